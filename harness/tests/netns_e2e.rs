//! End to end, `--netns` (issue 30): electors in their own network namespaces, kernel faults
//! on their links, in every Redis topology (replica, quorum3, Sentinel). As root: a short
//! seeded run per topology injects the faults, reports no violation and leaves no
//! namespace, veth or nftables table behind. Without root (or a netns fault without
//! `--netns`) the run fails with one line: never a silent skip.
//!
//! One `--netns` harness at a time on a machine (a second refuses: the link addresses would
//! clash), so the campaigns here take turns ([`ONE_AT_A_TIME`]); another `--netns` campaign
//! running on the machine makes them fail with that refusal.

use std::process::{Command, Output};
use std::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn harness(args: &[&str]) -> (Output, tempfile::TempDir) {
    let out = tempfile::Builder::new()
        .prefix("netns-e2e")
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
    println!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o, out)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn field(summary: &str, key: &str) -> Option<f64> {
    summary.split_whitespace().find_map(|kv| {
        kv.strip_prefix(&format!("{key}="))
            .and_then(|v| v.parse().ok())
    })
}

fn leftovers() -> Vec<String> {
    let ns = Command::new("ip").args(["netns", "list"]).output();
    let mut left: Vec<String> = ns
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("lh-"))
        .map(str::to_string)
        .collect();
    let tables = Command::new("nft").args(["list", "tables"]).output();
    left.extend(
        tables
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("table inet lh_"))
            .map(str::to_string),
    );
    left
}

/// A short seeded `--netns` campaign with `extra` (topology) options and the four nftables
/// faults: as root it must pass with faults drawn (`--min-faults`), work done across the
/// links, every record of a fault on the coordination service's ports naming `service` (what
/// "Redis" means in that topology), and nothing left behind.
fn netns_campaign(extra: &[&str], seed: &str, service: &str) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut args = vec![
        "--netns",
        "--runs",
        "1",
        "--electors",
        "3",
        "--seconds",
        "20",
        "--ttl-ms",
        "500",
        "--seed",
        seed,
        "--fault",
        "loss,oneway,cut-resource,heal-delivers",
        // `partition` is a group: oneway and heal-delivers count for it.
        "--min-faults",
        "partition=1",
    ];
    args.extend_from_slice(extra);
    let (o, dir) = harness(&args);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    if !is_root() {
        assert_eq!(o.status.code(), Some(2), "{stdout}{stderr}");
        assert!(stderr.contains("--netns needs root"), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        return;
    }
    let summary = stdout.lines().last().unwrap_or("");
    assert!(
        summary.starts_with("runs=1 violations=0 "),
        "{summary}\n{stdout}{stderr}"
    );
    assert_eq!(o.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        field(summary, "faults").unwrap_or(0.0) >= 2.0,
        "too few faults: {summary}"
    );
    assert!(
        field(summary, "writes_ok").unwrap_or(0.0) >= 100.0,
        "the electors did not work across their links: {summary}"
    );
    let per_kind = stdout
        .lines()
        .find(|l| l.starts_with("faults per kind: "))
        .unwrap_or("");
    assert!(
        ["loss=", "oneway=", "cut-resource=", "heal-delivers="]
            .iter()
            .any(|k| per_kind.contains(k)),
        "{per_kind}"
    );
    let run = std::fs::read_to_string(dir.path().join("run-0000/run.jsonl")).unwrap_or_default();
    for line in run.lines() {
        let Ok(e) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let kind = e["kind"].as_str().unwrap_or("");
        if e["ev"] == "fault" && ["oneway", "cut-resource"].contains(&kind) {
            let detail = e["detail"].as_str().unwrap_or("");
            assert!(
                detail.contains(service),
                "{kind}: {detail} (want {service})"
            );
        }
    }
    assert_eq!(leftovers(), Vec::<String>::new(), "left behind");
}

#[test]
fn netns_run_injects_kernel_faults_and_cleans_up() {
    netns_campaign(&[], "3030", "redis");
}

/// Quorum: each elector's proxies to the 3 nodes sit on its link; `oneway` drops a direction
/// to and from all 3 at once, `cut-resource` keeps all 3.
#[test]
fn netns_quorum3_campaign() {
    netns_campaign(&["--topology", "quorum3"], "3030", "every node (3)");
}

/// Sentinel: no proxies; the electors reach the 3 data nodes and 3 Sentinels at the service
/// address on their own link, which Sentinel hands out as the primary's address.
#[test]
fn netns_sentinel_campaign() {
    netns_campaign(
        &["--topology", "sentinel"],
        "3031",
        "every server and sentinel (6)",
    );
}

#[test]
fn netns_faults_need_netns_and_privileges() {
    let (o, _dir) = harness(&["--runs", "1", "--seconds", "5", "--fault", "oneway"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr.contains("fault oneway needs --netns"), "{stderr}");
    if is_root() {
        // As nobody: the one-line refusal (the binary and module are world-readable here).
        let o = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_lease-harness"))
            .args(["run", "--netns", "--runs", "1", "--seconds", "5", "--out"])
            .arg(std::env::temp_dir().join("netns-e2e-nobody"))
            .arg("--module")
            .arg(testsupport::module_path())
            .output()
            .expect("setpriv");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("--netns needs root"), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
}
