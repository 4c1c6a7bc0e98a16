//! Quorum mode (docs/quorum.md) against 3 real `redis-server`s with the module: one token on
//! every node of the majority, above every token any node issued before; the leader survives
//! one node down and steps down when a majority is gone; a resign releases on every node.

use std::time::Duration;

use redis_lease_client::{Elector, ElectorConfig, Nodes, Role, RunOutcome};
use testsupport::{RedisServer, ServerOptions};
use tokio::time::{sleep, Instant};

const KEY: &str = "q-lease";

fn node() -> RedisServer {
    RedisServer::start(ServerOptions::default().module_args(&["lease.grace-ms", "0"]))
}

fn holder(s: &RedisServer) -> Option<(String, u64)> {
    let mut c = s.connection();
    let v: Option<(String, u64, u64)> = redis::cmd("LEASE.GET").arg(KEY).query(&mut c).ok()?;
    v.map(|(o, t, _)| (o, t))
}

/// Elector "q-a" in quorum mode on `nodes`, with a short reconnect backoff.
fn elector_q_a(nodes: &[RedisServer], ttl: Duration) -> Elector<Nodes> {
    let urls: Vec<String> = nodes.iter().map(|s| s.url()).collect();
    // The restarted test servers come back empty and without grace: a restarted node must
    // count toward nothing for the quarantine (one max TTL; the tests' leases are shorter).
    let cfg = ElectorConfig::new(&urls[0], KEY, ttl)
        .with_owner("q-a")
        .with_backoff(Duration::from_millis(20), Duration::from_millis(200))
        .with_node_quarantine(ttl * 2);
    Elector::with_nodes(cfg, &urls).unwrap()
}

async fn wait_leader(rx: &tokio::sync::watch::Receiver<Role>, within: Duration) -> u64 {
    let end = Instant::now() + within;
    loop {
        if let Some(t) = rx.borrow().token() {
            return t;
        }
        assert!(Instant::now() < end, "no leader within {within:?}");
        sleep(Duration::from_millis(5)).await;
    }
}

/// Would catch: a reign started without the raise (nodes holding different tokens), a token
/// not above the highest any node issued before, renewal not surviving a minority down, a
/// leader that keeps leading without a majority, a release that misses a node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_round_unifies_tokens_survives_a_minority_and_releases_everywhere() {
    let mut nodes = [node(), node(), node()];
    // Node 2 has issued a much higher token before (its wall clock ran ahead, say): the
    // reign's token must be above it, and every node must carry it.
    let far = {
        let mut c = nodes[2].connection();
        let t: u64 = redis::cmd("LEASE.ACQUIRE")
            .arg("other")
            .arg("x")
            .arg(30_000)
            .query(&mut c)
            .unwrap();
        let high = t + 5_000_000_000;
        let r: i64 = redis::cmd("LEASE.RAISE")
            .arg("other")
            .arg("x")
            .arg(t)
            .arg(high)
            .query(&mut c)
            .unwrap();
        assert_eq!(r, 1);
        high
    };
    let ttl = Duration::from_millis(900);
    let mut e = elector_q_a(&nodes, ttl);
    let handle = e.handle();
    let rx = e.subscribe();
    let run = tokio::spawn(async move {
        e.run(|ctx| async move { ctx.cancelled().await })
            .await
            .unwrap()
    });
    let t0 = Instant::now();
    let token = wait_leader(&rx, Duration::from_secs(5)).await;
    println!("quorum elected in {:?} with token {token}", t0.elapsed());
    assert!(
        token > far,
        "reign token {token} above node 2's earlier {far}"
    );
    for (i, s) in nodes.iter().enumerate() {
        assert_eq!(
            holder(s),
            Some(("q-a#1".into(), token)),
            "node {i} holds the one token"
        );
    }

    // One node down: renewals still reach a majority; leadership continues past 2 TTLs.
    nodes[0].kill();
    sleep(ttl * 2).await;
    assert_eq!(rx.borrow().token(), Some(token), "leads on 2 of 3");

    // A second node down: no majority; the leader steps down within about one TTL.
    nodes[1].kill();
    let lost_at = Instant::now();
    while rx.borrow().is_leader() {
        assert!(
            lost_at.elapsed() < ttl * 2,
            "still leading without a majority"
        );
        sleep(Duration::from_millis(5)).await;
    }
    println!(
        "stepped down {:?} after losing the majority",
        lost_at.elapsed()
    );

    nodes[0].restart();
    nodes[1].restart();
    let back = Instant::now();
    // Back (data lost here: the test servers run without persistence) and grace 0: their
    // identities changed, so they count toward nothing for the quarantine (2 TTLs here);
    // then a new reign, token above the previous one (node 2 still knows it).
    let token2 = wait_leader(&rx, Duration::from_secs(10)).await;
    assert!(
        back.elapsed() >= ttl * 2,
        "restarted empty nodes counted before their quarantine ended ({:?})",
        back.elapsed()
    );
    assert!(token2 > token, "{token2} > {token}");
    // A node that came back after the round may not be in this reign; a majority is, under
    // a later reign's owner (R17: the counter advanced when the first reign ended, and after
    // every round in between that released partial grants, Q4).
    let owners: Vec<String> = nodes
        .iter()
        .filter_map(|s| holder(s).filter(|(_, t)| *t == token2).map(|(o, _)| o))
        .collect();
    assert!(
        owners.len() >= 2,
        "{owners:?}: fewer than 2 of 3 nodes hold {token2}"
    );
    assert!(
        owners.windows(2).all(|w| w[0] == w[1]),
        "one owner per reign: {owners:?}"
    );
    let reign: u64 = owners[0]
        .strip_prefix("q-a#")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        reign >= 2,
        "the second reign's owner is past #1: {owners:?}"
    );
    handle.resign();
    assert_eq!(run.await.unwrap(), RunOutcome::Resigned);
    for (i, s) in nodes.iter().enumerate() {
        assert_eq!(holder(s), None, "node {i} released");
    }
}

/// Two electors on the same 3 nodes: never two leaders at once, and a resign hands over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_electors_never_lead_together() {
    let nodes = [node(), node(), node()];
    let urls: Vec<String> = nodes.iter().map(|s| s.url()).collect();
    let ttl = Duration::from_millis(600);
    let mk = |o: &str| {
        let cfg = ElectorConfig::new(&urls[0], KEY, ttl)
            .with_owner(o)
            .with_backoff(Duration::from_millis(10), Duration::from_millis(100));
        Elector::with_nodes(cfg, &urls).unwrap()
    };
    let (mut a, mut b) = (mk("a"), mk("b"));
    let (ha, hb) = (a.handle(), b.handle());
    let (ra, rb) = (a.subscribe(), b.subscribe());
    let ja = tokio::spawn(async move { a.run(|ctx| async move { ctx.cancelled().await }).await });
    let jb = tokio::spawn(async move { b.run(|ctx| async move { ctx.cancelled().await }).await });
    let end = Instant::now() + Duration::from_secs(3);
    let mut first = None;
    let mut handed = None;
    while Instant::now() < end {
        let (la, lb) = (ra.borrow().token(), rb.borrow().token());
        assert!(la.is_none() || lb.is_none(), "two leaders: {la:?} {lb:?}");
        if first.is_none() {
            if let Some(t) = la.or(lb) {
                first = Some((la.is_some(), t));
                if la.is_some() {
                    ha.resign()
                } else {
                    hb.resign()
                }
            }
        } else if let (Some((a_first, t1)), None) = (first, handed) {
            let other = if a_first { lb } else { la };
            if let Some(t2) = other {
                assert!(t2 > t1);
                handed = Some(t2);
            }
        }
        sleep(Duration::from_millis(2)).await;
    }
    assert!(handed.is_some(), "hand-over after resign: {first:?}");
    ha.resign();
    hb.resign();
    let _ = ja.await;
    let _ = jb.await;
}

/// Would catch: a quorum transport that frees the nodes still held for us as soon as a
/// renewal round is lost, before our task has stopped. Such a node can complete a
/// successor's majority while our task still acts (found by the model check,
/// docs/model.md). Here a majority says "not held" (an intruder holds nodes 0 and 1), node 2
/// still holds our lease: it must stay ours until the task has stopped, then be released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_round_frees_the_remaining_nodes_only_after_the_task_stopped() {
    let nodes = [node(), node(), node()];
    let ttl = Duration::from_millis(900);
    let mut e = elector_q_a(&nodes, ttl);
    let rx = e.subscribe();
    let (stopped_tx, mut stopped_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let _run = tokio::spawn(async move {
        e.run(move |ctx| {
            let stopped_tx = stopped_tx.clone();
            async move {
                ctx.cancelled().await;
                // A task that needs a while to stop (well within its stop budget).
                sleep(Duration::from_millis(400)).await;
                let _ = stopped_tx.send(());
            }
        })
        .await
    });
    let token = wait_leader(&rx, Duration::from_secs(5)).await;
    for s in &nodes[..2] {
        let mut c = s.connection();
        let _: i64 = redis::cmd("DEL").arg(KEY).query(&mut c).unwrap();
        let t: Option<u64> = redis::cmd("LEASE.ACQUIRE")
            .arg(KEY)
            .arg("intruder")
            .arg(5_000)
            .query(&mut c)
            .unwrap();
        assert!(t.is_some(), "intruder granted");
    }
    // The next renewal round finds a majority against us: we step down at once...
    let end = Instant::now() + ttl * 2;
    while rx.borrow().is_leader() {
        assert!(Instant::now() < end, "still leading without a majority");
        sleep(Duration::from_millis(2)).await;
    }
    // ...but node 2 is still ours while the task is stopping.
    assert_eq!(
        holder(&nodes[2]),
        Some(("q-a#1".into(), token)),
        "node 2 freed before the task stopped"
    );
    assert!(
        stopped_rx.try_recv().is_err(),
        "the task had already stopped"
    );
    tokio::time::timeout(Duration::from_secs(2), stopped_rx.recv())
        .await
        .expect("task stopped")
        .expect("task stopped");
    // Then it is released (a new campaign may briefly hold it with a new token; never the old).
    let end = Instant::now() + Duration::from_secs(2);
    while holder(&nodes[2]).map(|h| h.1) == Some(token) {
        assert!(
            Instant::now() < end,
            "node 2 still holds the old reign's token"
        );
        sleep(Duration::from_millis(5)).await;
    }
}

/// A node with a unix socket beside its TCP port (two addresses of one server).
fn node_with_socket(path: &std::path::Path) -> RedisServer {
    RedisServer::start(
        ServerOptions::default()
            .module_args(&["lease.grace-ms", "0"])
            .extra_args(&[
                "--unixsocket",
                &path.display().to_string(),
                "--unixsocketperm",
                "700",
            ]),
    )
}

fn quorum_cfg(urls: &[String], owner: &str, ttl: Duration) -> ElectorConfig {
    ElectorConfig::new(&urls[0], KEY, ttl)
        .with_owner(owner)
        .with_backoff(Duration::from_millis(10), Duration::from_millis(100))
}

/// Issue 32 item 2: one server listed twice is refused at start, under any spelling.
#[test]
fn a_node_list_naming_one_server_twice_is_refused() {
    let s = node();
    let p = s.addr().port();
    for list in [
        vec![s.url(), s.url()],
        vec![
            format!("redis://localhost:{p}/"),
            format!("redis://127.0.0.1:{p}/"),
        ],
        vec![
            format!("redis://127.0.0.1:{p}/0"),
            format!("redis://127.0.0.1:{p}/1"),
        ],
    ] {
        let e = Elector::with_nodes(quorum_cfg(&list, "d", Duration::from_secs(1)), &list)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("same server"), "{list:?}: {e}");
    }
}

/// Issue 32 item 2, once connected: a server reachable at two addresses the start check
/// cannot relate (its TCP port and its unix socket) counts once. With the third node frozen,
/// only that one server answers: no majority, nobody leads (at the old code it led alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_behind_two_addresses_counts_once() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("a.sock");
    let a = node_with_socket(&sock);
    let b = node();
    b.signal(libc_sigstop());
    let urls = vec![a.url(), format!("unix://{}", sock.display()), b.url()];
    let mut e =
        Elector::with_nodes(quorum_cfg(&urls, "dup", Duration::from_millis(600)), &urls).unwrap();
    let rx = e.subscribe();
    let h = e.handle();
    let j = tokio::spawn(async move { e.run(|ctx| async move { ctx.cancelled().await }).await });
    let end = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < end {
        assert!(
            rx.borrow().token().is_none(),
            "led with one server counted twice (node 3 frozen)"
        );
        sleep(Duration::from_millis(5)).await;
    }
    b.signal(libc_sigcont());
    // With the frozen node back, the real majority {a, b} elects.
    wait_leader(&rx, Duration::from_secs(3)).await;
    h.resign();
    let _ = j.await;
}

fn libc_sigstop() -> i32 {
    nix::sys::signal::Signal::SIGSTOP as i32
}
fn libc_sigcont() -> i32 {
    nix::sys::signal::Signal::SIGCONT as i32
}

/// Issue 32 item 3: a node address re-pointed at an already-running empty server (a VIP or
/// DNS name moved to a spare that is past its grace). X reigns on the bare majority {A, C}
/// (B was frozen during its campaign); then C's address is moved to spare S and C dies. Y,
/// which knew C, must not count S: at the old code Y reigned on {B, S} while X still led.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_swapped_for_a_running_empty_server_counts_toward_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (c_sock, s_sock, link) = (
        dir.path().join("c.sock"),
        dir.path().join("s.sock"),
        dir.path().join("node3.sock"),
    );
    let a = node();
    let b = node();
    let mut c = node_with_socket(&c_sock);
    let _s = node_with_socket(&s_sock);
    std::os::unix::fs::symlink(&c_sock, &link).unwrap();
    let urls = vec![a.url(), b.url(), format!("unix://{}", link.display())];
    let ttl = Duration::from_millis(3000);
    b.signal(libc_sigstop());
    let mut x = Elector::with_nodes(quorum_cfg(&urls, "x", ttl), &urls).unwrap();
    let rx = x.subscribe();
    let hx = x.handle();
    let jx = tokio::spawn(async move { x.run(|ctx| async move { ctx.cancelled().await }).await });
    wait_leader(&rx, Duration::from_secs(3)).await;
    b.signal(libc_sigcont());
    let mut y = Elector::with_nodes(quorum_cfg(&urls, "y", ttl), &urls).unwrap();
    let ry = y.subscribe();
    let hy = y.handle();
    let jy = tokio::spawn(async move { y.run(|ctx| async move { ctx.cancelled().await }).await });
    // Y polls: it has connected to every node (and seen C) well within this.
    sleep(Duration::from_millis(500)).await;
    assert!(
        ry.borrow().token().is_none(),
        "Y cannot lead while X holds A and C"
    );
    // The swap: C's address now leads to S, and C is gone.
    let tmp = dir.path().join("node3.tmp");
    std::os::unix::fs::symlink(&s_sock, &tmp).unwrap();
    std::fs::rename(&tmp, &link).unwrap();
    c.kill();
    let end = Instant::now() + Duration::from_secs(4);
    while Instant::now() < end {
        let (lx, ly) = (rx.borrow().token(), ry.borrow().token());
        assert!(
            lx.is_none() || ly.is_none(),
            "two leaders after the swap: x={lx:?} y={ly:?}"
        );
        sleep(Duration::from_millis(2)).await;
    }
    hx.resign();
    hy.resign();
    let _ = jx.await;
    let _ = jy.await;
}

/// Protocol Q4 + R17 (found by the quorum model check): a campaign round that releases its
/// partial grants retires its owner, so the next round uses a new one. Otherwise that
/// RELEASE, executed late on a node whose connection was replaced, could free the node after
/// the next round (same owner) had refreshed it there, inside the new reign. Here an intruder
/// holds two of three nodes: every round of q-a gets one grant and releases it; once the
/// intruder lets go, q-a reigns with an owner past `#1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_that_released_partial_grants_retires_its_owner() {
    let nodes = [node(), node(), node()];
    for s in &nodes[..2] {
        let mut c = s.connection();
        let _: u64 = redis::cmd("LEASE.ACQUIRE")
            .arg(KEY)
            .arg("intruder")
            .arg(1500)
            .query(&mut c)
            .unwrap();
    }
    // Q10's wait off (a BLOCK budget of one op timeout leaves no wait): this test is about
    // rounds that release. With the wait on, a round decided early on two refusals, before
    // node 2's grant arrived, waits instead of releasing, and rightly keeps its owner.
    let ttl = Duration::from_millis(600);
    let urls: Vec<String> = nodes.iter().map(|s| s.url()).collect();
    let cfg = ElectorConfig::new(&urls[0], KEY, ttl)
        .with_owner("q-a")
        .with_backoff(Duration::from_millis(20), Duration::from_millis(200))
        .with_node_quarantine(ttl * 2);
    let cfg = cfg.clone().with_block_timeout(cfg.op_timeout);
    let mut e = Elector::with_nodes(cfg, &urls).unwrap();
    let rx = e.subscribe();
    let h = e.handle();
    let j = tokio::spawn(async move { e.run(|ctx| async move { ctx.cancelled().await }).await });
    let token = wait_leader(&rx, Duration::from_secs(5)).await;
    let (owner, t) = holder(&nodes[2]).expect("q-a holds node 2");
    assert_eq!(t, token);
    let reign: u64 = owner
        .strip_prefix("q-a#")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("owner {owner}"));
    assert!(
        reign > 1,
        "the rounds that released partial grants reused owner {owner}"
    );
    h.resign();
    let _ = j.await;
}

/// docs/security.md's quorum-mode elector recipe, exactly as printed there (password added
/// by the test): the single-node elector's rules plus `+lease.raise` and `+info`.
const QUORUM_ELECTOR: &str = "resetkeys resetchannels -@all +lease.acquire +lease.renew +lease.release +lease.get +wait +lease.raise +info ~leases:*";

/// Nodes with the user `elector` (password `elector-pw`) under `rules`, and its URLs.
fn acl_nodes(rules: &str) -> (Vec<RedisServer>, Vec<String>) {
    let nodes = vec![node(), node(), node()];
    let urls = nodes
        .iter()
        .map(|s| {
            let mut c = s.connection();
            let mut cmd = redis::cmd("ACL");
            cmd.arg("SETUSER")
                .arg("elector")
                .arg("on")
                .arg(">elector-pw");
            for r in rules.split_whitespace() {
                cmd.arg(r);
            }
            let _: () = cmd.query(&mut c).unwrap();
            format!("redis://elector:elector-pw@{}/", s.addr())
        })
        .collect();
    (nodes, urls)
}

/// Would catch: the security.md quorum recipe missing a command the quorum elector sends
/// (it could not lead, or could not release), or the client leading on nodes where it may
/// not run LEASE.RAISE (the round would go without unified tokens).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quorum_elector_acl_recipe_leads_and_lacking_raise_does_not() {
    const K: &str = "leases:q";
    let get = |s: &RedisServer| -> Option<(String, u64)> {
        let mut c = s.connection();
        let v: Option<(String, u64, u64)> = redis::cmd("LEASE.GET").arg(K).query(&mut c).ok()?;
        v.map(|(o, t, _)| (o, t))
    };
    let ttl = Duration::from_millis(800);
    let cfg = |urls: &[String]| {
        ElectorConfig::new(&urls[0], K, ttl)
            .with_owner("acl")
            .with_backoff(Duration::from_millis(10), Duration::from_millis(100))
    };

    let (nodes, urls) = acl_nodes(QUORUM_ELECTOR);
    let mut e = Elector::with_nodes(cfg(&urls), &urls).unwrap();
    let rx = e.subscribe();
    let h = e.handle();
    let j = tokio::spawn(async move { e.run(|ctx| async move { ctx.cancelled().await }).await });
    let token = wait_leader(&rx, Duration::from_secs(5)).await;
    for (i, s) in nodes.iter().enumerate() {
        assert_eq!(
            get(s).map(|(_, t)| t),
            Some(token),
            "node {i} holds the reign's token"
        );
    }
    h.resign();
    assert_eq!(j.await.unwrap().unwrap(), RunOutcome::Resigned);
    for (i, s) in nodes.iter().enumerate() {
        assert_eq!(get(s), None, "node {i} released by the recipe's user");
    }

    // The negative control: the same rules without `+lease.raise` never lead.
    let (_nodes, urls) = acl_nodes(&QUORUM_ELECTOR.replace(" +lease.raise", ""));
    let mut e = Elector::with_nodes(cfg(&urls), &urls).unwrap();
    let rx = e.subscribe();
    let h = e.handle();
    let j = tokio::spawn(async move { e.run(|ctx| async move { ctx.cancelled().await }).await });
    let end = Instant::now() + ttl * 3;
    while Instant::now() < end {
        assert!(rx.borrow().token().is_none(), "led without +lease.raise");
        sleep(Duration::from_millis(5)).await;
    }
    h.resign();
    let _ = j.await;
}

/// `LEASE.ACQUIRE` calls a node has served (`INFO commandstats`).
fn acquire_calls(s: &RedisServer) -> u64 {
    let mut c = s.connection();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_lease.acquire:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Protocol Q10: a refused follower waits on the wait node (the smallest URL) instead of
/// polling every node, and takes over as soon as the holder releases. Would catch: followers
/// polling (about 40 rounds in the 1.5 s below at the 20..40 ms pause of this config, so about
/// 40 ACQUIREs on every node), a wait that never wakes, or a wake that does not lead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_follower_waits_on_one_node_and_takes_over_on_release() {
    let nodes = [node(), node(), node()];
    for s in &nodes {
        let mut c = s.connection();
        let _: u64 = redis::cmd("LEASE.ACQUIRE")
            .arg(KEY)
            .arg("holder")
            .arg(20_000)
            .query(&mut c)
            .unwrap();
    }
    let before: Vec<u64> = nodes.iter().map(acquire_calls).collect();
    // TTL 3 s: the wait is capped at the renew interval (1 s), so 1.5 s see at most two.
    let mut e = elector_q_a(&nodes, Duration::from_secs(3));
    let rx = e.subscribe();
    let h = e.handle();
    let j = tokio::spawn(async move { e.run(|ctx| async move { ctx.cancelled().await }).await });
    sleep(Duration::from_millis(1500)).await;
    assert!(
        rx.borrow().token().is_none(),
        "led while another held every node"
    );
    for (i, s) in nodes.iter().enumerate() {
        let calls = acquire_calls(s) - before[i];
        // A round and the wait (one more call on the wait node), then once more after the
        // cap (the renew interval): 4 on the wait node, 2 on the others, plus the odd round
        // that ended on two refusals before the wait node answered and so polls once: at
        // most 7; polling: about 40.
        assert!(
            calls <= 7,
            "node {i}: {calls} ACQUIREs in 1.5 s: the follower polls"
        );
        assert!(calls >= 1, "node {i}: never asked");
    }
    // The holder lets go (the wait node last, as a resigning leader does): the waiting
    // follower leads at once, long before the holder's 20 s lease would have expired.
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_by_key(|&i| nodes[i].url());
    order.rotate_left(1);
    for &i in &order {
        let (_, t) = holder(&nodes[i]).expect("holder still holds");
        let mut c = nodes[i].connection();
        let r: i64 = redis::cmd("LEASE.RELEASE")
            .arg(KEY)
            .arg("holder")
            .arg(t)
            .query(&mut c)
            .unwrap();
        assert_eq!(r, 1);
    }
    let token = wait_leader(&rx, Duration::from_secs(5)).await;
    for s in &nodes {
        let (owner, t) = holder(s).expect("q-a holds every node");
        assert!(owner.starts_with("q-a#"), "{owner}");
        assert_eq!(t, token);
    }
    h.resign();
    let _ = j.await;
}
