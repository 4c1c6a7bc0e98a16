//! This process' node state: the token watermark and the start of the grace period, kept in
//! atomics (Redis calls us on its main thread only) and handed to the engine as a plain
//! `crate::lease::node::Node` together with the configuration in force.

use crate::lease::node::Node;
use crate::lease::Now;
use crate::module::config;
use std::sync::atomic::{AtomicU64, Ordering};

/// See `Node::token_watermark`.
static TOKEN_WATERMARK: AtomicU64 = AtomicU64::new(0);
/// See `Node::grace_started_mono_us`.
static GRACE_START_US: AtomicU64 = AtomicU64::new(0);
/// See `Node::grace_max_ttl_ms`.
static GRACE_MAX_TTL_MS: AtomicU64 = AtomicU64::new(0);

pub fn snapshot() -> Node {
    Node {
        config: config::snapshot(),
        token_watermark: TOKEN_WATERMARK.load(Ordering::Relaxed),
        grace_started_mono_us: GRACE_START_US.load(Ordering::Relaxed),
        grace_max_ttl_ms: GRACE_MAX_TTL_MS.load(Ordering::Relaxed),
    }
}

pub fn observe_token(token: u64) {
    TOKEN_WATERMARK.fetch_max(token, Ordering::Relaxed);
}

/// Records a new grace start (see `Node::start_grace` for why).
pub fn set_grace_start(now: Now) {
    let n = snapshot().start_grace(now);
    GRACE_START_US.store(n.grace_started_mono_us, Ordering::Relaxed);
    GRACE_MAX_TTL_MS.store(n.grace_max_ttl_ms, Ordering::Relaxed);
}

pub fn grace_ms_left(now: Now) -> u64 {
    snapshot().grace_ms_left(now)
}
