//! Compatibility with the build before the engine redesign (commit 9f3d1d5): an RDB it wrote
//! loads to the same leases, and the replication stream a primary sends is byte-for-byte what
//! that build sent (modulo tokens and wall-clock instants, which depend on when it runs).
//!
//! With `REDIS_LEASE_OLD_MODULE=/path/to/old/libredis_lease.so` two more tests run a
//! replica on the old build under a primary on this one and the other way round; without it
//! they return at once (building the old commit costs a full compile, so it is opt-in):
//!   git worktree add /tmp/old 9f3d1d5 && (cd /tmp/old && cargo build -p redis-lease)
//!   REDIS_LEASE_OLD_MODULE=/tmp/old/target/debug/libredis_lease.so cargo test -p redis-lease --test compat
//! Since the RDB encoding version 2 an old replica follows a new primary only through the
//! replication stream (unchanged): its full sync happens before any lease exists. A full
//! sync that carries leases cannot load on a build older than v2 (docs/deploy.md §6: upgrade
//! replicas first); that refusal is not exercised here.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Facts printed by tests/data/make-rdb-fixture.sh when the fixture was written.
const TIME_BEFORE_MS: u64 = 1_796_104_148_393;
const TIME_AFTER_MS: u64 = 1_796_104_148_839;
const LONG_TTL_MS: u64 = 2_147_483_647;

/// (db, key, owner while held, token, grants); owner `None` = saved free.
type Fixture = (i64, &'static str, Option<&'static [u8]>, u64, u64);
const FIXTURE: &[Fixture] = &[
    (0, "held", Some(b"holder-1"), 1_796_104_148_412_000, 1),
    (0, "released", None, 1_796_104_148_425_000, 1),
    (0, "expired", None, 1_796_104_148_517_000, 1),
    (0, "regranted", Some(b"second"), 1_796_104_148_661_000, 2),
    (
        0,
        "binary",
        Some(b"own\x00\xff\r\nx"),
        1_796_104_148_742_000,
        1,
    ),
    (3, "other", Some(b"db3-owner"), 1_796_104_148_769_000, 1),
];

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Would catch: any change of the RDB encoding (field order, widths, the held flag), of the
/// type name or version, or of how a loaded absolute expiry becomes a local deadline.
#[test]
fn rdb_written_by_the_previous_build_loads_to_the_same_leases() {
    let s = RedisServer::start(ServerOptions::default());
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/main-9f3d1d5.rdb");
    std::fs::copy(fixture, s.dir().join("dump.rdb")).expect("copy fixture");
    let mut c = s.connection();
    let _: () = redis::cmd("DEBUG")
        .arg("RELOAD")
        .arg("NOSAVE")
        .query(&mut c)
        .expect("DEBUG RELOAD NOSAVE of the fixture");
    let plain: String = redis::cmd("GET").arg("plain").query(&mut c).expect("get");
    assert_eq!(plain, "value");
    let now = wall_ms();
    for &(db, key, owner, token, grants) in FIXTURE {
        let _: () = redis::cmd("SELECT").arg(db).query(&mut c).expect("select");
        let info: Vec<redis::Value> = redis::cmd("LEASE.INFO")
            .arg(key)
            .query(&mut c)
            .expect("lease.info");
        let int = |i: usize| -> i64 { redis::from_redis_value(info[i].clone()).expect("int") };
        assert_eq!(int(9) as u64, token, "{key}: last_token");
        assert_eq!(int(11) as u64, grants, "{key}: grants");
        let Some(owner) = owner else {
            assert_eq!(int(1), 0, "{key}: saved free, loads free");
            continue;
        };
        // Held with a ~24.8-day lease at save time: live until then, free (same token
        // history) afterwards. Within a minute of the boundary nothing is asserted about
        // liveness.
        let earliest_end = TIME_BEFORE_MS + LONG_TTL_MS;
        let latest_end = TIME_AFTER_MS + LONG_TTL_MS;
        if now + 60_000 < earliest_end {
            let (o, t, pttl) = get(&mut c, key).unwrap_or_else(|| panic!("{key}: not live"));
            assert_eq!((o.as_slice(), t), (owner, token), "{key}");
            assert!(
                pttl + now >= earliest_end - 2_000 && pttl + now <= latest_end + 2_000,
                "{key}: pttl {pttl} at {now}"
            );
        } else if now > latest_end + 60_000 {
            assert_eq!(get(&mut c, key), None, "{key}: lapsed while on disk");
        }
    }
    // A loaded lease keeps issuing above its history.
    let _: () = redis::cmd("SELECT").arg(0).query(&mut c).expect("select");
    let t = acquire(&mut c, "released", "new-owner", 1000).expect("grant");
    assert!(t > FIXTURE[1].3);
}

/// `DUMP` of a free lease in encoding version 1, written by the build before the second
/// round of issue 16 (`55ce9f1`; every build before the v2 encoding wrote these bytes): type
/// id with version 1, token, grants, held = 0, RDB version, CRC. A held lease cannot be
/// pinned this way (its absolute expiry must lie within `lease.max-ttl` of the load, so any
/// fixed payload goes stale); its fields are the same code path after the held flag, and the
/// RDB fixture above checks that they load.
const FREE_DUMP_V1_55CE9F1: &str =
    "078195e6ac7adca9780102810006618f1a13682802010200000a0076ed262d38b4b128";

/// The same free lease as the builds from `90b8e73` until the membership id DUMPed it, in
/// encoding version 2: type id with version 2, one string buffer of 17 bytes (flags 0, token
/// and grants as u64 little endian), RDB version (10: Redis 7.0), CRC. Written with
/// COMPAT_PRINT=1 at the commit that introduced v2, and checked field by field there. This
/// build writes version 3, whose value bytes for a lease without a membership id are these
/// (only the encoding version in the type id, and so the CRC, differ).
const FREE_DUMP_V2: &str =
    "078195e6ac7adca978020511002868131a8f6106000100000000000000000a002f74f62f84d4cf38";

fn unhex(h: &str) -> Vec<u8> {
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Would catch: this build no longer loading a version-1 DUMP (every RESTORE payload taken
/// before the upgrade), loading it as another lease, or writing other v3 bytes for it
/// (layout, byte order, a lost grants count or token).
#[test]
fn dump_of_a_v1_free_lease_restores_and_dumps_as_v3() {
    let s = start();
    let mut c = s.connection();
    let payload = unhex(FREE_DUMP_V1_55CE9F1);
    let _: () = redis::cmd("RESTORE")
        .arg("free")
        .arg(0)
        .arg(&payload[..])
        .query(&mut c)
        .expect("RESTORE of the previous build's v1 payload");
    // It is the lease it claims to be: free, last token and grants as saved.
    assert_eq!(get(&mut c, "free"), None);
    let info: Vec<redis::Value> = redis::cmd("LEASE.INFO")
        .arg("free")
        .query(&mut c)
        .expect("lease.info");
    let int = |i: usize| -> u64 { redis::from_redis_value(info[i].clone()).expect("int") };
    let (token, grants) = (1_796_117_105_961_000u64, 1u64);
    assert_eq!((int(9), int(11)), (token, grants));
    // DUMP writes it in encoding version 3.
    let again: Vec<u8> = redis::cmd("DUMP").arg("free").query(&mut c).expect("DUMP");
    if std::env::var_os("COMPAT_PRINT").is_some() {
        let hex: String = again.iter().map(|b| format!("{b:02x}")).collect();
        println!("v3 DUMP: {hex}");
    }
    // Field by field first (so a change says what changed), then the pinned bytes.
    // [type 7][0x81 + module id, 8 bytes BE, low 10 bits = encver][opcode 5 = string]
    // [length 17][flags][token LE][grants LE][EOF 0][RDB version, 2 bytes][CRC, 8 bytes].
    assert_eq!(again[0], 7, "module type");
    let id = u64::from_be_bytes(again[2..10].try_into().expect("id"));
    assert_eq!(id & 1023, 3, "encoding version 3");
    assert_eq!(
        id & !1023,
        u64::from_be_bytes(payload[2..10].try_into().expect("id")) & !1023,
        "same type name"
    );
    assert_eq!(
        (again[10], again[11], again[12]),
        (5, 17, 0),
        "one string of 17, free"
    );
    assert_eq!(&again[13..21], &token.to_le_bytes(), "token");
    assert_eq!(&again[21..29], &grants.to_le_bytes(), "grants");
    assert_eq!(again[29], 0, "module value EOF");
    // The value's bytes after the type id (up to its EOF) are version 2's pinned ones: a
    // lease without a membership id is encoded alike. The trailer holds the server's RDB
    // version and the CRC, which covers the type id, so it differs.
    let pinned = unhex(FREE_DUMP_V2);
    let value = &again[..again.len() - 10];
    assert_eq!(value[0], pinned[0]);
    assert_eq!(value[10..], pinned[10..pinned.len() - 10], "v2 value bytes");
    // This build's payload restores to the same lease, and it keeps issuing above its history.
    let _: () = redis::cmd("RESTORE")
        .arg("free2")
        .arg(0)
        .arg(&again[..])
        .query(&mut c)
        .expect("RESTORE of the v3 payload");
    let info2: Vec<redis::Value> = redis::cmd("LEASE.INFO")
        .arg("free2")
        .query(&mut c)
        .expect("lease.info");
    assert_eq!(info2, info);
    let t = acquire(&mut c, "free", "someone", 1000).expect("grant");
    assert!(t > token, "{t}");
}

/// Would catch: this build no longer loading what the previous build (encoding version 2)
/// DUMPed or saved: every RESTORE payload and RDB taken before the membership id.
#[test]
fn dump_of_a_v2_free_lease_restores() {
    let s = start();
    let mut c = s.connection();
    let payload = unhex(FREE_DUMP_V2);
    let id = u64::from_be_bytes(payload[2..10].try_into().expect("id"));
    assert_eq!(id & 1023, 2, "the pinned payload is version 2");
    let _: () = redis::cmd("RESTORE")
        .arg("free")
        .arg(0)
        .arg(&payload[..])
        .query(&mut c)
        .expect("RESTORE of the previous build's v2 payload");
    let info: Vec<redis::Value> = redis::cmd("LEASE.INFO")
        .arg("free")
        .query(&mut c)
        .expect("lease.info");
    let int = |i: usize| -> u64 { redis::from_redis_value(info[i].clone()).expect("int") };
    assert_eq!((int(1), int(9), int(11)), (0, 1_796_117_105_961_000, 1));
    assert_eq!(info[13], redis::Value::Nil, "bound to no membership");
    let t = acquire(&mut c, "free", "someone", 1000).expect("grant");
    assert!(t > 1_796_117_105_961_000, "{t}");
}

/// Would catch: a membership id lost or misplaced by DUMP/RESTORE (the version-3 layout of
/// lease-core/src/rdb.rs: flags bit 1, the id as u64 little endian after the grants).
#[test]
fn dump_of_a_bound_lease_carries_its_membership_id() {
    // Uncompressed, so the bytes are the layout (Redis LZF-compresses strings above 20 bytes).
    let s = RedisServer::start(ServerOptions::default().extra_args(&["--rdbcompression", "no"]));
    let mut c = s.connection();
    let m = "0123456789abcdef";
    let r: i64 = redis::cmd("LEASE.MEMBERSHIP")
        .arg(&["k", "NONE", m])
        .query(&mut c)
        .expect("bind");
    assert_eq!(r, 1);
    let dump: Vec<u8> = redis::cmd("DUMP").arg("k").query(&mut c).expect("DUMP");
    let id = u64::from_be_bytes(dump[2..10].try_into().expect("id"));
    assert_eq!(id & 1023, 3, "encoding version 3");
    // [type][id 9][opcode 5][length 25][flags 2][token 0][grants 0][membership LE][EOF]
    assert_eq!((dump[10], dump[11], dump[12]), (5, 25, 2), "free, bound");
    assert_eq!(&dump[13..29], &[0u8; 16], "token, grants");
    assert_eq!(&dump[29..37], &0x0123_4567_89ab_cdef_u64.to_le_bytes());
    assert_eq!(dump[37], 0, "module value EOF");
    let _: () = redis::cmd("RESTORE")
        .arg("k2")
        .arg(0)
        .arg(&dump[..])
        .query(&mut c)
        .expect("RESTORE");
    let info: Vec<redis::Value> = redis::cmd("LEASE.INFO").arg("k2").query(&mut c).unwrap();
    assert_eq!(info[13], redis::Value::BulkString(m.as_bytes().to_vec()));
}

// ---------------------------------------------------------------------------------------
// The replication stream, read as a replica would: `PSYNC ? -1`, skip the RDB, parse RESP.

fn read_line(r: &mut BufReader<TcpStream>) -> Vec<u8> {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line).expect("read line");
    while matches!(line.last(), Some(b'\n' | b'\r')) {
        line.pop();
    }
    line
}

fn read_command(r: &mut BufReader<TcpStream>) -> Vec<Vec<u8>> {
    let head = read_line(r);
    let n: usize = std::str::from_utf8(&head[1..])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an array header: {head:?}"));
    (0..n)
        .map(|_| {
            let h = read_line(r);
            let len: usize = std::str::from_utf8(&h[1..])
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("not a bulk header: {h:?}"));
            let mut buf = vec![0u8; len + 2];
            r.read_exact(&mut buf).expect("bulk");
            buf.truncate(len);
            buf
        })
        .collect()
}

struct FakeReplica(BufReader<TcpStream>);

impl FakeReplica {
    fn attach(primary: &RedisServer) -> FakeReplica {
        let mut s = TcpStream::connect(("127.0.0.1", primary.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        // No `REPLCONF capa eof`: the primary sends a disk-based RDB with a length prefix.
        s.write_all(b"PSYNC ? -1\r\n").expect("psync");
        let mut r = BufReader::new(s);
        let full = read_line(&mut r);
        assert!(full.starts_with(b"+FULLRESYNC"), "{full:?}");
        let len = loop {
            let l = read_line(&mut r);
            if l.is_empty() {
                continue; // keep-alive newlines while the RDB is written
            }
            assert_eq!(l[0], b'$', "{l:?}");
            break std::str::from_utf8(&l[1..])
                .ok()
                .and_then(|s| s.parse::<usize>().ok())
                .expect("rdb length");
        };
        let mut rdb = vec![0u8; len];
        r.read_exact(&mut rdb).expect("rdb");
        FakeReplica(r)
    }

    /// Commands up to (not including) `SET <end_key> ...`, without PINGs.
    fn until(&mut self, end_key: &[u8]) -> Vec<Vec<Vec<u8>>> {
        let mut out = vec![];
        loop {
            let c = read_command(&mut self.0);
            if c[0].eq_ignore_ascii_case(b"PING") {
                continue;
            }
            if c[0].eq_ignore_ascii_case(b"SET") && c.get(1).map(Vec::as_slice) == Some(end_key) {
                return out;
            }
            out.push(c);
        }
    }
}

/// Tokens become T1, T2, ... in order of first appearance and wall instants become W, so
/// two runs at different times compare equal; everything else is kept byte for byte.
fn normalize(cmds: &[Vec<Vec<u8>>]) -> Vec<String> {
    let mut tokens: Vec<Vec<u8>> = vec![];
    let mut tok = |t: &[u8]| {
        let i = tokens.iter().position(|x| x == t).unwrap_or_else(|| {
            tokens.push(t.to_vec());
            tokens.len() - 1
        });
        format!("T{}", i + 1)
    };
    cmds.iter()
        .map(|c| {
            let apply = c[0].eq_ignore_ascii_case(b"LEASE.APPLY");
            let kind = c.get(2).map(|k| k.to_ascii_uppercase());
            let words: Vec<String> = c
                .iter()
                .enumerate()
                .map(|(i, a)| match (apply, kind.as_deref(), i) {
                    (true, Some(b"HOLD"), 4) | (true, Some(b"FREE"), 3) => tok(a),
                    (true, Some(b"HOLD"), 5) => "W".to_string(),
                    _ => a.escape_ascii().to_string(),
                })
                .collect();
            words.join(" ")
        })
        .collect()
}

/// What the build at 9f3d1d5 sent for the sequence below (recorded with
/// `REDIS_LEASE_MODULE=<old .so> COMPAT_PRINT=1 cargo test --test compat stream`).
const EXPECTED_STREAM: &[&str] = &[
    "SELECT 0",
    "LEASE.APPLY k HOLD alpha T1 W",
    "LEASE.APPLY k HOLD alpha T1 W",
    "LEASE.APPLY k HOLD alpha T1 W",
    "LEASE.APPLY k FREE T1",
    "LEASE.APPLY k HOLD beta T2 W",
    "LEASE.APPLY k FREE T2",
    "LEASE.APPLY b HOLD o\\x00\\xff\\r\\n T3 W",
    "SET fenced v",
    "LEASE.APPLY k HOLD gamma T4 W",
    "LEASE.APPLY k FREE T4",
    "LEASE.APPLY k HOLD delta T5 W",
];

/// Would catch: an effect replicated in another form, order or grouping (MULTI/EXEC), an
/// effect that is no longer replicated (or replicated by a command that changed nothing),
/// a different encoding of a binary owner.
#[test]
fn replication_stream_is_byte_for_byte_the_previous_builds() {
    let p = RedisServer::start(primary_opts(&["lease.grace-ms", "0"]));
    let mut fake = FakeReplica::attach(&p);
    let mut c = p.connection();
    let t1 = acquire(&mut c, "k", "alpha", 5000).expect("grant");
    assert_eq!(acquire(&mut c, "k", "alpha", 9000), Some(t1)); // refresh
    assert_eq!(renew(&mut c, "k", "alpha", t1, 7000), 1);
    assert_eq!(renew(&mut c, "k", "alpha", t1 + 1, 7000), 0); // nothing replicated
    assert_eq!(acquire(&mut c, "k", "other", 7000), None); // busy: nothing replicated
    assert_eq!(release(&mut c, "k", "alpha", t1), 1);
    assert_eq!(release(&mut c, "k", "alpha", t1), 0);
    // Expiry found by the timer.
    acquire(&mut c, "k", "beta", 50).expect("grant");
    wait_for(Duration::from_secs(5), || {
        (info_field(&mut c, "expired") == 1).then_some(())
    })
    .expect("timer expiry");
    // Binary owner, then a fenced write.
    let owner: &[u8] = b"o\x00\xff\r\n";
    let t3: u64 = redis::cmd("LEASE.ACQUIRE")
        .arg("b")
        .arg(owner)
        .arg(1000)
        .query(&mut c)
        .expect("binary grant");
    let _: () = redis::cmd("LEASE.FENCE")
        .arg("b")
        .arg(t3)
        .arg("SET")
        .arg("fenced")
        .arg("v")
        .query(&mut c)
        .expect("fenced set");
    let e = err_of(&mut c, &["LEASE.FENCE", "b", &(t3 + 1).to_string()]);
    assert!(e.starts_with("FENCED"), "{e}");
    // Hand-over to a blocked acquirer.
    let t4 = acquire(&mut c, "k", "gamma", 10_000).expect("grant");
    let port = p.port;
    let waiter = std::thread::spawn(move || {
        let mut w = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .and_then(|c| c.get_connection())
            .expect("waiter connection");
        acquire_blocking(&mut w, "k", "delta", 1000, 5000)
    });
    wait_for(Duration::from_secs(5), || {
        (info_field(&mut c, "blocked_clients") == 1).then_some(())
    })
    .expect("waiter blocked");
    assert_eq!(release(&mut c, "k", "gamma", t4), 1);
    assert!(waiter.join().expect("waiter").is_some());
    let _: () = redis::cmd("SET")
        .arg("end")
        .arg(1)
        .query(&mut c)
        .expect("set");

    let got = normalize(&fake.until(b"end"));
    if std::env::var_os("COMPAT_PRINT").is_some() {
        for l in &got {
            println!("    {l:?},");
        }
    }
    assert_eq!(got, EXPECTED_STREAM);
}

// ---------------------------------------------------------------------------------------
// Mixed versions (opt-in, see the module doc).

fn old_module() -> Option<String> {
    std::env::var("REDIS_LEASE_OLD_MODULE").ok()
}

fn opts_with_module(so: &str, extra: &[&str]) -> ServerOptions {
    let mut o = ServerOptions::default()
        .extra_args(&["--loadmodule", so, "lease.grace-ms", "0"])
        .extra_args(extra);
    o.load_module = false;
    o
}

fn mixed_pair(primary_so: &str, replica_so: &str) {
    let p = RedisServer::start(opts_with_module(
        primary_so,
        &["--repl-diskless-sync-delay", "0"],
    ));
    let port = p.port.to_string();
    let r = RedisServer::start(opts_with_module(
        replica_so,
        &["--replicaof", "127.0.0.1", &port],
    ));
    wait_link_up(&p, &r);
    let (mut pc, mut rc) = (p.connection(), r.connection());
    let t = acquire(&mut pc, "k", "a", 5000).expect("grant");
    assert_eq!(renew(&mut pc, "k", "a", t, 6000), 1);
    acquire(&mut pc, "x", "short", 50).expect("grant");
    wait_for(Duration::from_secs(5), || {
        (info_field(&mut pc, "expired") == 1).then_some(())
    })
    .expect("expiry");
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);
    for key in ["k", "x"] {
        assert_eq!(digest(&mut pc, key), digest(&mut rc, key), "{key}");
        assert_eq!(lease_info(&mut pc, key), lease_info(&mut rc, key), "{key}");
    }
    assert_eq!(release(&mut pc, "k", "a", t), 1);
    assert_eq!(wait_acks(&mut pc, 1, 2000), 1);
    assert_eq!(lease_info(&mut pc, "k"), lease_info(&mut rc, "k"));
    assert_eq!(get(&mut rc, "k"), None);
}

#[test]
fn old_replica_follows_new_primary() {
    let Some(old) = old_module() else { return };
    let new = testsupport::module_path();
    mixed_pair(&new.to_string_lossy(), &old);
}

#[test]
fn new_replica_follows_old_primary() {
    let Some(old) = old_module() else { return };
    let new = testsupport::module_path();
    mixed_pair(&old, &new.to_string_lossy());
}
