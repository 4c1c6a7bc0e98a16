//! The one clock every process of a run shares: `CLOCK_MONOTONIC` in nanoseconds.
//!
//! All processes of a run live on one machine, so their `CLOCK_MONOTONIC` readings are
//! directly comparable (it is a system-wide clock, unlike a per-process `Instant`). Wall
//! clocks are never used for ordering: a wall-clock step (one of our faults) would reorder
//! the histories.

use std::time::{Duration, Instant};

/// Nanoseconds on the real `CLOCK_MONOTONIC`, read by a raw `clock_gettime` system call.
///
/// Not through libc: `--elector-clock-rate` runs electors under libfaketime, which replaces
/// libc's `clock_gettime` (CLOCK_MONOTONIC included) by a clock running at another rate, and
/// every history must stay on the real clock for the checker to compare processes. A raw
/// syscall bypasses both libc and the vDSO, so libfaketime cannot reach it; it costs a few
/// hundred ns more than the vDSO, nothing next to a network round trip.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the syscall writes into the timespec we own; CLOCK_MONOTONIC always exists
    // on Linux, so the call cannot fail with a valid pointer.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clock_gettime,
            libc::CLOCK_MONOTONIC,
            &mut ts as *mut libc::timespec,
        )
    };
    debug_assert_eq!(rc, 0);
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// The first (`Instant`, real ns) pair of this process: the origin of [`clock_rate`].
static ORIGIN: std::sync::OnceLock<(Instant, u64)> = std::sync::OnceLock::new();

/// Record the origin of [`clock_rate`]; call it first thing in a process whose clock may be
/// faked (the elector). Later calls do nothing.
pub fn init() {
    ORIGIN.get_or_init(|| (Instant::now(), mono_ns()));
}

/// How fast this process's `Instant` runs against the real clock, measured since [`init`]
/// (1.0 until 100 ms have passed, or without `init`). Exactly 1 unless the process runs
/// under libfaketime with a rate (`--elector-clock-rate`).
pub fn clock_rate() -> f64 {
    let Some((i0, r0)) = ORIGIN.get() else {
        return 1.0;
    };
    let real = mono_ns().saturating_sub(*r0);
    if real < 100_000_000 {
        return 1.0;
    }
    i0.elapsed().as_nanos() as f64 / real as f64
}

/// Converts a future `Instant` (from a library that speaks `std`/`tokio` instants) to the
/// shared clock: now + how far away it is, on the real clock. `Instant` is `CLOCK_MONOTONIC`
/// on Linux, so normally the only error is the few ns between the two reads; under a faked
/// clock rate R the distance in `Instant` time takes 1/R as long in real time, so it is
/// divided by the measured rate: the history then says when the elector will *really*
/// reach its deadline, which is what the checker compares with other processes' events.
pub fn instant_to_ns(when: Instant) -> u64 {
    let now_i = Instant::now();
    let now_ns = mono_ns();
    let rate = clock_rate();
    if when >= now_i {
        now_ns + (when.duration_since(now_i).as_nanos() as f64 / rate) as u64
    } else {
        now_ns.saturating_sub((now_i.duration_since(when).as_nanos() as f64 / rate) as u64)
    }
}

pub fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

pub fn dur_ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}
