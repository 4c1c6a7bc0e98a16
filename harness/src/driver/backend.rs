//! The coordination service under test, as the driver sees it: N nodes that electors reach
//! through their own proxy to each (or directly, [`Backend::direct_url`]), and what a fault
//! can do to one node. Redis (replica, Sentinel, quorum of N primaries) is
//! `backend_redis.rs`, one etcd or ZooKeeper server `backend_store.rs`; what only Redis can do (replication failovers, `CLIENT PAUSE`) is
//! reached through [`Backend::redis`].

use super::backend_redis::RedisBackend;
use std::net::SocketAddr;

pub(crate) trait Backend {
    /// How many nodes electors are given (`--redis` once per node, in this order); 0 when they
    /// find the service themselves ([`Backend::direct_url`]).
    fn nodes(&self) -> usize;

    /// Node `k`'s name in fault records (`primary` for a single primary).
    fn node_name(&self, k: usize) -> String;

    /// Where node `k` listens now: the target of every elector's proxy for it.
    fn node_addr(&self, k: usize) -> SocketAddr;

    /// The URL an elector is given for a node reached at `addr` (its proxy).
    fn node_url(&self, addr: SocketAddr) -> String {
        format!("redis://{addr}/")
    }

    /// The one URL every elector is given when there are no per-node proxies (Sentinel).
    fn direct_url(&self) -> Option<String> {
        None
    }

    /// The ports of every server electors reach directly (Sentinel: the data nodes and the
    /// Sentinels; the `--netns` faults drop them on an elector's link). Empty with proxies.
    fn direct_ports(&self) -> Vec<u16> {
        vec![]
    }

    /// kill -9 node `k`; its data stays for [`Backend::restart`].
    fn kill(&mut self, k: usize);

    /// Remove node `k`'s persisted data (after [`Backend::kill`]): a restart without it.
    fn wipe(&mut self, k: usize);

    /// Start node `k` again on its port with whatever data it kept; returns once it answers.
    fn restart(&mut self, k: usize) -> Result<(), String>;

    /// What a restart keeps, for the fault record (`kill -9, <this>`).
    fn kept(&self) -> &'static str {
        "AOF everysec kept"
    }

    /// Send `sig` (SIGSTOP, SIGCONT) to node `k`'s process.
    fn signal(&self, k: usize, sig: i32);

    /// Does node `k` answer a request now (the "backend answers again" probe)?
    fn answers(&self, k: usize) -> bool;

    /// Step node `k`'s wall clock to `offset_s` from its base (0 = back); `Err(reason)` where
    /// this node's clock cannot be set (not under libfaketime, or a runtime libfaketime
    /// does not reach).
    fn set_clock(&self, k: usize, offset_s: f64) -> Result<(), String>;

    /// The last lines of node `k`'s log, for errors.
    fn log(&self, k: usize) -> String;

    /// The Redis backend, for the faults only Redis has.
    fn redis(&mut self) -> Option<&mut RedisBackend> {
        None
    }
}

/// `backend.redis()` or the one-line reason a Redis-only fault cannot run.
pub(crate) fn redis_of(b: &mut dyn Backend) -> Result<&mut RedisBackend, String> {
    b.redis()
        .ok_or_else(|| "this fault needs a Redis backend".to_string())
}
