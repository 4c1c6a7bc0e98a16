//! BLOCK: wake-ups on release, expiry and end of grace, measured against a bound; timeout;
//! FIFO; no blocking inside MULTI/Lua; grace after start (docs/protocol.md §5, §6).
//!
//! The bounds here are generous (CI machines are shared); the latency targets themselves
//! are measured by `scripts/bench`.

mod common;
use common::*;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Starts a blocked `LEASE.ACQUIRE ... BLOCK timeout` on its own connection; sends back
/// (reply, instant the reply arrived).
fn blocked_acquire(
    s: &RedisServer,
    key: &str,
    owner: &str,
    ttl: u64,
    timeout: u64,
) -> mpsc::Receiver<(Option<u64>, Instant)> {
    let (tx, rx) = mpsc::channel();
    let mut c = s.connection();
    let (key, owner) = (key.to_string(), owner.to_string());
    thread::spawn(move || {
        let r: Option<u64> = redis::cmd("LEASE.ACQUIRE")
            .arg(&key)
            .arg(&owner)
            .arg(ttl)
            .arg("BLOCK")
            .arg(timeout)
            .query(&mut c)
            .expect("blocked acquire");
        let _ = tx.send((r, Instant::now()));
    });
    rx
}

fn wait_blocked(c: &mut Con, n: i64) {
    wait_for(Duration::from_secs(5), || {
        (info_field(c, "blocked_clients") == n).then_some(())
    })
    .unwrap_or_else(|| panic!("expected {n} blocked clients"));
}

#[test]
fn release_wakes_a_blocked_acquirer_at_once() {
    let s = start();
    let mut c = s.connection();
    let t = acquire(&mut c, "k", "leader", 30000).unwrap();
    let rx = blocked_acquire(&s, "k", "follower", 5000, 0);
    wait_blocked(&mut c, 1);
    let released_at = Instant::now();
    let r: i64 = redis::cmd("LEASE.RELEASE")
        .arg("k")
        .arg("leader")
        .arg(t)
        .query(&mut c)
        .unwrap();
    assert_eq!(r, 1);
    let (got, at) = rx.recv_timeout(Duration::from_secs(5)).expect("woken");
    let token = got.expect("granted on release");
    assert!(token > t);
    let waited = at.saturating_duration_since(released_at);
    println!("hand-over on release: {waited:?} (release sent -> follower's grant received)");
    assert!(waited < Duration::from_millis(100), "{waited:?}");
    assert_eq!(get(&mut c, "k").unwrap().0, b"follower");
    wait_blocked(&mut c, 0);
}

#[test]
fn expiry_wakes_a_blocked_acquirer_at_the_deadline_not_before() {
    let s = start();
    let mut c = s.connection();
    let ttl = 300;
    let sent = Instant::now();
    let t = acquire(&mut c, "k", "leader", ttl).unwrap();
    let granted = Instant::now();
    let rx = blocked_acquire(&s, "k", "follower", 5000, 5000);
    let (got, at) = rx.recv_timeout(Duration::from_secs(5)).expect("woken");
    assert!(got.expect("granted at expiry") > t);
    // Safety: never before the old lease's expiry as the server measures it; the server's
    // grant happened after `sent`, so the earliest legal wake-up is sent + ttl.
    let since_sent = at.duration_since(sent);
    assert!(
        since_sent >= Duration::from_millis(ttl),
        "woke {since_sent:?} after the grant: before expiry!"
    );
    let late = at
        .duration_since(granted)
        .saturating_sub(Duration::from_millis(ttl));
    println!("hand-over on expiry: {late:?} after the deadline");
    assert!(
        late < Duration::from_millis(100),
        "timer should wake at the deadline, was {late:?} late"
    );
}

/// Would catch: a renew adding an expiry entry each time (the heap growing with the renew
/// rate), and a renew to a SHORTER ttl keeping only the old, later entry (the waiter would
/// then wake at the old deadline, seconds late). Issue 16's timer design.
#[test]
fn renews_add_no_expiry_entries_and_a_shorter_renew_still_wakes_on_time() {
    let s = start();
    let mut c = s.connection();
    let t = acquire(&mut c, "k", "leader", 5000).unwrap();
    assert_eq!(info_field(&mut c, "expiry_timers"), 1);
    for _ in 0..100 {
        assert_eq!(renew(&mut c, "k", "leader", t, 5000), 1);
    }
    let entries = info_field(&mut c, "expiry_timers");
    println!("expiry entries after 100 renews: {entries}");
    assert_eq!(entries, 1, "renews must not add expiry entries");
    // Shorter: the pending entry (~5 s) is now after the deadline; a new one must be added.
    let sent = Instant::now();
    assert_eq!(renew(&mut c, "k", "leader", t, 300), 1);
    let rx = blocked_acquire(&s, "k", "follower", 5000, 10_000);
    let (got, at) = rx.recv_timeout(Duration::from_secs(10)).expect("woken");
    assert!(got.expect("granted at expiry") > t);
    let since = at.duration_since(sent);
    println!("woken {since:?} after a renew to 300 ms");
    assert!(
        since >= Duration::from_millis(300),
        "before expiry: {since:?}"
    );
    assert!(
        since < Duration::from_millis(2_000),
        "woken at the old deadline, not the renewed one: {since:?}"
    );
}

#[test]
fn block_timeout_returns_nil() {
    let s = start();
    let mut c = s.connection();
    acquire(&mut c, "k", "leader", 30000).unwrap();
    let t0 = Instant::now();
    let rx = blocked_acquire(&s, "k", "follower", 5000, 200);
    let (got, at) = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("timed out reply");
    assert_eq!(got, None);
    let waited = at.duration_since(t0);
    assert!(
        waited >= Duration::from_millis(190) && waited < Duration::from_millis(1500),
        "{waited:?}"
    );
    assert_eq!(info_field(&mut c, "block_timeouts"), 1);
    wait_blocked(&mut c, 0);
}

#[test]
fn waiters_are_served_first_come_first_served() {
    let s = start();
    let mut c = s.connection();
    let mut token = acquire(&mut c, "k", "w0", 30000).unwrap();
    let mut rxs = vec![];
    for i in 1..=3 {
        rxs.push(blocked_acquire(&s, "k", &format!("w{i}"), 30000, 0));
        wait_blocked(&mut c, i); // enforce arrival order
    }
    for (i, rx) in rxs.into_iter().enumerate() {
        let holder = format!("w{i}");
        let r: i64 = redis::cmd("LEASE.RELEASE")
            .arg("k")
            .arg(&holder)
            .arg(token)
            .query(&mut c)
            .unwrap();
        assert_eq!(r, 1, "{holder} releases");
        let (got, _) = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("next waiter served");
        token = got.expect("granted");
        assert_eq!(
            get(&mut c, "k").unwrap().0,
            format!("w{}", i + 1).into_bytes(),
            "FIFO order"
        );
    }
}

#[test]
fn block_does_not_block_inside_multi_or_lua() {
    let s = start();
    let mut c = s.connection();
    acquire(&mut c, "k", "leader", 30000).unwrap();
    let t0 = Instant::now();
    let (r,): (Option<u64>,) = redis::pipe()
        .atomic()
        .cmd("LEASE.ACQUIRE")
        .arg(&["k", "x", "1000", "BLOCK", "0"])
        .query(&mut c)
        .unwrap();
    assert_eq!(r, None);
    let r: Option<u64> = redis::cmd("EVAL")
        .arg("return redis.call('LEASE.ACQUIRE', KEYS[1], 'y', 1000, 'BLOCK', 0)")
        .arg(1)
        .arg("k")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, None);
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "must not have blocked"
    );
    // Inside MULTI a free lease is still granted.
    let (r,): (Option<u64>,) = redis::pipe()
        .atomic()
        .cmd("LEASE.ACQUIRE")
        .arg(&["free", "x", "1000", "BLOCK", "0"])
        .query(&mut c)
        .unwrap();
    assert!(r.is_some());
}

#[test]
fn disconnected_waiter_is_forgotten() {
    let s = start();
    let mut c = s.connection();
    acquire(&mut c, "k", "leader", 30000).unwrap();
    // A raw client: it sends the blocking command and goes away without reading.
    let sock = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    let mut sock2 = sock.try_clone().unwrap();
    use std::io::Write;
    sock2.write_all(b"*6\r\n$13\r\nLEASE.ACQUIRE\r\n$1\r\nk\r\n$4\r\ngone\r\n$4\r\n1000\r\n$5\r\nBLOCK\r\n$1\r\n0\r\n").unwrap();
    wait_blocked(&mut c, 1);
    drop(sock);
    drop(sock2);
    wait_blocked(&mut c, 0);
    ping(&mut c);
}

#[test]
fn grace_after_start_refuses_then_blocks_then_ends() {
    let s = RedisServer::start(ServerOptions::default().module_args(&["lease.grace-ms", "1500"]));
    let mut c = s.connection();
    let e = err_of(&mut c, &["LEASE.ACQUIRE", "k", "a", "1000"]);
    assert!(e.starts_with("GRACE "), "{e}");
    let ms: u64 = e.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(ms > 0 && ms <= 1500, "{e}");
    assert_eq!(info_field(&mut c, "grace_active"), 1);
    assert_eq!(info_field(&mut c, "grace_rejected"), 1);
    // BLOCK waits through grace and is granted when it ends.
    let rx = blocked_acquire(&s, "k", "b", 1000, 10000);
    let (got, _) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("granted at end of grace");
    assert!(got.is_some());
    assert_eq!(info_field(&mut c, "grace_active"), 0);
    assert!(s.log().contains("grace period of 1500 ms started"));
}

#[test]
fn lowering_grace_to_zero_ends_it_at_once_for_waiters() {
    let s = RedisServer::start(ServerOptions::default().module_args(&["lease.grace-ms", "60000"]));
    let mut c = s.connection();
    let rx = blocked_acquire(&s, "k", "b", 1000, 0);
    wait_blocked(&mut c, 1);
    let t0 = Instant::now();
    redis::cmd("CONFIG")
        .arg(&["SET", "lease.grace-ms", "0"])
        .query::<()>(&mut c)
        .unwrap();
    let (got, at) = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("woken when grace is lowered");
    assert!(got.is_some());
    let waited = at.duration_since(t0);
    assert!(waited < Duration::from_millis(200), "{waited:?}");
    assert!(
        acquire(&mut c, "other", "x", 1000).is_some(),
        "grace over for new commands too"
    );
}
