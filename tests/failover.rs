//! Losing state and what saves you (docs/failover.md §1, §2): a replica promoted after it missed a grant,
//! and a server restarted without (or with lagging) persistence. In both cases the new
//! primary does not know every lease that may be live, so it grants nothing new for the
//! grace period (default `lease.max-ttl`), keeps renewing what it does know, and then issues
//! tokens above every token the lost history contained.
//!
//! How the grant is lost, deterministically: the replica is frozen (SIGSTOP) and the primary
//! then drops its link (`CLIENT KILL TYPE replica`) *before* the grant. SIGSTOP alone would
//! not do: the kernel keeps accepting the replication stream into the stopped replica's
//! socket buffer and the replica applies it on SIGCONT. With the link closed first, the
//! primary has no replica to send the grant to (`WAIT 1 200` → 0), and once the primary is
//! killed -9 the replica cannot fetch it from the backlog either.

mod common;
use common::*;
use std::time::{Duration, Instant};

/// The number in `GRACE <ms> ms left: ...`.
fn grace_ms_in(err: &str) -> u64 {
    let rest = err
        .strip_prefix("GRACE ")
        .unwrap_or_else(|| panic!("not a GRACE error: {err}"));
    rest.split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{err}"))
}

const MAX_TTL: u64 = 1500;

/// Would catch: no grace on promotion (the newcomer would get the lost lease at once while
/// the old leader still believes it holds it), grace that refuses renewals of leases the
/// replica knows, BLOCK that does not wait through grace (or wakes late), a token after
/// promotion that is not above the lost one (a resource that saw the lost token would then
/// accept the new leader's writes as stale, or vice versa), and expiry timers not re-armed
/// on promotion (a known lease would never expire on the new primary).
#[test]
fn promoted_replica_that_missed_a_grant_waits_out_grace_then_issues_a_higher_token() {
    let ttl = MAX_TTL.to_string();
    // Both run the production default: grace = max-ttl. The primary disables its own start-up
    // grace only so that the test can grant at once.
    let mut p = RedisServer::start(primary_opts(&[
        "lease.max-ttl",
        &ttl,
        "lease.grace-ms",
        "0",
    ]));
    let r = start_replica(&p, &["lease.max-ttl", &ttl]);
    let (mut pc, mut rc) = (p.connection(), r.connection());

    // Known to the replica: one lease its new leader will renew, one nobody touches.
    let known = acquire(&mut pc, "known", "k-holder", MAX_TTL).expect("grant");
    let idle = acquire(&mut pc, "idle", "i-holder", MAX_TTL).expect("grant");
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);

    // Cut the replica off, then grant: this grant exists only on the primary.
    r.signal(libc::SIGSTOP);
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut pc)
        .expect("client kill");
    assert_eq!(killed, 1);
    let lost = acquire(&mut pc, "lease", "old-leader", MAX_TTL).expect("grant on the old primary");
    assert_eq!(
        wait_acks(&mut pc, 1, 200),
        0,
        "no replica acknowledged the grant"
    );
    p.kill();
    r.signal(libc::SIGCONT);

    let promoted_at = Instant::now();
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut rc)
        .expect("promote");
    assert_eq!(
        lease_info(&mut rc, "lease"),
        None,
        "the replica never saw the grant"
    );

    // Grace: the newcomer is told why it gets nothing.
    let e = err_of(&mut rc, &["LEASE.ACQUIRE", "lease", "new-leader", "1000"]);
    let left = grace_ms_in(&e);
    assert!(left > 0 && left <= MAX_TTL, "{e}");
    let info = info_text(&mut rc, "lease");
    assert_eq!(
        info_value(&info, "lease_grace_active").as_deref(),
        Some("1")
    );
    let log = r.log();
    assert!(log.contains("promoted to primary"), "{log}");
    // Both leases the replica knows got an expiry timer at promotion (replicas arm none).
    assert!(
        log.contains("expiry timers armed for 2 held lease(s)"),
        "{log}"
    );
    // ... while the holder the replica knows renews as usual.
    assert_eq!(renew(&mut rc, "known", "k-holder", known, MAX_TTL), 1);

    // BLOCK waits through grace and is granted right after it, above the lost token.
    let token = acquire_blocking(&mut rc, "lease", "new-leader", 1000, 10_000).expect("granted");
    let waited = promoted_at.elapsed();
    eprintln!("promotion -> grant after grace: {waited:?} (grace {MAX_TTL} ms, ACQUIRE BLOCK)");
    assert!(
        waited >= Duration::from_millis(MAX_TTL),
        "granted during grace: {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(MAX_TTL + 500),
        "woke late: {waited:?}"
    );
    assert!(token > lost, "token {token} must exceed the lost {lost}");
    assert!(token > known.max(idle));
    let other = acquire(&mut rc, "other", "x", 1000).expect("non-blocking grant after grace");
    assert!(other > token);

    // The untouched known lease expired on the new primary through a re-armed timer: no
    // command touched it, yet it was freed (counted and replicated as an expiry).
    wait_for(Duration::from_secs(3), || {
        (info_field(&mut rc, "expired") >= 1).then_some(())
    })
    .expect("idle lease expired on the promoted replica");
    assert_eq!(
        lease_info(&mut rc, "idle").map(|i| (i.0, i.1)),
        Some((0, idle))
    );
}

/// Restarts a primary after `kill -9` with `opts`, and checks: the start-up grace refuses
/// new grants (GRACE error, INFO, log), `keep` (if given, a lease the persisted state knows)
/// renews during grace, a BLOCK acquire is served only after grace, and every token issued
/// after the restart is above `max_before`.
fn check_restart(
    s: &mut RedisServer,
    opts: ServerOptions,
    keep: Option<(u64, &str)>,
    max_before: u64,
) {
    let grace = MAX_TTL;
    s.kill();
    let restarted_at = Instant::now();
    s.restart_with(opts);
    let mut c = s.connection();
    let e = err_of(&mut c, &["LEASE.ACQUIRE", "a", "newcomer", "1000"]);
    let left = grace_ms_in(&e);
    assert!(left > 0 && left <= grace, "{e}");
    assert_eq!(info_field(&mut c, "grace_active"), 1);
    assert!(s
        .log()
        .contains("grace period of 1500 ms started (server start)"));
    if let Some((token, owner)) = keep {
        assert_eq!(
            renew(&mut c, "held", owner, token, MAX_TTL),
            1,
            "known lease renews in grace"
        );
    }
    let t = acquire_blocking(&mut c, "a", "newcomer", 1000, 10_000).expect("granted after grace");
    let waited = restarted_at.elapsed();
    eprintln!("restart -> grant after grace: {waited:?} (grace {grace} ms)");
    assert!(
        waited >= Duration::from_millis(grace),
        "granted during grace: {waited:?}"
    );
    assert!(
        t > max_before,
        "token {t} after restart must exceed {max_before}"
    );
    for key in ["b", "c", "never-used"] {
        let t2 = acquire(&mut c, key, "n", 1000).expect("grant after grace");
        assert!(t2 > max_before, "{key}: {t2} <= {max_before}");
    }
}

/// Grants and releases a few leases; returns the highest token issued.
fn history(c: &mut Con) -> u64 {
    let mut max = 0;
    for round in 0..3 {
        for key in ["a", "b", "c"] {
            let t = acquire(c, key, &format!("o{round}"), 1000).expect("grant");
            let _: i64 = redis::cmd("LEASE.RELEASE")
                .arg(key)
                .arg(format!("o{round}"))
                .arg(t)
                .query(c)
                .expect("release");
            assert!(t > max);
            max = t;
        }
    }
    max
}

/// Would catch: no start-up grace (a restarted server with no memory of a live lease would
/// grant it again at once), and tokens after a restart without persistence that are not
/// above the forgotten ones (the wall-clock term of the token rule is what carries them).
#[test]
fn restart_without_persistence_waits_out_grace_and_tokens_keep_rising() {
    let ttl = MAX_TTL.to_string();
    let opts = |grace: &[&str]| {
        let mut args = vec!["lease.max-ttl", ttl.as_str()];
        args.extend_from_slice(grace);
        ServerOptions::default().module_args(&args)
    };
    let mut s = RedisServer::start(opts(&["lease.grace-ms", "0"]));
    let max_before = history(&mut s.connection());
    check_restart(&mut s, opts(&[]), None, max_before);
}

/// Would catch: the same, with AOF `everysec`: grace still applies although state was
/// loaded (the last second of writes may be missing after a power loss), a loaded live lease
/// whose holder cannot renew it during grace, and tokens not above the loaded history.
#[test]
fn restart_with_aof_everysec_waits_out_grace_keeps_known_leases_and_tokens_keep_rising() {
    let ttl = MAX_TTL.to_string();
    let opts = |grace: &[&str]| {
        let mut args = vec!["lease.max-ttl", ttl.as_str()];
        args.extend_from_slice(grace);
        ServerOptions::default().module_args(&args).extra_args(&[
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
        ])
    };
    let mut s = RedisServer::start(opts(&["lease.grace-ms", "0"]));
    let mut c = s.connection();
    let mut max_before = history(&mut c);
    let held = acquire(&mut c, "held", "holder", MAX_TTL).expect("grant");
    max_before = max_before.max(held);
    // kill -9 loses nothing that reached the file (the page cache outlives the process);
    // everysec only risks the last second on a power loss. Wait until the grant is in the
    // file so the test does not depend on when Redis flushes its AOF buffer.
    let aof_dir = s.dir().join("appendonlydir");
    let needle = held.to_string();
    wait_for(Duration::from_secs(5), || {
        let all: String = std::fs::read_dir(&aof_dir)
            .ok()?
            .filter_map(|e| std::fs::read(e.ok()?.path()).ok())
            .map(|b| String::from_utf8_lossy(&b).to_string())
            .collect();
        all.contains(&needle).then_some(())
    })
    .expect("grant reached the AOF file");
    check_restart(&mut s, opts(&[]), Some((held, "holder")), max_before);
}

/// What grace and tokens do NOT prevent: split brain of two primaries. The replica is
/// promoted while the old primary is still up and reachable by the old leader (a partition,
/// or a promotion by an operator or Sentinel that could not reach the old primary). Each
/// primary then has its own live leader for the same key and each accepts that leader's
/// FENCE. Only the token order separates them: the new grant's token is above the old one,
/// so a resource that remembers the highest token it has seen refuses the old leader once
/// the new one has written (docs/failover.md).
///
/// Would catch (as a guard on the documented limit): a change that makes either primary
/// refuse its own leader (then the docs overstate the problem), or a new token that is not
/// above the old leader's (then even a token-ordering resource could not separate them).
#[test]
fn split_brain_of_two_primaries_yields_two_leaders_ordered_only_by_token() {
    let ttl = "1000";
    let p = RedisServer::start(primary_opts(&["lease.max-ttl", ttl, "lease.grace-ms", "0"]));
    let r = start_replica(&p, &["lease.max-ttl", ttl]);
    let (mut pc, mut rc) = (p.connection(), r.connection());
    let old = acquire(&mut pc, "lease", "old-leader", 1000).expect("grant");
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);

    // The old leader keeps renewing on the old primary, which never learns of the promotion.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let renewer = {
        let stop = stop.clone();
        let mut c = p.connection();
        std::thread::spawn(move || {
            let mut renewed = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                assert_eq!(renew(&mut c, "lease", "old-leader", old, 1000), 1);
                renewed += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            renewed
        })
    };
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut rc)
        .expect("promote");
    // The new primary waits out grace and the lapse of the lease it knew, then grants.
    let new = acquire_blocking(&mut rc, "lease", "new-leader", 1000, 10_000).expect("granted");
    let fence = |c: &mut Con, token: u64| -> Result<i64, String> {
        redis::cmd("LEASE.FENCE")
            .arg("lease")
            .arg(token)
            .query(c)
            .map_err(|e| e.to_string())
    };
    // Two leaders at once, each accepted by its own primary.
    let on_old = get(&mut pc, "lease").expect("old primary still has a leader");
    let on_new = get(&mut rc, "lease").expect("new primary has a leader");
    assert_eq!((on_old.0.as_slice(), on_old.1), (&b"old-leader"[..], old));
    assert_eq!((on_new.0.as_slice(), on_new.1), (&b"new-leader"[..], new));
    assert!(
        fence(&mut pc, old).is_ok(),
        "old primary fences for the old leader"
    );
    assert!(
        fence(&mut rc, new).is_ok(),
        "new primary fences for the new leader"
    );
    assert!(
        fence(&mut rc, old).is_err(),
        "new primary refuses the old token"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let renewed = renewer.join().expect("renewer");
    assert!(
        renewed >= 3,
        "old leader renewed through the split: {renewed}"
    );
    // The only thing that orders them: the token.
    assert!(
        new > old,
        "new token {new} must exceed the old leader's {old}"
    );
    eprintln!("split brain: old leader token {old} (renewed {renewed}x), new leader token {new}");
}

/// What narrows split brain: `min-replicas-to-write` on the old primary. Once the old
/// primary has no good replica, it refuses the old leader's renewals (NOREPLICAS), so that
/// leader's lease lapses at its TTL; a new primary whose grace is at least
/// `min-replicas-max-lag` + `max-ttl` grants only after that, and the two reigns do not
/// overlap on the servers. Here the replica's promotion itself closes its link, so the old
/// primary notices at once; in a real partition it notices after `min-replicas-max-lag`
/// seconds, which is why grace must cover that too (docs/failover.md §3.1).
///
/// Would catch: lease renewals that bypass `min-replicas-to-write` on the old primary (the
/// old leader would renew through the split), or a grant on the new primary while the old
/// primary still holds the lease.
#[test]
fn split_brain_is_narrowed_by_min_replicas_on_the_old_primary() {
    let ttl = "1000";
    let p = RedisServer::start(
        primary_opts(&["lease.max-ttl", ttl, "lease.grace-ms", "0"]).extra_args(&[
            "--min-replicas-to-write",
            "1",
            "--min-replicas-max-lag",
            "1",
        ]),
    );
    let r = start_replica(&p, &["lease.max-ttl", ttl]);
    let (mut pc, mut rc) = (p.connection(), r.connection());
    wait_for(Duration::from_secs(5), || {
        let i = info_text(&mut pc, "replication");
        (info_value(&i, "min_slaves_good_slaves").as_deref() == Some("1")).then_some(())
    })
    .expect("replica counted as good");
    let old = acquire(&mut pc, "lease", "old-leader", 1000).expect("grant");
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut rc)
        .expect("promote");
    wait_for(Duration::from_secs(5), || {
        let i = info_text(&mut pc, "replication");
        (info_value(&i, "min_slaves_good_slaves").as_deref() == Some("0")).then_some(())
    })
    .expect("old primary lost its good replica");
    // The old leader can no longer renew on the old primary.
    let e = err_of(
        &mut pc,
        &[
            "LEASE.RENEW",
            "lease",
            "old-leader",
            &old.to_string(),
            "1000",
        ],
    );
    assert!(e.starts_with("NOREPLICAS"), "{e}");
    let new = acquire_blocking(&mut rc, "lease", "new-leader", 1000, 10_000).expect("granted");
    // By the time the new primary grants, the old primary's lease has lapsed.
    assert_eq!(
        get(&mut pc, "lease"),
        None,
        "old primary still has a live leader"
    );
    assert!(new > old);
}
