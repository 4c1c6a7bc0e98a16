//! Process-wide state of the module and the operations every entry point shares: what to do
//! when a lease is granted, renewed, released or expires (replicate, notify, wake, arm a
//! timer), the expiry timers, the grace period and the registry of blocked waiters.
//!
//! All of it runs on Redis' main thread (commands, timers, events, blocked-client callbacks);
//! the mutexes are uncontended and only there to keep Rust's aliasing rules honest.

use super::datatype::LEASE_TYPE;
use super::{config, ffi};
use crate::lease::{Grace, Lease, Now};
use redis_module::key::RedisKeyWritable;
use redis_module::{raw, Context, ContextFlags, RedisModuleTimerID};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Locks ignoring poisoning: a panic is already turned into an error reply at the entry
/// point, and the maps stay structurally valid.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// `INFO lease` counters.
        pub struct Counters { $(pub $name: AtomicU64,)* }
        pub static COUNTERS: Counters = Counters { $($name: AtomicU64::new(0),)* };
        impl Counters {
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name.load(Ordering::Relaxed)),)*]
            }
        }
    };
}

counters!(
    acquired,
    refreshed,
    contended,
    grace_rejected,
    renewed,
    renew_rejected,
    released,
    release_rejected,
    expired,
    fence_ok,
    fence_rejected,
    block_timeouts,
);

pub fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

type KeyId = (i32, Vec<u8>);

struct Armed {
    id: RedisModuleTimerID,
    fire_mono_us: u64,
    gen: u64,
}

struct TimerData {
    db: i32,
    key: Vec<u8>,
    gen: u64,
}

lazy_static::lazy_static! {
    /// One expiry timer per held lease key, at (or before) its deadline.
    static ref TIMERS: Mutex<HashMap<KeyId, Armed>> = Mutex::new(HashMap::new());
    /// Keys with blocked acquirers and how many; woken at the end of grace.
    static ref WAITERS: Mutex<HashMap<KeyId, usize>> = Mutex::new(HashMap::new());
    static ref GRACE_TIMER: Mutex<Option<RedisModuleTimerID>> = Mutex::new(None);
}
const MAX_TIMER_MS: u64 = 86_400_000;
static TIMER_GEN: AtomicU64 = AtomicU64::new(0);
/// Monotonic µs at which the current grace period started (module load or promotion).
static GRACE_START_US: AtomicU64 = AtomicU64::new(0);

/// Highest token this process has issued, applied from its primary, or loaded: the next
/// grant on any key is above it (see `Lease::next_token`).
static TOKEN_WATERMARK: AtomicU64 = AtomicU64::new(0);

pub fn token_floor() -> u64 {
    TOKEN_WATERMARK.load(Ordering::Relaxed).saturating_add(1)
}

pub fn observe_token(token: u64) {
    TOKEN_WATERMARK.fetch_max(token, Ordering::Relaxed);
}

pub fn is_primary(ctx: &Context) -> bool {
    ctx.get_flags().contains(ContextFlags::MASTER)
}

// ---------------------------------------------------------------------------------------
// Grace (SPEC §6)

/// Starts a grace period now. Called at module load (server start) and on promotion:
/// in both cases this server may not know leases that were granted elsewhere (by the old
/// primary, or by its own previous life whose last writes were never persisted), so for
/// `lease.grace-ms` (default: `lease.max-ttl`, the longest lease anyone could hold) it
/// grants nothing new. Leases it does know are renewed as usual.
pub fn start_grace(ctx: &Context, why: &str) {
    GRACE_START_US.store(ffi::now().mono_us, Ordering::Relaxed);
    let ms = config::grace_ms();
    if ms > 0 {
        ctx.log_notice(&format!(
            "lease: grace period of {ms} ms started ({why}): no new lease is granted until it ends"
        ));
    }
    arm_grace_timer(ctx);
}

pub fn grace_ms_left(now: Now) -> u64 {
    Grace::starting_at(GRACE_START_US.load(Ordering::Relaxed))
        .ms_left(now.mono_us, config::grace_ms())
}

/// (Re)arms the single grace-end timer from the configuration in force; when grace is
/// already over, wakes every blocked acquirer at once (so lowering `lease.grace-ms` to 0
/// ends it for waiters too, not only for new commands).
pub fn arm_grace_timer(ctx: &Context) {
    if let Some(id) = lock(&GRACE_TIMER).take() {
        let _ = ctx.stop_timer::<()>(id);
    }
    let left = grace_ms_left(ffi::now());
    if left == 0 {
        wake_all_waiters(ctx);
        return;
    }
    let id = ctx.create_timer(Duration::from_millis(left), on_grace_timer, ());
    *lock(&GRACE_TIMER) = Some(id);
}

fn on_grace_timer(ctx: &Context, _: ()) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        *lock(&GRACE_TIMER) = None;
        end_or_rearm_grace(ctx);
    }));
}

fn end_or_rearm_grace(ctx: &Context) {
    if grace_ms_left(ffi::now()) > 0 {
        // The timer is ms-granular (and wall-clock based, see `on_cron`); re-arm for the
        // remainder.
        arm_grace_timer(ctx);
    } else {
        if let Some(id) = lock(&GRACE_TIMER).take() {
            let _ = ctx.stop_timer::<()>(id);
        }
        ctx.log_notice("lease: grace period ended");
        wake_all_waiters(ctx);
    }
}

// ---------------------------------------------------------------------------------------
// Waiters (BLOCK)

pub fn add_waiter(db: i32, key: &[u8]) {
    *lock(&WAITERS).entry((db, key.to_vec())).or_insert(0) += 1;
}

pub fn remove_waiter(db: i32, key: &[u8]) {
    let mut w = lock(&WAITERS);
    let id = (db, key.to_vec());
    if let Some(n) = w.get_mut(&id) {
        *n -= 1;
        if *n == 0 {
            w.remove(&id);
        }
    }
}

pub fn blocked_clients() -> u64 {
    lock(&WAITERS).values().map(|&n| n as u64).sum()
}

fn wake_all_waiters(ctx: &Context) {
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

// ---------------------------------------------------------------------------------------
// Effects shared by every entry point

/// A held lease passed its deadline (found by the timer or lazily by a write command):
/// it is already freed in memory; tell replicas/AOF, subscribers and waiters.
pub fn on_expired(ctx: &Context, key: *mut raw::RedisModuleString, token: u64) {
    bump(&COUNTERS.expired);
    ffi::replicate_effect(ctx.ctx, key, &crate::lease::Effect::Free { token });
    ffi::notify(ctx.ctx, ffi::EV_EXPIRED, key);
    ffi::signal_ready(ctx.ctx, key);
}

/// After a grant, refresh or renew (or the creation of a free lease key for waiters):
/// replicate the new state and, if held, make sure a timer will fire at the deadline.
pub fn on_held(ctx: &Context, key: *mut raw::RedisModuleString, lease: &Lease, now: Now) {
    ffi::replicate_effect(ctx.ctx, key, &lease.effect(now));
    if let Some(deadline) = lease.deadline_mono_us() {
        let name = redis_module::RedisString::string_as_slice(key);
        ensure_timer(ctx, ffi::selected_db(ctx.ctx), name, deadline, now);
    }
}

// ---------------------------------------------------------------------------------------
// Expiry timers (SPEC §7: waiters wake at the expiry instant, not on a poll)

/// Makes sure a timer fires no later than `deadline_mono_us` for this key. A timer that
/// fires early (the lease was renewed meanwhile) just re-arms itself for the new deadline,
/// so a renew never has to touch the timer: one timer per lease, whatever the renew rate.
pub fn ensure_timer(ctx: &Context, db: i32, key: &[u8], deadline_mono_us: u64, now: Now) {
    let mut timers = lock(&TIMERS);
    let id = (db, key.to_vec());
    if let Some(a) = timers.get(&id) {
        if a.fire_mono_us <= deadline_mono_us {
            return;
        }
        let _ = ctx.stop_timer::<TimerData>(a.id);
    }
    // Round up: firing a little late costs at most a millisecond of wake-up latency, firing
    // early only costs a re-arm. Capped (a day) so no input can overflow the timer API; a
    // farther deadline is simply re-armed when the timer fires.
    let delay_ms = deadline_mono_us
        .saturating_sub(now.mono_us)
        .div_ceil(1000)
        .min(MAX_TIMER_MS);
    let gen = TIMER_GEN.fetch_add(1, Ordering::Relaxed);
    let data = TimerData {
        db,
        key: key.to_vec(),
        gen,
    };
    let tid = ctx.create_timer(Duration::from_millis(delay_ms), on_expiry_timer, data);
    timers.insert(
        id,
        Armed {
            id: tid,
            fire_mono_us: now.mono_us.saturating_add(delay_ms * 1000),
            gen,
        },
    );
}

/// Drops every expiry timer (on demotion to replica: replicas never judge expiry, the
/// primary's `FREE` effects do).
pub fn stop_all_timers(ctx: &Context) {
    let all: Vec<Armed> = lock(&TIMERS).drain().map(|(_, a)| a).collect();
    for a in all {
        let _ = ctx.stop_timer::<TimerData>(a.id);
    }
}

pub fn armed_timers() -> usize {
    lock(&TIMERS).len()
}

fn on_expiry_timer(ctx: &Context, data: TimerData) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        {
            let mut timers = lock(&TIMERS);
            let id = (data.db, data.key.clone());
            if timers.get(&id).map(|a| a.gen) == Some(data.gen) {
                timers.remove(&id);
            }
        }
        check_expiry(ctx, data.db, &data.key);
    }));
}

/// Frees the lease at `key` if its monotonic deadline has passed, else re-arms its timer.
/// The caller has already removed the key's entry from `TIMERS`.
fn check_expiry(ctx: &Context, db: i32, key_name: &[u8]) {
    // Only the primary judges expiry; a replica waits for the primary's FREE effect.
    let before = ffi::selected_db(ctx.ctx);
    if !is_primary(ctx) || !ffi::select_db(ctx.ctx, db) {
        return;
    }
    let now = ffi::now();
    let key = ffi::string(ctx.ctx, key_name);
    {
        let handle = RedisKeyWritable::open_with_redis_string(ctx.ctx, key.inner);
        if let Ok(Some(lease)) = handle.get_value::<Lease>(&LEASE_TYPE) {
            if let Some(token) = lease.expire_due(now) {
                on_expired(ctx, key.inner, token);
            } else if let Some(deadline) = lease.deadline_mono_us() {
                ensure_timer(ctx, db, key_name, deadline, now);
            }
        }
    }
    ffi::select_db(ctx.ctx, before);
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
/// and removed its entry. Entries in `TIMERS` always belong to timers that have not fired,
/// so stopping them here never double-handles an expiry.
pub fn on_cron(ctx: &Context) {
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
    let due: Vec<(KeyId, Armed)> = {
        let mut timers = lock(&TIMERS);
        let ids: Vec<KeyId> = timers
            .iter()
            .filter(|(_, a)| stepped || a.fire_mono_us <= now.mono_us)
            .map(|(id, _)| id.clone())
            .collect();
        ids.into_iter()
            .filter_map(|id| timers.remove(&id).map(|a| (id, a)))
            .collect()
    };
    for ((db, key), armed) in due {
        let _ = ctx.stop_timer::<TimerData>(armed.id);
        check_expiry(ctx, db, &key);
    }
    let grace_pending = lock(&GRACE_TIMER).is_some();
    if grace_pending && (stepped || grace_ms_left(now) == 0) {
        end_or_rearm_grace(ctx);
    }
}

/// Arms a timer for every held lease in every database: after loading (RDB/AOF) and on
/// promotion, when leases exist that no command of this process has touched yet.
pub fn rearm_all(ctx: &Context) {
    let dbs = database_count(ctx);
    let before = ffi::selected_db(ctx.ctx);
    let now = ffi::now();
    let mut found = 0usize;
    for db in 0..dbs {
        if !ffi::select_db(ctx.ctx, db) {
            continue;
        }
        let mut held: Vec<(Vec<u8>, u64)> = vec![];
        scan_leases(ctx, &mut |name, lease| {
            if let Some(d) = lease.deadline_mono_us() {
                held.push((name.to_vec(), d));
            }
        });
        for (name, deadline) in held {
            ensure_timer(ctx, db, &name, deadline, now);
            found += 1;
        }
    }
    ffi::select_db(ctx.ctx, before);
    if found > 0 {
        ctx.log_notice(&format!(
            "lease: expiry timers armed for {found} held lease(s)"
        ));
    }
}

fn database_count(ctx: &Context) -> i32 {
    config_u64(ctx, "databases")
        .and_then(|n| i32::try_from(n).ok())
        .unwrap_or(16)
}

/// A numeric server setting, via `CONFIG GET name` -> ["name", "value"].
fn config_u64(ctx: &Context, name: &str) -> Option<u64> {
    match ctx.call("CONFIG", &["GET", name]) {
        Ok(redis_module::RedisValue::Array(v)) => v.get(1).and_then(|x| match x {
            redis_module::RedisValue::SimpleString(s) => s.parse().ok(),
            redis_module::RedisValue::BulkString(s) => s.parse().ok(),
            redis_module::RedisValue::BulkRedisString(s) => s.to_string_lossy().parse().ok(),
            redis_module::RedisValue::StringBuffer(b) => {
                std::str::from_utf8(b).ok().and_then(|s| s.parse().ok())
            }
            _ => None,
        }),
        _ => None,
    }
}

/// Does `min-replicas-to-write` allow a write right now? Redis checks it when a `write`
/// command arrives, but not when a blocked module client is served later; a BLOCKed
/// acquirer admitted while the replicas were up must not be granted after they went away
/// (that grant would exist on no replica, exactly what the setting is there to stop).
/// `INFO replication` carries `min_slaves_good_slaves` only while the setting is active, so
/// the common case (not configured) costs one INFO section and no CONFIG call.
pub fn replicas_allow_write(ctx: &Context) -> bool {
    if !is_primary(ctx) {
        return true;
    }
    let Some(good) = ctx
        .server_info("replication")
        .field("min_slaves_good_slaves")
        .and_then(|v| v.to_string_lossy().trim().parse::<u64>().ok())
    else {
        return true;
    };
    good >= config_u64(ctx, "min-replicas-to-write").unwrap_or(0)
}

/// Calls `f(name, lease)` for each lease key of the selected database.
fn scan_leases(ctx: &Context, f: &mut dyn FnMut(&[u8], &Lease)) {
    unsafe extern "C" fn cb(
        _ctx: *mut raw::RedisModuleCtx,
        keyname: *mut raw::RedisModuleString,
        key: *mut raw::RedisModuleKey,
        privdata: *mut std::os::raw::c_void,
    ) {
        if key.is_null() {
            return;
        }
        let f = &mut *(privdata as *mut &mut dyn FnMut(&[u8], &Lease));
        let ty = raw::RedisModule_ModuleTypeGetType.map_or(std::ptr::null_mut(), |g| g(key));
        if ty.is_null() || ty != *LEASE_TYPE.raw_type.borrow() {
            return;
        }
        let v = raw::RedisModule_ModuleTypeGetValue.map_or(std::ptr::null_mut(), |g| g(key));
        if let Some(lease) = (v as *const Lease).as_ref() {
            f(redis_module::RedisString::string_as_slice(keyname), lease);
        }
    }
    // SAFETY: the cursor is created and destroyed here; the callback only reads the key
    // Redis opened for it; `f` outlives the scan.
    unsafe {
        let (Some(create), Some(scan), Some(destroy)) = (
            raw::RedisModule_ScanCursorCreate,
            raw::RedisModule_Scan,
            raw::RedisModule_ScanCursorDestroy,
        ) else {
            return;
        };
        let cursor = create();
        let mut fref: &mut dyn FnMut(&[u8], &Lease) = f;
        let p = &mut fref as *mut &mut dyn FnMut(&[u8], &Lease) as *mut std::os::raw::c_void;
        while scan(ctx.ctx, cursor, Some(cb), p) != 0 {}
        destroy(cursor);
    }
}
