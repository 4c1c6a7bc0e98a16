//! Server events: promotion (grace + re-armed timers), end of loading (re-armed timers),
//! the server cron (timers that Redis' wall-clock timer wheel would fire late),
//! configuration changes (grace length may have changed), and key moves that carry a held
//! lease to a new name (its expiry timer must follow).

use crate::module::guard::guard;
use crate::module::{blocking, executor, ffi, policy, server, timers};
use redis_module::{raw, Context, ContextFlags};
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicI64, Ordering};

fn on_role_changed(ctx: &Context, now_primary: bool) {
    if now_primary {
        // The old primary may have granted leases (or renewed them) in writes this node
        // never received: wait out the longest possible lease before granting anew.
        timers::start_grace(ctx, "promoted to primary");
        executor::rearm_all(ctx);
    } else {
        timers::stop_all(ctx);
    }
}

fn on_loading_ended(ctx: &Context) {
    if server::is_primary(ctx) {
        // Entries from before the load (`DEBUG RELOAD`, a full resync) name keys that were
        // all replaced: drop them, so `lease_expiry_timers` counts about one per held lease
        // instead of growing with every reload.
        timers::stop_all(ctx);
        executor::rearm_all(ctx);
    }
}

fn on_config_changed(ctx: &Context, names: &[&[u8]]) {
    if names.iter().any(|n| n.starts_with(b"lease.")) {
        timers::arm_grace_timer(ctx);
    }
    // SAFETY (issue 24): while the policy could evict lease keys no grant was made, but a
    // lease evicted meanwhile may still be live in its holder's view (renewed just before it
    // was evicted, for up to lease.max-ttl); a grace of at least max-ttl, whatever
    // lease.grace-ms says, outlasts it before anyone else is granted.
    let policy_changed = names
        .iter()
        .any(|n| std::str::from_utf8(n).is_ok_and(policy::concerns));
    if policy_changed && policy::refresh(ctx) {
        timers::start_grace_for_lost_state(ctx, "maxmemory-policy no longer evicts lease keys");
    }
}

/// Generic keyspace events: a held lease arriving under a new name (RENAME, COPY, RESTORE,
/// MOVE) gets an expiry timer under that name; the blocked acquirers of a name that loses
/// its key by another road than a lease command (DEL, UNLINK, RENAME, MOVE) are answered nil
/// at once (`blocking::unblock_waiters`) instead of waiting until their BLOCK timeout.
fn on_generic_event(ctx: &Context, event: &[u8], key: &[u8]) {
    match event {
        // A primary's RESTORE outside loading comes from a client: MIGRATE (resharding) or
        // a manual DUMP/RESTORE from another server, whose wall clock may differ (issue 24).
        b"restore"
            if server::is_primary(ctx) && !ctx.get_flags().contains(ContextFlags::LOADING) =>
        {
            executor::migrated_key(ctx, key)
        }
        b"rename_to" | b"copy_to" | b"restore" | b"move_to" if server::is_primary(ctx) => {
            executor::rearm_key(ctx, key)
        }
        b"del" | b"rename_from" | b"move_from" => {
            let db = ffi::selected_db(ctx.ctx);
            if blocking::has_waiters(db, key) {
                blocking::unblock_waiters(ctx, Some((db, key)));
            }
        }
        _ => {}
    }
}

/// `FLUSHDB`/`FLUSHALL [ASYNC]` empty the keyspace without a per-key event: every waiter's
/// name lost its key (see `on_generic_event`).
fn on_flushed(ctx: &Context) {
    blocking::unblock_waiters(ctx, None);
}

/// `SWAPDB` moves every lease of two databases at once; the expiry timers are keyed by
/// (db, key) and would keep pointing at the old database. Re-arm all of them: cheap for the
/// tens of leases a deployment has, and it keeps waiters' wake-ups on time.
fn on_swapdb(ctx: &Context) {
    if server::is_primary(ctx) {
        timers::stop_all(ctx);
        executor::rearm_all(ctx);
    }
    // A waiter's name now holds another database's key, or nothing (see `on_generic_event`).
    blocking::unblock_waiters(ctx, None);
}

// ---------------------------------------------------------------------------------------
// Subscriptions
//
// Made by `subscribe`, the last step of a load that can no longer fail. Redis 7.0 keeps a
// failed load's server-event and keyspace subscriptions after it unloads the library (its
// next cron tick or keyspace event then jumps into freed code), so nothing may be subscribed
// before every check has passed. That is also why these are raw callbacks rather than the
// crate's event-handler attributes: `redis_module!` subscribes those before `init` runs,
// whatever `init` then decides.

unsafe extern "C" fn server_event(
    ctx: *mut raw::RedisModuleCtx,
    eid: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    guard((), || {
        let ctx = Context::new(ctx);
        match eid.id {
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED => on_role_changed(
                &ctx,
                subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_MASTER,
            ),
            raw::REDISMODULE_EVENT_LOADING
                if subevent == raw::REDISMODULE_SUBEVENT_LOADING_ENDED =>
            {
                on_loading_ended(&ctx)
            }
            raw::REDISMODULE_EVENT_CONFIG if !data.is_null() => {
                // SAFETY: for this event Redis passes a RedisModuleConfigChange whose names
                // are `num_changes` NUL-terminated strings, alive during the callback.
                let names: Vec<&[u8]> = unsafe {
                    let change = &*data.cast::<raw::RedisModuleConfigChange>();
                    (0..change.num_changes as usize)
                        .map(|i| *change.config_names.add(i))
                        .filter(|p| !p.is_null())
                        .map(|p| CStr::from_ptr(p).to_bytes())
                        .collect()
                };
                on_config_changed(&ctx, &names);
            }
            raw::REDISMODULE_EVENT_CRON_LOOP => on_cron(&ctx),
            raw::REDISMODULE_EVENT_SWAPDB => on_swapdb(&ctx),
            raw::REDISMODULE_EVENT_FLUSHDB if subevent == raw::REDISMODULE_SUBEVENT_FLUSHDB_END => {
                on_flushed(&ctx)
            }
            _ => {}
        }
    })
}

unsafe extern "C" fn keyspace_event(
    ctx: *mut raw::RedisModuleCtx,
    _type: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    guard((), || {
        if event.is_null() || key.is_null() {
            return;
        }
        let ctx = Context::new(ctx);
        // SAFETY: Redis passes the event name as a C string and the key, both alive during
        // the callback.
        let event = unsafe { CStr::from_ptr(event) }.to_bytes();
        on_generic_event(&ctx, event, redis_module::RedisString::string_as_slice(key));
    });
    raw::REDISMODULE_OK as c_int
}

/// The server events the module follows; the role change is the one safety needs (grace on
/// promotion), the others keep timers on time.
const SERVER_EVENTS: [u64; 6] = [
    raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
    raw::REDISMODULE_EVENT_LOADING,
    raw::REDISMODULE_EVENT_CONFIG,
    raw::REDISMODULE_EVENT_CRON_LOOP,
    raw::REDISMODULE_EVENT_SWAPDB,
    raw::REDISMODULE_EVENT_FLUSHDB,
];

fn set_server_event(ctx: &Context, id: u64, on: bool) -> bool {
    let ev = raw::RedisModuleEvent { id, dataver: 1 };
    let cb: raw::RedisModuleEventCallback = if on { Some(server_event) } else { None };
    // SAFETY: valid ctx during OnLoad; the callback matches RedisModuleEventCallback; a NULL
    // callback unsubscribes.
    unsafe {
        raw::RedisModule_SubscribeToServerEvent
            .is_some_and(|sub| sub(ctx.ctx, ev, cb) == raw::REDISMODULE_OK as c_int)
    }
}

/// Subscribes every server event and the generic keyspace events. On a failure undoes what it
/// did (so a refused load leaves nothing behind) and says which one failed.
pub fn subscribe(ctx: &Context) -> Result<(), String> {
    for (i, &id) in SERVER_EVENTS.iter().enumerate() {
        if !set_server_event(ctx, id, true) {
            for &done in &SERVER_EVENTS[..i] {
                set_server_event(ctx, done, false);
            }
            return Err(format!("could not subscribe to server event {id}"));
        }
    }
    // Last: Redis 7.0 has no way to unsubscribe from keyspace events.
    // SAFETY: valid ctx during OnLoad; the callback matches RedisModuleNotificationFunc.
    let ok = unsafe {
        raw::RedisModule_SubscribeToKeyspaceEvents.is_some_and(|sub| {
            sub(
                ctx.ctx,
                redis_module::NotifyEvent::GENERIC.bits(),
                Some(keyspace_event),
            ) == raw::REDISMODULE_OK as c_int
        })
    };
    if !ok {
        for &id in &SERVER_EVENTS {
            set_server_event(ctx, id, false);
        }
        return Err("could not subscribe to keyspace events".into());
    }
    Ok(())
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
fn on_cron(ctx: &Context) {
    {
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
        timers::resume_if_pause_over(ctx);
        if stepped || timers::overdue(now) {
            timers::run_due(ctx, stepped);
        }
        if timers::grace_timer_pending()
            && (stepped || crate::module::node::grace_ms_left(now) == 0)
        {
            timers::end_or_rearm_grace(ctx);
        }
    }
}
