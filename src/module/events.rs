//! Server events: promotion (grace + re-armed timers), end of loading (re-armed timers),
//! the server cron (timers that Redis' wall-clock timer wheel would fire late),
//! configuration changes (grace length may have changed), and key moves that carry a held
//! lease to a new name (its expiry timer must follow).

use super::datatype::LEASE_TYPE;
use super::{ffi, runtime};
use crate::lease::Lease;
use redis_module::server_events::{LoadingSubevent, ServerRole};
use redis_module::{Context, NotifyEvent, RedisString};
use redis_module_macros::{
    config_changed_event_handler, cron_event_handler, loading_event_handler,
    role_changed_event_handler,
};
use std::panic::{catch_unwind, AssertUnwindSafe};

#[role_changed_event_handler]
fn on_role_changed(ctx: &Context, role: ServerRole) {
    let _ = catch_unwind(AssertUnwindSafe(|| match role {
        ServerRole::Primary => {
            // The old primary may have granted leases (or renewed them) in writes this node
            // never received: wait out the longest possible lease before granting anew.
            runtime::start_grace(ctx, "promoted to primary");
            runtime::rearm_all(ctx);
        }
        ServerRole::Replica => runtime::stop_all_timers(ctx),
    }));
}

/// Server cron: the safety net for module timers, which Redis runs on the wall clock (see
/// `runtime::on_cron`).
#[cron_event_handler]
fn on_cron(ctx: &Context, _hz: u64) {
    let _ = catch_unwind(AssertUnwindSafe(|| runtime::on_cron(ctx)));
}

#[loading_event_handler]
fn on_loading(ctx: &Context, ev: LoadingSubevent) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if ev == LoadingSubevent::Ended && runtime::is_primary(ctx) {
            runtime::rearm_all(ctx);
        }
    }));
}

#[config_changed_event_handler]
fn on_config_changed(ctx: &Context, names: &[&str]) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if names.iter().any(|n| n.starts_with("lease.")) {
            runtime::arm_grace_timer(ctx);
        }
    }));
}

/// Generic keyspace events: a held lease arriving under a new name (RENAME, COPY, RESTORE,
/// MOVE) gets an expiry timer under that name.
pub fn on_generic_event(ctx: &Context, _ev: NotifyEvent, event: &str, key: &[u8]) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if !matches!(event, "rename_to" | "copy_to" | "restore" | "move_to")
            || !runtime::is_primary(ctx)
        {
            return;
        }
        let name = RedisString::create_from_slice(ctx.ctx, key);
        let handle = ctx.open_key(&name);
        if let Ok(Some(lease)) = handle.get_value::<Lease>(&LEASE_TYPE) {
            if let Some(deadline) = lease.deadline_mono_us() {
                runtime::ensure_timer(ctx, ffi::selected_db(ctx.ctx), key, deadline, ffi::now());
            }
        }
    }));
}

/// `SWAPDB` moves every lease of two databases at once; the expiry timers are keyed by
/// (db, key) and would keep pointing at the old database. Re-arm all of them: cheap for the
/// tens of leases a deployment has, and it keeps waiters' wake-ups on time.
unsafe extern "C" fn on_swapdb(
    ctx: *mut redis_module::raw::RedisModuleCtx,
    _eid: redis_module::raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut std::os::raw::c_void,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let ctx = Context::new(ctx);
        if runtime::is_primary(&ctx) {
            runtime::stop_all_timers(&ctx);
            runtime::rearm_all(&ctx);
        }
    }));
}

/// Subscribes the events the crate's macros do not cover.
pub fn subscribe_raw_events(ctx: &Context) {
    use redis_module::raw;
    // SAFETY: valid ctx at load; the callback matches RedisModuleEventCallback.
    unsafe {
        if let Some(sub) = raw::RedisModule_SubscribeToServerEvent {
            let ev = raw::RedisModuleEvent {
                id: raw::REDISMODULE_EVENT_SWAPDB,
                dataver: 1,
            };
            if sub(ctx.ctx, ev, Some(on_swapdb)) != raw::REDISMODULE_OK as std::os::raw::c_int {
                ctx.log_warning("lease: could not subscribe to SWAPDB events");
            }
        }
    }
}
