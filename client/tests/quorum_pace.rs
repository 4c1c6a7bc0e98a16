//! Protocol Q2: a quorum round never BLOCKs, so a follower polls "with the loop's jittered
//! pause" between rounds (at least `backoff_min`, 50 ms by default), not back to back (the
//! Python and Java ports re-asked at once: about a thousand rounds a second on loopback).
//! Counted on the server: `LEASE.ACQUIRE` calls on one node while another elector leads.

use std::time::Duration;

use redis_lease_client::{Elector, ElectorConfig};
use testsupport::{RedisServer, ServerOptions};
use tokio::time::{sleep, Instant};

fn acquire_calls(s: &RedisServer) -> u64 {
    let stats: String = s.query(&["INFO", "commandstats"]).expect("INFO");
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_lease.acquire:calls="))
        .and_then(|r| r.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

async fn poll(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_follower_pauses_between_rounds() {
    let nodes: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start(ServerOptions::default()))
        .collect();
    let urls: Vec<String> = nodes.iter().map(|s| s.url()).collect();
    let ttl = Duration::from_secs(2);
    let mk = |owner: &str| {
        let cfg = ElectorConfig::new(&urls[0], "q-pace", ttl).with_owner(owner);
        Elector::with_nodes(cfg, &urls).expect("config")
    };
    let mut a = mk("pace-a");
    let (ra, ha) = (a.subscribe(), a.handle());
    let ja = tokio::spawn(async move { a.run(|ctx| async move { ctx.cancelled().await }).await });
    poll(Duration::from_secs(10), "a to lead", || {
        ra.borrow().is_leader()
    })
    .await;
    let base = acquire_calls(&nodes[0]);
    let mut b = mk("pace-b");
    let (rb, hb) = (b.subscribe(), b.handle());
    let jb = tokio::spawn(async move { b.run(|ctx| async move { ctx.cancelled().await }).await });
    poll(Duration::from_secs(10), "b's first round", || {
        acquire_calls(&nodes[0]) > base
    })
    .await;
    let (n0, t0) = (acquire_calls(&nodes[0]), Instant::now());
    sleep(Duration::from_secs(1)).await; // the window in which rounds are counted
    let (n, secs) = (acquire_calls(&nodes[0]) - n0, t0.elapsed().as_secs_f64());
    // One ACQUIRE per round on this node; a pause of at least 50 ms: at most 20 a second.
    assert!(
        n >= 1 && (n as f64) <= 40.0 * secs,
        "the follower made {n} rounds in {secs:.2} s"
    );
    assert!(!rb.borrow().is_leader(), "two leaders");
    hb.resign();
    ha.resign();
    let _ = jb.await;
    let _ = ja.await;
}
