//! Quorum mode as a user whose ACL lacks `+lease.raise` (docs/security.md §3 says quorum mode
//! needs it): the elector must not lead, and must say why, in its error metrics and log, not
//! poll in silence as if another elector held the lease. (The recipe itself, and that it
//! leads, is `quorum_redis.rs` `the_quorum_elector_acl_recipe_leads_and_lacking_raise_does_not`.)
//!
//! Would catch: a refused RAISE treated as "not granted" (nothing counted, nothing logged: an
//! operator sees an elector that never leads and no reason).

use std::time::Duration;

use redis_lease_client::{Elector, ElectorConfig};
use testsupport::{RedisServer, ServerOptions};
use tokio::time::{sleep, Instant};

/// docs/security.md's quorum-mode elector rules, read from the file.
fn quorum_recipe() -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/security.md"))
        .expect("docs/security.md");
    doc.lines()
        .filter_map(|l| l.trim().strip_prefix("ACL SETUSER elector on >... "))
        .find(|rest| rest.contains("+lease.raise"))
        .expect("a quorum-mode `ACL SETUSER elector on >... ... +lease.raise` line")
        .split_whitespace()
        .map(String::from)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_raise_is_counted_and_logged_not_taken_for_a_busy_lease() {
    let rules: Vec<String> = quorum_recipe()
        .into_iter()
        .filter(|r| r != "+lease.raise")
        .collect();
    let nodes: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start(ServerOptions::default()))
        .collect();
    let urls: Vec<String> = nodes
        .iter()
        .map(|s| {
            let mut c = s.connection();
            let mut cmd = redis::cmd("ACL");
            cmd.arg("SETUSER")
                .arg("elector")
                .arg("on")
                .arg(">elector-pw");
            for r in &rules {
                cmd.arg(r);
            }
            let _: () = cmd.query(&mut c).expect("ACL SETUSER");
            format!("redis://elector:elector-pw@{}/", s.addr())
        })
        .collect();
    let ttl = Duration::from_millis(800);
    let cfg = ElectorConfig::new(&urls[0], "leases:q-acl", ttl)
        .with_owner("acl")
        .with_backoff(Duration::from_millis(10), Duration::from_millis(100));
    let mut e = Elector::with_nodes(cfg, &urls).expect("config");
    let rx = e.subscribe();
    let metrics = e.metrics();
    let h = e.handle();
    let j = tokio::spawn(async move { e.run(|ctx| async move { ctx.cancelled().await }).await });
    let refused = || {
        metrics.value(
            "lease_redis_errors_total",
            &[("op", "acquire"), ("kind", "server")],
        )
    };
    let end = Instant::now() + ttl * 5;
    while refused() < 1.0 {
        assert!(rx.borrow().token().is_none(), "led without +lease.raise");
        assert!(
            Instant::now() < end,
            "the refused RAISE was never counted as an error:\n{}",
            metrics.render()
        );
        sleep(Duration::from_millis(5)).await;
    }
    assert!(rx.borrow().token().is_none(), "led without +lease.raise");
    h.resign();
    let _ = j.await;
}
