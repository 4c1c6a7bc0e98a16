//! The data type across DEBUG RELOAD, AOF rewrite + restart, DUMP/RESTORE, COPY, RENAME,
//! DEL and restarts without persistence; and hostile RESTORE payloads that carry a valid
//! CRC64, so they reach the module's loader, never crash the server.

mod common;
use common::*;
use std::time::{Duration, Instant};

fn info_of(c: &mut Con, key: &str) -> Vec<redis::Value> {
    redis::cmd("LEASE.INFO").arg(key).query(c).unwrap()
}

fn last_token(c: &mut Con, key: &str) -> u64 {
    let v = info_of(c, key);
    redis::from_redis_value(v[9].clone()).unwrap()
}

#[test]
fn debug_reload_keeps_holders_tokens_and_timers() {
    let s = start();
    let mut c = s.connection();
    let held = acquire(&mut c, "held", "a", 20000).unwrap();
    let freed = acquire(&mut c, "freed", "b", 20000).unwrap();
    let _: i64 = redis::cmd("LEASE.RELEASE")
        .arg("freed")
        .arg("b")
        .arg(freed)
        .query(&mut c)
        .unwrap();
    acquire(&mut c, "short", "s", 400).unwrap();
    let before = snapshot(&mut c, "held");
    redis::cmd("DEBUG")
        .arg("RELOAD")
        .query::<()>(&mut c)
        .unwrap();
    assert_eq!(snapshot(&mut c, "held"), before);
    let (owner, token, pttl) = get(&mut c, "held").unwrap();
    assert_eq!((owner.as_slice(), token), (&b"a"[..], held));
    assert!(pttl <= 20000 && pttl > 15000, "{pttl}");
    assert_eq!(get(&mut c, "freed"), None);
    assert_eq!(last_token(&mut c, "freed"), freed);
    assert!(acquire(&mut c, "freed", "c", 1000).unwrap() > freed);
    // The reloaded short lease still expires on time and wakes a blocked acquirer.
    let t0 = Instant::now();
    let got: Option<u64> = acquire_blocking(&mut c, "short", "w", 1000, 5000);
    assert!(got.is_some(), "waiter woken at expiry after reload");
    assert!(
        t0.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t0.elapsed()
    );
}

#[test]
fn aof_rewrite_and_restart_restore_the_same_state() {
    let opts =
        ServerOptions::default().extra_args(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut s = RedisServer::start(opts);
    let mut c = s.connection();
    let a = acquire(&mut c, "a", "owner-a", 25000).unwrap();
    let b = acquire(&mut c, "b", "owner-b", 25000).unwrap();
    let _: i64 = redis::cmd("LEASE.RELEASE")
        .arg("b")
        .arg("owner-b")
        .arg(b)
        .query(&mut c)
        .unwrap();
    redis::cmd("BGREWRITEAOF").query::<()>(&mut c).unwrap();
    wait_for(Duration::from_secs(10), || {
        let info: String = redis::cmd("INFO").arg("persistence").query(&mut c).unwrap();
        (info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0"))
            .then_some(())
    })
    .expect("rewrite finishes");
    // Changes after the rewrite land in the incremental AOF.
    let r: i64 = redis::cmd("LEASE.RENEW")
        .arg("a")
        .arg("owner-a")
        .arg(a)
        .arg(25000)
        .query(&mut c)
        .unwrap();
    assert_eq!(r, 1);
    let c2 = acquire(&mut c, "c", "owner-c", 25000).unwrap();
    let before: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|k| snapshot(&mut c, k))
        .collect();
    s.kill(); // kill -9: appendfsync always means nothing acknowledged is lost
    s.restart();
    let mut c = s.connection();
    let after: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|k| snapshot(&mut c, k))
        .collect();
    assert_eq!(after, before);
    assert_eq!(get(&mut c, "a").map(|g| g.1), Some(a));
    assert_eq!(get(&mut c, "c").map(|g| g.1), Some(c2));
    assert_eq!(get(&mut c, "b"), None);
    assert!(
        acquire(&mut c, "b", "x", 1000).unwrap() > b,
        "tokens rise across AOF restart"
    );
}

#[test]
fn dump_restore_copy_rename_and_memory() {
    let s = start();
    let mut c = s.connection();
    let owner = "o".repeat(27);
    let t = acquire(&mut c, "k", &owner, 20000).unwrap();
    let mem: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("k")
        .query(&mut c)
        .unwrap();
    println!("MEMORY USAGE of one lease with a 27-byte owner: {mem} bytes");
    assert!(mem <= 100, "{mem}");
    let payload: Vec<u8> = redis::cmd("DUMP").arg("k").query(&mut c).unwrap();
    redis::cmd("RESTORE")
        .arg("k2")
        .arg(0)
        .arg(&payload)
        .query::<()>(&mut c)
        .unwrap();
    assert_eq!(
        get(&mut c, "k2").map(|g| (g.0, g.1)),
        Some((owner.clone().into_bytes(), t))
    );
    redis::cmd("COPY")
        .arg("k")
        .arg("k3")
        .query::<()>(&mut c)
        .unwrap();
    assert_eq!(get(&mut c, "k3").map(|g| g.1), Some(t));
    redis::cmd("RENAME")
        .arg("k3")
        .arg("k4")
        .query::<()>(&mut c)
        .unwrap();
    assert_eq!(get(&mut c, "k4").map(|g| g.1), Some(t));
    assert_eq!(get(&mut c, "k3"), None);
    let ty: String = redis::cmd("TYPE").arg("k4").query(&mut c).unwrap();
    assert_eq!(ty, "leasetype");
    // No native TTL on lease keys.
    let ttl: i64 = redis::cmd("PTTL").arg("k").query(&mut c).unwrap();
    assert_eq!(ttl, -1);
}

#[test]
fn renamed_lease_still_expires_on_time_for_waiters() {
    let s = start();
    let mut c = s.connection();
    acquire(&mut c, "old", "a", 300).unwrap();
    redis::cmd("RENAME")
        .arg("old")
        .arg("new")
        .query::<()>(&mut c)
        .unwrap();
    let t0 = Instant::now();
    let got: Option<u64> = acquire_blocking(&mut c, "new", "w", 1000, 5000);
    assert!(got.is_some());
    assert!(
        t0.elapsed() < Duration::from_millis(1000),
        "woken late: {:?}",
        t0.elapsed()
    );
}

#[test]
fn tokens_rise_across_del_and_restart_without_persistence() {
    let mut s = start();
    let mut c = s.connection();
    let t1 = acquire(&mut c, "k", "a", 20000).unwrap();
    redis::cmd("DEL").arg("k").query::<()>(&mut c).unwrap();
    let t2 = acquire(&mut c, "k", "b", 20000).unwrap();
    assert!(
        t2 > t1,
        "DEL loses the history; the wall-clock floor keeps tokens rising"
    );
    s.kill();
    s.restart();
    let mut c = s.connection();
    assert_eq!(get(&mut c, "k"), None, "no persistence: the lease is gone");
    let t3 = acquire(&mut c, "k", "c", 20000).unwrap();
    assert!(
        t3 > t2,
        "restart without persistence: {t3} must exceed {t2}"
    );
}

// ------------------------------------------------------------------------------------------
// Hostile RESTORE payloads

/// CRC-64/Jones as Redis computes the DUMP trailer (reflected, poly 0xad93d23594c935a9).
fn crc64(data: &[u8]) -> u64 {
    const POLY_REFLECTED: u64 = 0x95AC_9329_AC4B_C9B5;
    let mut crc = 0u64;
    for &b in data {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ POLY_REFLECTED
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// Replaces the trailer so the server's CRC check passes and the loader sees the bytes.
fn with_crc(body: &[u8]) -> Vec<u8> {
    let mut v = body.to_vec();
    v.extend_from_slice(&crc64(body).to_le_bytes());
    v
}

/// RDB length encoding as `rdbSaveLen` writes it.
fn rdb_len(n: u64) -> Vec<u8> {
    match n {
        0..=63 => vec![n as u8],
        64..=16383 => vec![0x40 | (n >> 8) as u8, n as u8],
        _ if n <= u64::from(u32::MAX) => {
            let mut v = vec![0x80];
            v.extend_from_slice(&(n as u32).to_be_bytes());
            v
        }
        _ => {
            let mut v = vec![0x81];
            v.extend_from_slice(&n.to_be_bytes());
            v
        }
    }
}

/// A held lease in encoding version 1, as builds before v2 saved it (4 unsigned fields and
/// one string), given the module id bytes (`[0x81, id BE]`, version bits set to 1 here) and
/// the RDB version trailer of a DUMP of this server. Without the CRC.
fn v1_held_body(
    id_bytes: &[u8],
    version: &[u8],
    owner: &[u8],
    token: u64,
    expires_wall_ms: u64,
) -> Vec<u8> {
    let id = u64::from_be_bytes(id_bytes[1..9].try_into().unwrap());
    let mut b = vec![7u8, 0x81];
    b.extend_from_slice(&((id & !1023) | 1).to_be_bytes());
    for (op, field) in [
        (2u8, rdb_len(token)),
        (2, rdb_len(1)),
        (2, rdb_len(1)),
        (5, [rdb_len(owner.len() as u64), owner.to_vec()].concat()),
        (2, rdb_len(expires_wall_ms)),
    ] {
        b.push(op);
        b.extend_from_slice(&field);
    }
    b.push(0); // module value EOF
    b.extend_from_slice(version);
    b
}

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap()
}

/// RESTOREs every truncation of `body` (a DUMP payload without its CRC) and 1500 random
/// corruptions of its value, each with a valid CRC; returns (tried, accepted, rejected).
fn restore_corruptions(c: &mut Con, body: &[u8], seed: u64, prefix: &str) -> (usize, usize, usize) {
    // Layout: [type][module id ...][opcodes + values ...][EOF][rdb version: 2][crc: 8].
    let data_end = body.len() - 2;
    let version = &body[data_end..];
    let mut rng = Rng(seed);
    let mut accepted = 0;
    let mut rejected = 0;
    let mut cases: Vec<Vec<u8>> = vec![];
    // Truncations at every position (the version bytes kept so the loader runs).
    for cut in 1..data_end {
        let mut b = body[..cut].to_vec();
        b.extend_from_slice(version);
        cases.push(b);
    }
    // Random byte flips and insertions inside the value, 1500 of them.
    for _ in 0..1500 {
        let mut b = body[..data_end].to_vec();
        for _ in 0..=rng.below(3) {
            let i = 1 + rng.below(b.len() - 1);
            match rng.below(3) {
                0 => b[i] ^= 1 << rng.below(8),
                1 => b[i] = rng.next() as u8,
                _ => b.insert(i, rng.next() as u8),
            }
        }
        b.extend_from_slice(version);
        cases.push(b);
    }
    for (i, b) in cases.iter().enumerate() {
        let key = format!("{prefix}{i}");
        let r: redis::RedisResult<()> = redis::cmd("RESTORE")
            .arg(&key)
            .arg(0)
            .arg(with_crc(b))
            .query(c);
        match r {
            Ok(()) => {
                accepted += 1;
                // Whatever was accepted must be a sane lease: readable, token < 2^53.
                if let Ok(Some((_, tok, _))) =
                    redis::cmd("LEASE.GET")
                        .arg(&key)
                        .query::<Option<(Vec<u8>, u64, u64)>>(c)
                {
                    assert!(tok > 0 && tok < (1 << 53));
                }
            }
            Err(_) => rejected += 1,
        }
        if i % 100 == 0 {
            ping(c);
        }
    }
    (cases.len(), accepted, rejected)
}

/// The encodings this build loads: the version-3 payload its own DUMP writes (of a lease
/// bound to a membership id, so the id's bytes are corrupted too; without one the bytes are
/// version 2's), and a version-1 payload as earlier builds wrote it.
#[test]
fn corrupt_restore_payloads_with_valid_crc_never_crash() {
    let mut s = start();
    let mut c = s.connection();
    let owner = "owner-with-some-length";
    let token: u64 = redis::cmd("LEASE.ACQUIRE")
        .arg(&["src", owner, "20000", "MEMBERSHIP", "0123456789abcdef"])
        .query(&mut c)
        .unwrap();
    let good: Vec<u8> = redis::cmd("DUMP").arg("src").query(&mut c).unwrap();
    let n = good.len();
    let (body, trailer) = good.split_at(n - 8);
    assert_eq!(
        crc64(body).to_le_bytes(),
        trailer,
        "our CRC64 matches the server's"
    );
    let id = u64::from_be_bytes(body[2..10].try_into().unwrap());
    assert_eq!(id & 1023, 3, "DUMP writes encoding version 3");
    let v1 = v1_held_body(
        &body[1..10],
        &body[body.len() - 2..],
        owner.as_bytes(),
        token,
        wall_ms() + 20000,
    );
    // The hand-built v1 payload is a valid one: it restores to the same holder.
    redis::cmd("RESTORE")
        .arg("v1")
        .arg(0)
        .arg(with_crc(&v1))
        .query::<()>(&mut c)
        .expect("a v1 payload restores");
    assert_eq!(
        get(&mut c, "v1").map(|g| (g.0, g.1)),
        Some((owner.as_bytes().to_vec(), token))
    );
    for (name, body, seed) in [
        ("v3", body, 0x5eed_1ea5e),
        ("v1", &v1[..], 0x0001_ea5e_0001),
    ] {
        let (tried, accepted, rejected) = restore_corruptions(&mut c, body, seed, name);
        println!(
            "hostile RESTORE payloads ({name}): {tried} tried, {accepted} accepted as valid leases, {rejected} rejected"
        );
        assert!(
            rejected > tried / 2,
            "{name}: most corruptions must be refused"
        );
    }
    assert!(
        !s.stdio().contains("internal error"),
        "no panic, even caught: {}",
        s.stdio()
    );
    ping(&mut c);
    s.assert_alive();
}

#[test]
fn restore_refuses_an_unknown_encoding_version() {
    let mut s = start();
    let mut c = s.connection();
    // Bound to a membership id: the one thing version 3 has that version 2 has not (an
    // unbound lease is the same bytes in both, and a v2 label on it rightly loads).
    let _: u64 = redis::cmd("LEASE.ACQUIRE")
        .arg(&["src", "a", "20000", "MEMBERSHIP", "0123456789abcdef"])
        .query(&mut c)
        .unwrap();
    let good: Vec<u8> = redis::cmd("DUMP").arg("src").query(&mut c).unwrap();
    let body = &good[..good.len() - 8];
    // The module id (after the type byte, as an RDB 64-bit length: 0x81 + 8 bytes big
    // endian) carries the encoding version in its low 10 bits.
    assert_eq!(body[1], 0x81, "module id encoding");
    let id = u64::from_be_bytes(body[2..10].try_into().unwrap());
    assert_eq!(id & 1023, 3, "encoding version 3");
    // A later version (4), and a v3 value labelled as v2, v1 or version 0: all refused.
    for ver in [4u64, 1023, 2, 1, 0] {
        let mut b = body.to_vec();
        b[2..10].copy_from_slice(&((id & !1023) | ver).to_be_bytes());
        let key = format!("v{ver}");
        let r: redis::RedisResult<()> = redis::cmd("RESTORE")
            .arg(&key)
            .arg(0)
            .arg(with_crc(&b))
            .query(&mut c);
        assert!(
            r.is_err(),
            "a v3 value labelled version {ver} must be refused"
        );
        assert_eq!(get(&mut c, &key), None);
    }
    ping(&mut c);
    s.assert_alive();
}

#[test]
fn swapdb_keeps_expiry_wake_ups_on_time() {
    let s = start();
    let mut c = s.connection();
    acquire(&mut c, "k", "a", 400).unwrap();
    redis::cmd("SWAPDB")
        .arg(0)
        .arg(1)
        .query::<()>(&mut c)
        .unwrap();
    // The lease now lives in db 1; a waiter there must be woken at its expiry, not never.
    redis::cmd("SELECT").arg(1).query::<()>(&mut c).unwrap();
    assert!(get(&mut c, "k").is_some(), "the lease moved to db 1");
    let t0 = Instant::now();
    let got: Option<u64> = acquire_blocking(&mut c, "k", "w", 1000, 5000);
    assert!(got.is_some(), "waiter in db 1 served");
    assert!(
        t0.elapsed() < Duration::from_millis(1000),
        "woken late: {:?}",
        t0.elapsed()
    );
}
