//! `lease.max-ttl`, `lease.grace-ms`, `lease.max-owner-len` (README, Configuration) as Redis stores them.
//! Registered as module configs in lib.rs (so `CONFIG SET/GET lease.*` and redis.conf lines
//! work, and Redis itself refuses out-of-range values with its own one-line error), and also
//! accepted as `loadmodule` arguments (parsed in `crate::lease::config`). Redis writes these
//! atomics; everything else reads them through `snapshot`.

use crate::lease::config::{
    migrate_grace_ms, Config, DEFAULT_GRACE_MS, DEFAULT_MAX_OWNER_LEN, DEFAULT_MAX_TTL,
    DEFAULT_MIGRATE_GRACE_MS,
};
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

fn var(name: &str) -> Option<&'static AtomicI64> {
    match name {
        "max-ttl" => Some(&MAX_TTL),
        "grace-ms" => Some(&GRACE_MS),
        "max-owner-len" => Some(&MAX_OWNER_LEN),
        "migrate-grace-ms" => Some(&MIGRATE_GRACE_MS),
        _ => None,
    }
}

/// Stores values `crate::lease::config::parse_module_args` accepted.
pub fn apply_module_args(values: &[(&'static str, i64)]) {
    for (name, v) in values {
        if let Some(a) = var(name) {
            a.store(*v, Ordering::Relaxed);
        }
    }
}
