//! Counts a replica and `INFO lease` report (issue 35, item 5; docs/failover.md §2.4).
//!
//! Would catch: a replica that counts a `LEASE.RAISE` as a grant (its `LEASE.INFO` then shows
//! `grants 2` against the primary's 1), and `lease_expiry_timers` growing with every reload
//! (each reload added one more entry per held lease).

mod common;
use common::*;
use std::time::Duration;

#[test]
fn replica_grant_count_matches_the_primary_after_raise() {
    let p = RedisServer::start(primary_opts(&["lease.grace-ms", "0"]));
    let r = start_replica(&p, &[]);
    let (mut pc, mut rc) = (p.connection(), r.connection());
    let t = acquire(&mut pc, "k", "a", 20_000).expect("grant");
    let raised: i64 = redis::cmd("LEASE.RAISE")
        .arg("k")
        .arg("a")
        .arg(t)
        .arg(t + 1_000)
        .query(&mut pc)
        .expect("raise");
    assert_eq!(raised, 1);
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);
    let primary = lease_info(&mut pc, "k").expect("primary info");
    let replica = lease_info(&mut rc, "k").expect("replica info");
    assert_eq!(primary.2, 1, "the primary counts one grant");
    assert_eq!(
        replica, primary,
        "(live, last_token, grants) on the replica"
    );
    // A real grant after a release is counted on both.
    assert_eq!(release(&mut pc, "k", "a", t + 1_000), 1);
    acquire(&mut pc, "k", "a", 20_000).expect("grant");
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);
    let primary = lease_info(&mut pc, "k").expect("primary info");
    assert_eq!(primary.2, 2);
    assert_eq!(lease_info(&mut rc, "k"), Some(primary));
}

#[test]
fn expiry_timer_count_does_not_grow_with_reloads() {
    let s = start();
    let mut c = s.connection();
    for i in 0..5 {
        acquire(&mut c, &format!("k{i}"), "a", 30_000).expect("grant");
    }
    assert_eq!(info_field(&mut c, "expiry_timers"), 5);
    for _ in 0..3 {
        let _: () = redis::cmd("DEBUG")
            .arg("RELOAD")
            .query(&mut c)
            .expect("reload");
    }
    wait_for(Duration::from_secs(2), || {
        (info_field(&mut c, "expiry_timers") == 5).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "lease_expiry_timers {} after 3 reloads of 5 held leases",
            info_field(&mut c, "expiry_timers")
        )
    });
}
