//! The shared decision vectors (`conformance/vectors/*.json`, format in
//! `conformance/README.md`) run against this crate's pure decision core. The files are the
//! single source of truth for every client; this test only translates them.

use std::path::PathBuf;
use std::time::Duration;

use redis_lease_client::decide::{
    self, AcquireDecision, ReignEvent, RenewDecision, StepDownReason,
};
use redis_lease_client::quorum_decide::{
    self as qd, AfterAcquire, AfterRenew, IdentityCheck, NodeReply, NotLeading,
};
use redis_lease_client::{CommandError, ElectorConfig, ErrorKind, QuorumControl, Replicated};
use serde_json::{json, Map, Value};
use tokio::time::Instant;

fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../conformance/vectors")
}

fn us(d: Duration) -> i64 {
    // Nearest microsecond (the format's tolerance rule).
    ((d.as_nanos() + 500) / 1000) as i64
}

fn dur(v: &Value) -> Duration {
    Duration::from_micros(v.as_u64().expect("non-negative integer µs"))
}

/// A fixed origin far enough from "now" that instants before it exist.
struct Clock(Instant);
impl Clock {
    fn at(&self, v: &Value) -> Instant {
        self.0 + dur(v)
    }
    fn of(&self, i: Instant) -> i64 {
        us(i - self.0)
    }
}

fn config(c: &Map<String, Value>, key: &str, owner: &str) -> ElectorConfig {
    let g = |k: &str| c.get(k).unwrap_or_else(|| panic!("config lacks {k}"));
    let mut cfg = ElectorConfig::new(
        "redis://x/",
        key,
        Duration::from_millis(g("ttl_ms").as_u64().expect("ttl_ms")),
    )
    .with_owner(owner);
    cfg.drift = g("drift").as_f64().expect("drift");
    cfg.margin = dur(g("margin_us"));
    cfg.stop_budget = dur(g("stop_budget_us"));
    cfg.renew_interval = dur(g("renew_interval_us"));
    cfg.op_timeout = dur(g("op_timeout_us"));
    cfg.block_timeout = dur(g("block_timeout_us"));
    cfg.min_replicas = g("min_replicas").as_u64().expect("min_replicas") as u32;
    cfg.wait_timeout = dur(g("wait_timeout_us"));
    cfg.backoff_min = dur(g("backoff_min_us"));
    cfg.backoff_max = dur(g("backoff_max_us"));
    cfg
}

fn config_json(cfg: &ElectorConfig) -> Value {
    let floor_us = |d: Duration| (d.as_nanos() / 1000) as i64;
    json!({
        "ttl_ms": cfg.ttl.as_millis() as u64,
        "drift": cfg.drift,
        "margin_us": floor_us(cfg.margin),
        "stop_budget_us": floor_us(cfg.stop_budget),
        "renew_interval_us": floor_us(cfg.renew_interval),
        "op_timeout_us": floor_us(cfg.op_timeout),
        "block_timeout_us": floor_us(cfg.block_timeout),
        "min_replicas": cfg.min_replicas,
        "wait_timeout_us": floor_us(cfg.wait_timeout),
        "backoff_min_us": floor_us(cfg.backoff_min),
        "backoff_max_us": floor_us(cfg.backoff_max),
    })
}

fn kind_of(label: &str, grace_us: Option<&Value>) -> ErrorKind {
    match label {
        "connection" => ErrorKind::Connection,
        "timeout" => ErrorKind::Timeout,
        "grace" => ErrorKind::Grace(dur(grace_us.expect("grace_us"))),
        "readonly" => ErrorKind::ReadOnly,
        "noreplicas" => ErrorKind::NoReplicas,
        "loading" => ErrorKind::Loading,
        "fenced" => ErrorKind::Fenced,
        "rejected" => ErrorKind::Rejected("x".into()),
        "server" => ErrorKind::Server("X".into()),
        "protocol" => ErrorKind::Protocol,
        "membership" => ErrorKind::Membership,
        other => panic!("unknown error kind {other}"),
    }
}

fn error_of(r: &Value) -> CommandError {
    CommandError::new(
        kind_of(r["kind"].as_str().expect("kind"), r.get("grace_us")),
        "vector",
    )
}

fn acquire_result(r: &Value) -> Result<Replicated<Option<u64>>, CommandError> {
    match r["reply"].as_str().expect("reply") {
        "granted" => Ok(Replicated {
            value: Some(r["token"].as_u64().expect("token")),
            acked: r["acked"].as_u64().map(|n| n as u32),
        }),
        "nil" => Ok(Replicated {
            value: None,
            acked: None,
        }),
        "error" => Err(error_of(r)),
        other => panic!("unknown acquire reply {other}"),
    }
}

fn renew_result(r: &Value) -> Result<Replicated<bool>, CommandError> {
    match r["reply"].as_str().expect("reply") {
        "renewed" => Ok(Replicated {
            value: true,
            acked: r["acked"].as_u64().map(|n| n as u32),
        }),
        "not_held" => Ok(Replicated {
            value: false,
            acked: None,
        }),
        "error" => Err(error_of(r)),
        other => panic!("unknown renew reply {other}"),
    }
}

/// A round's replies, one per node in node order; `null` = no reply before the step's limit.
fn node_replies<T>(
    input: &Value,
    one: impl Fn(&Value) -> Result<T, ErrorKind>,
) -> Vec<NodeReply<T>> {
    input["replies"]
        .as_array()
        .expect("replies")
        .iter()
        .map(|r| if r.is_null() { None } else { Some(one(r)) })
        .collect()
}

fn reason(label: &str) -> StepDownReason {
    [
        StepDownReason::RenewRejected,
        StepDownReason::DeadlinePassed,
        StepDownReason::Resigned,
        StepDownReason::TaskExited,
    ]
    .into_iter()
    .find(|r| r.label() == label)
    .unwrap_or_else(|| panic!("unknown reason {label}"))
}

/// Run one case; returns what this implementation computed, in the vector's shape.
fn run_case(decision: &str, cfg: Option<ElectorConfig>, input: &Value, clock: &Clock) -> Value {
    let cfg = || cfg.clone().expect("this decision needs a config");
    match decision {
        "config_defaults" => config_json(&ElectorConfig::new(
            "redis://x/",
            "k",
            Duration::from_millis(input["ttl_ms"].as_u64().expect("ttl_ms")),
        )),
        "config_validate" => {
            let rule = decide::config_problem(&cfg()).map(|(rule, _)| rule);
            json!({"valid": rule.is_none(), "rule": rule})
        }
        "deadline" => {
            let c = cfg();
            let d = decide::local_deadline(&c, clock.at(&input["sent_at_us"]));
            json!({
                "lead_time_us": us(c.lead_time()),
                "deadline_us": clock.of(d),
                "stop_at_us": clock.of(decide::stop_at(&c, d)),
            })
        }
        "op_limit" => {
            let block = input["block_us"].as_u64().map(Duration::from_micros);
            json!({"limit_us": us(decide::op_limit(&cfg(), block))})
        }
        "wait_for" => match decide::wait_for(&cfg()) {
            None => json!({"wait": null}),
            Some(w) => {
                json!({"wait": {"replicas": w.replicas, "timeout_ms": decide::wire_ms(w.timeout)}})
            }
        },
        "retry_interval" => json!({"retry_us": us(decide::retry_interval(&cfg()))}),
        "backoff" => {
            let c = cfg();
            let attempt = input["attempt"].as_u64().expect("attempt") as u32;
            let unit = input["unit"].as_f64().expect("unit");
            json!({
                "cap_us": us(decide::backoff_cap(&c, attempt)),
                "delay_us": us(decide::backoff(&c, attempt, unit)),
            })
        }
        "classify_error" => {
            let e = if let Some(line) = input["error"].as_str() {
                let (code, detail) = line.split_once(' ').unwrap_or((line, ""));
                CommandError::from_server(code, detail)
            } else {
                let t = input["transport"].as_str().expect("transport");
                CommandError::new(kind_of(t, None), "vector")
            };
            let grace = match e.kind {
                ErrorKind::Grace(d) => json!(us(d)),
                _ => Value::Null,
            };
            json!({"kind": e.kind.label(), "grace_us": grace})
        }
        "on_acquire" => {
            let res = acquire_result(&input["result"]);
            let sent = clock.at(&input["sent_at_us"]);
            match decide::on_acquire(&cfg(), sent, clock.at(&input["now_us"]), &res) {
                AcquireDecision::Lead {
                    token,
                    deadline,
                    next_renew,
                } => json!({"action": "lead", "token": token,
                    "deadline_us": clock.of(deadline), "next_renew_us": clock.of(next_renew)}),
                AcquireDecision::Unconfirmed {
                    token,
                    retry_in,
                    why,
                } => json!({"action": "unconfirmed", "token": token,
                    "retry_in_us": us(retry_in), "why": why.label()}),
                AcquireDecision::NotGranted => json!({"action": "not_granted"}),
                AcquireDecision::Grace(d) => json!({"action": "grace", "wait_us": us(d)}),
                AcquireDecision::Backoff(k) => json!({"action": "backoff", "kind": k.label()}),
            }
        }
        "not_granted_pause" => {
            let block = input["block_us"].as_u64().map(Duration::from_micros);
            let d = decide::not_granted_pause(
                &cfg(),
                block,
                clock.at(&input["sent_at_us"]),
                clock.at(&input["now_us"]),
                input["unit"].as_f64().expect("unit"),
            );
            json!({"pause_us": us(d)})
        }
        "on_renew" => {
            let res = renew_result(&input["result"]);
            match decide::on_renew(
                &cfg(),
                clock.at(&input["deadline_us"]),
                clock.at(&input["sent_at_us"]),
                clock.at(&input["now_us"]),
                &res,
            ) {
                RenewDecision::Renewed {
                    deadline,
                    next_renew,
                } => json!({"action": "renewed", "deadline_us": clock.of(deadline),
                    "next_renew_us": clock.of(next_renew)}),
                RenewDecision::StepDown(r) => json!({"action": "step_down", "reason": r.label()}),
                RenewDecision::Retry { at, why } => {
                    json!({"action": "retry", "at_us": clock.of(at), "why": why.label()})
                }
            }
        }
        "must_stop" => json!({"stop": decide::must_stop(
            &cfg(),
            clock.at(&input["deadline_us"]),
            clock.at(&input["now_us"]),
        )}),
        "step_down" => {
            json!({"release": reason(input["reason"].as_str().expect("reason")).release_after()})
        }
        "reign_owner" => {
            let reign = input["reign"].as_u64().expect("reign");
            json!({"reign_owner": decide::reign_owner(input["owner"].as_str().expect("owner"), reign)})
        }
        "next_reign" => {
            let event = match input["event"].as_str().expect("event") {
                "granted" => ReignEvent::Granted,
                "unconfirmed" => ReignEvent::Unconfirmed,
                "not_granted" => ReignEvent::NotGranted,
                "error" => ReignEvent::Error,
                "stepped_down" => ReignEvent::SteppedDown,
                other => panic!("unknown event {other}"),
            };
            json!({"reign": decide::next_reign(input["reign"].as_u64().expect("reign"), event)})
        }
        "quorum_after_acquire" => {
            let replies: Vec<NodeReply<Option<u64>>> = node_replies(input, |r| {
                acquire_result(r).map(|x| x.value).map_err(|e| e.kind)
            });
            match qd::after_acquire(QuorumControl::Correct, &replies, 0) {
                AfterAcquire::Raise { target, nodes } => {
                    json!({"action": "raise", "target": target, "nodes": nodes})
                }
                AfterAcquire::Abort { release, outcome } => {
                    let partial: Vec<[u64; 2]> =
                        release.iter().map(|&(i, t)| [i as u64, t]).collect();
                    let (outcome, kind, grace) = match outcome {
                        NotLeading::NotGranted => ("not_granted", Value::Null, Value::Null),
                        NotLeading::WrongMembership => {
                            ("membership_mismatch", Value::Null, Value::Null)
                        }
                        NotLeading::Error(k) => {
                            let grace = match &k {
                                ErrorKind::Grace(d) => json!(us(*d)),
                                _ => Value::Null,
                            };
                            ("error", json!(k.label()), grace)
                        }
                    };
                    json!({"action": "abort", "partial": partial, "outcome": outcome,
                           "error_kind": kind, "grace_us": grace})
                }
                AfterAcquire::ActUnified { .. } => panic!("ActUnified is a control"),
            }
        }
        "quorum_after_renew" => {
            let replies: Vec<NodeReply<bool>> = node_replies(input, |r| {
                renew_result(r).map(|x| x.value).map_err(|e| e.kind)
            });
            let action = match qd::after_renew(QuorumControl::Correct, &replies) {
                AfterRenew::Renewed => "renewed",
                AfterRenew::Lost => "lost",
                AfterRenew::Unknown => "unknown",
            };
            let confirmed = qd::raise_confirmed(QuorumControl::Correct, &replies, replies.len());
            json!({"action": action, "confirmed": confirmed})
        }
        "quorum_wait" => {
            let urls: Vec<String> = input["urls"]
                .as_array()
                .expect("urls")
                .iter()
                .map(|u| u.as_str().expect("url").to_string())
                .collect();
            let replies: Vec<NodeReply<Option<u64>>> = node_replies(input, |r| {
                acquire_result(r).map(|x| x.value).map_err(|e| e.kind)
            });
            let node = qd::wait_node(&urls);
            let block = input["block_us"].as_u64().map(Duration::from_micros);
            let c = cfg();
            let wait = qd::wait_after_refusal(
                &replies,
                node,
                input["released_any"].as_bool().expect("released_any"),
                block,
                c.op_timeout,
                c.renew_interval,
            );
            json!({"wait_node": node, "wait_us": wait.map(us)})
        }
        "quorum_identity" => {
            let known: Vec<Option<String>> = input["known"]
                .as_array()
                .expect("known")
                .iter()
                .map(|k| k.as_str().map(str::to_string))
                .collect();
            let me = input["me"].as_u64().expect("me") as usize;
            let (check, of) =
                match qd::check_identity(me, input["seen"].as_str().expect("seen"), &known) {
                    IdentityCheck::First => ("first", Value::Null),
                    IdentityCheck::Same => ("same", Value::Null),
                    IdentityCheck::Changed => ("changed", Value::Null),
                    IdentityCheck::Duplicate { of } => ("duplicate", json!(of)),
                };
            json!({"check": check, "of": of})
        }
        "quorum_quarantine" => {
            let c = cfg();
            json!({"quarantine_us": us(qd::quarantine(c.ttl, dur(&input["node_quarantine_us"]), c.drift))})
        }
        other => panic!("unknown decision {other}: this client does not implement it"),
    }
}

/// Equal, except integers whose key ends in `_us` may differ by 1 µs (format's tolerance).
fn matches(key: &str, want: &Value, got: &Value) -> bool {
    match (want, got) {
        (Value::Number(w), Value::Number(g)) if key.ends_with("_us") => {
            match (w.as_i64(), g.as_i64()) {
                (Some(w), Some(g)) => (w - g).abs() <= 1,
                _ => w == g,
            }
        }
        (Value::Number(w), Value::Number(g)) => w.as_f64() == g.as_f64(),
        (Value::Object(w), Value::Object(g)) => {
            w.len() == g.len()
                && w.iter()
                    .all(|(k, wv)| g.get(k).is_some_and(|gv| matches(k, wv, gv)))
        }
        _ => want == got,
    }
}

#[test]
fn every_shared_vector_passes() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(vectors_dir())
        .expect("conformance/vectors exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no vector files found");
    // Far from the process start so that instants "before" the origin never underflow.
    let clock = Clock(Instant::now() + Duration::from_secs(3600));
    let (mut cases, mut failures) = (0, vec![]);
    for f in &files {
        let doc: Value =
            serde_json::from_str(&std::fs::read_to_string(f).expect("read")).expect("json");
        let decision = doc["decision"].as_str().expect("decision");
        let defaults = doc["defaults"]["config"].as_object().cloned();
        for case in doc["cases"].as_array().expect("cases") {
            cases += 1;
            let cfg = defaults.clone().map(|mut c| {
                if let Some(o) = case.get("config").and_then(Value::as_object) {
                    c.extend(o.clone());
                }
                let input = &case["input"];
                config(
                    &c,
                    input.get("key").and_then(Value::as_str).unwrap_or("k"),
                    input.get("owner").and_then(Value::as_str).unwrap_or("o"),
                )
            });
            let got = run_case(decision, cfg, &case["input"], &clock);
            if !matches("", &case["expect"], &got) {
                failures.push(format!(
                    "{}: {:?}: expected {} got {}",
                    f.file_name().unwrap_or_default().to_string_lossy(),
                    case["name"].as_str().unwrap_or("?"),
                    case["expect"],
                    got
                ));
            }
        }
    }
    println!("{} vector files, {cases} cases", files.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
