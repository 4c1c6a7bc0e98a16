//! `INFO lease` counters, bumped only by the executor (`Effect::Count`).

use crate::lease::engine::Counter;
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTS: [AtomicU64; Counter::ALL.len()] = [const { AtomicU64::new(0) }; Counter::ALL.len()];

pub fn bump(c: Counter) {
    COUNTS[c as usize].fetch_add(1, Ordering::Relaxed);
}

/// (name, value) in `INFO` order.
pub fn fields() -> Vec<(&'static str, u64)> {
    Counter::ALL
        .iter()
        .map(|&c| (c.name(), COUNTS[c as usize].load(Ordering::Relaxed)))
        .collect()
}
