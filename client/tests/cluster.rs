//! The elector on a real Redis Cluster: three primaries with the module, joined with
//! `CLUSTER ADDSLOTSRANGE` + `CLUSTER MEET`. The elector is given the URL of a node that does
//! NOT own the lease key's slot: `MOVED` takes it to the slot's primary (client/src/sentinel.rs,
//! "Cluster"). Then the slot migrates to another primary while the elector leads (the steps of
//! `redis-cli --cluster reshard`): the term goes on without a step-down, its renewals land on
//! the new owner and the release at resign too; the fencing helper on a connection to the new
//! owner writes with the live token and refuses a stale one.
//!
//! Would catch: MOVED not followed (never leads), a redirect that loses the owner or token (the
//! renewal on the new owner is refused and the term ends), a migration ending the term, and a
//! release sent to the old owner (the lease stays held on the new one).

use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_lease_client::{Elector, ElectorConfig, Role, RunOutcome};
use testsupport::{free_port, RedisServer, ServerOptions};

const TTL: Duration = Duration::from_millis(2000);
const RANGES: [(u16, u16); 3] = [(0, 5460), (5461, 10922), (10923, 16383)];

/// A free port whose cluster bus port (port + 10000) is free too.
fn cluster_port() -> u16 {
    loop {
        let p = free_port();
        if p > 55535 {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", p + 10000)).is_ok() {
            return p;
        }
    }
}

fn node() -> RedisServer {
    let mut opts = ServerOptions::default().extra_args(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "5000",
    ]);
    opts.port = Some(cluster_port());
    RedisServer::start(opts)
}

fn poll<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn ok(s: &RedisServer, args: &[&str]) {
    let r: String = s
        .query(args)
        .unwrap_or_else(|e| panic!("{args:?} on :{}: {e}", s.port));
    assert!(r == "OK" || r == "NOKEY", "{args:?}: {r}");
}

/// `LEASE.GET key` on one node, answered by that node itself: (owner, token, pttl ms).
fn held(s: &RedisServer, key: &str) -> Option<(String, u64, u64)> {
    s.query(&["LEASE.GET", key])
        .unwrap_or_else(|e| panic!("LEASE.GET on :{}: {e}", s.port))
}

fn cluster() -> Vec<RedisServer> {
    let nodes: Vec<RedisServer> = (0..3).map(|_| node()).collect();
    for (i, (n, (lo, hi))) in nodes.iter().zip(RANGES).enumerate() {
        // Distinct config epochs before MEET, as `redis-cli --cluster create` sets them. Left
        // at 0, the nodes resolve the collision by gossip after joining, and a migration made
        // while that runs can be undone: the importing node skips its epoch bump at SETSLOT
        // NODE when it believes it holds the highest epoch, and the old owner's gossip with a
        // freshly bumped epoch takes the slot back (seen once in CI: MOVED from the new owner).
        ok(n, &["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()]);
        ok(
            n,
            &["CLUSTER", "ADDSLOTSRANGE", &lo.to_string(), &hi.to_string()],
        );
    }
    for n in &nodes[1..] {
        ok(
            &nodes[0],
            &["CLUSTER", "MEET", "127.0.0.1", &n.port.to_string()],
        );
    }
    poll(
        Duration::from_secs(20),
        "a 3-primary cluster with every slot known on every node",
        || {
            for n in &nodes {
                let info: String = n.query(&["CLUSTER", "INFO"]).ok()?;
                let slots: Vec<redis::Value> = n.query(&["CLUSTER", "SLOTS"]).ok()?;
                if !info.contains("cluster_state:ok") || slots.len() != 3 {
                    return None;
                }
            }
            Some(())
        },
    );
    nodes
}

/// The index in `RANGES` (and `cluster()`'s nodes) of the primary owning `key`'s slot.
fn slot_owner(nodes: &[RedisServer], key: &str) -> (u16, usize) {
    let slot: u16 = nodes[0]
        .query(&["CLUSTER", "KEYSLOT", key])
        .expect("keyslot");
    let i = RANGES
        .iter()
        .position(|(lo, hi)| (*lo..=*hi).contains(&slot))
        .expect("a range holds the slot");
    (slot, i)
}

/// An elector running on `url` whose task counts its starts and any end before `resigned`.
struct Running {
    rt: tokio::runtime::Runtime,
    leadership: tokio::sync::watch::Receiver<Role>,
    handle: redis_lease_client::ElectorHandle,
    starts: Arc<AtomicUsize>,
    stopped_early: Arc<AtomicUsize>,
    resigned: Arc<std::sync::atomic::AtomicBool>,
    run: tokio::task::JoinHandle<Result<RunOutcome<()>, redis_lease_client::LeaseError>>,
}

impl Running {
    fn start(url: String, key: &str, owner: &str) -> Running {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let cfg = ElectorConfig::new(url, key, TTL)
            .with_owner(owner)
            .with_backoff(Duration::from_millis(20), Duration::from_millis(100));
        let mut elector = Elector::new(cfg).expect("config");
        let leadership = elector.subscribe();
        let handle = elector.handle();
        let starts = Arc::new(AtomicUsize::new(0));
        let stopped_early = Arc::new(AtomicUsize::new(0));
        let resigned = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s2, e2, r2) = (starts.clone(), stopped_early.clone(), resigned.clone());
        let run = rt.spawn(async move {
            elector
                .run(move |ctx| {
                    let (s2, e2, r2) = (s2.clone(), e2.clone(), r2.clone());
                    async move {
                        s2.fetch_add(1, Ordering::SeqCst);
                        ctx.cancelled().await;
                        if !r2.load(Ordering::SeqCst) {
                            e2.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                })
                .await
        });
        Running {
            rt,
            leadership,
            handle,
            starts,
            stopped_early,
            resigned,
            run,
        }
    }

    fn leader(&self) -> Option<(u64, tokio::time::Instant)> {
        match *self.leadership.borrow() {
            Role::Leader { token, deadline } => Some((token, deadline)),
            Role::Follower => None,
        }
    }

    /// One term, never ended before the resign.
    fn assert_one_unbroken_term(&self) {
        assert_eq!(
            self.starts.load(Ordering::SeqCst),
            1,
            "one term, never restarted"
        );
        assert_eq!(
            self.stopped_early.load(Ordering::SeqCst),
            0,
            "the migration must not end the term"
        );
    }

    fn resign(self) {
        self.resigned.store(true, Ordering::SeqCst);
        self.handle.resign();
        let run = self.run;
        let outcome = self
            .rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(10), run).await })
            .expect("run ends after resign")
            .expect("run task")
            .expect("run result");
        assert_eq!(outcome, RunOutcome::Resigned);
    }
}

#[test]
fn elector_follows_moved_and_keeps_its_term_across_a_slot_migration() {
    let nodes = cluster();
    let key = "{rust-cluster}:leader";
    let (slot, src_i) = slot_owner(&nodes, key);
    let dst_i = (src_i + 1) % 3;
    let other_i = (src_i + 2) % 3;
    let (src, dst, other) = (&nodes[src_i], &nodes[dst_i], &nodes[other_i]);

    // Start from a node that does not own the slot (and will not own it after the migration
    // either): every command's first hop is a MOVED.
    let e = Running::start(other.url(), key, "cluster-e1");
    let (token, _) = poll(Duration::from_secs(10), "the elector to lead", || {
        e.leader()
    });
    let (owner, t, _) = held(src, key).expect("the lease lives on the slot's primary");
    assert_eq!((owner.as_str(), t), ("cluster-e1#1", token));
    for n in [dst, other] {
        let r: redis::RedisResult<Option<(String, u64, u64)>> = n.query(&["LEASE.GET", key]);
        let e = r.expect_err("a node that does not own the slot must redirect");
        assert_eq!(e.code(), Some("MOVED"), "{e}");
    }

    // Migrate the slot src -> dst with its key (the documented resharding steps).
    let s = slot.to_string();
    let dst_id = move_key(src, dst, slot, key);
    for n in [dst, src, other] {
        ok(n, &["CLUSTER", "SETSLOT", &s, "NODE", &dst_id]);
    }
    let migrated = tokio::time::Instant::now();
    let (_, d0) = e.leader().expect("still leading right after the migration");
    let (owner, t, pttl) = held(dst, key).expect("MIGRATE carried the lease");
    // A restored lease is held for the module's maximum TTL (never shorter than the
    // holder's), so a pttl back within our TTL below proves a RENEW ran on dst.
    assert_eq!((owner.as_str(), t), ("cluster-e1#1", token));
    assert!(pttl > TTL.as_millis() as u64, "restored pttl {pttl}");
    let r: redis::RedisResult<Option<(String, u64, u64)>> = src.query(&["LEASE.GET", key]);
    assert_eq!(
        r.expect_err("the old owner redirects").code(),
        Some("MOVED")
    );

    poll(
        Duration::from_secs(10),
        "a renewal on the slot's new owner that moved the deadline",
        || {
            let (tok, d) = e.leader()?;
            let (_, t, pttl) = held(dst, key)?;
            (tok == token
                && t == token
                && pttl <= TTL.as_millis() as u64
                && d > d0
                && d > migrated + TTL.mul_f64(0.9))
            .then_some(())
        },
    );
    e.assert_one_unbroken_term();

    // The fencing helper on an application connection to the slot's new owner (its keys in
    // the lease key's slot): the live token writes, a stale one is refused and not applied.
    let data = "{rust-cluster}:data";
    let fenced = e.rt.block_on(async {
        let mut conn = redis::Client::open(dst.url())
            .expect("client")
            .get_multiplexed_async_connection()
            .await
            .expect("connection");
        let live = redis_lease_client::fence(&mut conn, key, token, &["SET", data, "live"]).await;
        let stale =
            redis_lease_client::fence(&mut conn, key, token - 1, &["SET", data, "stale"]).await;
        (live, stale)
    });
    assert_eq!(fenced.0, Ok(redis::Value::Okay), "the live token's write");
    assert_eq!(
        fenced.1.expect_err("a stale token must be refused").kind,
        redis_lease_client::ErrorKind::Fenced
    );
    let v: String = dst.query(&["GET", data]).expect("GET");
    assert_eq!(v, "live", "the stale write was not applied");

    e.resign();
    assert_eq!(
        held(dst, key),
        None,
        "resign must RELEASE on the slot's new owner"
    );
}

/// The first resharding steps for `key`'s slot, src -> dst: IMPORTING, MIGRATING, and
/// `MIGRATE` of the key (the slot stays migrating until `SETSLOT NODE`). Returns dst's id.
fn move_key(src: &RedisServer, dst: &RedisServer, slot: u16, key: &str) -> String {
    let s = slot.to_string();
    let src_id: String = src.query(&["CLUSTER", "MYID"]).expect("myid");
    let dst_id: String = dst.query(&["CLUSTER", "MYID"]).expect("myid");
    ok(dst, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &src_id]);
    ok(src, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &dst_id]);
    let dport = dst.port.to_string();
    ok(
        src,
        &["MIGRATE", "127.0.0.1", &dport, "", "0", "5000", "KEYS", key],
    );
    dst_id
}

/// `LEASE.GET key` on an importing node: `ASKING` first, on the same connection (without it
/// the node redirects with `MOVED` to the slot's owner).
fn held_asking(s: &RedisServer, key: &str) -> Option<(String, u64, u64)> {
    let client = redis::Client::open(s.url()).expect("client");
    let mut con = client.get_connection().expect("connection");
    let (v,): (Option<(String, u64, u64)>,) = redis::pipe()
        .cmd("ASKING")
        .ignore()
        .cmd("LEASE.GET")
        .arg(key)
        .query(&mut con)
        .unwrap_or_else(|e| panic!("ASKING + LEASE.GET on :{}: {e}", s.port));
    v
}

/// A migration that stays half-done: the key moved to the importing node, the slot still
/// MIGRATING on its owner, for three TTLs. The owner answers `ASK` for the key; the elector
/// must follow it (ASKING + the command on the importing node) and keep its term.
///
/// Would catch: `ASK` not followed (every renewal fails, the term ends at its deadline: the
/// state before this test), an `ASK` taken as a `MOVED` (the owner would change mid-migration;
/// the release at the end then still works, but the first poll below sees renewals on the
/// importing node only if they are sent with ASKING).
#[test]
fn elector_follows_ask_and_keeps_its_term_while_the_slot_stays_migrating() {
    let nodes = cluster();
    let key = "{rust-ask}:leader";
    let (slot, src_i) = slot_owner(&nodes, key);
    let (src, dst) = (&nodes[src_i], &nodes[(src_i + 1) % 3]);
    let e = Running::start(src.url(), key, "ask-e1");
    let (token, _) = poll(Duration::from_secs(10), "the elector to lead", || {
        e.leader()
    });

    let dst_id = move_key(src, dst, slot, key);
    let migrated = tokio::time::Instant::now();
    let r: redis::RedisResult<Option<(String, u64, u64)>> = src.query(&["LEASE.GET", key]);
    assert_eq!(
        r.expect_err("the owner sends the moved key's commands on")
            .code(),
        Some("ASK")
    );

    // Half-migrated for three TTLs: renewals reach the importing node through ASK (a restored
    // lease is held for the module's maximum TTL, so a pttl back within our TTL proves a
    // RENEW ran there), and the term outlives the deadline it had when the key moved.
    poll(
        Duration::from_secs(10),
        "a renewal through ASK on the importing node",
        || {
            let (_, t, pttl) = held_asking(dst, key)?;
            (t == token && pttl <= TTL.as_millis() as u64).then_some(())
        },
    );
    let until = Instant::now() + TTL * 3;
    while Instant::now() < until {
        let (tok, _) = e
            .leader()
            .expect("the term must go on while the slot migrates");
        assert_eq!(tok, token);
        std::thread::sleep(Duration::from_millis(50));
    }
    let (_, d) = e.leader().expect("still leading");
    assert!(d > migrated + TTL * 2, "the deadline kept moving");
    e.assert_one_unbroken_term();

    let s = slot.to_string();
    for n in &nodes {
        ok(n, &["CLUSTER", "SETSLOT", &s, "NODE", &dst_id]);
    }
    e.resign();
    assert_eq!(
        held(dst, key),
        None,
        "resign must RELEASE on the slot's new owner"
    );
}
