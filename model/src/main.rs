//! `lease-model [--electors N] [--horizon H] [--budget B] [--faults drop,crash,failover,restart]
//! [--control NAME] [--eager] [--stop acting|fencing|tokens]`: checks one configuration and prints the states explored and
//! any counterexample (scripts/model runs the larger configuration of docs/model.md).

use lease_model::{check, Control, Faults, Setup};

fn main() {
    let mut setup = Setup {
        electors: 3,
        horizon: 8,
        faults: Faults {
            budget: 1,
            ..Faults::ALL
        },
        control: Control::None,
        eager: false,
    };
    let mut stop: Option<&'static str> = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| panic!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--electors" => setup.electors = value().parse().expect("--electors N"),
            "--horizon" => setup.horizon = value().parse().expect("--horizon H"),
            "--budget" => setup.faults.budget = value().parse().expect("--budget B"),
            "--faults" => {
                let v = value();
                let has = |k: &str| v.split(',').any(|x| x == k);
                setup.faults.drop_messages = has("drop");
                setup.faults.crash_electors = has("crash");
                setup.faults.failover = has("failover");
                setup.faults.restart_primary = has("restart");
            }
            "--control" => {
                setup.control = match value().as_str() {
                    "none" => Control::None,
                    "grace-zero" => Control::GraceZero,
                    "deadline-from-reply" => Control::DeadlineFromReply,
                    "drift-beyond-bound" => Control::DriftBeyondBound,
                    "no-deadline-check" => Control::NoDeadlineCheck,
                    "replica-clock-behind" => Control::ReplicaClockBehind,
                    other => panic!("unknown control {other}"),
                }
            }
            "--eager" => setup.eager = true,
            "--stop" => {
                stop = Some(match value().as_str() {
                    "acting" => "one acting elector",
                    "fencing" => "fencing: no accepted token regression",
                    "tokens" => "tokens strictly increase",
                    other => panic!("unknown property {other} (acting, fencing, tokens)"),
                })
            }
            other => panic!("unknown argument {other}"),
        }
    }
    // A negative control stops at its first counterexample of the property it breaks
    // (or of `--stop`'s).
    let stop_at = stop.or(match setup.control {
        Control::None => None,
        Control::ReplicaClockBehind => Some("tokens strictly increase"),
        _ => Some("one acting elector"),
    });
    let r = check(setup, stop_at);
    println!("{r}");
    if !r.violations.is_empty() {
        std::process::exit(1);
    }
}
