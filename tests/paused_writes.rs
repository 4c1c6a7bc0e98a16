//! Writes paused by the server (issue 35, item 1; docs/failover.md §2.6): `CLIENT PAUSE
//! WRITE|ALL`, `FAILOVER`, `SHUTDOWN` waiting for a lagging replica, `CLUSTER FAILOVER`. While
//! the server pauses writes it forbids anything from reaching the AOF or a replica (Redis
//! asserts it in `propagateNow`), and it asks modules to hold their own writes back
//! (`RedisModule_AvoidReplicaTraffic`). A lease that expires, or a BLOCKed waiter that would be
//! granted, during the pause must wait for its end: the server stays up, and the expiry or the
//! grant happens right after the pause.
//!
//! Each test would catch: the expiry timer, the cron safety net or a waiter's grant writing
//! during the pause (the server aborts: `ASSERTION FAILED` in `propagateNow`, with AOF on or a
//! replica attached), a waiter granted during the pause (visible without AOF or replicas too),
//! and deferred work that is never resumed after the pause (expiry or grant missing after it).

mod common;
use common::*;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// `CLIENT PAUSE ms mode`; returns the instant just before sending: the server's pause ends
/// no earlier than this plus `ms`.
fn pause(con: &mut Con, ms: u64, mode: &str) -> Instant {
    let sent = Instant::now();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg(mode)
        .query(con)
        .expect("CLIENT PAUSE");
    sent
}

/// `lease_expired` of `INFO lease`.
fn expired(con: &mut Con) -> i64 {
    info_field(con, "expired")
}

/// Has the server died or begun its crash report (the process lives on while it writes it)?
fn crashed(s: &mut RedisServer) -> bool {
    !s.alive() || s.log().contains("BUG REPORT START")
}

/// Bounded wait until the server crashes or `limit` passes; true if it is still up.
fn stays_up(s: &mut RedisServer, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if crashed(s) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    !crashed(s)
}

/// Panics with the log (where an abort is reported) if the server died.
fn assert_up(s: &mut RedisServer, what: &str) {
    if crashed(s) {
        panic!("redis-server died {what}; log tail:\n{}", s.log_tail(40));
    }
}

/// A BLOCKed acquirer on its own connection and thread: sends the instant its reply arrived
/// and the reply.
fn spawn_waiter(
    s: &RedisServer,
    key: &'static str,
    owner: &'static str,
) -> mpsc::Receiver<(Instant, redis::RedisResult<Option<u64>>)> {
    let mut con = s.connection();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r: redis::RedisResult<Option<u64>> = redis::cmd("LEASE.ACQUIRE")
            .arg(key)
            .arg(owner)
            .arg(5000)
            .arg("BLOCK")
            .arg(0)
            .query(&mut con);
        let _ = tx.send((Instant::now(), r));
    });
    rx
}

/// Bounded wait until `n` clients are blocked on leases.
fn wait_blocked(con: &mut Con, n: i64) {
    wait_for(Duration::from_secs(5), || {
        (info_field(con, "blocked_clients") == n).then_some(())
    })
    .expect("the waiter never blocked");
}

/// `CLIENT PAUSE WRITE` with the AOF on: the lease lapses during the pause (LEASE.GET, a read,
/// reports it gone on time), but it is freed — and `FREE` written — only after the pause; a
/// renewal sent during the pause waits for its end and is then refused (its lease lapsed
/// meanwhile: expiry observed late, never early).
#[test]
fn client_pause_write_with_aof_defers_expiry_and_renewals_to_the_end_of_the_pause() {
    let mut s = RedisServer::start(ServerOptions::default().extra_args(&["--appendonly", "yes"]));
    let mut c = s.connection();
    let asked = Instant::now();
    let t = acquire(&mut c, "k", "holder", 150).expect("grant");
    let sent = pause(&mut c, 2000, "WRITE");
    let pause_end = sent + Duration::from_millis(2000);

    // A renewal during the pause: Redis holds it back until the pause ends.
    let mut rc = s.connection();
    let renewer = std::thread::spawn(move || {
        let r: i64 = redis::cmd("LEASE.RENEW")
            .arg("k")
            .arg("holder")
            .arg(t)
            .arg(150)
            .query(&mut rc)
            .expect("renew after the pause");
        (Instant::now(), r)
    });

    // The deadline passes during the pause: reads see no holder, nothing is freed yet.
    wait_for(Duration::from_secs(1), || {
        get(&mut c, "k").is_none().then_some(())
    })
    .expect("LEASE.GET still reports the holder after its deadline");
    assert!(
        asked.elapsed() >= Duration::from_millis(150),
        "LEASE.GET reported the lease gone before its deadline"
    );
    // Past the deadline by several expiry-timer and cron periods, still inside the pause.
    assert!(
        stays_up(&mut s, Duration::from_millis(400)),
        "the server died when a lease expired during CLIENT PAUSE WRITE (AOF on); log tail:\n{}",
        s.log_tail(40)
    );
    assert!(
        Instant::now() < pause_end,
        "the test machine is too slow for this test"
    );
    assert_up(
        &mut s,
        "while a lease expired during CLIENT PAUSE WRITE (AOF on)",
    );
    assert_eq!(expired(&mut c), 0, "a lease was freed during the pause");

    let (renew_at, renewed) = renewer.join().expect("renewer");
    assert!(renew_at >= pause_end, "the renewal ran during the pause");
    assert_eq!(renewed, 0, "a renewal of a lapsed lease was accepted");
    wait_for(Duration::from_secs(2), || {
        (expired(&mut c) == 1).then_some(())
    })
    .expect("the lease was not freed after the pause");
    assert_up(&mut s, "after the pause");
    // The AOF holds the FREE: a restart from it has no holder and the same last token.
    s.restart();
    let mut c = s.connection();
    assert_eq!(get(&mut c, "k"), None);
    assert_eq!(lease_info(&mut c, "k").map(|i| i.1), Some(t));
}

/// `CLIENT PAUSE ALL` with a replica attached: no command reaches the server during the pause,
/// the expiry timer fires in it; after the pause the primary is up and the replica has the
/// `FREE`.
#[test]
fn client_pause_all_with_a_replica_defers_expiry_to_the_end_of_the_pause() {
    let mut p = RedisServer::start(primary_opts(&["lease.grace-ms", "0"]));
    let r = start_replica(&p, &[]);
    let mut pc = p.connection();
    acquire(&mut pc, "k", "holder", 500).expect("grant");
    let granted = Instant::now();
    pause(&mut pc, 1200, "ALL");
    assert!(
        granted.elapsed() < Duration::from_millis(450),
        "the pause must begin before the deadline; the test machine is too slow"
    );
    assert!(
        stays_up(&mut p, Duration::from_millis(1400)),
        "the primary died when a lease expired during CLIENT PAUSE ALL; log tail:\n{}",
        p.log_tail(40)
    );
    let mut pc = p.connection();
    wait_for(Duration::from_secs(2), || {
        (expired(&mut pc) == 1).then_some(())
    })
    .expect("the lease was not freed after the pause");
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);
    let mut rc = r.connection();
    assert_eq!(digest(&mut rc, "k"), digest(&mut pc, "k"));
    assert_eq!(lease_info(&mut rc, "k").map(|i| i.0), Some(0));
}

/// Grace ends during `CLIENT PAUSE WRITE` (AOF on) with a BLOCKed waiter: it is granted right
/// after the pause, not in it.
#[test]
fn waiter_at_grace_end_during_a_pause_is_granted_after_it() {
    let mut s = RedisServer::start(
        ServerOptions::default()
            .grace_ms(800)
            .extra_args(&["--appendonly", "yes"]),
    );
    let mut c = s.connection();
    let rx = spawn_waiter(&s, "k", "waiter");
    wait_blocked(&mut c, 1);
    let sent = pause(&mut c, 2000, "WRITE");
    // INFO is no write: it runs during the pause. Grace still on now = it ends in the pause.
    assert_eq!(
        info_field(&mut c, "grace_active"),
        1,
        "the pause must begin during grace; the test machine is too slow"
    );
    let pause_end = sent + Duration::from_millis(2000);
    let (at, got) = rx
        .recv_timeout(Duration::from_secs(5))
        .unwrap_or_else(|_| panic!("the waiter was never answered; log:\n{}", s.log_tail(40)));
    assert_up(
        &mut s,
        "when grace ended during CLIENT PAUSE WRITE with a waiter",
    );
    let token = got.expect("grant").expect("a token, not nil");
    assert!(at >= pause_end, "the waiter was granted during the pause");
    assert!(
        at < pause_end + Duration::from_secs(1),
        "the grant came long after the pause"
    );
    assert_eq!(get(&mut c, "k").map(|h| h.1), Some(token));
}

/// `CONFIG SET lease.grace-ms 0` during `CLIENT PAUSE WRITE` (CONFIG is not a write, so it
/// runs): ending grace wakes the waiter, which is granted after the pause. Without AOF or
/// replicas nothing aborts; what fails here is a waiter granted during the pause.
#[test]
fn config_set_ending_grace_during_a_pause_grants_the_waiter_after_it() {
    let mut s = RedisServer::start(ServerOptions::default().grace_ms(60_000));
    let mut c = s.connection();
    let rx = spawn_waiter(&s, "k", "waiter");
    wait_blocked(&mut c, 1);
    let sent = pause(&mut c, 800, "WRITE");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("lease.grace-ms")
        .arg(0)
        .query(&mut c)
        .expect("CONFIG SET during the pause");
    let pause_end = sent + Duration::from_millis(800);
    let (at, got) = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the waiter was never answered");
    assert_up(&mut s, "after CONFIG SET during a pause");
    got.expect("grant").expect("a token, not nil");
    assert!(at >= pause_end, "the waiter was granted during the pause");
}

/// `FAILOVER` with a lease expiring while the primary waits for its replica (paused writes):
/// the failover completes, the old primary is a replica of the new one, both are up.
#[test]
fn failover_completes_with_a_lease_expiring_during_it() {
    let mut p = RedisServer::start(primary_opts(&["lease.grace-ms", "0"]));
    let mut r = start_replica(&p, &["lease.grace-ms", "0"]);
    let mut pc = p.connection();
    // The replica cannot acknowledge while stopped: the primary stays paused, waiting for it
    // (to receive the grant, among others).
    r.signal(libc::SIGSTOP);
    acquire(&mut pc, "k", "holder", 800).expect("grant");
    let granted = Instant::now();
    let _: () = redis::cmd("FAILOVER")
        .arg("TIMEOUT")
        .arg(10_000)
        .query(&mut pc)
        .expect("FAILOVER");
    wait_for(Duration::from_secs(2), || {
        let i: String = p.query(&["INFO", "replication"]).ok()?;
        (info_value(&i, "master_failover_state").as_deref() == Some("waiting-for-sync"))
            .then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "FAILOVER did not wait for the replica; log:\n{}",
            p.log_tail(40)
        )
    });
    assert!(
        granted.elapsed() < Duration::from_millis(700),
        "FAILOVER must begin before the deadline; the test machine is too slow"
    );
    // Past the lease's deadline, still waiting.
    let lapsed = stays_up(&mut p, Duration::from_millis(1000));
    r.signal(libc::SIGCONT);
    assert!(
        lapsed,
        "the primary died when a lease expired during FAILOVER; log tail:\n{}",
        p.log_tail(40)
    );
    let mut rc = r.connection();
    wait_for(Duration::from_secs(10), || {
        let ri = info_text(&mut rc, "replication");
        let pi = info_text(&mut pc, "replication");
        (info_value(&ri, "role").as_deref() == Some("master")
            && info_value(&pi, "role").as_deref() == Some("slave")
            && info_value(&pi, "master_link_status").as_deref() == Some("up"))
        .then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "FAILOVER did not complete; old primary log:\n{}\nreplica log:\n{}",
            p.log_tail(30),
            r.log_tail(30)
        )
    });
    assert_up(&mut p, "after FAILOVER");
    r.assert_alive();
    // The new primary knows the lease; it has lapsed there (judged against its own clock).
    wait_for(Duration::from_secs(3), || {
        (get(&mut rc, "k").is_none()).then_some(())
    })
    .expect("the lapsed lease is still held on the new primary");
}

/// `SHUTDOWN` waits (writes paused) for a lagging replica; a lease expires meanwhile. The
/// server must finish the shutdown it was asked for: save its RDB and exit, not abort.
#[test]
fn shutdown_waiting_for_a_lagging_replica_saves_after_a_lease_expires() {
    let mut p = RedisServer::start(primary_opts(&["lease.grace-ms", "0"]).extra_args(&[
        "--shutdown-timeout",
        "1",
        "--appendonly",
        "no",
    ]));
    let r = start_replica(&p, &[]);
    let mut pc = p.connection();
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);
    r.signal(libc::SIGSTOP);
    // Lagging: writes the stopped replica cannot acknowledge; the lease expires 300 ms into
    // the shutdown's wait of 1 s.
    acquire(&mut pc, "k", "holder", 300).expect("grant");
    let _: () = redis::cmd("SET")
        .arg("plain")
        .arg("data")
        .query(&mut pc)
        .expect("set");
    // SHUTDOWN SAVE: waits up to shutdown-timeout (1 s) for the replica, then saves and exits.
    let _ = redis::cmd("SHUTDOWN").arg("SAVE").query::<()>(&mut pc);
    let exited = wait_for(Duration::from_secs(10), || (!p.alive()).then_some(()));
    r.signal(libc::SIGCONT);
    assert!(exited.is_some(), "the server did not exit");
    let log = p.log();
    assert!(
        !log.contains("BUG REPORT START"),
        "the server aborted during SHUTDOWN; log tail:\n{}",
        p.log_tail(40)
    );
    assert!(
        p.dir().join("dump.rdb").exists(),
        "no RDB saved; log tail:\n{}",
        p.log_tail(30)
    );
    // The saved data set is whole: the plain key and the lease key.
    p.restart_with(ServerOptions::default());
    let mut pc = p.connection();
    let v: Option<String> = redis::cmd("GET").arg("plain").query(&mut pc).expect("get");
    assert_eq!(v.as_deref(), Some("data"));
    assert!(lease_info(&mut pc, "k").is_some());
}

fn cluster_node() -> RedisServer {
    RedisServer::start(ServerOptions::default().extra_args(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "5000",
        "--repl-diskless-sync-delay",
        "0",
    ]))
}

fn role_of(s: &RedisServer) -> Option<String> {
    let i: String = s.query(&["INFO", "replication"]).ok()?;
    info_value(&i, "role")
}

/// `CLUSTER FAILOVER` with a lease expiring while the primary is paused for it: a one-shard
/// cluster (a primary with every slot and its replica). The replica lags behind (its own
/// `CLIENT PAUSE` holds back its primary's stream), so the primary stays paused (it waits for
/// the replica to reach its offset) past the lease's deadline; then the replica catches up
/// and the failover completes.
#[test]
fn cluster_failover_completes_with_a_lease_expiring_during_it() {
    let mut p = cluster_node();
    let mut r = cluster_node();
    let mut pc = p.connection();
    let _: () = redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query(&mut pc)
        .expect("addslots");
    let _: () = redis::cmd("CLUSTER")
        .arg("MEET")
        .arg("127.0.0.1")
        .arg(r.port)
        .query(&mut pc)
        .expect("meet");
    let pid: String = redis::cmd("CLUSTER")
        .arg("MYID")
        .query(&mut pc)
        .expect("myid");
    let mut rc = r.connection();
    wait_for(Duration::from_secs(10), || {
        let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut rc).ok()?;
        nodes.contains(&pid).then_some(())
    })
    .expect("the replica never learnt the primary");
    let _: () = redis::cmd("CLUSTER")
        .arg("REPLICATE")
        .arg(&pid)
        .query(&mut rc)
        .expect("replicate");
    wait_link_up(&p, &r);
    wait_for(Duration::from_secs(10), || {
        let i: String = redis::cmd("CLUSTER").arg("INFO").query(&mut pc).ok()?;
        i.contains("cluster_state:ok").then_some(())
    })
    .expect("cluster not ok");

    acquire(&mut pc, "k", "holder", 800).expect("grant");
    let granted = Instant::now();
    // The replica applies nothing from its primary during its own pause, so it lags behind
    // the write below until 1800 ms from now, and the primary stays paused waiting for it.
    pause(&mut rc, 1800, "WRITE");
    let _: () = redis::cmd("SET")
        .arg("plain")
        .arg("data")
        .query(&mut pc)
        .expect("set");
    let _: () = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .query(&mut rc)
        .expect("cluster failover");
    wait_for(Duration::from_secs(2), || {
        p.log()
            .contains("Manual failover requested by replica")
            .then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "the primary never paused for the manual failover; log tail:\n{}",
            p.log_tail(40)
        )
    });
    assert!(
        granted.elapsed() < Duration::from_millis(700),
        "the failover must begin before the deadline; the test machine is too slow"
    );
    assert!(
        stays_up(&mut p, Duration::from_millis(1000)),
        "the primary died when a lease expired during CLUSTER FAILOVER; log tail:\n{}",
        p.log_tail(40)
    );
    wait_for(Duration::from_secs(10), || {
        (role_of(&r).as_deref() == Some("master") && role_of(&p).as_deref() == Some("slave"))
            .then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "CLUSTER FAILOVER did not complete; old primary log:\n{}\nreplica log:\n{}",
            p.log_tail(30),
            r.log_tail(30)
        )
    });
    assert_up(&mut p, "after CLUSTER FAILOVER");
    r.assert_alive();
}
