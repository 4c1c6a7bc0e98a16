//! End to end: the real harness binary against real `redis-server` processes with the module.
//!
//! - a short seeded chaos run with the safe elector must end with zero violations, having
//!   actually injected faults and moved leadership;
//! - the negative controls (an elector that keeps acting past its deadline, a resource that
//!   does not fence) must be reported: this is what proves the checker can fail.
//!
//! Both need the module built (`cargo build`; `cargo test --workspace` builds it) and a
//! `redis-server` (`REDIS_SERVER_BIN`).

use std::process::Command;

struct Outcome {
    code: Option<i32>,
    stdout: String,
    summary: String,
}

fn chaos(args: &[&str]) -> (Outcome, tempfile::TempDir) {
    let out = tempfile::Builder::new()
        .prefix("chaos-e2e")
        .tempdir()
        .expect("tempdir");
    let module = testsupport::module_path();
    let o = Command::new(env!("CARGO_BIN_EXE_lease-harness"))
        .arg("run")
        .arg("--out")
        .arg(out.path())
        .arg("--module")
        .arg(&module)
        .args(args)
        .output()
        .expect("run lease-harness");
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&o.stderr);
    println!("{stdout}\n{stderr}");
    let summary = stdout.lines().last().unwrap_or("").to_string();
    (
        Outcome {
            code: o.status.code(),
            stdout,
            summary,
        },
        out,
    )
}

/// `key=value` from the summary line.
fn field(summary: &str, key: &str) -> Option<f64> {
    summary.split_whitespace().find_map(|kv| {
        kv.strip_prefix(&format!("{key}="))
            .and_then(|v| v.parse().ok())
    })
}

#[test]
fn short_seeded_chaos_run_has_no_violations() {
    let (o, dir) = chaos(&[
        "--runs",
        "1",
        "--electors",
        "4",
        "--seconds",
        "30",
        "--ttl-ms",
        "500",
        "--seed",
        "20261129",
        "--fault",
        "kill,pause,partition,blackhole,delay,resign,restart,restart-aof,failover,clock-jump,late-delivery",
    ]);
    assert!(
        o.summary.starts_with("runs=1 violations=0 "),
        "summary: {}\n{}",
        o.summary,
        o.stdout
    );
    assert_eq!(o.code, Some(0), "{}", o.stdout);
    // The run did something: faults injected, several grants, writes accepted.
    let faults = field(&o.summary, "faults").unwrap_or(0.0);
    assert!(
        faults >= 3.0,
        "only {faults} faults injected: {}",
        o.summary
    );
    assert!(
        field(&o.summary, "writes_ok").unwrap_or(0.0) > 100.0,
        "{}",
        o.summary
    );
    let report =
        std::fs::read_to_string(dir.path().join("run-0000/report.json")).expect("report.json");
    let rep: serde_json::Value = serde_json::from_str(&report).expect("report json");
    assert!(
        rep["grants"].as_u64().unwrap_or(0) >= 2,
        "leadership never moved: {report}"
    );
    let svg =
        std::fs::read_to_string(dir.path().join("run-0000/timeline.svg")).expect("timeline.svg");
    assert!(
        svg.starts_with("<svg") && svg.contains("e0.0"),
        "timeline incomplete"
    );
}

#[test]
fn negative_controls_are_caught() {
    // An elector whose work ignores cancellation and its deadline, and a resource that does
    // not fence: pauses and partitions of the leader must produce overlapping leaders and a
    // lower token accepted after a higher one.
    let (o, _dir) = chaos(&[
        "--runs",
        "1",
        "--electors",
        "3",
        "--seconds",
        "20",
        "--ttl-ms",
        "500",
        "--seed",
        "7",
        "--fault",
        "pause,partition",
        "--elector-mode",
        "ignore-deadline",
        "--no-fence",
    ]);
    assert_eq!(
        o.code,
        Some(1),
        "checker did not fail the unsafe run: {}",
        o.stdout
    );
    assert!(
        field(&o.summary, "violations").unwrap_or(0.0) > 0.0,
        "{}",
        o.summary
    );
    assert!(
        o.stdout.contains("VIOLATION run-0000 overlap"),
        "no overlap reported:\n{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("VIOLATION run-0000 token_regression"),
        "no token regression reported:\n{}",
        o.stdout
    );
}

#[test]
fn fencing_alone_catches_the_stale_writes_of_the_unsafe_elector() {
    // Same unsafe elector, fencing resource: the resource stays consistent (no token
    // regression, no stale write accepted) but the checker still reports the overlap.
    let (o, _dir) = chaos(&[
        "--runs",
        "1",
        "--electors",
        "3",
        "--seconds",
        "20",
        "--ttl-ms",
        "500",
        "--seed",
        "7",
        "--fault",
        "pause,partition",
        "--elector-mode",
        "ignore-deadline",
    ]);
    assert_eq!(o.code, Some(1), "{}", o.stdout);
    assert!(
        o.stdout.contains("VIOLATION run-0000 overlap"),
        "{}",
        o.stdout
    );
    assert!(!o.stdout.contains("token_regression"), "{}", o.stdout);
    assert!(
        field(&o.summary, "writes_fenced").unwrap_or(0.0) > 0.0,
        "{}",
        o.summary
    );
}

/// Issue 23's negative control: the Rust elector with one owner for every reign (the wire
/// behaviour before protocol R17) under late-delivered RENEW/RELEASE: a stale RELEASE frees
/// the next reign and a follower is granted while it acts.
#[test]
fn reused_owner_under_late_delivery_is_caught() {
    let (o, _dir) = chaos(&[
        "--runs",
        "1",
        "--electors",
        "3",
        "--seconds",
        "20",
        "--seed",
        "23",
        "--fault",
        "late-delivery",
        "--elector-mode",
        "reuse-owner",
    ]);
    assert_eq!(
        o.code,
        Some(1),
        "checker did not fail the reused owner: {}",
        o.stdout
    );
    assert!(
        o.stdout.contains("VIOLATION run-0000 early_grant"),
        "no early grant reported:\n{}",
        o.stdout
    );
}

/// Electors that never reach the backend (here: a program that only sleeps) must not make a
/// clean campaign: with no grant in any run the campaign tested nothing and fails (exit 2,
/// one line saying so), where it used to print violations=0 and exit 0.
#[test]
fn a_campaign_in_which_no_elector_ever_led_fails() {
    let (o, _dir) = chaos(&[
        "--runs",
        "1",
        "--electors",
        "1",
        "--seconds",
        "5",
        "--fault",
        "resign",
        "--elector-cmd",
        "sleep 100",
    ]);
    assert_eq!(o.code, Some(2), "{}", o.stdout);
    assert!(
        o.stdout.contains("runs without a grant: [0]"),
        "{}",
        o.stdout
    );
}
