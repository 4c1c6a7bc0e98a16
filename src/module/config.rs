//! The `lease.*` settings (README, Configuration; one row each in `ROWS`) as Redis stores them.
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

use crate::lease::config::{self as setting, migrate_grace_ms, Config, Setting};
use redis_module::{raw, Context};
use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_longlong, c_void};
use std::sync::atomic::{AtomicI64, Ordering};

pub static MAX_TTL: AtomicI64 = AtomicI64::new(setting::MAX_TTL.default);
pub static GRACE_MS: AtomicI64 = AtomicI64::new(setting::GRACE_MS.default);
pub static MAX_OWNER_LEN: AtomicI64 = AtomicI64::new(setting::MAX_OWNER_LEN.default);
/// `lease.migrate-grace-ms` (issue 24): read by the RESTORE hook only, so not in `Config`.
pub static MIGRATE_GRACE_MS: AtomicI64 = AtomicI64::new(setting::MIGRATE_GRACE_MS.default);

/// One row per setting: the core's row (name, default, bounds) and the atomic Redis writes
/// it to. `register` registers exactly these, in this order.
static ROWS: [(Setting, &AtomicI64); 4] = [
    (setting::MAX_TTL, &MAX_TTL),
    (setting::GRACE_MS, &GRACE_MS),
    (setting::MAX_OWNER_LEN, &MAX_OWNER_LEN),
    (setting::MIGRATE_GRACE_MS, &MIGRATE_GRACE_MS),
];

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

/// The atomic of the setting `name` (a name `parse_module_args` returned).
fn atomic(name: &str) -> Option<&'static AtomicI64> {
    ROWS.iter().find(|(s, _)| s.name == name).map(|&(_, a)| a)
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

/// Registers the settings of `ROWS`, each with the `loadmodule` argument (already validated) as
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
    for &(
        Setting {
            name,
            default: builtin,
            min,
            max,
        },
        atomic,
    ) in &ROWS
    {
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
        let Some(atomic) = atomic(name) else {
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
