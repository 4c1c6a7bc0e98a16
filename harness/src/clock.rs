//! The one clock every process of a run shares: `CLOCK_MONOTONIC` in nanoseconds.
//!
//! All processes of a run live on one machine, so their `CLOCK_MONOTONIC` readings are
//! directly comparable (it is a system-wide clock, unlike a per-process `Instant`). Wall
//! clocks are never used for ordering: a wall-clock step (one of our faults) would reorder
//! the histories.

use std::time::{Duration, Instant};

/// Nanoseconds on `CLOCK_MONOTONIC`.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists
    // on Linux, so the call cannot fail with a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0);
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Converts a future `Instant` (from a library that speaks `std`/`tokio` instants) to the
/// shared clock: now + how far away it is. `Instant` is `CLOCK_MONOTONIC` on Linux, so the
/// only error is the few ns between the two reads.
pub fn instant_to_ns(when: Instant) -> u64 {
    let now_i = Instant::now();
    let now_ns = mono_ns();
    if when >= now_i {
        now_ns + when.duration_since(now_i).as_nanos() as u64
    } else {
        now_ns.saturating_sub(now_i.duration_since(when).as_nanos() as u64)
    }
}

pub fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

pub fn dur_ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}
