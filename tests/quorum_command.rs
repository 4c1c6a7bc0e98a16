//! `LEASE.RAISE key owner token newtoken` (quorum mode, docs/quorum.md): the live holder's
//! token is raised in place, the old token stops working everywhere (renew, release, fence),
//! every later grant on this node (any key) is above the raised token, the new state reaches
//! replicas as a `HOLD` effect, and every refusal changes nothing.

mod common;
use common::*;

fn raise(c: &mut Con, key: &str, owner: &str, token: u64, new_token: u64) -> i64 {
    redis::cmd("LEASE.RAISE")
        .arg(key)
        .arg(owner)
        .arg(token)
        .arg(new_token)
        .query(c)
        .expect("raise")
}

/// Would catch: a raise that leaves the old token live, changes the expiry, does not move
/// the key's or the node's watermark (the next grant could then reuse a token at or below
/// the raised one), or raises a lease it should not (other owner, wrong token, lapsed).
#[test]
fn raise_moves_the_live_token_and_every_later_grant_above_it() {
    let s = RedisServer::start(ServerOptions::default().module_args(&["lease.grace-ms", "0"]));
    let mut c = s.connection();
    let t = acquire(&mut c, "k", "a", 20_000).expect("grant");
    let high = t + 1_000_000_000;
    let pttl_before = get(&mut c, "k").expect("held").2;

    assert_eq!(raise(&mut c, "k", "b", t, high), 0, "other owner");
    assert_eq!(raise(&mut c, "k", "a", t + 1, high), 0, "wrong token");
    assert_eq!(raise(&mut c, "nokey", "a", t, high), 0, "no key");
    assert_eq!(
        get(&mut c, "k").expect("held").1,
        t,
        "refusals change nothing"
    );

    assert_eq!(raise(&mut c, "k", "a", t, high), 1);
    let (owner, token, pttl) = get(&mut c, "k").expect("still held");
    assert_eq!((owner.as_slice(), token), (&b"a"[..], high));
    assert!(
        pttl <= pttl_before && pttl > 15_000,
        "expiry unchanged by a raise: {pttl_before} -> {pttl}"
    );
    // Idempotent: the elector may retry a raise whose reply it lost.
    assert_eq!(raise(&mut c, "k", "a", high, high), 1);

    // The old token is dead for every command; the new one works.
    assert_eq!(renew(&mut c, "k", "a", t, 20_000), 0);
    assert!(err_of(&mut c, &["LEASE.FENCE", "k", &t.to_string()]).starts_with("FENCED"));
    let left: i64 = redis::cmd("LEASE.FENCE")
        .arg("k")
        .arg(high)
        .query(&mut c)
        .unwrap();
    assert!(left > 0);
    assert_eq!(renew(&mut c, "k", "a", high, 20_000), 1);
    assert_eq!(release(&mut c, "k", "a", t), 0);
    assert_eq!(release(&mut c, "k", "a", high), 1);

    // Next grant on this key and on a fresh key of the same node: above the raised token.
    let next = acquire(&mut c, "k", "b", 1000).expect("grant after release");
    assert!(next > high, "{next} > {high}");
    let other = acquire(&mut c, "other", "b", 1000).expect("grant on a new key");
    assert!(other > high, "node watermark: {other} > {high}");
}

/// Would catch: a parser that accepts a lower new token, a token at or above 2^53, or
/// anything not a strict integer, and any of those changing the lease.
#[test]
fn bad_arguments_are_errors_and_change_nothing() {
    let s = RedisServer::start(ServerOptions::default().module_args(&["lease.grace-ms", "0"]));
    let mut c = s.connection();
    let t = acquire(&mut c, "k", "a", 20_000).expect("grant");
    let ts = t.to_string();
    let below = (t - 1).to_string();
    let cases: [(&[&str], &str); 7] = [
        (
            &["LEASE.RAISE", "k", "a", &ts, &below],
            "ERR newtoken must not be below",
        ),
        (
            &["LEASE.RAISE", "k", "a", &ts, "9007199254740992"],
            "ERR token must be",
        ),
        (&["LEASE.RAISE", "k", "a", &ts, "-1"], "ERR token must be"),
        (&["LEASE.RAISE", "k", "a", &ts, "1e9"], "ERR token must be"),
        (&["LEASE.RAISE", "k", "a", "0", &ts], "ERR token must be"),
        (&["LEASE.RAISE", "k", "", &ts, &ts], "ERR owner must be"),
        (
            &["LEASE.RAISE", "k", "a", &ts],
            "ERR wrong number of arguments",
        ),
    ];
    for (args, want) in cases {
        let e = err_of(&mut c, args);
        assert!(e.starts_with(want), "{args:?}: {e}");
    }
    assert_eq!(get(&mut c, "k").expect("held").1, t);
    let _: () = redis::cmd("SET").arg("str").arg("x").query(&mut c).unwrap();
    assert!(err_of(&mut c, &["LEASE.RAISE", "str", "a", "1", "2"]).starts_with("WRONGTYPE"));
}

/// Would catch: a raise that is not replicated (a replica promoted after it would let the
/// old token renew and would issue tokens at or below the raised one).
#[test]
fn raise_reaches_the_replica_as_an_effect() {
    let p = RedisServer::start(primary_opts(&["lease.grace-ms", "0"]));
    let r = start_replica(&p, &["lease.grace-ms", "0"]);
    let (mut pc, mut rc) = (p.connection(), r.connection());
    let t = acquire(&mut pc, "k", "a", 20_000).expect("grant");
    assert_eq!(raise(&mut pc, "k", "a", t, t + 777), 1);
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);
    let (owner, token, _) = get(&mut rc, "k").expect("replica holds");
    assert_eq!((owner.as_slice(), token), (&b"a"[..], t + 777));
}
