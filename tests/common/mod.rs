//! Helpers shared by the module's integration tests. Every server comes from the one
//! `testsupport::RedisServer` guard.
#![allow(dead_code)]

use std::time::{Duration, Instant};
pub use testsupport::{RedisServer, ServerOptions};

pub type Con = redis::Connection;

pub fn start() -> RedisServer {
    RedisServer::start(ServerOptions::default())
}

pub fn acquire(con: &mut Con, key: &str, owner: &str, ttl: u64) -> Option<u64> {
    redis::cmd("LEASE.ACQUIRE")
        .arg(key)
        .arg(owner)
        .arg(ttl)
        .query(con)
        .expect("acquire")
}

/// `LEASE.ACQUIRE key owner ttl BLOCK timeout` on this connection (blocks this thread).
pub fn acquire_blocking(
    con: &mut Con,
    key: &str,
    owner: &str,
    ttl: u64,
    timeout: u64,
) -> Option<u64> {
    redis::cmd("LEASE.ACQUIRE")
        .arg(key)
        .arg(owner)
        .arg(ttl)
        .arg("BLOCK")
        .arg(timeout)
        .query(con)
        .expect("blocking acquire")
}

pub fn renew(con: &mut Con, key: &str, owner: &str, token: u64, ttl: u64) -> i64 {
    redis::cmd("LEASE.RENEW")
        .arg(key)
        .arg(owner)
        .arg(token)
        .arg(ttl)
        .query(con)
        .expect("renew")
}

pub fn release(con: &mut Con, key: &str, owner: &str, token: u64) -> i64 {
    redis::cmd("LEASE.RELEASE")
        .arg(key)
        .arg(owner)
        .arg(token)
        .query(con)
        .expect("release")
}

/// Tiny deterministic PRNG (xorshift) so a randomized test names its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

pub fn try_cmd<T: redis::FromRedisValue>(con: &mut Con, args: &[&[u8]]) -> redis::RedisResult<T> {
    let mut c = redis::cmd(std::str::from_utf8(args[0]).expect("ascii command"));
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(con)
}

/// The error text of a command that must fail (code + detail, as the server sent it).
pub fn err_of(con: &mut Con, args: &[&str]) -> String {
    let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    match try_cmd::<redis::Value>(con, &a) {
        Ok(v) => panic!("{args:?} should fail, got {v:?}"),
        Err(e) => format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")),
    }
}

/// [owner, token, pttl] or None.
pub fn get(con: &mut Con, key: &str) -> Option<(Vec<u8>, u64, u64)> {
    redis::cmd("LEASE.GET").arg(key).query(con).expect("get")
}

pub fn info_field(con: &mut Con, field: &str) -> i64 {
    let info: String = redis::cmd("INFO").arg("lease").query(con).expect("info");
    let prefix = format!("lease_{field}:");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {info}"))
}

/// Polls `f` until it returns Some or `limit` passes (bounded wait, never a fixed sleep).
pub fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What the server holds about a key apart from the running clock (digest of owner and
/// token, last token, grant count), for "bad input changes nothing" checks.
pub fn snapshot(con: &mut Con, key: &str) -> (String, Vec<redis::Value>) {
    let digest: Vec<String> = redis::cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg(key)
        .query(con)
        .expect("digest");
    let info: Option<Vec<redis::Value>> =
        redis::cmd("LEASE.INFO").arg(key).query(con).expect("info");
    let mut info = info.unwrap_or_default();
    // drop "pttl" and its value (positions 6, 7): it moves with time
    if info.len() >= 8 {
        info.drain(6..8);
    }
    (digest.concat(), info)
}

pub fn ping(con: &mut Con) {
    let p: String = redis::cmd("PING").query(con).expect("server must stay up");
    assert_eq!(p, "PONG");
}

// ---------------------------------------------------------------------------------------
// Replication helpers (tests/replication.rs, tests/failover.rs, tests/cluster.rs)

/// `INFO <section>` as text.
pub fn info_text(con: &mut Con, section: &str) -> String {
    redis::cmd("INFO").arg(section).query(con).expect("info")
}

/// One `name:value` field of an INFO text.
pub fn info_value(info: &str, name: &str) -> Option<String> {
    let prefix = format!("{name}:");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().to_string())
}

/// Options for a primary that serves replicas: the full sync starts at once (Redis' default
/// diskless sync waits 5 s for more replicas to join).
pub fn primary_opts(module_args: &[&str]) -> ServerOptions {
    ServerOptions::default()
        .module_args(module_args)
        .extra_args(&["--repl-diskless-sync-delay", "0"])
}

/// Starts a replica of `primary` and waits (bounded) until its link is up and the primary
/// counts it as online.
pub fn start_replica(primary: &RedisServer, module_args: &[&str]) -> RedisServer {
    let port = primary.port.to_string();
    let r = RedisServer::start(
        ServerOptions::default()
            .module_args(module_args)
            .extra_args(&["--replicaof", "127.0.0.1", &port]),
    );
    wait_link_up(primary, &r);
    r
}

/// Bounded wait until `replica` has finished its sync with `primary`.
pub fn wait_link_up(primary: &RedisServer, replica: &RedisServer) {
    let mut rc = replica.connection();
    let mut pc = primary.connection();
    let rport = format!("port={},state=online", replica.port);
    wait_for(Duration::from_secs(15), || {
        let ri = info_text(&mut rc, "replication");
        let pi = info_text(&mut pc, "replication");
        (info_value(&ri, "master_link_status").as_deref() == Some("up") && pi.contains(&rport))
            .then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "replica did not sync; replica log:\n{}\nprimary log:\n{}",
            replica.log(),
            primary.log()
        )
    });
}

/// `WAIT n timeout_ms`: how many replicas acknowledged every write so far.
pub fn wait_acks(con: &mut Con, n: u64, timeout_ms: u64) -> i64 {
    redis::cmd("WAIT")
        .arg(n)
        .arg(timeout_ms)
        .query(con)
        .expect("WAIT")
}

/// `DEBUG DIGEST-VALUE key` (owner, token, held flag; not the running clock).
pub fn digest(con: &mut Con, key: &str) -> String {
    let d: Vec<String> = redis::cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg(key)
        .query(con)
        .expect("digest");
    d.concat()
}

/// `LEASE.INFO key` as (live, last_token, grants), or None for no key.
pub fn lease_info(con: &mut Con, key: &str) -> Option<(i64, u64, u64)> {
    let v: Option<Vec<redis::Value>> = redis::cmd("LEASE.INFO")
        .arg(key)
        .query(con)
        .expect("lease.info");
    let v = v?;
    let int = |i: usize| -> i64 { redis::from_redis_value(v[i].clone()).expect("int field") };
    Some((int(1), int(9) as u64, int(11) as u64))
}

/// A `MONITOR` feed read on a background thread; `text()` is everything seen so far.
pub struct Monitor {
    seen: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Monitor {
    pub fn start(server: &RedisServer) -> Monitor {
        use std::io::{BufRead, BufReader, Write};
        let mut sock =
            std::net::TcpStream::connect(("127.0.0.1", server.port)).expect("monitor connect");
        sock.write_all(b"MONITOR\r\n").expect("monitor");
        let mut reader = BufReader::new(sock);
        let mut first = String::new();
        reader.read_line(&mut first).expect("monitor reply");
        assert_eq!(first.trim_end(), "+OK", "MONITOR refused");
        let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let out = seen.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            // Ends when the server goes away (the guard kills it at the end of the test).
            while matches!(reader.read_line(&mut line), Ok(n) if n > 0) {
                out.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push_str(&line);
                line.clear();
            }
        });
        Monitor { seen }
    }

    pub fn text(&self) -> String {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Bounded wait until the feed contains `needle`; panics with the feed otherwise.
    pub fn wait_for(&self, needle: &str) {
        if wait_for(Duration::from_secs(5), || {
            self.text().contains(needle).then_some(())
        })
        .is_none()
        {
            panic!("MONITOR never showed {needle}; feed:\n{}", self.text());
        }
    }
}
