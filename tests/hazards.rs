//! Server-side hazards found in review (issue 24), each against real servers: a writable
//! replica granting leases of its own, eviction under `allkeys-*`, an RDB or DUMP whose held
//! lease lies far beyond the loading server's clock, `lease.max-ttl` lowered during grace, and
//! a migrated lease on a target whose wall clock runs ahead. Every wait is bounded.

mod common;
use common::*;

/// Would catch (issue 24, item 2): a replica with `replica-read-only no` granting,
/// renewing, releasing, raising or fence-checking leases of its own while its primary
/// decides the same keys (reproduced: two holders of one key), and a replica that stops
/// applying its primary's effects or serving `LEASE.GET` once it refuses client writes.
#[test]
fn writable_replica_refuses_lease_writes_but_applies_its_primary_and_reads() {
    let p = RedisServer::start(primary_opts(&["lease.grace-ms", "0"]));
    let port = p.port.to_string();
    let r = RedisServer::start(ServerOptions::default().grace_ms(0).extra_args(&[
        "--replicaof",
        "127.0.0.1",
        &port,
        "--replica-read-only",
        "no",
    ]));
    wait_link_up(&p, &r);
    let (mut pc, mut rc) = (p.connection(), r.connection());
    // The replica really is writable: a plain SET is accepted there.
    let _: () = redis::cmd("SET")
        .arg("plain")
        .arg("1")
        .query(&mut rc)
        .expect("replica-read-only no lets a plain write through");

    let t = acquire(&mut pc, "k", "alpha", 20_000).expect("primary grants");
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);
    let ts = t.to_string();
    for args in [
        vec!["LEASE.ACQUIRE", "free", "beta", "20000"],
        vec!["LEASE.ACQUIRE", "k", "beta", "20000"],
        vec!["LEASE.ACQUIRE", "free", "beta", "20000", "BLOCK", "100"],
        vec!["LEASE.RENEW", "k", "alpha", &ts, "20000"],
        vec!["LEASE.RELEASE", "k", "alpha", &ts],
        vec!["LEASE.RAISE", "k", "alpha", &ts, &ts],
        vec!["LEASE.FENCE", "k", &ts],
        vec!["LEASE.FENCE", "k", &ts, "SET", "k2", "v"],
    ] {
        let e = err_of(&mut rc, &args);
        assert!(e.starts_with("READONLY "), "{args:?} on a replica: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
    // Nothing changed on the replica: no key was created, the fenced SET did not run.
    let exists: i64 = redis::cmd("EXISTS")
        .arg("free")
        .arg("k2")
        .query(&mut rc)
        .expect("exists");
    assert_eq!(exists, 0, "a refused command left a key behind");
    // Reads stay allowed and show the primary's holder.
    let (owner, token, _) = get(&mut rc, "k").expect("replica reads the primary's lease");
    assert_eq!((owner.as_slice(), token), (&b"alpha"[..], t));
    assert!(lease_info(&mut rc, "k").is_some());
    // The replica still applies its primary's effects.
    assert_eq!(release(&mut pc, "k", "alpha", t), 1);
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);
    assert_eq!(get(&mut rc, "k"), None, "primary's release applied");
    let t2 = acquire(&mut pc, "k", "gamma", 20_000).expect("primary grants again");
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);
    assert_eq!(get(&mut rc, "k").map(|g| g.1), Some(t2));
    ping(&mut rc);
}
