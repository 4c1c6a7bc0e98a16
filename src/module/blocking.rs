//! `LEASE.ACQUIRE ... BLOCK timeout` on Redis' blocking-on-keys machinery (not wrapped by
//! the crate, so raw calls). Redis keeps the clients blocked on a key in arrival order and
//! retries them in that order whenever the key is signalled ready (release, expiry timer,
//! end of grace), which gives FIFO hand-over among waiters for free.

use super::runtime::{self, bump, COUNTERS};
use super::{commands, ffi};
use crate::lease::{Acquire, LeaseError};
use redis_module::{raw, Context, RedisError, RedisString};
use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

struct Waiter {
    owner: Vec<u8>,
    ttl_ms: u64,
    db: i32,
    key: Vec<u8>,
}

const OK: c_int = raw::REDISMODULE_OK as c_int;
const ERR: c_int = raw::REDISMODULE_ERR as c_int;

pub fn block(ctx: &Context, key: &RedisString, owner: &[u8], ttl_ms: u64, timeout_ms: u64) {
    let db = ffi::selected_db(ctx.ctx);
    let w = Box::new(Waiter {
        owner: owner.to_vec(),
        ttl_ms,
        db,
        key: key.as_slice().to_vec(),
    });
    runtime::add_waiter(db, key.as_slice());
    let mut keys = [key.inner];
    // SAFETY: the callbacks below match RedisModuleCmdFunc; privdata is a Box we reclaim in
    // `free_waiter`, which Redis calls exactly once (served, timed out or disconnected).
    unsafe {
        if let Some(f) = raw::RedisModule_BlockClientOnKeys {
            f(
                ctx.ctx,
                Some(on_ready),
                Some(on_timeout),
                Some(free_waiter),
                timeout_ms as i64,
                keys.as_mut_ptr(),
                1,
                Box::into_raw(w).cast::<c_void>(),
            );
        }
    }
}

/// The key was signalled: retry the grant. ERR keeps the client blocked (still held by
/// someone, or still in grace); OK means we replied.
unsafe extern "C" fn on_ready(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let r = catch_unwind(AssertUnwindSafe(|| {
        let Some(get_priv) = raw::RedisModule_GetBlockedClientPrivateData else {
            return ERR;
        };
        let Some(get_key) = raw::RedisModule_GetBlockedClientReadyKey else {
            return ERR;
        };
        let Some(w) = (get_priv(ctx) as *const Waiter).as_ref() else {
            return ERR;
        };
        let key = get_key(ctx);
        if key.is_null() {
            return ERR;
        }
        let context = Context::new(ctx);
        // Redis applied min-replicas-to-write when the command arrived, not now; a grant
        // here is a new write, so check it again (see `replicas_allow_write`).
        if !runtime::replicas_allow_write(&context) {
            context.reply(Err(RedisError::String(LeaseError::NoReplicas.to_string())));
            return OK;
        }
        match commands::try_acquire(&context, key, &w.owner, w.ttl_ms, ffi::now(), false) {
            Ok(Acquire::Granted { token }) | Ok(Acquire::Refreshed { token }) => {
                raw::RedisModule_ReplyWithLongLong.map(|f| f(ctx, token as i64));
                OK
            }
            Ok(_) => ERR,
            Err(e) => {
                context.reply(Err(e));
                OK
            }
        }
    }));
    r.unwrap_or(ERR)
}

unsafe extern "C" fn on_timeout(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    bump(&COUNTERS.block_timeouts);
    raw::RedisModule_ReplyWithNull.map(|f| f(ctx));
    OK
}

unsafe extern "C" fn free_waiter(_ctx: *mut raw::RedisModuleCtx, privdata: *mut c_void) {
    if privdata.is_null() {
        return;
    }
    let w = Box::from_raw(privdata.cast::<Waiter>());
    runtime::remove_waiter(w.db, &w.key);
}
