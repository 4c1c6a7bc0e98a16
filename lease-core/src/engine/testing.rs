//! Shared fixtures of the engine's table tests: a clock, a node, and `run`, which calls the
//! engine the way the executor does and returns what a test asserts on.

use super::{handle, Call, Outcome, Reply, Store};
use crate::node::Node;
use crate::request::Request;
use crate::state::{Acquire, Lease, Now};

pub const WALL0: u64 = 1_800_000_000_000; // 2027, ms

/// `ms` after an arbitrary origin on both clocks.
pub fn at(ms: u64) -> Now {
    Now {
        mono_us: 5_000_000 + ms * 1000,
        wall_ms: WALL0 + ms,
    }
}

/// Monotonic deadline of a lease that was given `ttl` ms at `t` ms.
pub fn deadline(t: u64, ttl: u64) -> u64 {
    at(t).mono_us + ttl * 1000
}

/// A node with grace disabled (`lease.grace-ms 0`), defaults otherwise.
pub fn node() -> Node {
    Node::default().with_grace_ms(0)
}

impl Node {
    pub fn with_grace_ms(mut self, ms: i64) -> Node {
        self.config.grace_ms = ms;
        self
    }
}

pub fn client() -> Call {
    Call {
        can_block: true,
        replicas_ok: true,
        ..Call::default()
    }
}

/// A lease held by `owner` since `t` for `ttl` ms (granted by the engine itself).
pub fn held_by(owner: &str, t: u64, ttl: u64) -> (Lease, u64) {
    let mut l = Lease::new();
    match l.acquire(owner.as_bytes(), ttl, at(t), 0, 0) {
        Ok(Acquire::Granted { token }) => (l, token),
        other => panic!("fixture grant failed: {other:?}"),
    }
}

/// One engine call; the lease after the call (created or changed in place) comes back.
pub fn run(
    node: &Node,
    lease: Option<Lease>,
    now: Now,
    call: Call,
    req: Request<'_>,
) -> (Reply, Option<Lease>, Vec<super::Effect>) {
    let mut lease = lease;
    let Outcome {
        reply,
        store,
        effects,
    } = handle(node, lease.as_mut(), now, call, &req);
    if let Store::Create(l) = store {
        assert!(lease.is_none(), "engine created a key that exists");
        lease = Some(l);
    }
    (reply, lease, effects)
}
