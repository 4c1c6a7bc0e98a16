//! The module's own data type: one key per lease, no native Redis TTL (a wall-clock jump
//! must not delete a live lease, and a free lease keeps its token history).
//!
//! Encoding version 3 (written by this build; RDB, the RDB preamble of an AOF rewrite, DUMP:
//! version 2 plus the quorum-mode membership id) and versions 2 and 1 (written by builds
//! before it; still loaded, never written): the byte layout
//! and the pure codec are lease-core/src/rdb.rs, the only place the layout is written down.
//! Why v2: five module field calls per key cost about 1.8x the instructions of a `SET PX`
//! key per save; one buffer call is the floor the module API allows (docs/scale.md §5).
//! A build that knows only v1 (v2) refuses a v2 (v3) value (docs/operations.md: upgrade
//! replicas first).
//!
//! The loader refuses any other version and anything a healthy save cannot produce
//! (returns NULL, so `RESTORE` answers "Bad data format" and the server stays up). An expiry
//! further ahead than any lease can have left is clamped with a warning instead
//! (`to_lease`). It relies on REDISMODULE_OPTIONS_HANDLE_IO_ERRORS (set at load) so a short
//! or mistyped payload is an IO error we check, not a server panic.

use crate::lease::owner::OWNER_HARD_CAP;
use crate::lease::rdb::{encode_v3, PersistedSource};
use crate::lease::{Lease, Persisted};
use crate::module::guard::guard;
use crate::module::{ffi, node};
use redis_module::native_types::RedisType;
use redis_module::raw;
use std::os::raw::{c_int, c_void};

/// Bump on any change of the encoding above, and keep loading the old versions.
/// 3: the quorum-mode membership id (issue 32).
pub const TYPE_VERSION: i32 = 3;

pub static LEASE_TYPE: RedisType = RedisType::new(
    "leasetype",
    TYPE_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        free: Some(free),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        aux_load: None,
        aux_save: None,
        aux_save2: None,
        aux_save_triggers: 0,
        free_effort: None,
        unlink: None,
        copy: Some(copy),
        defrag: None,
        copy2: None,
        free_effort2: None,
        mem_usage2: None,
        unlink2: None,
    },
);

/// The lease behind a value pointer Redis hands to a type callback.
///
/// # Safety
/// `value` is null or a pointer this module created with `Box::into_raw(Box<Lease>)` (every
/// value of this type is: `keys::LeaseKey::create`, `rdb_load`, `copy`) that Redis has not
/// freed yet, and nothing else accesses it during the callback.
unsafe fn lease_ref<'a>(value: *const c_void) -> Option<&'a Lease> {
    // SAFETY: guaranteed by the caller, see above.
    unsafe { value.cast::<Lease>().as_ref() }
}

unsafe extern "C" fn rdb_save(io: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: Redis passes a value of this type (see `lease_ref`).
    let Some(lease) = (unsafe { lease_ref(value) }) else {
        return;
    };
    // Encoding version 3, written from the value itself into one buffer reused for every key
    // (no owner copy and no allocation per key: issue 16, a save of 1M leases).
    // `tests/compat.rs` pins the bytes.
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    guard((), || {
        SCRATCH.with(|scratch| {
            // Not re-entered (Redis saves one key at a time); if it ever were, a fresh buffer
            // is correct, only slower.
            match scratch.try_borrow_mut() {
                Ok(mut buf) => {
                    encode_v3(lease.saved(ffi::now()), &mut buf);
                    raw::save_slice(io, &buf);
                }
                Err(_) => {
                    let mut buf = Vec::new();
                    encode_v3(lease.saved(ffi::now()), &mut buf);
                    raw::save_slice(io, &buf);
                }
            }
        })
    })
}

/// Redis' IO as the decoder's field source.
struct Io(*mut raw::RedisModuleIO);

impl PersistedSource for Io {
    fn unsigned(&mut self) -> Option<u64> {
        raw::load_unsigned(self.0).ok()
    }
    fn bytes(&mut self) -> Option<Vec<u8>> {
        let buf = raw::load_string_buffer(self.0).ok()?;
        let b = buf.as_ref();
        // Checked before the copy as well: a hostile length is not copied at all.
        (b.len() <= OWNER_HARD_CAP).then(|| b.to_vec())
    }
}

fn load_v1(io: *mut raw::RedisModuleIO) -> Option<Lease> {
    let p = Persisted::decode_v1(&mut Io(io))?;
    to_lease(io, p)
}

/// Versions 2 and 3 (3 = 2 + the membership id). Decoded in place from Redis' buffer
/// (freed when `buf` drops): only the owner is copied.
fn load_buffer(
    io: *mut raw::RedisModuleIO,
    decode: fn(&[u8]) -> Option<Persisted>,
) -> Option<Lease> {
    let buf = raw::load_string_buffer(io).ok()?;
    let p = decode(buf.as_ref())?;
    to_lease(io, p)
}

/// The checked lease of a decoded value. A held lease whose saved expiry lies beyond what
/// any lease can have left (this server's wall clock weeks behind the saver's) is loaded
/// with `lease.max-ttl` left and a warning, not refused (`Lease::load_persisted` says why).
fn to_lease(io: *mut raw::RedisModuleIO, p: Persisted) -> Option<Lease> {
    let max_ttl = crate::module::config::snapshot().limits().max_ttl_ms;
    let (lease, clamped) = Lease::load_persisted(p, ffi::now(), max_ttl)?;
    if let Some(saved_ms) = clamped {
        warn_clamped(io, saved_ms, max_ttl);
    }
    Some(lease)
}

fn warn_clamped(io: *mut raw::RedisModuleIO, saved_ms: u64, max_ttl: u64) {
    // SAFETY: reading a function pointer Redis filled in at module load; `io` is the loader's.
    let name = unsafe { raw::RedisModule_GetKeyNameFromIO.map(|f| f(io)) }
        .filter(|k| !k.is_null())
        .map(|k| {
            crate::lease::args::printable(redis_module::RedisString::string_as_slice(k.cast_mut()))
        })
        .unwrap_or_else(|| "?".into());
    let msg = format!(
        "lease: key '{name}': the saved expiry lies {} days beyond this server's wall clock (clock behind the saving server's?); loaded as held for lease.max-ttl ({max_ttl} ms) instead, token history kept",
        saved_ms / 86_400_000
    );
    let Ok(msg) = std::ffi::CString::new(msg) else {
        return;
    };
    // SAFETY: `%s` with a NUL-terminated string we own; `io` is the loader's.
    unsafe {
        if let Some(log) = raw::RedisModule_LogIOError {
            log(io, c"warning".as_ptr(), c"%s".as_ptr(), msg.as_ptr());
        }
    }
}

unsafe extern "C" fn rdb_load(io: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        let loaded = match encver {
            1 => load_v1(io),
            2 => load_buffer(io, Persisted::decode_v2),
            3 => load_buffer(io, Persisted::decode_v3),
            // A newer (or corrupt) encoding: refuse rather than guess (NULL makes RESTORE
            // answer "Bad data format" and an RDB load fail cleanly).
            _ => None,
        };
        match loaded {
            Some(lease) => {
                node::observe_token(lease.last_token());
                Box::into_raw(Box::new(lease)).cast::<c_void>()
            }
            None => std::ptr::null_mut(),
        }
    })
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: Redis passes a value of this type (see `lease_ref`).
    if let Some(lease) = unsafe { lease_ref(value) } {
        guard((), || {
            ffi::emit_aof_effect(aof, key, &lease.to_apply(ffi::now()))
        });
    }
}

unsafe extern "C" fn free(value: *mut c_void) {
    if !value.is_null() {
        // SAFETY: every value of this type is a `Box<Lease>` turned into a raw pointer
        // (see `lease_ref`), and Redis calls `free` exactly once per value.
        drop(unsafe { Box::from_raw(value.cast::<Lease>()) });
    }
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    // SAFETY: Redis passes a value of this type (see `lease_ref`).
    unsafe { lease_ref(value) }.map_or(0, Lease::mem_usage)
}

/// Digest of what replicas must agree on: owner, token (held or last issued) and the
/// membership binding. The expiry
/// is left out on purpose: each node holds it as its own monotonic deadline, so two
/// healthy nodes would differ in it by the replication delay.
unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // SAFETY: Redis passes a value of this type (see `lease_ref`).
    let Some(lease) = (unsafe { lease_ref(value) }) else {
        return;
    };
    // SAFETY: reading function pointers Redis filled in at module load.
    let fns = unsafe {
        (
            raw::RedisModule_DigestAddLongLong,
            raw::RedisModule_DigestAddStringBuffer,
            raw::RedisModule_DigestEndSequence,
        )
    };
    let (Some(add_ll), Some(add_buf), Some(end)) = fns else {
        return;
    };
    let owner = lease.owner();
    // SAFETY: `md` is the digest Redis passed for this call; the owner buffer is passed with
    // its length and outlives the call.
    unsafe {
        add_ll(md, lease.last_token() as i64);
        add_ll(md, i64::from(lease.is_held()));
        add_buf(md, owner.as_ptr().cast(), owner.len());
        if let Some(m) = lease.membership() {
            // Only when bound, so a value without one digests as before.
            add_ll(md, m as i64);
        }
        end(md);
    }
}

unsafe extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    // SAFETY: Redis passes a value of this type (see `lease_ref`).
    match unsafe { lease_ref(value) } {
        Some(lease) => guard(std::ptr::null_mut(), || {
            // The copy has no expiry timer entry of its own yet (`copy_to` arms one).
            let mut copy = lease.clone();
            copy.set_timer_pending(false);
            Box::into_raw(Box::new(copy)).cast::<c_void>()
        }),
        None => std::ptr::null_mut(),
    }
}
