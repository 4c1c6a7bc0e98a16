//! The server's eviction policy as the lease sees it (issue 24): lease keys carry no Redis
//! TTL, so `volatile-*` never evicts them, but under `allkeys-*` with `maxmemory` set an
//! eviction deletes a held lease without anyone being told (a silent forced release). While
//! that can happen the module grants nothing (`crate::lease::admit`), warns in the log, and
//! shows it in `INFO lease`; the state is read at load and again on every `CONFIG SET` of
//! `maxmemory` or `maxmemory-policy` (the config-change server event), so the check on a
//! grant is one atomic load.

use crate::lease::admit::policy_evicts_leases;
use crate::module::guard::lock;
use crate::module::server;
use redis_module::Context;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

static EVICTING: AtomicBool = AtomicBool::new(false);
lazy_static::lazy_static! {
    static ref POLICY: Mutex<String> = Mutex::new(String::new());
}

/// The config names whose change makes `refresh` necessary.
pub fn concerns(name: &str) -> bool {
    name == "maxmemory" || name == "maxmemory-policy"
}

/// Reads `maxmemory` and `maxmemory-policy` and records whether eviction can remove a lease
/// key; logs a warning when it starts to, a notice when it stops. Returns true when it
/// stopped just now (the caller starts a grace period: a lease evicted meanwhile may still
/// be live in its holder's view).
pub fn refresh(ctx: &Context) -> bool {
    let policy = server::config_string(ctx, "maxmemory-policy").unwrap_or_default();
    let maxmemory = server::config_string(ctx, "maxmemory")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    // maxmemory 0 = no limit: nothing is ever evicted, whatever the policy says.
    let evicting = maxmemory > 0 && policy_evicts_leases(&policy);
    let was = EVICTING.swap(evicting, Ordering::Relaxed);
    *lock(&POLICY) = policy.clone();
    if evicting && !was {
        ctx.log_warning(&format!(
            "lease: maxmemory-policy {policy} can evict lease keys (a silent forced release): LEASE.ACQUIRE is refused until the policy is noeviction or volatile-* (or maxmemory 0)"
        ));
    }
    if was && !evicting {
        ctx.log_notice(&format!(
            "lease: maxmemory-policy {policy} (maxmemory {maxmemory}) no longer evicts lease keys: grants resume after a grace period"
        ));
    }
    was && !evicting
}

/// The policy's name while it can evict lease keys.
pub fn evicting() -> Option<String> {
    EVICTING
        .load(Ordering::Relaxed)
        .then(|| lock(&POLICY).clone())
}

/// (`lease_evicting`, `lease_maxmemory_policy`) of `INFO lease`.
pub fn info() -> (bool, String) {
    (EVICTING.load(Ordering::Relaxed), lock(&POLICY).clone())
}
