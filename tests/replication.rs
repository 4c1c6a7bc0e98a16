//! Replication (docs/protocol.md §4): replicas receive the primary's decisions as `LEASE.APPLY` effects
//! and end in the same state after every command; expiry is judged on the primary and
//! reaches the replica as a `FREE` effect; `WAIT` and `min-replicas-to-write` apply to lease
//! commands; the effect command cannot be forged by a client (plain, MULTI, Lua, functions).
//!
//! Every wait is bounded; the replica's state is read only after `WAIT 1` confirmed it.

mod common;
use common::*;
use std::time::Duration;

/// Asserts the replica holds exactly what the primary holds for `key`: the same holder and
/// token, the same remaining time within a small skew (the replica converted the absolute
/// expiry to its own monotonic deadline on receipt), the same digest and token history.
fn assert_same(p: &mut Con, r: &mut Con, key: &str, step: &str) {
    let (gp, gr) = (get(p, key), get(r, key));
    match (&gp, &gr) {
        (None, None) => {}
        (Some((po, pt, pp)), Some((ro, rt, rp))) => {
            assert_eq!((po, pt), (ro, rt), "{step}: holder differs");
            assert!(
                pp.abs_diff(*rp) <= 100,
                "{step}: pttl primary {pp} vs replica {rp}"
            );
        }
        _ => panic!("{step}: primary {gp:?} vs replica {gr:?}"),
    }
    assert_eq!(digest(p, key), digest(r, key), "{step}: DEBUG DIGEST-VALUE");
    assert_eq!(lease_info(p, key), lease_info(r, key), "{step}: LEASE.INFO");
}

/// Would catch: a command not replicated at all (replica differs), replicated as the
/// command itself (MONITOR shows LEASE.ACQUIRE/RENEW/RELEASE, which a replica re-judges
/// against its own clock), a refresh/renew that does not carry the new expiry, a release or
/// expiry that does not reach the replica, or a replica that loses the token history.
#[test]
fn replica_applies_effects_and_matches_the_primary_after_each_command() {
    let p = RedisServer::start(primary_opts(&["lease.grace-ms", "0"]));
    let r = start_replica(&p, &["lease.grace-ms", "0"]);
    let (mut pc, mut rc) = (p.connection(), r.connection());
    let mon = Monitor::start(&r);

    let t1 = acquire(&mut pc, "k", "alpha", 5000).expect("grant");
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);
    assert_same(&mut pc, &mut rc, "k", "grant");

    // Same owner again: refresh keeps the token, the replica gets the later expiry.
    assert_eq!(acquire(&mut pc, "k", "alpha", 9000), Some(t1));
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);
    assert_same(&mut pc, &mut rc, "k", "refresh");
    assert!(
        get(&mut rc, "k").expect("held").2 > 5000,
        "refresh replicated"
    );

    assert_eq!(renew(&mut pc, "k", "alpha", t1, 7000), 1);
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);
    assert_same(&mut pc, &mut rc, "k", "renew");
    let pttl = get(&mut rc, "k").expect("held").2;
    assert!((6500..=7000).contains(&pttl), "renew replicated: {pttl}");

    // A refused renew (wrong token) and a contended acquire change nothing and replicate
    // nothing.
    assert_eq!(renew(&mut pc, "k", "alpha", t1 + 1, 7000), 0);
    assert_eq!(acquire(&mut pc, "k", "beta", 1000), None);

    assert_eq!(release(&mut pc, "k", "alpha", t1), 1);
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);
    assert_same(&mut pc, &mut rc, "k", "release");
    assert_eq!(get(&mut rc, "k"), None);

    // A short lease that expires on the primary: the replica learns it from a FREE effect.
    let t2 = acquire(&mut pc, "k", "beta", 300).expect("grant after release");
    assert!(t2 > t1);
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);
    assert_same(&mut pc, &mut rc, "k", "second grant");
    mon.wait_for(&format!("\"LEASE.APPLY\" \"k\" \"FREE\" \"{t2}\""));
    assert_eq!(
        info_field(&mut pc, "expired"),
        1,
        "expiry judged on the primary"
    );
    assert_eq!(
        info_field(&mut rc, "expired"),
        0,
        "the replica never judges expiry"
    );
    assert_same(&mut pc, &mut rc, "k", "expiry");
    assert_eq!(lease_info(&mut rc, "k"), Some((0, t2, 2)));

    // Hand-over to a BLOCKed acquirer at expiry: the grant made when the waiter is served
    // (outside any command) is replicated as well.
    let th = acquire(&mut pc, "h", "x", 300).expect("grant");
    let ty: Option<u64> = redis::cmd("LEASE.ACQUIRE")
        .arg("h")
        .arg("y")
        .arg(5000)
        .arg("BLOCK")
        .arg(5000)
        .query(&mut pc)
        .expect("blocking acquire");
    let ty = ty.expect("granted at expiry");
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);
    assert_same(&mut pc, &mut rc, "h", "hand-over at expiry");
    assert_eq!(get(&mut rc, "h").map(|g| g.1), Some(ty));
    mon.wait_for(&format!("\"LEASE.APPLY\" \"h\" \"FREE\" \"{th}\""));
    mon.wait_for(&format!("\"LEASE.APPLY\" \"h\" \"HOLD\" \"y\" \"{ty}\""));

    let feed = mon.text();
    for effect in [
        format!("\"LEASE.APPLY\" \"k\" \"HOLD\" \"alpha\" \"{t1}\""),
        format!("\"LEASE.APPLY\" \"k\" \"FREE\" \"{t1}\""),
        format!("\"LEASE.APPLY\" \"k\" \"HOLD\" \"beta\" \"{t2}\""),
    ] {
        assert!(feed.contains(&effect), "missing {effect} in:\n{feed}");
    }
    // grant, refresh, renew, release, grant, expiry: six effects, nothing for the refused
    // renew and the contended acquire.
    assert_eq!(feed.matches("\"LEASE.APPLY\" \"k\"").count(), 6, "{feed}");
    for cmd in ["LEASE.ACQUIRE", "LEASE.RENEW", "LEASE.RELEASE"] {
        assert!(
            !feed.to_ascii_uppercase().contains(cmd),
            "replica re-judges {cmd}:\n{feed}"
        );
    }
}

/// Would catch: lease commands not flagged `write` (min-replicas-to-write would not apply
/// and a grant would be made that no replica has), or a grant/renew that is not propagated
/// (WAIT would report 0 with a healthy replica).
#[test]
fn min_replicas_refuses_grants_without_a_replica_and_wait_counts_acks() {
    let p = RedisServer::start(
        primary_opts(&["lease.grace-ms", "0"]).extra_args(&["--min-replicas-to-write", "1"]),
    );
    let mut pc = p.connection();
    let e = err_of(&mut pc, &["LEASE.ACQUIRE", "k", "a", "1000"]);
    assert!(e.starts_with("NOREPLICAS"), "{e}");
    assert_eq!(lease_info(&mut pc, "k"), None, "refused grant left no key");

    let mut r = start_replica(&p, &["lease.grace-ms", "0"]);
    let mut rc = r.connection();
    wait_for(Duration::from_secs(5), || {
        let i = info_text(&mut pc, "replication");
        (info_value(&i, "min_slaves_good_slaves").as_deref() == Some("1")).then_some(())
    })
    .expect("primary counts the replica as good");
    let t = acquire(&mut pc, "k", "a", 5000).expect("grant with the replica up");
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1, "WAIT after ACQUIRE");
    assert_eq!(get(&mut rc, "k").map(|g| g.1), Some(t));
    assert_eq!(renew(&mut pc, "k", "a", t, 5000), 1);
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1, "WAIT after RENEW");

    r.kill();
    wait_for(Duration::from_secs(5), || {
        let i = info_text(&mut pc, "replication");
        (info_value(&i, "connected_slaves").as_deref() == Some("0")).then_some(())
    })
    .expect("primary notices the dead replica");
    let before = snapshot(&mut pc, "k");
    for args in [
        &["LEASE.ACQUIRE", "k2", "b", "1000"][..],
        &["LEASE.RENEW", "k", "a", &t.to_string(), "5000"],
        &["LEASE.RELEASE", "k", "a", &t.to_string()],
    ] {
        let e = err_of(&mut pc, args);
        assert!(e.starts_with("NOREPLICAS"), "{args:?}: {e}");
    }
    assert_eq!(snapshot(&mut pc, "k"), before);
    assert_eq!(lease_info(&mut pc, "k2"), None);
    // Reads go on.
    assert_eq!(get(&mut pc, "k").map(|g| g.1), Some(t));
}

/// Would catch: LEASE.APPLY accepted from an ordinary client in any context (a client could
/// then forge a holder, free someone else's lease or rewind the token history), or a
/// refused forgery that still changed state.
#[test]
fn forged_effects_are_refused_everywhere_and_change_nothing() {
    let p = RedisServer::start(primary_opts(&["lease.grace-ms", "0"]));
    let r = start_replica(&p, &["lease.grace-ms", "0"]);
    let (mut pc, mut rc) = (p.connection(), r.connection());
    let t = acquire(&mut pc, "k", "real", 10_000).expect("grant");
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);
    let before_p = snapshot(&mut pc, "k");
    let before_r = snapshot(&mut rc, "k");
    let far = "99999999999999";
    let (forged_tok, low_tok) = ((t + 1000).to_string(), "1".to_string());

    let forgeries: [&[&str]; 4] = [
        &["LEASE.APPLY", "k", "HOLD", "forger", &forged_tok, far],
        &["LEASE.APPLY", "k", "FREE", &low_tok],
        &["LEASE.APPLY", "k", "FREE", &forged_tok],
        &["LEASE.APPLY", "fresh", "HOLD", "forger", &forged_tok, far],
    ];
    for f in forgeries {
        let e = err_of(&mut pc, f);
        assert!(e.contains("LEASE.APPLY is internal"), "{f:?}: {e}");
        // On the replica an ordinary client cannot write at all.
        let e = err_of(&mut rc, f);
        assert!(e.starts_with("READONLY"), "replica {f:?}: {e}");
    }

    // Inside MULTI: queued, then refused by EXEC.
    let _: () = redis::cmd("MULTI").query(&mut pc).expect("multi");
    let q: String = redis::cmd("LEASE.APPLY")
        .arg("k")
        .arg("FREE")
        .arg(&forged_tok)
        .query(&mut pc)
        .expect("queued");
    assert_eq!(q, "QUEUED");
    // (redis-rs turns the error element of EXEC's array into the call's error)
    let exec = redis::cmd("EXEC").query::<redis::Value>(&mut pc);
    assert!(
        format!("{exec:?}").contains("LEASE.APPLY is internal"),
        "{exec:?}"
    );

    // From Lua and from a function.
    let e = err_of(
        &mut pc,
        &[
            "EVAL",
            "return redis.call('LEASE.APPLY', KEYS[1], 'HOLD', 'forger', ARGV[1], ARGV[2])",
            "1",
            "k",
            &forged_tok,
            far,
        ],
    );
    assert!(e.contains("LEASE.APPLY is internal"), "EVAL: {e}");
    let lib = "#!lua name=forge\nredis.register_function('forge', function(keys, args) \
               return redis.call('LEASE.APPLY', keys[1], 'FREE', args[1]) end)";
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(lib)
        .query(&mut pc)
        .expect("function load");
    let e = err_of(&mut pc, &["FCALL", "forge", "1", "k", &forged_tok]);
    assert!(e.contains("LEASE.APPLY is internal"), "FCALL: {e}");

    assert_eq!(snapshot(&mut pc, "k"), before_p, "primary changed");
    assert_eq!(lease_info(&mut pc, "fresh"), None, "forgery created a key");
    // Everything replicated so far has reached the replica, and it still matches.
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);
    assert_eq!(snapshot(&mut rc, "k"), before_r, "replica changed");
    assert_eq!(lease_info(&mut rc, "fresh"), None);
    let (owner, token, _) = get(&mut pc, "k").expect("still held");
    assert_eq!((owner.as_slice(), token), (&b"real"[..], t));
    // The real holder is unaffected: its renew still works.
    assert_eq!(renew(&mut pc, "k", "real", t, 10_000), 1);
}

/// Would catch: a BLOCKed acquirer granted on wake-up (expiry, release, end of grace) while
/// the primary lacks the replicas `min-replicas-to-write` demands. Redis checks that setting
/// only when a command arrives, not when a blocked module client is served later, so the
/// module must check it itself before granting.
#[test]
fn min_replicas_also_holds_for_a_blocked_acquirer_served_later() {
    let p = RedisServer::start(
        primary_opts(&["lease.grace-ms", "0"]).extra_args(&["--min-replicas-to-write", "1"]),
    );
    let mut pc = p.connection();
    let mut r = start_replica(&p, &["lease.grace-ms", "0"]);
    wait_for(Duration::from_secs(5), || {
        let i = info_text(&mut pc, "replication");
        (info_value(&i, "min_slaves_good_slaves").as_deref() == Some("1")).then_some(())
    })
    .expect("primary counts the replica as good");
    let held = acquire(&mut pc, "k", "a", 2500).expect("grant");

    // The waiter is admitted while the replica is up ...
    let mut wc = p.connection();
    let waiter = std::thread::spawn(move || {
        redis::cmd("LEASE.ACQUIRE")
            .arg("k")
            .arg("b")
            .arg(1000)
            .arg("BLOCK")
            .arg(5000)
            .query::<Option<u64>>(&mut wc)
    });
    wait_for(Duration::from_secs(5), || {
        (info_field(&mut pc, "blocked_clients") == 1).then_some(())
    })
    .expect("waiter blocked");
    // ... then the replica goes away before the lease expires.
    r.kill();
    wait_for(Duration::from_secs(5), || {
        let i = info_text(&mut pc, "replication");
        (info_value(&i, "min_slaves_good_slaves").as_deref() == Some("0")).then_some(())
    })
    .expect("primary notices the dead replica");
    let got = waiter.join().expect("waiter thread");
    let e = match got {
        Ok(v) => panic!("waiter served without a replica: {v:?}"),
        Err(e) => format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")),
    };
    assert!(e.starts_with("NOREPLICAS"), "{e}");
    // The expiry itself still happened (it must: the holder's time is up); no new holder.
    assert_eq!(get(&mut pc, "k"), None);
    assert_eq!(lease_info(&mut pc, "k"), Some((0, held, 1)));
}

/// Would catch: a replica that applies `LEASE.APPLY` but does not put it into its own AOF
/// (module commands are never propagated implicitly; the module must replicate verbatim),
/// and a fenced inner write that runs on the primary but never reaches the replica.
#[test]
fn replica_aof_records_effects_and_fenced_writes_reach_the_replica() {
    let p = RedisServer::start(primary_opts(&["lease.grace-ms", "0"]));
    let port = p.port.to_string();
    let mut r = RedisServer::start(
        ServerOptions::default()
            .module_args(&["lease.grace-ms", "0"])
            .extra_args(&[
                "--replicaof",
                "127.0.0.1",
                &port,
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ]),
    );
    wait_link_up(&p, &r);
    // After a full sync a replica with AOF rewrites its AOF in the background; a grant made
    // before that finishes would land in the rewritten base and prove nothing about the
    // effect's own propagation. Wait for the rewrite to be done (bounded).
    // (Valkey 9 skips the rewrite: it reuses the sync's RDB as the AOF base and says so.)
    wait_for(Duration::from_secs(15), || {
        let log = r.log();
        (log.contains("Background AOF rewrite finished")
            || log.contains("Reused RDB file from primary sync as AOF base file"))
        .then_some(())
    })
    .expect("replica's post-sync AOF rewrite");
    let mut rc = r.connection();
    let mut pc = p.connection();
    let t = acquire(&mut pc, "job", "owner-a", 20000).expect("granted");
    let r2: String = redis::cmd("LEASE.FENCE")
        .arg("job")
        .arg(t)
        .arg("SET")
        .arg("guarded")
        .arg("v1")
        .query(&mut pc)
        .unwrap();
    assert_eq!(r2, "OK");
    assert_eq!(wait_acks(&mut pc, 1, 5000), 1);
    let g: Option<String> = redis::cmd("GET").arg("guarded").query(&mut rc).unwrap();
    assert_eq!(
        g.as_deref(),
        Some("v1"),
        "the fenced SET is replicated as itself"
    );
    assert_eq!(get(&mut rc, "job").map(|x| x.1), Some(t));
    // Restart the replica alone, as a primary, from its own AOF.
    r.kill();
    let mut opts = r.opts.clone();
    opts.extra_args = vec!["--appendonly".into(), "yes".into()];
    r.restart_with(opts);
    let mut rc = r.connection();
    let (owner, token, pttl) = get(&mut rc, "job").expect("lease survives in the replica's AOF");
    assert_eq!((owner.as_slice(), token), (&b"owner-a"[..], t));
    assert!(pttl > 10_000 && pttl <= 20_000, "{pttl}");
    let g: Option<String> = redis::cmd("GET").arg("guarded").query(&mut rc).unwrap();
    assert_eq!(g.as_deref(), Some("v1"));
}

/// Would catch: a lease command that a replica executes itself (a second judge of the lease)
/// or a read that is refused on replicas.
#[test]
fn replica_refuses_lease_writes_and_answers_reads() {
    let p = RedisServer::start(primary_opts(&["lease.grace-ms", "0"]));
    let r = start_replica(&p, &["lease.grace-ms", "0"]);
    let (mut pc, mut rc) = (p.connection(), r.connection());
    let t = acquire(&mut pc, "k", "owner", 10_000).expect("grant");
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);
    let ts = t.to_string();
    for cmd in [
        &["LEASE.ACQUIRE", "k", "other", "1000"][..],
        &["LEASE.ACQUIRE", "free", "other", "1000", "BLOCK", "10"],
        &["LEASE.RENEW", "k", "owner", &ts, "1000"],
        &["LEASE.RELEASE", "k", "owner", &ts],
        &["LEASE.FENCE", "k", &ts],
    ] {
        let e = err_of(&mut rc, cmd);
        assert!(e.starts_with("READONLY"), "{cmd:?}: {e}");
    }
    assert_eq!(
        get(&mut rc, "k").map(|g| (g.0, g.1)),
        Some((b"owner".to_vec(), t))
    );
    assert_eq!(lease_info(&mut rc, "k").map(|i| i.1), Some(t));
}
