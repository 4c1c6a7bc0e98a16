//! This process' node state: the token watermark and the start of the grace period, kept in
//! atomics (Redis calls us on its main thread only) and handed to the engine as a plain
//! `crate::lease::node::Node` together with the configuration in force.

use crate::lease::node::Node;
use crate::lease::Now;
use crate::module::config;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// See `Node::token_watermark`.
static TOKEN_WATERMARK: AtomicU64 = AtomicU64::new(0);
/// See `Node::grace_started_mono_us`.
static GRACE_START_US: AtomicU64 = AtomicU64::new(0);
/// See `Node::grace_floor_ms`.
static GRACE_FLOOR_MS: AtomicU64 = AtomicU64::new(0);
/// See `Node::grace_after_lost_state`.
static GRACE_AFTER_LOST_STATE: AtomicBool = AtomicBool::new(false);
/// See `Node::grace_over`.
static GRACE_OVER: AtomicBool = AtomicBool::new(false);

pub fn snapshot() -> Node {
    Node {
        config: config::snapshot(),
        token_watermark: TOKEN_WATERMARK.load(Ordering::Relaxed),
        grace_started_mono_us: GRACE_START_US.load(Ordering::Relaxed),
        grace_floor_ms: GRACE_FLOOR_MS.load(Ordering::Relaxed),
        grace_after_lost_state: GRACE_AFTER_LOST_STATE.load(Ordering::Relaxed),
        grace_over: GRACE_OVER.load(Ordering::Relaxed),
    }
}

/// The grace has ended (`Node::end_grace`); true if it was running until now.
pub fn end_grace() -> bool {
    !GRACE_OVER.swap(true, Ordering::Relaxed)
}

pub fn observe_token(token: u64) {
    TOKEN_WATERMARK.fetch_max(token, Ordering::Relaxed);
}

/// Records a new grace start (see `Node::start_grace` for why; `lost_state`:
/// `Node::start_grace_for_lost_state`).
pub fn set_grace_start(now: Now, lost_state: bool) {
    let n = if lost_state {
        snapshot().start_grace_for_lost_state(now)
    } else {
        snapshot().start_grace(now)
    };
    GRACE_START_US.store(n.grace_started_mono_us, Ordering::Relaxed);
    GRACE_FLOOR_MS.store(n.grace_floor_ms, Ordering::Relaxed);
    GRACE_AFTER_LOST_STATE.store(n.grace_after_lost_state, Ordering::Relaxed);
    GRACE_OVER.store(n.grace_over, Ordering::Relaxed);
}

pub fn grace_ms_left(now: Now) -> u64 {
    snapshot().grace_ms_left(now)
}
