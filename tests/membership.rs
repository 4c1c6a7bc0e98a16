//! Quorum mode's membership binding (issue 32, docs/quorum.md §4.1): `MEMBERSHIP id` on
//! ACQUIRE, RENEW and RAISE, and the operator's `LEASE.MEMBERSHIP key old new`, on a real
//! server: a key bound to one node list refuses another, also while free; commands without the
//! option behave as before; bad input is a one-line error that changes nothing; the binding
//! survives DEBUG RELOAD, AOF rewrite (with and without the RDB preamble) and restart, DUMP and
//! RESTORE, reaches replicas as the `MEMBERSHIP` word of the deterministic effect, and costs
//! no memory.

mod common;
use common::*;
use std::time::Duration;

const M1: &str = "1111222233334444";
const M2: &str = "5555666677778888";

fn acquire_m(c: &mut Con, key: &str, owner: &str, m: &str) -> redis::RedisResult<Option<u64>> {
    redis::cmd("LEASE.ACQUIRE")
        .arg(&[key, owner, "5000", "MEMBERSHIP", m])
        .query(c)
}

fn rebind(c: &mut Con, key: &str, old: &str, new: &str) -> i64 {
    redis::cmd("LEASE.MEMBERSHIP")
        .arg(&[key, old, new])
        .query(c)
        .expect("lease.membership")
}

/// The `membership` field of `LEASE.INFO` (last), as text; `None` when bound to nothing.
fn bound_to(c: &mut Con, key: &str) -> Option<String> {
    let info: Vec<redis::Value> = redis::cmd("LEASE.INFO").arg(key).query(c).expect("info");
    assert_eq!(
        info[12],
        redis::Value::BulkString(b"membership".to_vec()),
        "{info:?}"
    );
    redis::from_redis_value::<Option<String>>(info[13].clone()).expect("membership field")
}

fn is_membership_error(e: &redis::RedisError, stored: &str, sent: &str) -> bool {
    e.code() == Some("MEMBERSHIP")
        && e.to_string()
            .contains(&format!("bound to membership {stored}, not {sent}"))
}

/// Would catch: the issue-32 overlap at the one node two node lists share. X (list 1) held
/// and released the key, so it is free; Y (list 2) must not get it there, and neither may a
/// renewal or raise of list 2; list 1 is still granted; a command without the option (single-
/// primary mode, or a quorum client from before) behaves as it always did.
#[test]
fn a_key_bound_to_one_membership_refuses_another_even_while_free() {
    let s = RedisServer::start(ServerOptions::default().module_args(&["lease.grace-ms", "0"]));
    let mut c = s.connection();
    let t = acquire_m(&mut c, "k", "x#1", M1)
        .expect("ok")
        .expect("granted");
    assert_eq!(
        bound_to(&mut c, "k").as_deref(),
        Some(M1),
        "the first grant binds"
    );
    assert_eq!(release(&mut c, "k", "x#1", t), 1);
    let before = snapshot(&mut c, "k");

    let e = acquire_m(&mut c, "k", "y#1", M2).expect_err("refused");
    assert!(is_membership_error(&e, M1, M2), "{e}");
    assert!(!e.to_string().contains('\n'));
    let (ts, t5) = (t.to_string(), (t + 5).to_string());
    for cmd in [
        vec!["LEASE.RENEW", "k", "x#1", &ts, "5000", "MEMBERSHIP", M2],
        vec!["LEASE.RAISE", "k", "x#1", &ts, &t5, "MEMBERSHIP", M2],
    ] {
        let e = redis::cmd(cmd[0])
            .arg(&cmd[1..])
            .query::<i64>(&mut c)
            .expect_err("refused");
        assert!(is_membership_error(&e, M1, M2), "{cmd:?}: {e}");
    }
    assert_eq!(snapshot(&mut c, "k"), before, "refusals change nothing");
    assert_eq!(info_field(&mut c, "membership_rejected"), 3);

    // The same membership is granted, above the kept token; its renewals and raises work.
    let t2 = acquire_m(&mut c, "k", "z#1", M1)
        .expect("ok")
        .expect("granted");
    assert!(t2 > t);
    let r: i64 = redis::cmd("LEASE.RENEW")
        .arg(&["k", "z#1", &t2.to_string(), "5000", "membership", M1])
        .query(&mut c)
        .unwrap();
    assert_eq!(r, 1);
    let r: i64 = redis::cmd("LEASE.RAISE")
        .arg(&[
            "k",
            "z#1",
            &t2.to_string(),
            &(t2 + 7).to_string(),
            "MEMBERSHIP",
            M1,
        ])
        .query(&mut c)
        .unwrap();
    assert_eq!(r, 1);
    assert_eq!(release(&mut c, "k", "z#1", t2 + 7), 1);
    // Without the option: as before, and the binding stays.
    let t3 = acquire(&mut c, "k", "plain", 1000).expect("granted");
    assert!(t3 > t2 + 7);
    assert_eq!(renew(&mut c, "k", "plain", t3, 1000), 1);
    assert_eq!(bound_to(&mut c, "k").as_deref(), Some(M1));
    // A key never bound (single-primary use) shows no membership.
    acquire(&mut c, "plain-key", "p", 1000).expect("granted");
    assert_eq!(bound_to(&mut c, "plain-key"), None);
}

/// Would catch: a malformed id or option that is accepted, panics, or changes state.
#[test]
fn bad_membership_input_is_a_one_line_error_that_changes_nothing() {
    let s = RedisServer::start(ServerOptions::default().module_args(&["lease.grace-ms", "0"]));
    let mut c = s.connection();
    let t = acquire_m(&mut c, "k", "x#1", M1)
        .expect("ok")
        .expect("granted");
    let ts = t.to_string();
    let t5 = (t + 5).to_string();
    let before = snapshot(&mut c, "k");
    let bad_ids = [
        "",
        "111122223333444",
        "11112222333344445",
        "0000000000000000",
        "111122223333444g",
        "0x11222233334444",
        "-111222233334444",
    ];
    let mut cases: Vec<(Vec<String>, &str)> = vec![];
    for id in bad_ids {
        let idv = id.to_string();
        for cmd in [
            vec!["LEASE.ACQUIRE", "k", "y", "100", "MEMBERSHIP", &idv],
            vec!["LEASE.RENEW", "k", "x#1", &ts, "100", "MEMBERSHIP", &idv],
            vec!["LEASE.RAISE", "k", "x#1", &ts, &t5, "MEMBERSHIP", &idv],
            vec!["LEASE.MEMBERSHIP", "k", M1, &idv],
            vec!["LEASE.MEMBERSHIP", "k", &idv, M2],
        ] {
            let want = "ERR membership id must be 16 hex digits";
            cases.push((cmd.iter().map(|s| s.to_string()).collect(), want));
        }
    }
    for (cmd, want) in [
        (
            vec!["LEASE.ACQUIRE", "k", "y", "100", "MEMBERSHIP"],
            "ERR wrong number of arguments",
        ),
        (
            vec!["LEASE.RENEW", "k", "x#1", &ts, "100", "MEMBERSHIP"],
            "ERR wrong number of arguments",
        ),
        (
            vec!["LEASE.RAISE", "k", "x#1", &ts, &t5, "MEMBERSHIP"],
            "ERR wrong number of arguments",
        ),
        (
            vec![
                "LEASE.ACQUIRE",
                "k",
                "y",
                "100",
                "MEMBERSHIP",
                M1,
                "BLOCK",
                "10",
            ],
            "ERR MEMBERSHIP cannot be combined with BLOCK",
        ),
        (
            vec![
                "LEASE.ACQUIRE",
                "k",
                "y",
                "100",
                "BLOCK",
                "10",
                "MEMBERSHIP",
                M1,
            ],
            "ERR MEMBERSHIP cannot be combined with BLOCK",
        ),
        (
            vec![
                "LEASE.ACQUIRE",
                "k",
                "y",
                "100",
                "MEMBERSHIP",
                M1,
                "MEMBERSHIP",
                M1,
            ],
            "ERR unknown option 'MEMBERSHIP'",
        ),
        (
            vec!["LEASE.RENEW", "k", "x#1", &ts, "100", "MEMBER", M1],
            "ERR unknown option 'MEMBER'",
        ),
        (
            vec!["LEASE.MEMBERSHIP", "k", M1],
            "ERR wrong number of arguments",
        ),
        (
            vec!["LEASE.MEMBERSHIP", "k", M1, M2, M2],
            "ERR unknown option '5555666677778888'",
        ),
        (
            vec!["LEASE.MEMBERSHIP", "k", M1, M2, "TOKEN"],
            "ERR wrong number of arguments",
        ),
        (
            vec!["LEASE.MEMBERSHIP", "k", M1, M2, "TOKEN", "0"],
            "ERR token must be a positive integer",
        ),
        (
            vec!["LEASE.MEMBERSHIP", "k", M1, M2, "TOKEN", "x"],
            "ERR token must be a positive integer",
        ),
        (
            vec!["LEASE.MEMBERSHIP", "k", M1, M2, "TOKEN", "5"],
            "ERR TOKEN needs a free lease",
        ),
        (
            vec!["LEASE.MEMBERSHIP", "k", M1, "NONE"],
            "ERR membership id must be 16 hex digits",
        ),
    ] {
        cases.push((cmd.iter().map(|s| s.to_string()).collect(), want));
    }
    for (cmd, want) in &cases {
        let e = redis::cmd(&cmd[0])
            .arg(&cmd[1..])
            .query::<redis::Value>(&mut c)
            .expect_err(&format!("{cmd:?} accepted"));
        let msg = e.to_string();
        assert!(
            format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or("")).starts_with(want)
                || msg.contains(want.trim_start_matches("ERR ")),
            "{cmd:?}: {msg}"
        );
        assert!(!msg.contains('\n'), "{cmd:?}: {msg}");
        assert_eq!(snapshot(&mut c, "k"), before, "{cmd:?} changed state");
        assert_eq!(snapshot(&mut c, "nokey").1, vec![], "{cmd:?} created a key");
    }
    ping(&mut c);
}

/// Would catch: a compare-and-set that ignores `old`, ends or hands over a live lease, or
/// cannot bind a node's key in advance.
#[test]
fn lease_membership_is_a_compare_and_set_that_never_ends_a_live_lease() {
    let s = RedisServer::start(ServerOptions::default().module_args(&["lease.grace-ms", "0"]));
    let mut c = s.connection();
    // A node added to the set: bound before any elector uses it.
    assert_eq!(
        rebind(&mut c, "new", M1, M2),
        0,
        "no key, old given: nothing"
    );
    assert_eq!(lease_info(&mut c, "new"), None);
    assert_eq!(rebind(&mut c, "new", "none", M2), 1);
    assert_eq!(bound_to(&mut c, "new").as_deref(), Some(M2));
    assert!(acquire_m(&mut c, "new", "x", M1).is_err());
    assert!(acquire_m(&mut c, "new", "y", M2).expect("ok").is_some());

    let t = acquire_m(&mut c, "k", "x#1", M1)
        .expect("ok")
        .expect("granted");
    assert_eq!(rebind(&mut c, "k", M2, M2), 0, "wrong old id");
    assert_eq!(
        rebind(&mut c, "k", "NONE", M2),
        0,
        "NONE does not match a bound key"
    );
    assert_eq!(bound_to(&mut c, "k").as_deref(), Some(M1));
    assert_eq!(rebind(&mut c, "k", M1, M2), 1);
    assert_eq!(rebind(&mut c, "k", M1, M2), 1, "a retried command");
    // The holder keeps the node until its lease expires; nobody else is granted meanwhile.
    assert_eq!(get(&mut c, "k").map(|g| g.1), Some(t));
    assert_eq!(
        acquire_m(&mut c, "k", "y#1", M2).expect("ok"),
        None,
        "still held"
    );
    let e = redis::cmd("LEASE.RENEW")
        .arg(&["k", "x#1", &t.to_string(), "5000", "MEMBERSHIP", M1])
        .query::<i64>(&mut c)
        .expect_err("the old list's renewal is refused");
    assert!(is_membership_error(&e, M2, M1), "{e}");
    // Its holder can still release it (RELEASE takes no membership: it can only end a lease).
    assert_eq!(release(&mut c, "k", "x#1", t), 1);
    // TOKEN carries the old list's highest token over: the next grant is above it.
    let high = t + 1_000_000_000;
    let r: i64 = redis::cmd("LEASE.MEMBERSHIP")
        .arg(&["k", M1, M2, "TOKEN", &high.to_string()])
        .query(&mut c)
        .unwrap();
    assert_eq!(r, 1);
    assert_eq!(lease_info(&mut c, "k").map(|i| i.1), Some(high));
    let t2 = acquire_m(&mut c, "k", "y#1", M2)
        .expect("ok")
        .expect("granted");
    assert!(t2 > high, "{t2} {high}");
}

/// Would catch: a binding lost by DEBUG RELOAD (RDB), an AOF rewrite (RDB preamble or
/// `EmitAOF` commands) and restart, DUMP/RESTORE, COPY, or not replicated (a promoted replica
/// would accept the other list), and a lease that moves to a larger allocation class.
#[test]
fn the_binding_survives_persistence_and_reaches_replicas() {
    for preamble in ["yes", "no"] {
        let opts = ServerOptions::default()
            .module_args(&["lease.grace-ms", "0"])
            .extra_args(&[
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--aof-use-rdb-preamble",
                preamble,
                "--repl-diskless-sync-delay",
                "0",
            ]);
        let mut s = RedisServer::start(opts);
        let mut c = s.connection();
        let owner = "o".repeat(27);
        let t = acquire(&mut c, "plain", &owner, 20_000).expect("granted");
        let plain_mem: i64 = redis::cmd("MEMORY")
            .arg(&["USAGE", "plain"])
            .query(&mut c)
            .unwrap();
        let tb = acquire_m(&mut c, "held", &owner, M1)
            .expect("ok")
            .expect("granted");
        let bound_mem: i64 = redis::cmd("MEMORY")
            .arg(&["USAGE", "held"])
            .query(&mut c)
            .unwrap();
        println!("MEMORY USAGE with a 27-byte owner: {plain_mem} bytes unbound, {bound_mem} bound");
        assert_eq!(plain_mem, bound_mem, "the id costs no allocation class");
        assert!(bound_mem <= 100, "{bound_mem}");
        assert_eq!(rebind(&mut c, "free", "NONE", M2), 1);
        let keys = ["plain", "held", "free"];
        let want = [None, Some(M1.to_string()), Some(M2.to_string())];
        let check = |c: &mut Con, what: &str| {
            for (k, w) in keys.iter().zip(&want) {
                assert_eq!(&bound_to(c, k), w, "{what} ({preamble}): {k}");
            }
            assert_eq!(get(c, "held").map(|g| g.1), Some(tb), "{what}");
            assert_eq!(get(c, "plain").map(|g| g.1), Some(t), "{what}");
        };
        check(&mut c, "as set");

        let _: () = redis::cmd("DEBUG")
            .arg("RELOAD")
            .query(&mut c)
            .expect("reload");
        check(&mut c, "DEBUG RELOAD");

        let dump: Vec<u8> = redis::cmd("DUMP").arg("free").query(&mut c).unwrap();
        let _: () = redis::cmd("RESTORE")
            .arg("free2")
            .arg(0)
            .arg(&dump)
            .query(&mut c)
            .unwrap();
        assert_eq!(bound_to(&mut c, "free2").as_deref(), Some(M2), "RESTORE");
        let _: i64 = redis::cmd("COPY")
            .arg(&["held", "held2"])
            .query(&mut c)
            .unwrap();
        assert_eq!(bound_to(&mut c, "held2").as_deref(), Some(M1), "COPY");

        // A replica gets the binding with the state (full sync, then the stream).
        let r = start_replica(&s, &["lease.grace-ms", "0"]);
        let mut rc = r.connection();
        let mon = Monitor::start(&r);
        assert_eq!(rebind(&mut c, "plain", "NONE", M1), 1);
        mon.wait_for("MEMBERSHIP");
        assert!(
            mon.text().contains("\"LEASE.APPLY\" \"plain\" \"HOLD\""),
            "{}",
            mon.text()
        );
        assert!(wait_acks(&mut c, 1, 5000) >= 1);
        for k in ["plain", "held", "free"] {
            assert_eq!(bound_to(&mut rc, k), bound_to(&mut c, k), "replica: {k}");
            assert_eq!(digest(&mut rc, k), digest(&mut c, k), "replica digest: {k}");
        }
        let e = redis::cmd("LEASE.MEMBERSHIP")
            .arg(&["plain", M1, M2])
            .query::<i64>(&mut rc)
            .expect_err("a replica refuses it");
        assert_eq!(e.code(), Some("READONLY"), "{e}");
        drop(rc);
        drop(r);
        let _: i64 = redis::cmd("LEASE.MEMBERSHIP")
            .arg(&["plain", M1, M1])
            .query(&mut c)
            .unwrap();

        // AOF rewrite, then a change in the incremental AOF, then kill -9 and restart.
        redis::cmd("BGREWRITEAOF").query::<()>(&mut c).unwrap();
        wait_for(Duration::from_secs(10), || {
            let info: String = redis::cmd("INFO").arg("persistence").query(&mut c).unwrap();
            (info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0"))
                .then_some(())
        })
        .expect("rewrite finishes");
        assert_eq!(rebind(&mut c, "free", M2, M1), 1);
        s.kill();
        s.restart();
        let mut c = s.connection();
        assert_eq!(
            bound_to(&mut c, "free").as_deref(),
            Some(M1),
            "incremental AOF ({preamble})"
        );
        assert_eq!(
            bound_to(&mut c, "plain").as_deref(),
            Some(M1),
            "AOF ({preamble})"
        );
        assert_eq!(
            bound_to(&mut c, "held").as_deref(),
            Some(M1),
            "AOF ({preamble})"
        );
        assert_eq!(get(&mut c, "held").map(|g| g.1), Some(tb));
        let e = acquire_m(&mut c, "free", "y", M2).expect_err("still bound after restart");
        assert!(is_membership_error(&e, M1, M2), "{e}");
    }
}
