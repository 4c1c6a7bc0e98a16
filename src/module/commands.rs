//! Command handlers: parse (pure, `crate::lease::args`), call the state machine, reply,
//! replicate. Each handler runs inside `guarded`, so even a bug that panics becomes an error
//! reply instead of aborting redis-server.

use super::datatype::LEASE_TYPE;
use super::runtime::{self, bump, COUNTERS};
use super::{config, ffi};
use crate::lease::args::{self, parse_owner, parse_token, parse_ttl, parse_u64};
use crate::lease::slot::key_slot;
use crate::lease::{Acquire, Effect, Lease, LeaseError, Now};
use redis_module::key::{RedisKey, RedisKeyWritable};
use redis_module::{
    raw, Context, ContextFlags, KeyType, RedisError, RedisResult, RedisString, RedisValue,
};
use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

fn fail(e: LeaseError) -> RedisError {
    RedisError::String(e.to_string())
}

/// Entry-point guard: a panic (a bug, never expected) becomes a one-line error reply.
fn guarded(f: impl FnOnce() -> RedisResult) -> RedisResult {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(RedisError::Str(
            "ERR internal error in redis-lease (see server log)",
        ))
    })
}

fn bytes(args: &[RedisString]) -> Vec<&[u8]> {
    args.iter().map(RedisString::as_slice).collect()
}

/// The lease stored at an open key: `Ok(None)` when the key does not exist, WRONGTYPE when
/// it holds something else.
fn lease_at(key: &RedisKeyWritable) -> Result<Option<&mut Lease>, RedisError> {
    if key.key_type() == KeyType::Empty {
        return Ok(None);
    }
    match key.get_value::<Lease>(&LEASE_TYPE) {
        Ok(Some(l)) => Ok(Some(l)),
        _ => Err(fail(LeaseError::WrongType)),
    }
}

fn lease_at_read(key: &RedisKey) -> Result<Option<&Lease>, RedisError> {
    if key.is_null() || key.key_type() == KeyType::Empty {
        return Ok(None);
    }
    match key.get_value::<Lease>(&LEASE_TYPE) {
        Ok(Some(l)) => Ok(Some(l)),
        _ => Err(fail(LeaseError::WrongType)),
    }
}

/// Frees the lease if its deadline passed, with all the side effects of an expiry. Write
/// commands call this first so that they never act on a lapsed holder.
fn expire_lazily(ctx: &Context, key: *mut raw::RedisModuleString, lease: &mut Lease, now: Now) {
    if let Some(token) = lease.expire_due(now) {
        runtime::on_expired(ctx, key, token);
    }
}

/// Shared by `LEASE.ACQUIRE` and the blocked-client retry. `keep_key` creates the key of a
/// free lease when absent, because Redis only wakes clients blocked on keys that exist.
pub fn try_acquire(
    ctx: &Context,
    key_ptr: *mut raw::RedisModuleString,
    owner: &[u8],
    ttl_ms: u64,
    now: Now,
    keep_key: bool,
) -> Result<Acquire, RedisError> {
    let key = RedisKeyWritable::open_with_redis_string(ctx.ctx, key_ptr);
    let grace = runtime::grace_ms_left(now);
    let outcome = match lease_at(&key)? {
        Some(lease) => {
            expire_lazily(ctx, key_ptr, lease, now);
            let out = lease
                .acquire(owner, ttl_ms, now, grace, runtime::token_floor())
                .map_err(fail)?;
            if matches!(out, Acquire::Granted { .. } | Acquire::Refreshed { .. }) {
                runtime::on_held(ctx, key_ptr, lease, now);
            }
            out
        }
        None => {
            let mut lease = Lease::new();
            let out = lease
                .acquire(owner, ttl_ms, now, grace, runtime::token_floor())
                .map_err(fail)?;
            let granted = matches!(out, Acquire::Granted { .. });
            if granted || keep_key {
                key.set_value(&LEASE_TYPE, lease)
                    .map_err(|_| fail(LeaseError::WrongType))?;
                if let Some(stored) = lease_at(&key)? {
                    runtime::on_held(ctx, key_ptr, stored, now);
                }
            }
            out
        }
    };
    match outcome {
        Acquire::Granted { token } => {
            runtime::observe_token(token);
            bump(&COUNTERS.acquired);
            ffi::notify(ctx.ctx, ffi::EV_ACQUIRED, key_ptr);
        }
        Acquire::Refreshed { .. } => bump(&COUNTERS.refreshed),
        _ => {}
    }
    Ok(outcome)
}

/// `LEASE.ACQUIRE key owner ttl [BLOCK timeout]`
pub fn acquire(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(|| {
        if args.len() < 4 {
            return Err(fail(LeaseError::WrongArity("lease.acquire")));
        }
        let a = bytes(&args);
        let req = args::parse_acquire(&a[2..], &config::limits()).map_err(fail)?;
        // MULTI, Lua and functions cannot block: BLOCK then behaves like a zero wait.
        let can_block = !ctx
            .get_flags()
            .intersects(ContextFlags::MULTI | ContextFlags::LUA | ContextFlags::DENY_BLOCKING);
        let will_block = req.block.is_some() && can_block;
        let now = ffi::now();
        let out = try_acquire(ctx, args[1].inner, req.owner, req.ttl_ms, now, will_block)?;
        match out {
            Acquire::Granted { token } | Acquire::Refreshed { token } => {
                Ok(RedisValue::Integer(token as i64))
            }
            Acquire::Busy | Acquire::InGrace { .. } if will_block => {
                if matches!(out, Acquire::Busy) {
                    bump(&COUNTERS.contended);
                }
                super::blocking::block(
                    ctx,
                    &args[1],
                    req.owner,
                    req.ttl_ms,
                    req.block.unwrap_or(0),
                );
                Ok(RedisValue::NoReply)
            }
            Acquire::Busy => {
                bump(&COUNTERS.contended);
                Ok(RedisValue::Null)
            }
            Acquire::InGrace { .. } if req.block.is_some() => Ok(RedisValue::Null),
            Acquire::InGrace { ms_left } => {
                // A newcomer must see why it is refused, not a silent nil (SPEC §6).
                bump(&COUNTERS.grace_rejected);
                Err(fail(LeaseError::Grace { ms_left }))
            }
        }
    })
}

/// `LEASE.RENEW key owner token ttl`
pub fn renew(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(|| {
        if args.len() != 5 {
            return Err(fail(LeaseError::WrongArity("lease.renew")));
        }
        let l = config::limits();
        let owner = parse_owner(args[2].as_slice(), &l).map_err(fail)?;
        let token = parse_token(args[3].as_slice()).map_err(fail)?;
        let ttl = parse_ttl(args[4].as_slice(), &l).map_err(fail)?;
        let now = ffi::now();
        let key_ptr = args[1].inner;
        let key = RedisKeyWritable::open_with_redis_string(ctx.ctx, key_ptr);
        let renewed = match lease_at(&key)? {
            Some(lease) => {
                expire_lazily(ctx, key_ptr, lease, now);
                let ok = lease.renew(owner, token, ttl, now);
                if ok {
                    runtime::on_held(ctx, key_ptr, lease, now);
                }
                ok
            }
            None => false,
        };
        bump(if renewed {
            &COUNTERS.renewed
        } else {
            &COUNTERS.renew_rejected
        });
        Ok(RedisValue::Integer(i64::from(renewed)))
    })
}

/// `LEASE.RELEASE key owner token`
pub fn release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(|| {
        if args.len() != 4 {
            return Err(fail(LeaseError::WrongArity("lease.release")));
        }
        let owner = parse_owner(args[2].as_slice(), &config::limits()).map_err(fail)?;
        let token = parse_token(args[3].as_slice()).map_err(fail)?;
        let now = ffi::now();
        let key_ptr = args[1].inner;
        let key = RedisKeyWritable::open_with_redis_string(ctx.ctx, key_ptr);
        let released = match lease_at(&key)? {
            Some(lease) => {
                expire_lazily(ctx, key_ptr, lease, now);
                let ok = lease.release(owner, token, now);
                if ok {
                    ffi::replicate_effect(ctx.ctx, key_ptr, &lease.effect(now));
                    ffi::notify(ctx.ctx, ffi::EV_RELEASED, key_ptr);
                    // Hand-over: blocked acquirers are served right after this command.
                    ffi::signal_ready(ctx.ctx, key_ptr);
                }
                ok
            }
            None => false,
        };
        bump(if released {
            &COUNTERS.released
        } else {
            &COUNTERS.release_rejected
        });
        Ok(RedisValue::Integer(i64::from(released)))
    })
}

/// `LEASE.FENCE key token [command arg ...]`
pub fn fence(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(|| {
        if args.len() < 3 {
            return Err(fail(LeaseError::WrongArity("lease.fence")));
        }
        let token = parse_token(args[2].as_slice()).map_err(fail)?;
        let now = ffi::now();
        let key_ptr = args[1].inner;
        let checked = {
            // The key handle is closed at the end of this block, before the inner command
            // runs: that command may touch the very same key.
            let key = RedisKeyWritable::open_with_redis_string(ctx.ctx, key_ptr);
            match lease_at(&key)? {
                Some(lease) => {
                    expire_lazily(ctx, key_ptr, lease, now);
                    lease.fence(token, now)
                }
                None => Err(LeaseError::Fenced),
            }
        };
        let remaining = match checked {
            Ok(ms) => ms,
            Err(e) => {
                bump(&COUNTERS.fence_rejected);
                return Err(fail(e));
            }
        };
        if args.len() == 3 {
            bump(&COUNTERS.fence_ok);
            return Ok(RedisValue::Integer(remaining as i64));
        }
        // Nothing can run between the check above and the command below: Redis executes one
        // command at a time, so check-and-act is atomic.
        let r = run_fenced(ctx, &args[1], &args[3..]);
        if r.is_ok() {
            bump(&COUNTERS.fence_ok);
        }
        r
    })
}

/// Runs the fenced command as the calling user (`C`: ACL checked against that user, never
/// more), propagated to replicas/AOF as itself (`!`), with errors returned as replies (`E`),
/// in script mode (`S`): only commands a Lua script may run are allowed. Without `S` a
/// client could crash the server: `LEASE.FENCE k t WAIT 1 10` trips Redis' assertion that a
/// module's temporary client never blocks (found by `fence_refuses_inner_commands_a_script_cannot_run`).
fn run_fenced(ctx: &Context, lease_key: &RedisString, inner: &[RedisString]) -> RedisResult {
    let name = CString::new(inner[0].as_slice()).map_err(|_| {
        fail(LeaseError::BadInnerCommand(
            "command name contains a NUL byte".into(),
        ))
    })?;
    let mut argv: Vec<*mut raw::RedisModuleString> = inner.iter().map(|s| s.inner).collect();
    if ctx.get_flags().contains(ContextFlags::CLUSTER) {
        check_same_slot(ctx, lease_key, &mut argv)?;
    }
    let Some(call) = (unsafe { raw::RedisModule_Call }) else {
        return Err(fail(LeaseError::BadInnerCommand(
            "RM_Call unavailable".into(),
        )));
    };
    // SAFETY: "v" takes (RedisModuleString **, size_t); argv[1..] are the caller's strings,
    // alive for the duration of this command.
    let reply = unsafe {
        call(
            ctx.ctx,
            name.as_ptr(),
            c"vC!ES".as_ptr().cast::<c_char>(),
            argv.as_mut_ptr().add(1),
            argv.len() - 1,
        )
    };
    if reply.is_null() {
        let why = match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ENOENT) => "unknown command".to_string(),
            Some(libc::EINVAL) => "wrong number of arguments".to_string(),
            Some(libc::EACCES) => {
                "NOPERM the user may not run this command or touch these keys".to_string()
            }
            Some(libc::EPERM) => "not allowed from a module call".to_string(),
            Some(libc::ENOSPC) => "OOM".to_string(),
            other => format!("call failed (errno {other:?})"),
        };
        return Err(fail(LeaseError::BadInnerCommand(why)));
    }
    // SAFETY: reply is a valid call reply we own; forwarded verbatim then freed.
    unsafe {
        if let Some(f) = raw::RedisModule_ReplyWithCallReply {
            f(ctx.ctx, reply);
        }
        if let Some(f) = raw::RedisModule_FreeCallReply {
            f(reply);
        }
    }
    Ok(RedisValue::NoReply)
}

/// Under Cluster the fenced command must stay in the lease key's slot: the FENCE command is
/// routed by its first key only, and RM_Call does not redirect.
fn check_same_slot(
    ctx: &Context,
    lease_key: &RedisString,
    argv: &mut [*mut raw::RedisModuleString],
) -> Result<(), RedisError> {
    let Some(get_keys) = (unsafe { raw::RedisModule_GetCommandKeys }) else {
        return Ok(());
    };
    let slot = key_slot(lease_key.as_slice());
    let mut n: c_int = 0;
    // SAFETY: argv is a valid array of argc strings; the result is freed with RM_Free.
    let pos = unsafe { get_keys(ctx.ctx, argv.as_mut_ptr(), argv.len() as c_int, &mut n) };
    if pos.is_null() {
        return Ok(()); // unknown command or no keys: RM_Call reports the former
    }
    let mut ok = true;
    for i in 0..n.max(0) as usize {
        // SAFETY: pos has n entries, each an index into argv.
        let p = unsafe { *pos.add(i) } as usize;
        if let Some(&s) = argv.get(p) {
            if key_slot(RedisString::string_as_slice(s)) != slot {
                ok = false;
            }
        }
    }
    // SAFETY: allocated by Redis for us.
    unsafe {
        if let Some(f) = raw::RedisModule_Free {
            f(pos.cast::<c_void>());
        }
    }
    if ok {
        Ok(())
    } else {
        Err(fail(LeaseError::CrossSlot))
    }
}

fn resp3(ctx: &Context) -> bool {
    ctx.get_flags().contains(ContextFlags::FLAGS_RESP3)
}

enum Field<'a> {
    Int(i64),
    Bytes(&'a [u8]),
    Nil,
}

/// Field/value pairs as a map under RESP3, as a flat array of values (`values_only`) or of
/// pairs under RESP2.
fn reply_fields(ctx: &Context, fields: &[(&'static str, Field<'_>)], values_only: bool) {
    // SAFETY: plain reply calls on a valid ctx; strings passed with explicit lengths.
    unsafe {
        let map = resp3(ctx);
        let n = fields.len() as std::os::raw::c_long;
        if map {
            raw::RedisModule_ReplyWithMap.map(|f| f(ctx.ctx, n));
        } else {
            let len = if values_only { n } else { 2 * n };
            raw::RedisModule_ReplyWithArray.map(|f| f(ctx.ctx, len));
        }
        for (name, v) in fields {
            if map || !values_only {
                raw::RedisModule_ReplyWithStringBuffer
                    .map(|f| f(ctx.ctx, name.as_ptr().cast(), name.len()));
            }
            match v {
                Field::Int(i) => {
                    raw::RedisModule_ReplyWithLongLong.map(|f| f(ctx.ctx, *i));
                }
                Field::Bytes(b) => {
                    raw::RedisModule_ReplyWithStringBuffer
                        .map(|f| f(ctx.ctx, b.as_ptr().cast(), b.len()));
                }
                Field::Nil => {
                    raw::RedisModule_ReplyWithNull.map(|f| f(ctx.ctx));
                }
            }
        }
    }
}

/// `LEASE.GET key` → nil, or [owner, token, pttl] (a map under RESP3). Read-only: a lapsed
/// holder is reported as no lease but not freed here (freeing is a write, done by the
/// timer or the next write command).
pub fn get(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(|| {
        if args.len() != 2 {
            return Err(fail(LeaseError::WrongArity("lease.get")));
        }
        let now = ffi::now();
        let key = ctx.open_key(&args[1]);
        let Some(lease) = lease_at_read(&key)? else {
            return Ok(RedisValue::Null);
        };
        let Some(h) = lease.holder(now) else {
            return Ok(RedisValue::Null);
        };
        reply_fields(
            ctx,
            &[
                ("owner", Field::Bytes(h.owner)),
                ("token", Field::Int(h.token as i64)),
                ("pttl", Field::Int(h.pttl_ms as i64)),
            ],
            true,
        );
        Ok(RedisValue::NoReply)
    })
}

/// `LEASE.INFO key` → nil or field/value pairs: live, owner, token, pttl (nil when not
/// live), last_token, grants.
pub fn info(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(|| {
        if args.len() != 2 {
            return Err(fail(LeaseError::WrongArity("lease.info")));
        }
        let now = ffi::now();
        let key = ctx.open_key(&args[1]);
        let Some(lease) = lease_at_read(&key)? else {
            return Ok(RedisValue::Null);
        };
        let h = lease.holder(now);
        reply_fields(
            ctx,
            &[
                ("live", Field::Int(i64::from(h.is_some()))),
                (
                    "owner",
                    h.as_ref().map_or(Field::Nil, |h| Field::Bytes(h.owner)),
                ),
                (
                    "token",
                    h.as_ref()
                        .map_or(Field::Nil, |h| Field::Int(h.token as i64)),
                ),
                (
                    "pttl",
                    h.as_ref()
                        .map_or(Field::Nil, |h| Field::Int(h.pttl_ms as i64)),
                ),
                ("last_token", Field::Int(lease.last_token() as i64)),
                ("grants", Field::Int(lease.grants() as i64)),
            ],
            false,
        );
        Ok(RedisValue::NoReply)
    })
}

fn parse_effect(a: &[&[u8]]) -> Result<Effect, LeaseError> {
    let int = |b: &[u8]| parse_u64(b).ok_or(LeaseError::BadEffect);
    let eff = match a {
        [kind, owner, token, wall] if kind.eq_ignore_ascii_case(b"HOLD") => Effect::Hold {
            owner: owner.to_vec(),
            token: int(token)?,
            expires_wall_ms: int(wall)?,
        },
        [kind, token] if kind.eq_ignore_ascii_case(b"FREE") => Effect::Free { token: int(token)? },
        _ => return Err(LeaseError::BadEffect),
    };
    Lease::validate_effect(&eff)?;
    Ok(eff)
}

/// `LEASE.APPLY key HOLD owner token expires_wall_ms` | `LEASE.APPLY key FREE token`:
/// the replicated effect. Only the primary's replication stream and AOF loading may send
/// it; from any ordinary client it would be a way to forge a lease, so it is refused.
pub fn apply(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(|| {
        let flags = ctx.get_flags();
        if !flags.intersects(ContextFlags::REPLICATED | ContextFlags::LOADING) {
            return Err(fail(LeaseError::ForgedEffect));
        }
        if args.len() < 2 {
            return Err(fail(LeaseError::WrongArity("lease.apply")));
        }
        let a = bytes(&args);
        let eff = parse_effect(&a[2..]).map_err(fail)?;
        let now = ffi::now();
        let key_ptr = args[1].inner;
        let key = RedisKeyWritable::open_with_redis_string(ctx.ctx, key_ptr);
        runtime::observe_token(match &eff {
            Effect::Hold { token, .. } | Effect::Free { token } => *token,
        });
        match lease_at(&key)? {
            Some(lease) => lease.apply(&eff, now),
            None => {
                let mut lease = Lease::new();
                lease.apply(&eff, now);
                key.set_value(&LEASE_TYPE, lease)
                    .map_err(|_| fail(LeaseError::WrongType))?;
            }
        }
        if flags.contains(ContextFlags::REPLICATED) {
            // Module commands are never propagated implicitly; this puts the effect into a
            // replica's own AOF (a replica does not feed sub-replicas from here).
            ffi::replicate_verbatim(ctx.ctx);
        }
        Ok(RedisValue::SimpleStringStatic("OK"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effects_parse_strictly() {
        let p = |v: &[&str]| {
            let b: Vec<&[u8]> = v.iter().map(|s| s.as_bytes()).collect();
            parse_effect(&b)
        };
        assert_eq!(
            p(&["HOLD", "o", "7", "100"]),
            Ok(Effect::Hold {
                owner: b"o".to_vec(),
                token: 7,
                expires_wall_ms: 100
            })
        );
        assert_eq!(p(&["FREE", "7"]), Ok(Effect::Free { token: 7 }));
        assert_eq!(p(&["FREE", "0"]), Ok(Effect::Free { token: 0 }));
        for bad in [
            &["HOLD", "", "7", "1"][..],
            &["HOLD", "o", "0", "1"],
            &["FREE"],
            &["X", "1"],
            &["FREE", "-1"],
        ] {
            assert_eq!(p(bad), Err(LeaseError::BadEffect), "{bad:?}");
        }
    }
}
