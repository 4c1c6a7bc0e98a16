//! `LEASE.ACQUIRE ... BLOCK timeout` on Redis' blocking-on-keys machinery (not wrapped by
//! the crate, so raw calls). Redis keeps the clients blocked on a key in arrival order and
//! retries them in that order whenever the key is signalled ready (release, expiry, end of
//! grace), which gives FIFO hand-over among waiters for free.
//!
//! This file only blocks clients and keeps the registry of waiters; what happens when one
//! is retried, times out or goes away is the executor's (`executor::on_ready` and friends),
//! passed in as `Callbacks` so that this file does not depend on it.

use crate::module::ffi;
use crate::module::guard::lock;
use redis_module::{raw, Context};
use std::collections::HashMap;
use std::os::raw::{c_int, c_void};
use std::sync::Mutex;

/// What a blocked acquirer asked for; Redis hands it back to every callback.
pub struct Waiter {
    pub owner: Vec<u8>,
    pub ttl_ms: u64,
    pub db: i32,
    pub key: Vec<u8>,
    /// The blocked client's id (for `CLIENT UNBLOCK`, see `unblock_waiters`).
    pub client: u64,
}

type KeyId = (i32, Vec<u8>);

lazy_static::lazy_static! {
    /// Keys with blocked acquirers and their client ids; woken at the end of grace.
    static ref WAITERS: Mutex<HashMap<KeyId, Vec<u64>>> = Mutex::new(HashMap::new());
}

pub type CmdFn = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *mut *mut raw::RedisModuleString,
    c_int,
) -> c_int;
pub type FreeFn = unsafe extern "C" fn(*mut raw::RedisModuleCtx, *mut c_void);

pub struct Callbacks {
    pub on_ready: CmdFn,
    pub on_timeout: CmdFn,
    pub free: FreeFn,
}

/// Blocks the calling client on `key` for `timeout_ms` (0 = forever).
pub fn block(
    ctx: &Context,
    key: *mut raw::RedisModuleString,
    owner: Vec<u8>,
    ttl_ms: u64,
    timeout_ms: u64,
    cb: &Callbacks,
) {
    let db = ffi::selected_db(ctx.ctx);
    let name = redis_module::RedisString::string_as_slice(key).to_vec();
    // SAFETY: valid ctx of the command being run.
    let client = unsafe { raw::RedisModule_GetClientId.map_or(0, |f| f(ctx.ctx)) };
    add_waiter(db, &name, client);
    let w = Box::new(Waiter {
        owner,
        ttl_ms,
        db,
        key: name,
        client,
    });
    let mut keys = [key];
    // SAFETY: the callbacks match RedisModuleCmdFunc / the free callback's signature;
    // privdata is a Box that `cb.free` reclaims (through `take_waiter`), which Redis calls
    // exactly once (served, timed out or disconnected).
    unsafe {
        if let Some(f) = raw::RedisModule_BlockClientOnKeys {
            f(
                ctx.ctx,
                Some(cb.on_ready),
                Some(cb.on_timeout),
                Some(cb.free),
                timeout_ms as i64,
                keys.as_mut_ptr(),
                1,
                Box::into_raw(w).cast::<c_void>(),
            );
        }
    }
}

/// The waiter of a blocked client, inside an `on_ready` callback.
///
/// # Safety
/// `ctx` is the context Redis passed to a reply callback of a client blocked by `block`.
pub unsafe fn waiter<'a>(ctx: *mut raw::RedisModuleCtx) -> Option<&'a Waiter> {
    // SAFETY: caller's contract; the private data is the `Box<Waiter>` given to Redis in
    // `block`, alive until the free callback runs (after this one).
    unsafe {
        let get = raw::RedisModule_GetBlockedClientPrivateData?;
        get(ctx).cast::<Waiter>().as_ref()
    }
}

/// The key signalled ready, inside an `on_ready` callback (null if unknown).
///
/// # Safety
/// As for `waiter`.
pub unsafe fn ready_key(ctx: *mut raw::RedisModuleCtx) -> *mut raw::RedisModuleString {
    // SAFETY: caller's contract.
    unsafe { raw::RedisModule_GetBlockedClientReadyKey.map_or(std::ptr::null_mut(), |f| f(ctx)) }
}

/// Takes back the waiter given to Redis in `block` and removes it from the registry.
///
/// # Safety
/// `privdata` is null or the pointer `block` gave Redis, passed to the free callback, which
/// Redis calls exactly once per blocked client.
pub unsafe fn take_waiter(privdata: *mut c_void) {
    if privdata.is_null() {
        return;
    }
    // SAFETY: caller's contract: this is the Box from `block`, reclaimed once.
    let w = unsafe { Box::from_raw(privdata.cast::<Waiter>()) };
    remove_waiter(w.db, &w.key, w.client);
}

fn add_waiter(db: i32, key: &[u8], client: u64) {
    lock(&WAITERS)
        .entry((db, key.to_vec()))
        .or_default()
        .push(client);
}

fn remove_waiter(db: i32, key: &[u8], client: u64) {
    let mut w = lock(&WAITERS);
    let id = (db, key.to_vec());
    if let Some(clients) = w.get_mut(&id) {
        if let Some(at) = clients.iter().position(|&c| c == client) {
            clients.remove(at);
        }
        if clients.is_empty() {
            w.remove(&id);
        }
    }
}

/// Up to `max` keys that have blocked acquirers (the expiry timer looks at these first
/// during an expiry storm).
pub fn waiter_keys(max: usize) -> Vec<KeyId> {
    lock(&WAITERS).keys().take(max).cloned().collect()
}

/// Whether (db, key) has blocked acquirers.
pub fn has_waiters(db: i32, key: &[u8]) -> bool {
    lock(&WAITERS).contains_key(&(db, key.to_vec()))
}

pub fn blocked_clients() -> u64 {
    lock(&WAITERS).values().map(|c| c.len() as u64).sum()
}

/// Signals every key with waiters (end of grace): Redis retries them after this callback.
pub fn wake_all_waiters(ctx: &Context) {
    let keys: Vec<KeyId> = lock(&WAITERS).keys().cloned().collect();
    let before = ffi::selected_db(ctx.ctx);
    for (db, key) in keys {
        if ffi::select_db(ctx.ctx, db) {
            let k = ffi::string(ctx.ctx, &key);
            ffi::signal_ready(ctx.ctx, k.inner);
        }
    }
    ffi::select_db(ctx.ctx, before);
}

/// Answers the blocked acquirers of (db, key) — every one with `None` — with nil, as a BLOCK
/// timeout would (`CLIENT UNBLOCK`, which runs the timeout callback), in arrival order. For
/// a name whose key went away by another road than a lease command (DEL, RENAME, MOVE,
/// SWAPDB, FLUSHDB/FLUSHALL): Redis retries module clients blocked on a key
/// only while the key exists, so without this they would wait until their timeout (forever
/// with BLOCK 0) while the name is free. A nil tells the client "not acquired, ask again".
pub fn unblock_waiters(ctx: &Context, only: Option<(i32, &[u8])>) {
    // Collected first: unblocking runs the free callback, which takes this lock.
    let clients: Vec<u64> = {
        let w = lock(&WAITERS);
        match only {
            Some((db, key)) => w.get(&(db, key.to_vec())).cloned().unwrap_or_default(),
            None => w.values().flatten().copied().collect(),
        }
    };
    for id in clients {
        let _ = ctx.call("CLIENT", &["UNBLOCK", &id.to_string()]);
    }
}
