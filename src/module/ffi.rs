//! The few raw Redis module calls the crate does not wrap (or wraps with a `CString::new(..)
//! .unwrap()` that would panic on client bytes containing NUL). Every function here is
//! binary-safe: client bytes travel as (pointer, length) or as `RedisModuleString`s.

use crate::lease::engine::Event;
use crate::lease::{Apply, Now};
use redis_module::raw;
use std::os::raw::{c_char, c_int};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Both server clocks, read once per command. CLOCK_MONOTONIC is the clock that judges
/// expiry (docs/protocol.md §2); CLOCK_REALTIME only converts deadlines that leave the process.
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

/// Decimal digits of `v`, written into `buf` (no allocation): the same bytes Redis writes
/// for an integer argument. Two digits per step (half the divisions of the plain loop).
/// A membership id as the wire spells it: 16 lower-case hex digits.
pub fn membership_hex(m: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        let nibble = (m >> (60 - 4 * i)) & 0xf;
        *b = b"0123456789abcdef"[nibble as usize];
    }
    out
}

fn decimal(v: u64, buf: &mut [u8; 20]) -> &[u8] {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";
    let mut i = buf.len();
    let mut v = v;
    while v >= 100 {
        let p = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[p..p + 2]);
    }
    if v >= 10 {
        let p = v as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[p..p + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + v as u8;
    }
    &buf[i..]
}

/// A command's own arguments (after the key) as Redis strings and, in the same order, the
/// byte slices already read from them (so matching them costs no call into Redis).
#[derive(Clone, Copy)]
pub struct CommandArgs<'a> {
    pub strings: &'a [*mut raw::RedisModuleString],
    pub bytes: &'a [&'a [u8]],
}

impl CommandArgs<'_> {
    /// No arguments to reuse (callbacks).
    pub const NONE: CommandArgs<'static> = CommandArgs {
        strings: &[],
        bytes: &[],
    };
}

/// An argument whose bytes are exactly `bytes`: replicating it by reference (`s`, one
/// reference count) instead of building a new object from the bytes gives the same bytes on
/// the wire at a fraction of the cost.
fn same_bytes(args: CommandArgs<'_>, bytes: &[u8]) -> Option<*mut raw::RedisModuleString> {
    args.strings
        .iter()
        .zip(args.bytes)
        .find(|(s, b)| !s.is_null() && **b == bytes)
        .map(|(s, _)| *s)
}

/// An argument that is the canonical decimal of `v`. The parser accepts only canonical
/// decimals (`args::parse_u64`: no sign, no leading zero), so equal values mean equal
/// bytes; cheaper than formatting `v` to compare bytes.
fn same_int(args: CommandArgs<'_>, v: u64) -> Option<*mut raw::RedisModuleString> {
    args.strings
        .iter()
        .zip(args.bytes)
        .find(|(s, b)| !s.is_null() && crate::lease::args::parse_u64(b) == Some(v))
        .map(|(s, _)| *s)
}

/// The effect words `HOLD` and `FREE` as strings created once and kept for the life of the
/// process (never freed: every use only takes and drops a reference). Null until created
/// (or if creation failed): callers then fall back to building the word per call.
static HOLD_WORD: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());
static FREE_WORD: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());

fn effect_word(
    cell: &AtomicPtr<raw::RedisModuleString>,
    word: &[u8],
) -> Option<*mut raw::RedisModuleString> {
    let s = cell.load(Ordering::Relaxed);
    if !s.is_null() {
        return Some(s);
    }
    // SAFETY: a NULL context is allowed (the string is then not auto-freed, which is the
    // point); bytes passed with their length. Main thread only, like every module callback.
    let s = unsafe {
        raw::RedisModule_CreateString.map_or(std::ptr::null_mut(), |f| {
            f(std::ptr::null_mut(), word.as_ptr().cast(), word.len())
        })
    };
    cell.store(s, Ordering::Relaxed);
    (!s.is_null()).then_some(s)
}

/// The last `expires_wall_ms` replicated and a kept string of its digits: effects in the
/// same millisecond with the same TTL (a pipeline of renewals, many leases renewed on one
/// schedule) carry the same value, and a reference is cheaper than a new object. Main
/// thread only (every caller runs in a Redis callback); null/`u64::MAX` = nothing kept.
static LAST_EXPIRES: AtomicU64 = AtomicU64::new(u64::MAX);
static LAST_EXPIRES_STR: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());

fn expires_string(v: u64) -> Option<*mut raw::RedisModuleString> {
    let kept = LAST_EXPIRES_STR.load(Ordering::Relaxed);
    if !kept.is_null() && LAST_EXPIRES.load(Ordering::Relaxed) == v {
        return Some(kept);
    }
    let mut b = [0u8; 20];
    let d = decimal(v, &mut b);
    // SAFETY: NULL context: a string we keep (not auto-freed); bytes with their length.
    let new = unsafe {
        raw::RedisModule_CreateString.map_or(std::ptr::null_mut(), |f| {
            f(std::ptr::null_mut(), d.as_ptr().cast(), d.len())
        })
    };
    if new.is_null() {
        return None;
    }
    if !kept.is_null() {
        // SAFETY: our own reference to a string created above; a replicated command that
        // still uses it holds its own reference (Redis counts them), so this only drops ours.
        unsafe {
            if let Some(free) = raw::RedisModule_FreeString {
                free(std::ptr::null_mut(), kept);
            }
        }
    }
    LAST_EXPIRES_STR.store(new, Ordering::Relaxed);
    LAST_EXPIRES.store(v, Ordering::Relaxed);
    Some(new)
}

/// Calls a variadic `(target, "LEASE.APPLY", fmt, ...)` module function (RM_Replicate or
/// RM_EmitAOF: same argument convention, different first argument) with an effect's
/// arguments: `key HOLD owner token expires_wall_ms` or `key FREE token`.
///
/// The bytes are always the same (decimal integers, the owner as stored); only how Redis gets
/// them differs. Cheapest is `s`, a reference to an existing string: the command's own
/// arguments when they hold exactly these bytes (a renew's owner and token, a release's
/// token), the kept `HOLD`/`FREE` words and the last expiry sent (`expires_string`). Otherwise `b` (bytes, one small allocation);
/// integers are formatted here (`b`), not by Redis (`l`), which costs about twice as much.
/// Why it matters: `RM_Replicate` was measured as the largest single cost of a renew (4,700
/// of its 12,600 instructions).
macro_rules! call_with_effect {
    ($f:expr, $target:expr, $key:expr, $eff:expr, $reuse:expr, $words:expr) => {{
        let reuse: CommandArgs<'_> = $reuse;
        let name = c"LEASE.APPLY".as_ptr();
        let mut tb = [0u8; 20];
        // SAFETY (every call below): format letters match the variadic arguments: s =
        // RedisModuleString* (valid: the command's arguments, alive during the command, or a
        // kept word), c = C string, b = (char*, size_t). Tokens < 2^53 and wall ms fit u64.
        match $eff {
            // Quorum mode's binding (docs/quorum.md §4.1): `... MEMBERSHIP id` at the end,
            // every word built here. Not the hot path the kept strings serve (single-primary
            // mode never binds a key), so one fixed format per effect is enough.
            Apply::Hold {
                owner,
                token,
                expires_wall_ms,
                membership: Some(m),
            } => {
                let mut eb = [0u8; 20];
                let exp = decimal(*expires_wall_ms, &mut eb);
                let tok = decimal(*token, &mut tb);
                let hex = membership_hex(*m);
                // SAFETY: format letters match the arguments (see above).
                unsafe {
                    $f(
                        $target,
                        name,
                        c"scbbbcb".as_ptr(),
                        $key,
                        c"HOLD".as_ptr(),
                        owner.as_ptr().cast::<c_char>(),
                        owner.len(),
                        tok.as_ptr().cast::<c_char>(),
                        tok.len(),
                        exp.as_ptr().cast::<c_char>(),
                        exp.len(),
                        c"MEMBERSHIP".as_ptr(),
                        hex.as_ptr().cast::<c_char>(),
                        hex.len(),
                    )
                };
            }
            Apply::Free {
                token,
                membership: Some(m),
            } => {
                let tok = decimal(*token, &mut tb);
                let hex = membership_hex(*m);
                // SAFETY: format letters match the arguments (see above).
                unsafe {
                    $f(
                        $target,
                        name,
                        c"scbcb".as_ptr(),
                        $key,
                        c"FREE".as_ptr(),
                        tok.as_ptr().cast::<c_char>(),
                        tok.len(),
                        c"MEMBERSHIP".as_ptr(),
                        hex.as_ptr().cast::<c_char>(),
                        hex.len(),
                    )
                };
            }
            Apply::Hold {
                owner,
                token,
                expires_wall_ms,
                membership: None,
            } => {
                let (op, ol) = (owner.as_ptr().cast::<c_char>(), owner.len());
                let word = if $words {
                    effect_word(&HOLD_WORD, b"HOLD")
                } else {
                    None
                };
                let (o, t) = match word {
                    Some(_) => (same_bytes(reuse, owner), same_int(reuse, *token)),
                    None => (None, None),
                };
                let e = match (word, o) {
                    (Some(_), Some(_)) => expires_string(*expires_wall_ms),
                    _ => None,
                };
                if let (Some(w), Some(o), Some(t), Some(e)) = (word, o, t, e) {
                    // SAFETY: format letters match the arguments (see above).
                    unsafe { $f($target, name, c"sssss".as_ptr(), $key, w, o, t, e) };
                    return;
                }
                // A grant: the token is new, the rest can be referenced.
                if let (Some(w), Some(o), None, Some(e)) = (word, o, t, e) {
                    let tok = decimal(*token, &mut tb);
                    // SAFETY: format letters match the arguments (see above).
                    unsafe {
                        $f(
                            $target,
                            name,
                            c"sssbs".as_ptr(),
                            $key,
                            w,
                            o,
                            tok.as_ptr().cast::<c_char>(),
                            tok.len(),
                            e,
                        )
                    };
                    return;
                }
                // Formatted only when no kept string serves (the common renew path skips it).
                let mut eb = [0u8; 20];
                let exp = decimal(*expires_wall_ms, &mut eb);
                let (ep, el) = (exp.as_ptr().cast::<c_char>(), exp.len());
                if let (Some(w), Some(o), Some(t)) = (word, o, t) {
                    // SAFETY: format letters match the arguments (see above).
                    unsafe { $f($target, name, c"ssssb".as_ptr(), $key, w, o, t, ep, el) };
                    return;
                }
                let tok = decimal(*token, &mut tb);
                match (word, o) {
                    // SAFETY: format letters match the arguments (see above).
                    (Some(w), Some(o)) => unsafe {
                        $f(
                            $target,
                            name,
                            c"sssbb".as_ptr(),
                            $key,
                            w,
                            o,
                            tok.as_ptr().cast::<c_char>(),
                            tok.len(),
                            ep,
                            el,
                        );
                    },
                    // SAFETY: format letters match the arguments (see above).
                    (Some(w), None) => unsafe {
                        $f(
                            $target,
                            name,
                            c"ssbbb".as_ptr(),
                            $key,
                            w,
                            op,
                            ol,
                            tok.as_ptr().cast::<c_char>(),
                            tok.len(),
                            ep,
                            el,
                        );
                    },
                    // SAFETY: format letters match the arguments (see above).
                    (None, _) => unsafe {
                        $f(
                            $target,
                            name,
                            c"scbbb".as_ptr(),
                            $key,
                            c"HOLD".as_ptr(),
                            op,
                            ol,
                            tok.as_ptr().cast::<c_char>(),
                            tok.len(),
                            ep,
                            el,
                        );
                    },
                }
            }
            Apply::Free {
                token,
                membership: None,
            } => {
                let word = if $words {
                    effect_word(&FREE_WORD, b"FREE")
                } else {
                    None
                };
                let t = word.and_then(|_| same_int(reuse, *token));
                if let (Some(w), Some(t)) = (word, t) {
                    // SAFETY: format letters match the arguments (see above).
                    unsafe { $f($target, name, c"sss".as_ptr(), $key, w, t) };
                    return;
                }
                let tok = decimal(*token, &mut tb);
                match word {
                    // SAFETY: format letters match the arguments (see above).
                    Some(w) => unsafe {
                        $f(
                            $target,
                            name,
                            c"ssb".as_ptr(),
                            $key,
                            w,
                            tok.as_ptr().cast::<c_char>(),
                            tok.len(),
                        );
                    },
                    // SAFETY: format letters match the arguments (see above).
                    None => unsafe {
                        $f(
                            $target,
                            name,
                            c"scb".as_ptr(),
                            $key,
                            c"FREE".as_ptr(),
                            tok.as_ptr().cast::<c_char>(),
                            tok.len(),
                        );
                    },
                }
            }
        }
    }};
}

/// Replicates an effect to replicas and the AOF as `LEASE.APPLY key HOLD owner token
/// expires_wall_ms` or `LEASE.APPLY key FREE token`: the primary's decision, never the
/// command a replica would re-judge against its own clock (docs/protocol.md §4). `args` are the
/// command's own arguments (empty for callbacks), reused where their bytes match.
pub fn replicate_effect(
    ctx: *mut raw::RedisModuleCtx,
    key: *mut raw::RedisModuleString,
    eff: &Apply,
    args: CommandArgs<'_>,
) {
    // SAFETY: reading a function pointer Redis filled in at module load.
    if let Some(replicate) = unsafe { raw::RedisModule_Replicate } {
        call_with_effect!(replicate, ctx, key, eff, args, true);
    }
}

/// The same effect written by AOF rewrite. It runs in the rewrite child and builds every
/// word per call (no kept strings are created there).
pub fn emit_aof_effect(io: *mut raw::RedisModuleIO, key: *mut raw::RedisModuleString, eff: &Apply) {
    // SAFETY: reading a function pointer Redis filled in at module load.
    if let Some(emit) = unsafe { raw::RedisModule_EmitAOF } {
        call_with_effect!(emit, io, key, eff, CommandArgs::NONE, false);
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

#[cfg(test)]
mod tests {
    use super::decimal;

    #[test]
    fn decimal_writes_what_redis_writes_for_an_integer() {
        let mut b = [0u8; 20];
        for v in [
            0u64,
            7,
            10,
            17,
            9_999,
            10_000,
            (1 << 53) - 1,
            1_796_104_148_393,
            u64::MAX,
        ] {
            assert_eq!(decimal(v, &mut b), v.to_string().as_bytes());
        }
    }
}
