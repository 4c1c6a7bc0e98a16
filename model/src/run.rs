//! Running the checker and reporting what it found (for both models: single-node
//! [`crate::model`] and quorum [`crate::quorum`]).

use std::collections::BTreeSet;
use std::fmt;
use std::time::{Duration, Instant};

use stateright::{Checker, HasDiscoveries, Model};

use crate::model::{LeaseModel, Setup};

/// What a model offers for a readable report: the configuration in one line, the tick of a
/// state, and one step of a path in words.
pub trait Explain: Model + Send + Sync + Sized + 'static {
    fn summary(&self) -> String;
    fn tick(st: &Self::State) -> u32;
    fn describe(&self, st: &Self::State, a: &Self::Action) -> String;
}

/// What one check explored and found.
pub struct Report {
    /// The configuration, one line.
    pub summary: String,
    pub states: usize,
    pub unique_states: usize,
    pub max_depth: usize,
    pub elapsed: Duration,
    /// Properties with a discovery that is a failure: a counterexample for
    /// `always`/`eventually`, with the path (one action per line, with the tick it happened
    /// at).
    pub violations: Vec<(&'static str, String)>,
    /// `sometimes` properties with an example (reachability: the path that reaches it).
    pub examples: Vec<(&'static str, String)>,
    /// `sometimes` properties never satisfied within the bound.
    pub unreached: Vec<&'static str>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: {} states ({} unique), depth {}, {:.1} s, violations: {:?}{}",
            self.summary,
            self.states,
            self.unique_states,
            self.max_depth,
            self.elapsed.as_secs_f64(),
            self.violations.iter().map(|v| v.0).collect::<Vec<_>>(),
            if self.examples.is_empty() && self.unreached.is_empty() {
                String::new()
            } else {
                format!(
                    ", reached: {:?}, unreached: {:?}",
                    self.examples.iter().map(|v| v.0).collect::<Vec<_>>(),
                    self.unreached
                )
            }
        )?;
        for (name, path) in &self.violations {
            writeln!(f, "counterexample for \"{name}\":\n{path}")?;
        }
        Ok(())
    }
}

impl Explain for LeaseModel {
    fn summary(&self) -> String {
        let s: &Setup = &self.setup;
        format!(
            "electors={} horizon={} faults={:?} control={:?} eager={}",
            s.electors, s.horizon, s.faults, s.control, s.eager
        )
    }
    fn tick(st: &Self::State) -> u32 {
        st.tick()
    }
    fn describe(&self, st: &Self::State, a: &Self::Action) -> String {
        LeaseModel::describe(self, st, a)
    }
}

/// Checks `setup` of the single-node model exhaustively (see [`explore`]).
pub fn check(setup: Setup, stop_at: Option<&'static str>) -> Report {
    explore(LeaseModel::new(setup), stop_at)
}

/// Checks `model` exhaustively (breadth first, so counterexamples are shortest). With
/// `stop_at`, stops as soon as that property has a discovery.
pub fn explore<M>(model: M, stop_at: Option<&'static str>) -> Report
where
    M: Explain,
    M::State: Send + Sync + std::hash::Hash + fmt::Debug + Clone + PartialEq + 'static,
    M::Action: Send + Sync + fmt::Debug + Clone + PartialEq,
{
    let summary = model.summary();
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
    let mut examples: Vec<(&'static str, String)> = vec![];
    let discoveries = checker.discoveries();
    let mut unreached = vec![];
    for p in model.properties() {
        let failure = p.expectation.discovery_is_failure();
        let Some(path) = discoveries.get(p.name) else {
            if !failure {
                unreached.push(p.name);
            }
            continue;
        };
        let mut text = String::new();
        for (st, action) in path.clone().into_vec() {
            if let Some(a) = action {
                text.push_str(&format!(
                    "  t={:>2}  {}\n",
                    M::tick(&st),
                    model.describe(&st, &a)
                ));
            }
        }
        if failure {
            violations.push((p.name, text));
        } else {
            examples.push((p.name, text));
        }
    }
    violations.sort();
    examples.sort();
    Report {
        summary,
        states: checker.state_count(),
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        elapsed,
        violations,
        examples,
        unreached,
    }
}
