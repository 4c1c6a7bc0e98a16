//! BLOCKed acquirers whose key goes away by another road than a lease command (issue 35, item
//! 4; docs/protocol.md §8): `DEL`, `RENAME`, `MOVE`, `SWAPDB`, `FLUSHDB`, `FLUSHALL [ASYNC]`.
//! Redis retries a module's key-blocked clients only while the key exists, so the module
//! answers them nil at once, as a BLOCK timeout would ("not acquired, ask again"); their next
//! ACQUIRE finds the name free.
//!
//! Would catch: waiters left blocked until their BLOCK timeout (forever with BLOCK 0) while
//! the name is free, waiters of other names disturbed, and a token that is not above the
//! removed lease's after the name is granted again.

mod common;
use common::*;
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn waiter(s: &RedisServer, db: i64, key: &str, owner: &str) -> mpsc::Receiver<Option<u64>> {
    let mut c = s.connection();
    let _: () = redis::cmd("SELECT").arg(db).query(&mut c).expect("select");
    let (tx, rx) = mpsc::channel();
    let (key, owner) = (key.to_string(), owner.to_string());
    std::thread::spawn(move || {
        let r: redis::RedisResult<Option<u64>> = redis::cmd("LEASE.ACQUIRE")
            .arg(&key)
            .arg(&owner)
            .arg(30_000)
            .arg("BLOCK")
            .arg(0)
            .query(&mut c);
        let _ = tx.send(r.expect("blocked acquire"));
    });
    rx
}

fn wait_blocked(c: &mut Con, n: i64) {
    wait_for(Duration::from_secs(5), || {
        (info_field(c, "blocked_clients") == n).then_some(())
    })
    .unwrap_or_else(|| panic!("expected {n} blocked clients"));
}

/// Runs `remove` (which takes the held lease `k` in db 0 away from its name) with a waiter
/// on `k` and one on another key: the first is answered nil within a bound, the second keeps
/// waiting (except where `remove` empties everything), and `k` is then granted with a higher
/// token.
fn waiter_is_answered_after(what: &str, everything: bool, remove: impl FnOnce(&mut Con)) {
    let s = start();
    let mut c = s.connection();
    let t = acquire(&mut c, "k", "holder", 30_000).expect("grant");
    acquire(&mut c, "other", "holder", 30_000).expect("grant");
    let rx = waiter(&s, 0, "k", "waiter");
    wait_blocked(&mut c, 1);
    let other = waiter(&s, 0, "other", "waiter");
    wait_blocked(&mut c, 2);
    let at = Instant::now();
    remove(&mut c);
    let got = rx
        .recv_timeout(Duration::from_secs(3))
        .unwrap_or_else(|_| panic!("the waiter stayed blocked after {what}"));
    eprintln!("{what}: waiter answered after {:?}", at.elapsed());
    assert_eq!(got, None, "{what}: a waiter is answered nil");
    if everything {
        assert_eq!(
            other.recv_timeout(Duration::from_secs(3)).ok(),
            Some(None),
            "{what}: the other waiter"
        );
        assert_eq!(info_field(&mut c, "blocked_clients"), 0);
    } else {
        assert!(
            other.try_recv().is_err(),
            "{what}: another key's waiter was answered"
        );
        assert_eq!(info_field(&mut c, "blocked_clients"), 1);
    }
    let _: () = redis::cmd("SELECT").arg(0).query(&mut c).expect("select");
    let again = acquire(&mut c, "k", "waiter", 30_000).expect("the name is free");
    assert!(again > t, "{what}: token {again} not above {t}");
    ping(&mut c);
}

fn run(c: &mut Con, args: &[&str]) {
    let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    try_cmd::<redis::Value>(c, &a).unwrap_or_else(|e| panic!("{args:?}: {e}"));
}

#[test]
fn del_answers_the_waiter() {
    waiter_is_answered_after("DEL", false, |c| run(c, &["DEL", "k"]));
}

#[test]
fn unlink_answers_the_waiter() {
    waiter_is_answered_after("UNLINK", false, |c| run(c, &["UNLINK", "k"]));
}

#[test]
fn rename_answers_the_waiter_on_the_old_name() {
    waiter_is_answered_after("RENAME", false, |c| run(c, &["RENAME", "k", "elsewhere"]));
}

#[test]
fn move_answers_the_waiter() {
    waiter_is_answered_after("MOVE", false, |c| run(c, &["MOVE", "k", "1"]));
}

#[test]
fn swapdb_answers_the_waiters() {
    waiter_is_answered_after("SWAPDB", true, |c| run(c, &["SWAPDB", "0", "1"]));
}

#[test]
fn flushdb_answers_the_waiters() {
    waiter_is_answered_after("FLUSHDB", true, |c| run(c, &["FLUSHDB"]));
}

#[test]
fn flushall_answers_the_waiters() {
    waiter_is_answered_after("FLUSHALL", true, |c| run(c, &["FLUSHALL"]));
}

#[test]
fn flushall_async_answers_the_waiters() {
    waiter_is_answered_after("FLUSHALL ASYNC", true, |c| run(c, &["FLUSHALL", "ASYNC"]));
}
