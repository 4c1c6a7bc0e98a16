//! Server events: promotion (grace + re-armed timers), end of loading (re-armed timers),
//! the server cron (timers that Redis' wall-clock timer wheel would fire late),
//! configuration changes (grace length may have changed), and key moves that carry a held
//! lease to a new name (its expiry timer must follow).

use crate::module::guard::guard;
use crate::module::{executor, ffi, policy, server, timers};
use redis_module::server_events::{LoadingSubevent, ServerRole};
use redis_module::{Context, ContextFlags, NotifyEvent};
use redis_module_macros::{
    config_changed_event_handler, cron_event_handler, loading_event_handler,
    role_changed_event_handler,
};
use std::sync::atomic::{AtomicI64, Ordering};

#[role_changed_event_handler]
fn on_role_changed(ctx: &Context, role: ServerRole) {
    guard((), || match role {
        ServerRole::Primary => {
            // The old primary may have granted leases (or renewed them) in writes this node
            // never received: wait out the longest possible lease before granting anew.
            timers::start_grace(ctx, "promoted to primary");
            executor::rearm_all(ctx);
        }
        ServerRole::Replica => timers::stop_all(ctx),
    })
}

#[loading_event_handler]
fn on_loading(ctx: &Context, ev: LoadingSubevent) {
    guard((), || {
        if ev == LoadingSubevent::Ended && server::is_primary(ctx) {
            executor::rearm_all(ctx);
        }
    })
}

#[config_changed_event_handler]
fn on_config_changed(ctx: &Context, names: &[&str]) {
    guard((), || {
        if names.iter().any(|n| n.starts_with("lease.")) {
            timers::arm_grace_timer(ctx);
        }
        // SAFETY (issue 24): while the policy could evict lease keys no grant was made, but
        // a lease evicted meanwhile may still be live in its holder's view (renewed just
        // before it was evicted, for up to lease.max-ttl); a grace of at least max-ttl,
        // whatever lease.grace-ms says, outlasts it before anyone else is granted.
        if names.iter().any(|n| policy::concerns(n)) && policy::refresh(ctx) {
            timers::start_grace_for_lost_state(ctx, "maxmemory-policy no longer evicts lease keys");
        }
    })
}

/// Generic keyspace events: a held lease arriving under a new name (RENAME, COPY, RESTORE,
/// MOVE) gets an expiry timer under that name.
pub fn on_generic_event(ctx: &Context, _ev: NotifyEvent, event: &str, key: &[u8]) {
    guard((), || {
        if !matches!(event, "rename_to" | "copy_to" | "restore" | "move_to")
            || !server::is_primary(ctx)
        {
            return;
        }
        // A primary's RESTORE outside loading comes from a client: MIGRATE (resharding)
        // or a manual DUMP/RESTORE from another server, whose wall clock may differ.
        if event == "restore" && !ctx.get_flags().contains(ContextFlags::LOADING) {
            executor::migrated_key(ctx, key);
        } else {
            executor::rearm_key(ctx, key);
        }
    })
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
    guard((), || {
        let ctx = Context::new(ctx);
        if server::is_primary(&ctx) {
            timers::stop_all(&ctx);
            executor::rearm_all(&ctx);
        }
    })
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

// ---------------------------------------------------------------------------------------
// Cron safety net: Redis' module timers run on the WALL clock

/// Wall-minus-monotonic offset seen at the previous cron tick (`i64::MIN`: none yet).
static CLOCK_OFFSET_US: AtomicI64 = AtomicI64::new(i64::MIN);
/// An offset change above this between two ticks (100 ms apart at the default hz) is a
/// step of the wall clock, not NTP slewing (≤ 500 ppm = 50 µs per 100 ms).
const STEP_US: i64 = 5_000;

/// Runs on every server cron tick (`hz` times a second). Redis keys module timers on
/// `ustime()`, the wall clock (module.c: `RM_CreateTimer` and `moduleTimerHandler`, Redis
/// 7.0 through 8.x): when the server's wall clock steps back by an hour, every armed expiry
/// timer fires an hour late. The lease itself stays correct (commands judge it on the
/// monotonic clock), but the expiry's effects would not happen on time: blocked acquirers
/// not woken, no `FREE` to replicas, no `lease.expired` event, and BLOCK waiters kept past
/// the end of grace. The cron runs on Redis' monotonic event-loop timer, so here we
/// (1) handle every timer whose monotonic fire time has passed, at most one tick late, and
/// (2) after a detected wall step, re-arm every timer (and the grace timer) so that they
/// fire on time again. In the normal case this finds nothing to do: the timer fired first
/// and removed its entry.
#[cron_event_handler]
fn on_cron(ctx: &Context, _hz: u64) {
    guard((), || {
        let now = ffi::now();
        // No reliable reading this tick: overdue timers below are still handled.
        let (stepped, offset, last) = match ffi::wall_minus_mono_us() {
            Some(offset) => {
                let last = CLOCK_OFFSET_US.swap(offset, Ordering::Relaxed);
                let stepped = last != i64::MIN && (offset - last).abs() > STEP_US;
                (stepped, offset, last)
            }
            None => (false, 0, 0),
        };
        if stepped {
            ctx.log_notice(&format!(
                "lease: server wall clock stepped by {} ms; expiry timers re-armed (lease expiry follows the monotonic clock and is unaffected)",
                (offset - last) / 1000
            ));
        }
        if stepped || timers::overdue(now) {
            timers::run_due(ctx, stepped);
        }
        if timers::grace_timer_pending()
            && (stepped || crate::module::node::grace_ms_left(now) == 0)
        {
            timers::end_or_rearm_grace(ctx);
        }
    })
}
