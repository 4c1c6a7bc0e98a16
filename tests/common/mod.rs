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
