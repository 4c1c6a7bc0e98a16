//! `lease.max-ttl`, `lease.grace-ms`, `lease.max-owner-len` (README, Configuration) as Redis stores them.
//! Registered as module configs by `register` (so `CONFIG SET/GET lease.*`, redis.conf lines
//! and `MODULE LOADEX ... CONFIG` work, and Redis itself refuses out-of-range values with its
//! own one-line error), and also accepted as `loadmodule` arguments (parsed in
//! `crate::lease::config`). Redis writes these atomics; everything else reads them through
//! `snapshot`.
//!
//! Which wins when a setting is given both ways (issue 35, item 3): the config line. A
//! `loadmodule` argument only sets the setting's *default*: `CONFIG SET` + `CONFIG REWRITE`
//! then writes a config line exactly when the value differs from it, and after a restart that
//! line is what counts. When a line overrides an argument with another value, the server log
//! says so at every load, naming both values and the winner.

use crate::lease::config::{
    migrate_grace_ms, Config, BOUNDS, DEFAULT_GRACE_MS, DEFAULT_MAX_OWNER_LEN, DEFAULT_MAX_TTL,
    DEFAULT_MIGRATE_GRACE_MS,
};
use redis_module::{raw, Context};
use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_longlong, c_void};
use std::sync::atomic::{AtomicI64, Ordering};

pub static MAX_TTL: AtomicI64 = AtomicI64::new(DEFAULT_MAX_TTL);
pub static GRACE_MS: AtomicI64 = AtomicI64::new(DEFAULT_GRACE_MS);
pub static MAX_OWNER_LEN: AtomicI64 = AtomicI64::new(DEFAULT_MAX_OWNER_LEN);
/// `lease.migrate-grace-ms` (issue 24): read by the RESTORE hook only, so not in `Config`.
pub static MIGRATE_GRACE_MS: AtomicI64 = AtomicI64::new(DEFAULT_MIGRATE_GRACE_MS);

pub fn snapshot() -> Config {
    Config {
        max_ttl: MAX_TTL.load(Ordering::Relaxed),
        grace_ms: GRACE_MS.load(Ordering::Relaxed),
        max_owner_len: MAX_OWNER_LEN.load(Ordering::Relaxed),
    }
}

/// The floor on a migrated lease's remaining time now (`lease.migrate-grace-ms`).
pub fn migrate_grace() -> u64 {
    migrate_grace_ms(
        MIGRATE_GRACE_MS.load(Ordering::Relaxed),
        MAX_TTL.load(Ordering::Relaxed),
    )
}

/// (atomic, built-in default) of each name of `BOUNDS`.
fn var(name: &str) -> Option<(&'static AtomicI64, i64)> {
    match name {
        "max-ttl" => Some((&MAX_TTL, DEFAULT_MAX_TTL)),
        "grace-ms" => Some((&GRACE_MS, DEFAULT_GRACE_MS)),
        "max-owner-len" => Some((&MAX_OWNER_LEN, DEFAULT_MAX_OWNER_LEN)),
        "migrate-grace-ms" => Some((&MIGRATE_GRACE_MS, DEFAULT_MIGRATE_GRACE_MS)),
        _ => None,
    }
}

extern "C" fn get_value(_name: *const c_char, privdata: *mut c_void) -> c_longlong {
    // SAFETY: `register` passes a pointer to one of the static atomics as privdata.
    unsafe { privdata.cast::<AtomicI64>().as_ref() }.map_or(0, |a| a.load(Ordering::Relaxed))
}

extern "C" fn set_value(
    _name: *const c_char,
    value: c_longlong,
    privdata: *mut c_void,
    _err: *mut *mut raw::RedisModuleString,
) -> c_int {
    // Redis has already checked the bounds given at registration.
    // SAFETY: as in `get_value`.
    match unsafe { privdata.cast::<AtomicI64>().as_ref() } {
        Some(a) => {
            a.store(value, Ordering::Relaxed);
            raw::REDISMODULE_OK as c_int
        }
        None => raw::REDISMODULE_ERR as c_int,
    }
}

/// Registers the three settings, each with the `loadmodule` argument (already validated) as
/// its default where one was given, and loads what redis.conf or `MODULE LOADEX ... CONFIG`
/// says. An error refuses the load: Redis then removes the registered configs itself, and
/// nothing else has been registered that outlives the library (see `events::subscribe`).
pub fn register(ctx: &Context, args: &[(&'static str, i64)]) -> Result<(), String> {
    // SAFETY: reading function pointers Redis filled in at module load.
    let (Some(reg), Some(load)) = (unsafe { raw::RedisModule_RegisterNumericConfig }, unsafe {
        raw::RedisModule_LoadConfigs
    }) else {
        return Err("this server has no module configuration API".into());
    };
    for &(name, min, max) in &BOUNDS {
        let Some((atomic, builtin)) = var(name) else {
            continue;
        };
        let default = args
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map_or(builtin, |&(_, v)| v);
        let cname = CString::new(name).map_err(|e| e.to_string())?;
        // SAFETY: valid ctx during OnLoad; Redis copies the name; the callbacks match the
        // numeric config signatures; privdata is a static atomic, valid forever.
        let status = unsafe {
            reg(
                ctx.ctx,
                cname.as_ptr(),
                default,
                raw::REDISMODULE_CONFIG_DEFAULT,
                min,
                max,
                Some(get_value),
                Some(set_value),
                None,
                (atomic as *const AtomicI64).cast_mut().cast::<c_void>(),
            )
        };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(format!("could not register the setting lease.{name}"));
        }
    }
    // SAFETY: valid ctx during OnLoad, after every config is registered.
    if unsafe { load(ctx.ctx) } != raw::REDISMODULE_OK as c_int {
        // Redis logged which value it refused on the line before.
        return Err("a lease.* setting was refused (the line above names it)".into());
    }
    for &(name, arg) in args {
        let Some((atomic, _)) = var(name) else {
            continue;
        };
        let now = atomic.load(Ordering::Relaxed);
        if now != arg {
            ctx.log_warning(&format!(
                "lease: lease.{name} is set both as a loadmodule argument ({arg}) and by a config line, CONFIG REWRITE or MODULE LOADEX CONFIG ({now}): the config line wins, lease.{name} is {now}; remove one of the two"
            ));
        }
    }
    Ok(())
}
