//! The few raw Redis module calls the crate does not wrap (or wraps with a `CString::new(..)
//! .unwrap()` that would panic on client bytes containing NUL). Every function here is
//! binary-safe: client bytes travel as (pointer, length) or as `RedisModuleString`s.

use crate::lease::engine::Event;
use crate::lease::{Apply, Now};
use redis_module::raw;
use std::os::raw::{c_char, c_int, c_longlong};

/// Both server clocks, read once per command. CLOCK_MONOTONIC is the clock that judges
/// expiry (SPEC §5); CLOCK_REALTIME only converts deadlines that leave the process.
pub fn now() -> Now {
    Now {
        mono_us: clock_us(libc::CLOCK_MONOTONIC),
        wall_ms: clock_us(libc::CLOCK_REALTIME) / 1000,
    }
}

/// Wall clock minus monotonic clock, µs: constant while nobody steps the wall clock (NTP
/// slewing moves it by at most 500 ppm), so a jump of it between two reads is a step.
/// `None` when the thread was descheduled between the reads (the pair would then differ by
/// the preemption, not by a step), so a busy machine does not report phantom steps.
pub fn wall_minus_mono_us() -> Option<i64> {
    let before = clock_us(libc::CLOCK_MONOTONIC) as i64;
    let wall = clock_us(libc::CLOCK_REALTIME) as i64;
    let after = clock_us(libc::CLOCK_MONOTONIC) as i64;
    (after - before <= 200).then(|| wall - before - (after - before) / 2)
}

fn clock_us(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; both clocks always exist on Linux.
    unsafe {
        libc::clock_gettime(clock, &mut ts);
    }
    (ts.tv_sec.max(0) as u64)
        .saturating_mul(1_000_000)
        .saturating_add((ts.tv_nsec.max(0) as u64) / 1000)
}

pub fn selected_db(ctx: *mut raw::RedisModuleCtx) -> i32 {
    // SAFETY: valid ctx from Redis.
    unsafe { raw::RedisModule_GetSelectedDb.map_or(0, |f| f(ctx)) }
}

pub fn select_db(ctx: *mut raw::RedisModuleCtx, db: i32) -> bool {
    // SAFETY: valid ctx from Redis.
    unsafe { raw::RedisModule_SelectDb.is_some_and(|f| f(ctx, db) == raw::REDISMODULE_OK as c_int) }
}

/// A new RedisModuleString holding `bytes` (binary safe), auto-freed with `ctx` or by the
/// caller through `RedisString`'s drop.
pub fn string(ctx: *mut raw::RedisModuleCtx, bytes: &[u8]) -> redis_module::RedisString {
    redis_module::RedisString::create_from_slice(ctx, bytes)
}

/// Calls a variadic `(target, "LEASE.APPLY", fmt, ...)` module function (RM_Replicate or
/// RM_EmitAOF: same argument convention, different first argument) with an effect's
/// arguments: `key HOLD owner token expires_wall_ms` or `key FREE token`.
macro_rules! call_with_effect {
    ($f:expr, $target:expr, $key:expr, $eff:expr) => {
        // SAFETY: format letters match the variadic arguments: s = RedisModuleString*,
        // c = C string, b = (char*, size_t), l = long long. Tokens < 2^53 and wall ms fit.
        unsafe {
            match $eff {
                Apply::Hold {
                    owner,
                    token,
                    expires_wall_ms,
                } => {
                    $f(
                        $target,
                        c"LEASE.APPLY".as_ptr(),
                        c"scbll".as_ptr(),
                        $key,
                        c"HOLD".as_ptr(),
                        owner.as_ptr().cast::<c_char>(),
                        owner.len(),
                        *token as c_longlong,
                        *expires_wall_ms as c_longlong,
                    );
                }
                Apply::Free { token } => {
                    $f(
                        $target,
                        c"LEASE.APPLY".as_ptr(),
                        c"scl".as_ptr(),
                        $key,
                        c"FREE".as_ptr(),
                        *token as c_longlong,
                    );
                }
            }
        }
    };
}

/// Replicates an effect to replicas and the AOF as `LEASE.APPLY key HOLD owner token
/// expires_wall_ms` or `LEASE.APPLY key FREE token`: the primary's decision, never the
/// command a replica would re-judge against its own clock (SPEC §6).
pub fn replicate_effect(
    ctx: *mut raw::RedisModuleCtx,
    key: *mut raw::RedisModuleString,
    eff: &Apply,
) {
    // SAFETY: reading a function pointer Redis filled in at module load.
    if let Some(replicate) = unsafe { raw::RedisModule_Replicate } {
        call_with_effect!(replicate, ctx, key, eff);
    }
}

/// The same effect written by AOF rewrite.
pub fn emit_aof_effect(io: *mut raw::RedisModuleIO, key: *mut raw::RedisModuleString, eff: &Apply) {
    // SAFETY: reading a function pointer Redis filled in at module load.
    if let Some(emit) = unsafe { raw::RedisModule_EmitAOF } {
        call_with_effect!(emit, io, key, eff);
    }
}

/// Wakes clients blocked on `key` (in the ctx's selected db); Redis serves them in FIFO order
/// after the current command or callback returns.
pub fn signal_ready(ctx: *mut raw::RedisModuleCtx, key: *mut raw::RedisModuleString) {
    // SAFETY: valid ctx and key from Redis or created by us.
    unsafe {
        if let Some(f) = raw::RedisModule_SignalKeyAsReady {
            f(ctx, key);
        }
    }
}

/// Keyspace notification of class `d` (module).
pub fn notify(ctx: *mut raw::RedisModuleCtx, event: Event, key: *mut raw::RedisModuleString) {
    let name = match event {
        Event::Acquired => c"lease.acquired",
        Event::Released => c"lease.released",
        Event::Expired => c"lease.expired",
    };
    // SAFETY: `name` is a NUL-terminated literal; ctx and key are valid for this call.
    unsafe {
        if let Some(f) = raw::RedisModule_NotifyKeyspaceEvent {
            f(
                ctx,
                raw::REDISMODULE_NOTIFY_MODULE as c_int,
                name.as_ptr(),
                key,
            );
        }
    }
}

/// Replicates the command as it was received (used for `LEASE.APPLY` on a replica so that
/// the replica's own AOF records it; module commands are never propagated implicitly).
pub fn replicate_verbatim(ctx: *mut raw::RedisModuleCtx) {
    // SAFETY: valid ctx.
    unsafe {
        if let Some(f) = raw::RedisModule_ReplicateVerbatim {
            f(ctx);
        }
    }
}
