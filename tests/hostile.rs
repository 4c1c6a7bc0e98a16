//! What a client with write access to a lease key can do to other holders, and what the
//! module guarantees anyway (docs/security.md, "Hostile clients"). These tests state the
//! threat honestly (a raw write can replace a lease's holder) and pin the guarantees that
//! survive it: a new grant never reuses a token, forged payloads are validated, the server
//! stays up, and FENCE never runs anything with more rights than its caller.
//! DEL is covered by persistence.rs `tokens_rise_across_del_and_restart_without_persistence`,
//! random corrupt RESTORE payloads by persistence.rs `corrupt_restore_payloads_with_valid_crc_never_crash`.

mod common;
use common::*;

fn fence(c: &mut Con, key: &str, token: u64) -> redis::RedisResult<i64> {
    redis::cmd("LEASE.FENCE").arg(key).arg(token).query(c)
}

/// Threat: RESTORE of an old DUMP brings back an old holder and its token, so that holder's
/// stale fenced writes pass again. Guarantee: the next grant is still above every token the
/// server has seen, including the replaced one.
#[test]
fn restore_replay_resurrects_an_old_holder_but_no_grant_reuses_a_token() {
    let s = start();
    let mut c = s.connection();
    let t1 = acquire(&mut c, "leases:k", "a", 30000).unwrap();
    let old: Vec<u8> = redis::cmd("DUMP").arg("leases:k").query(&mut c).unwrap();
    assert_eq!(release(&mut c, "leases:k", "a", t1), 1);
    let t2 = acquire(&mut c, "leases:k", "b", 30000).unwrap();
    assert!(t2 > t1);
    assert!(fence(&mut c, "leases:k", t1).is_err(), "t1 is stale now");
    redis::cmd("RESTORE")
        .arg("leases:k")
        .arg(0)
        .arg(&old)
        .arg("REPLACE")
        .query::<()>(&mut c)
        .unwrap();
    // The threat: the replayed payload is a valid lease, so it is accepted as state.
    assert_eq!(
        get(&mut c, "leases:k").map(|g| (g.0, g.1)),
        Some((b"a".to_vec(), t1))
    );
    assert!(
        fence(&mut c, "leases:k", t1).is_ok(),
        "replayed holder passes FENCE"
    );
    assert!(
        fence(&mut c, "leases:k", t2).is_err(),
        "the real holder is fenced out"
    );
    // The guarantee: whatever the key now says, no grant goes back.
    assert_eq!(release(&mut c, "leases:k", "a", t1), 1);
    let t3 = acquire(&mut c, "leases:k", "c", 30000).unwrap();
    assert!(t3 > t2, "{t3} must exceed every token seen ({t2})");
    println!("t1 {t1} (replayed), t2 {t2} (overwritten), t3 {t3} (next grant)");
}

/// Threat: RENAME (or COPY ... REPLACE) of one lease key over another replaces the target's
/// holder with the source's. Guarantee: the target's next grant is still above its own history.
#[test]
fn rename_over_a_lease_replaces_its_holder_but_no_grant_reuses_a_token() {
    let s = start();
    let mut c = s.connection();
    let ta = acquire(&mut c, "leases:a", "x", 30000).unwrap();
    let tb = acquire(&mut c, "leases:b", "y", 30000).unwrap();
    assert!(tb > ta);
    redis::cmd("RENAME")
        .arg("leases:a")
        .arg("leases:b")
        .query::<()>(&mut c)
        .unwrap();
    assert_eq!(
        get(&mut c, "leases:b").map(|g| (g.0, g.1)),
        Some((b"x".to_vec(), ta))
    );
    assert!(
        fence(&mut c, "leases:b", tb).is_err(),
        "y lost leases:b to the rename"
    );
    assert_eq!(release(&mut c, "leases:b", "x", ta), 1);
    let next = acquire(&mut c, "leases:b", "z", 30000).unwrap();
    assert!(
        next > tb,
        "{next} must exceed {tb}, the highest token leases:b ever had"
    );
}

/// Replaces the 8 little-endian bytes of `from` (the token field of a module value in
/// encoding version 2, docs/protocol.md §1) by `to`, and fixes the CRC64 trailer.
fn forge_token(dump: &[u8], from: u64, to: u64) -> Vec<u8> {
    let body = &dump[..dump.len() - 8];
    let needle = from.to_le_bytes();
    let at = body
        .windows(8)
        .position(|w| w == needle)
        .expect("token bytes in the payload");
    let mut b = body.to_vec();
    b[at..at + 8].copy_from_slice(&to.to_le_bytes());
    let mut crc = 0u64;
    for &x in &b {
        crc ^= u64::from(x);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x95AC_9329_AC4B_C9B5
            } else {
                crc >> 1
            };
        }
    }
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// Threat: a forged but well-formed payload with a token just below 2^53 raises the process's
/// token floor, so the token space runs out for every key (a denial of service until the key
/// is deleted and the server restarted). Guarantees: a token at or above 2^53 is refused,
/// grants are refused with one error line rather than reissue a token, the server stays up.
#[test]
fn forged_tokens_are_validated_and_exhaustion_refuses_grants_never_reissues() {
    let mut s = start();
    let mut c = s.connection();
    let t = acquire(&mut c, "leases:src", "a", 30000).unwrap();
    let dump: Vec<u8> = redis::cmd("DUMP").arg("leases:src").query(&mut c).unwrap();
    const LIMIT: u64 = 1 << 53;
    let r: redis::RedisResult<()> = redis::cmd("RESTORE")
        .arg("leases:over")
        .arg(0)
        .arg(forge_token(&dump, t, LIMIT))
        .query(&mut c);
    assert!(r.is_err(), "a token >= 2^53 must be refused: {r:?}");
    assert_eq!(get(&mut c, "leases:over"), None);
    redis::cmd("RESTORE")
        .arg("leases:forged")
        .arg(0)
        .arg(forge_token(&dump, t, LIMIT - 2))
        .query::<()>(&mut c)
        .unwrap();
    // Any key: the next grant is above everything seen, so only one token is left.
    let last = acquire(&mut c, "leases:other", "b", 30000).unwrap();
    assert_eq!(last, LIMIT - 1);
    let e = err_of(&mut c, &["LEASE.ACQUIRE", "leases:third", "c", "30000"]);
    assert!(e.contains("token space exhausted"), "{e}");
    println!("after a forged RESTORE: last grant {last}, then: {e}");
    ping(&mut c);
    s.assert_alive();
}

/// The LEASE.FENCE decision (docs/security.md): without Cluster, an inner command that touches
/// no key, or keys outside the lease key's slot, is NOT refused by the module. FENCE adds a
/// token check, never rights: the caller's ACL decides, exactly as if it ran the command
/// itself. Refusing them would break documented use (a fenced write to `report:state` under
/// lease `jobs:report`, a different slot) and add no protection a user lacks through ACL.
#[test]
fn fence_runs_keyless_and_cross_slot_commands_with_the_callers_rights_only() {
    let s = start();
    let mut admin = s.connection();
    let t = acquire(&mut admin, "jobs:report", "a", 30000).unwrap();
    let ts = t.to_string();
    // Cross-slot (standalone): allowed.
    let a: Vec<&[u8]> = vec![
        b"LEASE.FENCE",
        b"jobs:report",
        ts.as_bytes(),
        b"SET",
        b"report:state",
        b"7",
    ];
    let ok: String = try_cmd(&mut admin, &a).unwrap();
    assert_eq!(ok, "OK");
    // A user with every right but FLUSHALL cannot FLUSHALL through FENCE ...
    redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "noflush",
            "on",
            ">pw",
            "+@all",
            "-flushall",
            "~*",
            "&*",
        ])
        .query::<()>(&mut admin)
        .unwrap();
    let mut u = redis::Client::open(format!("redis://noflush:pw@127.0.0.1:{}/", s.port))
        .unwrap()
        .get_connection()
        .unwrap();
    let e = err_of(&mut u, &["LEASE.FENCE", "jobs:report", &ts, "FLUSHALL"]);
    assert!(
        e.contains("NOPERM") || e.contains("acl verification failed"),
        "{e}"
    );
    let v: Option<String> = redis::cmd("GET")
        .arg("report:state")
        .query(&mut admin)
        .unwrap();
    assert_eq!(v.as_deref(), Some("7"), "nothing was flushed");
    // ... and a stale token stops even a user who may FLUSHALL.
    let stale = (t - 1).to_string();
    let e = err_of(
        &mut admin,
        &["LEASE.FENCE", "jobs:report", &stale, "FLUSHALL"],
    );
    assert!(e.contains("FENCED"), "{e}");
    assert_eq!(get(&mut admin, "jobs:report").map(|g| g.1), Some(t));
    // A keyless command with a live token runs with the caller's rights (here: admin's).
    let n: i64 = redis::cmd("LEASE.FENCE")
        .arg("jobs:report")
        .arg(t)
        .arg("PUBLISH")
        .arg("epochs")
        .arg(&ts)
        .query(&mut admin)
        .unwrap();
    assert_eq!(n, 0);
}
