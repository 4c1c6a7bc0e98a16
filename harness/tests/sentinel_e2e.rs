//! End to end with real Sentinel and real failovers (the harness binary, real servers):
//!
//! - a short seeded campaign in the Sentinel topology (3 Sentinels, primary + 2 replicas,
//!   electors addressed through `redis+sentinel://`) with `sentinel-failover` (kill -9 of the
//!   primary, with and without a lost grant) must report zero violations and measure the
//!   leaderless time after each crash;
//! - the grace-sizing rule (docs/failover.md §3.1): with `min-replicas-max-lag L`, a split
//!   brain needs `lease.grace-ms >= max TTL + (L + 2) s`. One run below the rule must show the
//!   checker catching two leaders at once; one at the rule must show none.
//!
//! Needs the module built (`cargo build -p redis-lease`) and `REDIS_SERVER_BIN` (default
//! Debian's redis-server, whose binary is also its Sentinel).

use std::process::Command;

fn chaos(args: &[&str]) -> (Option<i32>, String, String, tempfile::TempDir) {
    let out = tempfile::Builder::new()
        .prefix("sentinel-e2e")
        .tempdir()
        .expect("tempdir");
    let o = Command::new(env!("CARGO_BIN_EXE_lease-harness"))
        .arg("run")
        .arg("--out")
        .arg(out.path())
        .arg("--module")
        .arg(testsupport::module_path())
        .args(args)
        .output()
        .expect("run lease-harness");
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    println!("{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    let summary = stdout.lines().last().unwrap_or("").to_string();
    (o.status.code(), summary, stdout, out)
}

fn field(summary: &str, key: &str) -> Option<f64> {
    summary.split_whitespace().find_map(|kv| {
        kv.strip_prefix(&format!("{key}="))
            .and_then(|v| v.parse().ok())
    })
}

/// The Sentinel recipe of docs/deploy.md: `min-replicas-to-write 1`, `min-replicas-max-lag 2`
/// and grace >= max TTL + 1000 x (lag + 2). Why the recipe and not bare Sentinel: a double
/// failover (Sentinel marks the node it has just promoted as down and promotes another) leaves
/// two primaries for seconds; without `min-replicas-to-write` the stale one keeps renewing its
/// leader while the new one grants after a short grace: a real double leader, found by the
/// evidence campaign with grace 1000 ms and no min-replicas (docs/deploy.md §2).
#[test]
fn sentinel_failover_campaign_has_no_violations() {
    let (code, summary, stdout, _dir) = chaos(&[
        "--topology",
        "sentinel",
        "--down-after-ms",
        "1000",
        "--min-replicas-max-lag",
        "2",
        "--grace-ms",
        "5000",
        "--runs",
        "1",
        "--electors",
        "3",
        "--seconds",
        "35",
        "--ttl-ms",
        "1000",
        "--seed",
        "15001",
        "--fault",
        "sentinel-failover",
    ]);
    assert!(
        summary.starts_with("runs=1 violations=0 "),
        "summary: {summary}\n{stdout}"
    );
    assert_eq!(code, Some(0));
    // Leadership came back after every crash, through Sentinel, on the promoted node.
    let n = field(&summary, "sentinel_failover_n").unwrap_or(0.0);
    assert!(
        n >= 1.0,
        "no measured recovery after a primary crash: {summary}"
    );
    // Not before the grace period could have ended (5000 ms after a promotion that comes
    // after the crash), and within a generous bound on a busy machine.
    let p50 = field(&summary, "sentinel_failover_p50_ms").unwrap_or(0.0);
    assert!(
        (5000.0..25000.0).contains(&p50),
        "leaderless p50 {p50} ms out of bounds: {summary}"
    );
}

#[test]
fn grace_below_ttl_plus_replication_lag_lets_a_split_brain_elect_two_leaders() {
    // min-replicas-max-lag 2, TTL 1000 ms: the rule asks for grace >= 1000 + (2 + 2) * 1000.
    let common = [
        "--runs",
        "1",
        "--electors",
        "3",
        "--seconds",
        "15",
        "--ttl-ms",
        "1000",
        "--min-replicas-max-lag",
        "2",
        "--seed",
        "15002",
        "--fault",
        "split-brain",
    ];
    let below = [&common[..], &["--grace-ms", "1000"]].concat();
    let (code, summary, stdout, _d1) = chaos(&below);
    let v = field(&summary, "violations").unwrap_or(0.0);
    assert!(
        v >= 1.0 && code == Some(1),
        "grace 1000 ms < 1000 + 4000 ms must let the checker catch two leaders: {summary}\n{stdout}"
    );
    let at = [&common[..], &["--grace-ms", "5000"]].concat();
    let (code, summary, stdout, _d2) = chaos(&at);
    assert!(
        summary.starts_with("runs=1 violations=0 ") && code == Some(0),
        "grace 5000 ms = 1000 + 4000 ms must keep one leader: {summary}\n{stdout}"
    );
    assert!(
        field(&summary, "faults").unwrap_or(0.0) >= 1.0,
        "the split brain was injected: {summary}"
    );
}
