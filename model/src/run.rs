//! Running the checker and reporting what it found.

use std::collections::BTreeSet;
use std::fmt;
use std::time::{Duration, Instant};

use stateright::{Checker, HasDiscoveries, Model};

use crate::model::{LeaseModel, Setup};

/// What one check explored and found.
pub struct Report {
    pub setup: Setup,
    pub states: usize,
    pub unique_states: usize,
    pub max_depth: usize,
    pub elapsed: Duration,
    /// Properties with a discovery: a counterexample for `always`/`eventually`, with the
    /// path (one action per line, with the tick it happened at).
    pub violations: Vec<(&'static str, String)>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.setup;
        writeln!(
            f,
            "electors={} horizon={} faults={:?} control={:?} eager={}: {} states ({} unique), depth {}, {:.1} s, violations: {:?}",
            s.electors,
            s.horizon,
            s.faults,
            s.control,
            s.eager,
            self.states,
            self.unique_states,
            self.max_depth,
            self.elapsed.as_secs_f64(),
            self.violations.iter().map(|v| v.0).collect::<Vec<_>>()
        )?;
        for (name, path) in &self.violations {
            writeln!(f, "counterexample for \"{name}\":\n{path}")?;
        }
        Ok(())
    }
}

/// Checks `setup` exhaustively (breadth first, so counterexamples are shortest). With
/// `stop_at`, stops as soon as that property has a discovery.
pub fn check(setup: Setup, stop_at: Option<&'static str>) -> Report {
    let model = LeaseModel::new(setup);
    let started = Instant::now();
    let mut builder = model.checker();
    builder = match stop_at {
        // One thread: the search is then strictly breadth first, so the counterexample
        // shown is a shortest one.
        Some(p) => builder.finish_when(HasDiscoveries::AnyOf(BTreeSet::from([p]))),
        None => builder.threads(2),
    };
    let checker = builder.spawn_bfs().join();
    let elapsed = started.elapsed();
    let model = checker.model();
    let mut violations: Vec<(&'static str, String)> = vec![];
    for (name, path) in checker.discoveries() {
        let mut text = String::new();
        let steps = path.into_vec();
        for (st, action) in steps {
            if let Some(a) = action {
                text.push_str(&format!(
                    "  t={:>2}  {}\n",
                    st.tick(),
                    model.describe(&st, &a)
                ));
            }
        }
        violations.push((name, text));
    }
    violations.sort();
    Report {
        setup,
        states: checker.state_count(),
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        elapsed,
        violations,
    }
}
