//! Server-side hazards found in review (issue 24), each against real servers: a writable
//! replica granting leases of its own, eviction under `allkeys-*`, an RDB or DUMP whose held
//! lease lies far beyond the loading server's clock, `lease.max-ttl` lowered during grace, and
//! a migrated lease on a target whose wall clock runs ahead. Every wait is bounded.

mod common;
use common::*;
use std::time::Duration;

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

fn config_set(c: &mut Con, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(c)
        .unwrap_or_else(|e| panic!("CONFIG SET {name} {value}: {e}"));
}

fn info_str(c: &mut Con, field: &str) -> Option<String> {
    info_value(&info_text(c, "lease"), &format!("lease_{field}"))
}

/// Would catch (issue 24, item 1): a lease key evicted under `allkeys-lru` (leases have no
/// TTL, `volatile-*` never picks them, `allkeys-*` does) and a second owner granted at once
/// while the first still holds ~30 s of its lease (reproduced after ~40 writes); no warning
/// when the policy is set; `INFO lease` not showing the state; grants resuming at once when
/// the policy becomes safe again although an evicted lease's holder may still lead.
#[test]
fn evicting_policy_refuses_grants_warns_and_ends_in_a_grace_period() {
    let s = RedisServer::start(ServerOptions::default().grace_ms(0));
    let mut c = s.connection();
    let t = acquire(&mut c, "k", "alpha", 30_000).expect("grant under noeviction");
    assert_eq!(info_str(&mut c, "evicting").as_deref(), Some("0"));
    let used: u64 = info_value(&info_text(&mut c, "memory"), "used_memory")
        .and_then(|v| v.parse().ok())
        .expect("used_memory");
    config_set(&mut c, "maxmemory", &(used + 2 * 1024 * 1024).to_string());
    config_set(&mut c, "maxmemory-policy", "allkeys-lru");
    // Warned in the log and shown in INFO.
    wait_for(Duration::from_secs(5), || {
        s.log()
            .contains("maxmemory-policy allkeys-lru can evict lease keys")
            .then_some(())
    })
    .unwrap_or_else(|| panic!("no warning on CONFIG SET; log:\n{}", s.log_tail(20)));
    assert_eq!(info_str(&mut c, "evicting").as_deref(), Some("1"));
    assert_eq!(
        info_str(&mut c, "maxmemory_policy").as_deref(),
        Some("allkeys-lru")
    );
    // Memory pressure until the lease key is evicted (bounded: at most 4000 writes of 10 KB).
    let filler = vec![b'x'; 10_240];
    let mut writes = 0;
    loop {
        let exists: i64 = redis::cmd("EXISTS").arg("k").query(&mut c).expect("exists");
        if exists == 0 {
            break;
        }
        assert!(writes < 4000, "lease key not evicted after {writes} writes");
        let _: () = redis::cmd("SET")
            .arg(format!("filler:{writes}"))
            .arg(&filler[..])
            .query(&mut c)
            .expect("set");
        writes += 1;
    }
    // The holder still leads in its own view (~30 s left): nobody else may be granted.
    let e = err_of(&mut c, &["LEASE.ACQUIRE", "k", "beta", "30000"]);
    assert!(
        e.starts_with("ERR ") && e.contains("allkeys-lru"),
        "second owner after eviction ({writes} writes): {e}"
    );
    let e = err_of(
        &mut c,
        &["LEASE.ACQUIRE", "new", "beta", "30000", "BLOCK", "50"],
    );
    assert!(e.contains("allkeys-lru"), "{e}");
    // Its holder learns the lease is gone at its next renew.
    assert_eq!(renew(&mut c, "k", "alpha", t, 30_000), 0);
    // Back to a safe policy: a grace period covers the evicted lease's holder.
    config_set(&mut c, "lease.grace-ms", "5000");
    config_set(&mut c, "maxmemory-policy", "noeviction");
    assert_eq!(info_str(&mut c, "evicting").as_deref(), Some("0"));
    let e = err_of(&mut c, &["LEASE.ACQUIRE", "k", "beta", "30000"]);
    assert!(e.starts_with("GRACE "), "{e}");
    assert_eq!(info_field(&mut c, "grace_active"), 1);
    // volatile-* never evicts a lease key (no TTL): grants are not refused there.
    config_set(&mut c, "lease.grace-ms", "0");
    config_set(&mut c, "maxmemory-policy", "volatile-lru");
    assert_eq!(info_str(&mut c, "evicting").as_deref(), Some("0"));
    assert!(acquire(&mut c, "k", "beta", 30_000).expect("grant") > t);
}

/// Would catch: a server started with an evicting policy that grants anyway, or says
/// nothing at load.
#[test]
fn evicting_policy_at_start_is_logged_and_refuses_grants() {
    let s = RedisServer::start(ServerOptions::default().grace_ms(0).extra_args(&[
        "--maxmemory",
        "100mb",
        "--maxmemory-policy",
        "allkeys-random",
    ]));
    let mut c = s.connection();
    assert!(
        s.log()
            .contains("maxmemory-policy allkeys-random can evict lease keys"),
        "no warning at load; log:\n{}",
        s.log_tail(20)
    );
    assert_eq!(info_str(&mut c, "evicting").as_deref(), Some("1"));
    let e = err_of(&mut c, &["LEASE.ACQUIRE", "k", "a", "1000"]);
    assert!(e.contains("allkeys-random"), "{e}");
    // No memory limit: nothing can be evicted, grants go on.
    config_set(&mut c, "maxmemory", "0");
    assert_eq!(info_str(&mut c, "evicting").as_deref(), Some("0"));
}
