//! The client library and `lease-run` addressed through Redis Sentinel follow a real
//! Sentinel failover: 3 Sentinels, a primary and 2 replicas (module on every data node), the
//! primary killed with SIGKILL, Sentinel promotes a replica, the module's grace runs on the
//! promoted node, and leadership resumes there with a higher token.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis_lease_client::{Elector, ElectorConfig, Role};
use testsupport::sentinel::{SentinelOptions, SentinelTopology};
use testsupport::ServerOptions;

const GRACE_MS: u64 = 1500;

fn topology() -> SentinelTopology {
    let grace = GRACE_MS.to_string();
    SentinelTopology::start(SentinelOptions {
        down_after_ms: 1000,
        data: ServerOptions::default()
            .module_args(&["lease.grace-ms", &grace])
            .extra_args(&["--repl-diskless-sync-delay", "0"]),
        ..SentinelOptions::default()
    })
}

/// `LEASE.GET key` on one node: (owner, token).
fn lease_on(t: &SentinelTopology, i: usize, key: &str) -> Option<(String, u64)> {
    let v: Option<(String, u64, u64)> = t.nodes[i].query(&["LEASE.GET", key]).ok()?;
    v.map(|(o, tok, _)| (o, tok))
}

#[test]
fn elector_follows_a_sentinel_promotion() {
    let mut topo = topology();
    let url = topo.sentinel_url();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cfg = ElectorConfig::new(url, "sentinel:job", Duration::from_millis(1000))
        .with_owner("elector-s1")
        .with_backoff(Duration::from_millis(50), Duration::from_millis(200))
        .with_block_timeout(Duration::from_millis(500));
    let mut elector = Elector::new(cfg).expect("config");
    let mut leadership = elector.subscribe();
    let handle = elector.handle();
    let run = rt.spawn(async move {
        elector
            .run(|ctx| async move {
                ctx.cancelled().await;
            })
            .await
    });

    let wait_leader = |rx: &mut tokio::sync::watch::Receiver<Role>, not: u64, limit| {
        rt.block_on(async {
            tokio::time::timeout(limit, async {
                loop {
                    if let Role::Leader { token, .. } = *rx.borrow_and_update() {
                        if token != not {
                            return token;
                        }
                    }
                    rx.changed().await.expect("elector alive");
                }
            })
            .await
        })
    };
    let t1 = wait_leader(&mut leadership, 0, Duration::from_secs(20))
        .expect("leader through sentinel (start-up grace 1.5 s)");
    let p0 = topo.primary_index().expect("sentinel names the primary");
    assert_eq!(p0, 0);
    assert_eq!(
        lease_on(&topo, 0, "sentinel:job"),
        Some(("elector-s1#1".into(), t1)),
        "granted on the primary Sentinel named"
    );

    let old_port = topo.nodes[0].port;
    let crash = Instant::now();
    topo.nodes[0].kill();
    let p = topo
        .wait_promotion(old_port, Duration::from_secs(30))
        .expect("sentinel promotes a replica");
    let promoted_after = crash.elapsed();
    let t2 = wait_leader(&mut leadership, t1, Duration::from_secs(30))
        .expect("leader again on the promoted node");
    let back_after = crash.elapsed();
    println!(
        "sentinel failover: promoted after {promoted_after:?}, leader again after {back_after:?} \
         (down-after 1000 ms, grace {GRACE_MS} ms, ttl 1000 ms); tokens {t1} -> {t2}"
    );
    assert!(t2 > t1, "token after failover {t2} must exceed {t1}");
    // A new reign (the first one stepped down when its primary died): a new owner (R17).
    assert_eq!(
        lease_on(&topo, p, "sentinel:job"),
        Some(("elector-s1#2".into(), t2)),
        "the new grant is on the promoted node"
    );
    // Grace ran on the promoted node: it started there at Sentinel's REPLICAOF NO ONE
    // (after the crash), so nothing was granted before crash + grace.
    let log = topo.nodes[p].log();
    assert!(
        log.contains("started (promoted to primary)"),
        "grace must start on promotion; log:\n{log}"
    );
    assert!(
        back_after >= Duration::from_millis(GRACE_MS),
        "granted {back_after:?} after the crash, before the {GRACE_MS} ms grace could end"
    );
    handle.resign();
    let outcome = rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), run).await });
    assert!(outcome.is_ok(), "elector resigned");
}

/// Lines `start <token>` the child appends.
fn starts(file: &Path) -> Vec<u64> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("start "))
        .filter_map(|t| t.trim().parse().ok())
        .collect()
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn lease_run_follows_a_sentinel_promotion() {
    let mut topo = topology();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("starts");
    let log = std::fs::File::create(dir.path().join("lease-run.log")).unwrap();
    let script = format!(
        "echo \"start $LEASE_TOKEN\" >> {}; exec sleep 1000",
        file.display()
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lease-run"));
    for s in topo.sentinel_addrs() {
        cmd.args(["--sentinel", &s]);
    }
    let child = cmd
        .args(["--master-name", testsupport::sentinel::MASTER_NAME])
        .args(["--key", "sentinel:run", "--ttl", "1s", "--restart"])
        .args(["--restart-delay", "100ms", "--backoff-max", "200ms"])
        .args(["--block-timeout", "500ms", "--", "sh", "-c", &script])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let _guard = Kill(child);
    let logtext = || std::fs::read_to_string(dir.path().join("lease-run.log")).unwrap_or_default();
    let wait_starts = |n: usize, limit: Duration| {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            let s = starts(&file);
            if s.len() >= n {
                return s;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "lease-run did not start its command {n} time(s); log:\n{}",
            logtext()
        );
    };
    let first = wait_starts(1, Duration::from_secs(20))[0];
    let old_port = topo.nodes[0].port;
    let crash = Instant::now();
    topo.nodes[0].kill();
    topo.wait_promotion(old_port, Duration::from_secs(30))
        .expect("sentinel promotes a replica");
    let all = wait_starts(2, Duration::from_secs(30));
    println!(
        "lease-run: command started again {:?} after the primary crash; tokens {all:?}",
        crash.elapsed()
    );
    assert!(
        all[1] > first,
        "token after failover must be higher: {all:?}"
    );
}
