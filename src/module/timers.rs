//! Expiry timers (SPEC §7: waiters wake at the expiry instant, not on a poll) and the
//! grace-end timer. One expiry timer per held lease key, at (or before) its deadline; what
//! happens when one fires is the executor's (`executor::on_expiry_timer`, passed in), so this
//! file does not depend on it.

use crate::lease::Now;
use crate::module::guard::{guard, lock};
use crate::module::{blocking, ffi, node};
use redis_module::{Context, RedisModuleTimerID};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

pub type KeyId = (i32, Vec<u8>);

pub struct Armed {
    id: RedisModuleTimerID,
    fire_mono_us: u64,
    gen: u64,
}

/// What an expiry timer carries to its callback.
pub struct TimerData {
    pub db: i32,
    pub key: Vec<u8>,
    gen: u64,
}

pub type OnFire = fn(&Context, TimerData);

lazy_static::lazy_static! {
    static ref TIMERS: Mutex<HashMap<KeyId, Armed>> = Mutex::new(HashMap::new());
    static ref GRACE_TIMER: Mutex<Option<RedisModuleTimerID>> = Mutex::new(None);
}
const MAX_TIMER_MS: u64 = 86_400_000;
static TIMER_GEN: AtomicU64 = AtomicU64::new(0);

/// Makes sure a timer fires no later than `deadline_mono_us` for this key. A timer that
/// fires early (the lease was renewed meanwhile) just re-arms itself for the new deadline,
/// so a renew never has to touch the timer: one timer per lease, whatever the renew rate.
pub fn ensure(
    ctx: &Context,
    db: i32,
    key: &[u8],
    deadline_mono_us: u64,
    now: Now,
    on_fire: OnFire,
) {
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
    let tid = ctx.create_timer(Duration::from_millis(delay_ms), on_fire, data);
    timers.insert(
        id,
        Armed {
            id: tid,
            fire_mono_us: now.mono_us.saturating_add(delay_ms * 1000),
            gen,
        },
    );
}

/// A timer fired: forget it unless a newer one replaced it meanwhile.
pub fn fired(data: &TimerData) {
    let mut timers = lock(&TIMERS);
    let id = (data.db, data.key.clone());
    if timers.get(&id).map(|a| a.gen) == Some(data.gen) {
        timers.remove(&id);
    }
}

/// Drops every expiry timer (on demotion to replica: replicas never judge expiry, the
/// primary's `FREE` effects do; and before re-arming everything after SWAPDB).
pub fn stop_all(ctx: &Context) {
    let all: Vec<Armed> = lock(&TIMERS).drain().map(|(_, a)| a).collect();
    for a in all {
        let _ = ctx.stop_timer::<TimerData>(a.id);
    }
}

/// Removes and stops the timers due by `now` (every timer if `all`): the cron safety net
/// handles them itself. Entries in the map always belong to timers that have not fired, so
/// stopping them here never double-handles an expiry.
pub fn take_due(ctx: &Context, now: Now, all: bool) -> Vec<KeyId> {
    let due: Vec<(KeyId, Armed)> = {
        let mut timers = lock(&TIMERS);
        let ids: Vec<KeyId> = timers
            .iter()
            .filter(|(_, a)| all || a.fire_mono_us <= now.mono_us)
            .map(|(id, _)| id.clone())
            .collect();
        ids.into_iter()
            .filter_map(|id| timers.remove(&id).map(|a| (id, a)))
            .collect()
    };
    due.into_iter()
        .map(|(id, armed)| {
            let _ = ctx.stop_timer::<TimerData>(armed.id);
            id
        })
        .collect()
}

pub fn armed() -> usize {
    lock(&TIMERS).len()
}

// ---------------------------------------------------------------------------------------
// Grace (SPEC §6)

/// Starts a grace period now (module load, promotion; see `Node::start_grace` for why).
pub fn start_grace(ctx: &Context, why: &str) {
    let now = ffi::now();
    node::set_grace_start(now);
    let ms = node::snapshot().config.grace_ms();
    if ms > 0 {
        ctx.log_notice(&format!(
            "lease: grace period of {ms} ms started ({why}): no new lease is granted until it ends"
        ));
    }
    arm_grace_timer(ctx);
}

/// (Re)arms the single grace-end timer from the configuration in force; when grace is
/// already over, wakes every blocked acquirer at once (so lowering `lease.grace-ms` to 0
/// ends it for waiters too, not only for new commands).
pub fn arm_grace_timer(ctx: &Context) {
    if let Some(id) = lock(&GRACE_TIMER).take() {
        let _ = ctx.stop_timer::<()>(id);
    }
    let left = node::grace_ms_left(ffi::now());
    if left == 0 {
        blocking::wake_all_waiters(ctx);
        return;
    }
    let id = ctx.create_timer(Duration::from_millis(left), on_grace_timer, ());
    *lock(&GRACE_TIMER) = Some(id);
}

fn on_grace_timer(ctx: &Context, _: ()) {
    guard((), || {
        *lock(&GRACE_TIMER) = None;
        end_or_rearm_grace(ctx);
    })
}

pub fn grace_timer_pending() -> bool {
    lock(&GRACE_TIMER).is_some()
}

pub fn end_or_rearm_grace(ctx: &Context) {
    if node::grace_ms_left(ffi::now()) > 0 {
        // The timer is ms-granular (and wall-clock based, see `events::on_cron`); re-arm for
        // the remainder.
        arm_grace_timer(ctx);
    } else {
        if let Some(id) = lock(&GRACE_TIMER).take() {
            let _ = ctx.stop_timer::<()>(id);
        }
        ctx.log_notice("lease: grace period ended");
        blocking::wake_all_waiters(ctx);
    }
}
