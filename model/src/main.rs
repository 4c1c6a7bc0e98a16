//! `lease-model [--electors N] [--horizon H] [--budget B] [--faults drop,crash,failover,restart]
//! [--control NAME] [--eager] [--stop acting|fencing|tokens]` (NAME: grace-zero,
//! deadline-from-reply, drift-beyond-bound, no-deadline-check, replica-clock-behind,
//! owner-reuse): checks one configuration of the
//! single-node model and prints the states explored and any counterexample.
//!
//! `lease-model --quorum [--horizon H] [--budget B] [--faults drop,wipe,restart,swap]
//! [--control grace-zero|no-unify|minority|identity-ignored|owner-reuse|
//! reign-on-step-down-only] [--skew-ms S] [--eager] [--release-on-lost] [--late-all]
//! [--stop acting|majority|fencing]`: the same for the quorum model (3 nodes, 2 electors).
//!
//! scripts/model runs the larger configurations of docs/model.md.

use lease_model::quorum::SKEW_MS;
use lease_model::{check, explore, Control, Faults, QControl, QFaults, QSetup, QuorumModel, Setup};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = if args.iter().any(|a| a == "--quorum") {
        quorum(args.into_iter().filter(|a| a != "--quorum").collect())
    } else {
        single(args)
    };
    std::process::exit(code);
}

fn single(args: Vec<String>) -> i32 {
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
    let mut args = args.into_iter();
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
                    "owner-reuse" => Control::OwnerReuse,
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
    i32::from(!r.violations.is_empty())
}

fn quorum(args: Vec<String>) -> i32 {
    let mut setup = QSetup {
        electors: 2,
        horizon: 6,
        faults: QFaults {
            budget: 1,
            drop_messages: true,
            wipe: true,
            restart: true,
            swap: false,
        },
        control: QControl::None,
        skew_ms: SKEW_MS,
        eager: false,
        release_on_lost: false,
        late_all: false,
        lists: false,
        procedure: false,
        no_token_floor: false,
    };
    let mut stop: Option<&'static str> = None;
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| panic!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--electors" => setup.electors = value().parse().expect("--electors N (1 or 2)"),
            "--horizon" => setup.horizon = value().parse().expect("--horizon H"),
            "--budget" => setup.faults.budget = value().parse().expect("--budget B"),
            "--skew-ms" => setup.skew_ms = value().parse().expect("--skew-ms S"),
            "--faults" => {
                let v = value();
                let has = |k: &str| v.split(',').any(|x| x == k);
                setup.faults.drop_messages = has("drop");
                setup.faults.wipe = has("wipe");
                setup.faults.restart = has("restart");
                setup.faults.swap = has("swap");
            }
            "--control" => {
                setup.control = match value().as_str() {
                    "none" => QControl::None,
                    "grace-zero" => QControl::GraceZero,
                    "no-unify" => QControl::NoUnify,
                    "minority" => QControl::Minority,
                    "identity-ignored" => QControl::IdentityIgnored,
                    "owner-reuse" => QControl::OwnerReuse,
                    "reign-on-step-down-only" => QControl::ReignOnStepDownOnly,
                    "no-membership" => QControl::NoMembership,
                    "rebind-early" => QControl::RebindEarly,
                    other => panic!("unknown quorum control {other}"),
                }
            }
            "--eager" => setup.eager = true,
            "--release-on-lost" => setup.release_on_lost = true,
            "--late-all" => setup.late_all = true,
            "--lists" => setup.lists = true,
            "--no-token-floor" => setup.no_token_floor = true,
            "--procedure" => {
                setup.lists = true;
                setup.procedure = true;
            }
            "--stop" => {
                stop = Some(match value().as_str() {
                    "acting" => "one acting elector",
                    "majority" => "reign token on a majority",
                    "fencing" => "fencing: reign tokens rise",
                    other => panic!("unknown property {other} (acting, majority, fencing)"),
                })
            }
            other => panic!("unknown argument {other}"),
        }
    }
    let stop_at = stop.or(match setup.control {
        QControl::None => None,
        QControl::NoUnify => Some("fencing: reign tokens rise"),
        _ => Some("one acting elector"),
    });
    let r = explore(QuorumModel::new(setup), stop_at);
    println!("{r}");
    for (name, path) in &r.examples {
        if stop_at.is_none() {
            println!("reached \"{name}\", e.g.:\n{path}");
        }
    }
    // Unreached `sometimes` properties are printed, not failures: a short horizon may not
    // reach a second reign (the tests check reachability where it must hold).
    i32::from(!r.violations.is_empty())
}
