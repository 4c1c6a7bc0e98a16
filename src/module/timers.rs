//! Expiry timers (docs/protocol.md §6: waiters wake at the expiry instant, not on a poll) and the
//! grace-end timer.
//!
//! Expiry: one min-heap of `(fire instant, db, key)` entries under ONE Redis module timer,
//! armed for the earliest entry (issue 16: a Redis timer per lease cost ~250 bytes and a
//! radix-tree insert per lease, and a renew paid a map lookup). An entry is only a promise to
//! look at the key then: what happens is the executor's (`executor::check_expiry`, passed in
//! as `OnDue`), so this file does not depend on it. Entries are never removed early:
//! - a renew only moves the deadline later, so it adds nothing (the lease value remembers its
//!   pending entry, `Lease::timer_pending`, see `executor::run_on_key`); the entry fires
//!   early and the expiry check re-arms for the current deadline;
//! - an entry whose key was deleted, released or re-granted fires and finds nothing due.
//!
//! Due entries are handled in batches of at most `BATCH_BUDGET_US` of work; if more are due
//! the timer is re-armed at 0 ms, so Redis serves clients between batches and an expiry storm
//! (100,000 leases with the same deadline) does not stall the event loop for its whole length.
//!
//! Paused writes (issue 35; docs/failover.md §2.6): while the server forbids propagation
//! (`server::writes_paused`: CLIENT PAUSE, FAILOVER, CLUSTER FAILOVER, SHUTDOWN waiting for a
//! replica), expiry writes `FREE` and a grant writes `HOLD`, and either would abort the server.
//! So due entries stay in the heap and blocked acquirers stay blocked; one poll timer
//! (`PAUSE_POLL_MS`) watches for the end of the pause and then runs the due entries and
//! wakes every waiter. Safe because a lease's expiry is only ever observed *late* that way,
//! never early: the holder's deadline has passed either way, and no other client can be
//! granted the lease before it is freed. Renewals are write commands, which the server itself
//! holds back for the pause; one that runs after its lease's deadline is refused as usual.

use crate::lease::Now;
use crate::module::duekey::DueKey;
use crate::module::guard::{guard, lock};
use crate::module::{blocking, ffi, node, server};
use redis_module::{Context, RedisModuleTimerID};
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// (fire instant in monotonic µs, then db and key in a `DueKey`): 16 bytes. A name, never a
/// reference to a value (see `duekey` for why that keeps stale entries harmless).
pub struct Entry {
    at: u64,
    key: DueKey,
}

impl Entry {
    pub fn new(at: u64, db: i32, key: &[u8]) -> Entry {
        Entry {
            at,
            key: DueKey::new(db, key),
        }
    }
}

// Ordered by instant only, reversed: `BinaryHeap` is a max-heap and pops the earliest.
impl Ord for Entry {
    fn cmp(&self, other: &Entry) -> std::cmp::Ordering {
        other.at.cmp(&self.at)
    }
}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Entry) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Entry {
    fn eq(&self, other: &Entry) -> bool {
        self.at == other.at
    }
}
impl Eq for Entry {}

/// Called for each due entry: (ctx, db, key, true), and for keys with blocked acquirers
/// ahead of their entries: (ctx, db, key, false) = expire it if it is due, nothing else.
/// Returns whether it signalled blocked acquirers.
pub type OnDue = fn(&Context, i32, &[u8], bool) -> bool;

struct Wheel {
    heap: BinaryHeap<Entry>,
    /// The Redis timer and the monotonic instant it was armed for.
    timer: Option<(RedisModuleTimerID, u64)>,
    on_due: Option<OnDue>,
}

lazy_static::lazy_static! {
    static ref EXPIRY: Mutex<Wheel> = Mutex::new(Wheel {
        heap: BinaryHeap::new(),
        timer: None,
        on_due: None,
    });
    static ref GRACE_TIMER: Mutex<Option<RedisModuleTimerID>> = Mutex::new(None);
    /// The poll timer armed while work waits for paused writes to end, and the monotonic
    /// instant the wait was first noticed (for the log line at its end).
    static ref PAUSE_POLL: Mutex<Option<(RedisModuleTimerID, u64)>> = Mutex::new(None);
}
/// A blocked acquirer was retried during a pause and left blocked: wake every waiter after it.
static WAKE_AFTER_PAUSE: AtomicBool = AtomicBool::new(false);
/// How often the end of a pause is looked for: the deferred work runs at most this late.
const PAUSE_POLL_MS: u64 = 10;
const MAX_TIMER_MS: u64 = 86_400_000;
/// Work per timer callback before yielding to the event loop (µs of monotonic time).
const BATCH_BUDGET_US: u64 = 2_000;
/// Keys with blocked acquirers looked at first in each batch (docs/protocol.md §6: a waiter wakes at
/// its lease's expiry, also when 100,000 other leases expire in the same millisecond and
/// its key's entry would come up only a few batches later).
const WAITER_KEYS_FIRST: usize = 256;
/// The clock is read once per this many entries while handling a batch.
const CLOCK_EVERY: usize = 32;

/// Adds an entry: the key is looked at no later than `deadline_mono_us`. The caller has
/// already decided that no entry for this key is pending in time (`Lease::timer_pending`).
pub fn ensure(ctx: &Context, db: i32, key: &[u8], deadline_mono_us: u64, now: Now, on_due: OnDue) {
    let mut w = lock(&EXPIRY);
    w.on_due = Some(on_due);
    w.heap.push(Entry::new(deadline_mono_us, db, key));
    arm(ctx, &mut w, now.mono_us);
}

/// `ensure` for many keys at once (re-arming after loading, promotion, SWAPDB).
pub fn add_many(ctx: &Context, entries: Vec<Entry>, now: Now, on_due: OnDue) {
    if entries.is_empty() {
        return;
    }
    let mut w = lock(&EXPIRY);
    w.on_due = Some(on_due);
    w.heap.extend(entries);
    arm(ctx, &mut w, now.mono_us);
}

/// Arms the one Redis timer for the earliest entry, unless it is already armed no later.
fn arm(ctx: &Context, w: &mut Wheel, now_mono_us: u64) {
    let Some(first) = w.heap.peek().map(|e| e.at) else {
        return;
    };
    if let Some((id, at)) = w.timer {
        if at <= first {
            return;
        }
        let _ = ctx.stop_timer::<()>(id);
        w.timer = None;
    }
    // Round up: firing a little late costs at most a millisecond of wake-up latency, firing
    // early only costs a re-arm. Capped (a day) so no input can overflow the timer API; a
    // farther deadline is simply re-armed when the timer fires.
    let delay_ms = first
        .saturating_sub(now_mono_us)
        .div_ceil(1000)
        .min(MAX_TIMER_MS);
    let id = ctx.create_timer(Duration::from_millis(delay_ms), on_timer, ());
    w.timer = Some((id, now_mono_us.saturating_add(delay_ms * 1000)));
}

fn on_timer(ctx: &Context, _: ()) {
    guard((), || {
        // This timer has fired: nothing to stop.
        lock(&EXPIRY).timer = None;
        run_due(ctx, false);
    })
}

/// Handles due entries for at most one batch budget, then re-arms the timer: at 0 ms if due
/// entries remain, else for the earliest entry. `restart`: drop the Redis timer first (after
/// a wall-clock step it fires at the wrong time; the entries themselves are monotonic).
pub fn run_due(ctx: &Context, restart: bool) {
    if restart {
        if let Some((id, _)) = lock(&EXPIRY).timer.take() {
            let _ = ctx.stop_timer::<()>(id);
        }
    }
    let start = ffi::now().mono_us;
    if server::writes_paused() {
        // Nothing is popped: every due entry waits for the end of the pause (module doc).
        wait_for_pause_end(ctx, start);
        return;
    }
    let mut now = start;
    let first = {
        let w = lock(&EXPIRY);
        match w.heap.peek() {
            Some(e) if e.at <= now => w.on_due,
            _ => None,
        }
    };
    // Signalled waiters are served in Redis' `beforeSleep`, i.e. only once this callback
    // returns. So when the look at waiter keys woke someone, this round ends right here
    // (timer re-armed at 0 ms): the woken acquirers get their grant now, not after a whole
    // batch (docs/protocol.md §6: a waiter wakes at the expiry instant, not after the whole storm).
    let woke = first.is_some_and(|on_due| expire_waiter_keys(ctx, on_due));
    let mut n = 0usize;
    loop {
        if woke {
            break;
        }
        if n > 0 && n.is_multiple_of(CLOCK_EVERY) {
            now = ffi::now().mono_us;
            if now.saturating_sub(start) >= BATCH_BUDGET_US {
                break;
            }
        }
        // Popped under the lock, handled without it: the handler may add entries.
        let (entry, on_due) = {
            let mut w = lock(&EXPIRY);
            if !matches!(w.heap.peek(), Some(e) if e.at <= now) {
                break;
            }
            (w.heap.pop(), w.on_due)
        };
        let (Some(entry), Some(on_due)) = (entry, on_due) else {
            break;
        };
        n += 1;
        on_due(ctx, entry.key.db(), entry.key.key(), true);
    }
    // And once more at the end of a batch: a waiter's deadline that passed during this
    // batch is served right after it, instead of after the next one.
    if n > 0 {
        if let Some(on_due) = lock(&EXPIRY).on_due {
            expire_waiter_keys(ctx, on_due);
        }
    }
    let mut w = lock(&EXPIRY);
    // Entries still due (budget spent): a 0 ms timer lets Redis serve clients first.
    arm(ctx, &mut w, ffi::now().mono_us);
}

/// Called for work that must not write now (due expiry entries, a blocked acquirer's grant):
/// arms the poll timer that resumes it after the pause, unless it is armed already.
/// `waiters`: a blocked acquirer was left blocked, so every waiter is woken after the pause.
pub fn defer_until_writes_resume(ctx: &Context, waiters: bool) {
    if waiters {
        WAKE_AFTER_PAUSE.store(true, Ordering::Relaxed);
    }
    wait_for_pause_end(ctx, ffi::now().mono_us);
}

fn wait_for_pause_end(ctx: &Context, now_mono_us: u64) {
    let mut poll = lock(&PAUSE_POLL);
    if poll.is_some() {
        return;
    }
    ctx.log_notice(
        "lease: the server pauses writes (CLIENT PAUSE, FAILOVER or SHUTDOWN): expiries and grants to waiters wait for the pause to end",
    );
    let id = ctx.create_timer(Duration::from_millis(PAUSE_POLL_MS), on_pause_poll, ());
    *poll = Some((id, now_mono_us));
}

fn on_pause_poll(ctx: &Context, _: ()) {
    guard((), || {
        let since = lock(&PAUSE_POLL).take().map_or(0, |(_, since)| since);
        if server::writes_paused() {
            let id = ctx.create_timer(Duration::from_millis(PAUSE_POLL_MS), on_pause_poll, ());
            *lock(&PAUSE_POLL) = Some((id, since));
            return;
        }
        resume_after_pause(ctx, since);
    })
}

/// From the server cron: the poll timer runs on the wall clock like every module timer (see
/// `events::on_cron`), so after a wall-clock step it could fire late; the cron notices the
/// end of a pause at most one tick late instead.
pub fn resume_if_pause_over(ctx: &Context) {
    let since = {
        let mut poll = lock(&PAUSE_POLL);
        match *poll {
            Some((id, since)) if !server::writes_paused() => {
                let _ = ctx.stop_timer::<()>(id);
                *poll = None;
                since
            }
            _ => return,
        }
    };
    resume_after_pause(ctx, since);
}

fn resume_after_pause(ctx: &Context, since: u64) {
    let waited_ms = ffi::now().mono_us.saturating_sub(since) / 1000;
    ctx.log_notice(&format!(
        "lease: writes resumed after {waited_ms} ms: deferred expiries and grants run now"
    ));
    // Expiry first: a lease that lapsed during the pause is freed, and its waiters
    // signalled, before the other waiters are retried.
    run_due(ctx, false);
    if WAKE_AFTER_PAUSE.swap(false, Ordering::Relaxed) {
        blocking::wake_all_waiters(ctx);
    }
}

/// Expires the due leases among the keys with blocked acquirers; true if any woke someone.
fn expire_waiter_keys(ctx: &Context, on_due: OnDue) -> bool {
    let mut woke = false;
    for (db, key) in blocking::waiter_keys(WAITER_KEYS_FIRST) {
        woke |= on_due(ctx, db, &key, false);
    }
    woke
}

/// Drops every expiry entry (on demotion to replica: replicas never judge expiry, the
/// primary's `FREE` effects do; and before re-arming everything after SWAPDB). Leases keep
/// their `timer_pending` record: every path that arms again afterwards clears it first
/// (`executor::rearm_all` / `rearm_key`).
pub fn stop_all(ctx: &Context) {
    let mut w = lock(&EXPIRY);
    w.heap.clear();
    w.heap.shrink_to_fit();
    if let Some((id, _)) = w.timer.take() {
        let _ = ctx.stop_timer::<()>(id);
    }
}

/// Pending expiry entries (`INFO lease` `lease_expiry_timers`): about one per held lease.
pub fn armed() -> usize {
    lock(&EXPIRY).heap.len()
}

/// Whether the earliest entry's instant has passed (the cron safety net then runs a batch).
pub fn overdue(now: Now) -> bool {
    matches!(lock(&EXPIRY).heap.peek(), Some(e) if e.at <= now.mono_us)
}

// ---------------------------------------------------------------------------------------
// Grace (docs/protocol.md §5)

/// Starts a grace period now (module load, promotion; see `Node::start_grace` for why).
pub fn start_grace(ctx: &Context, why: &str) {
    begin_grace(ctx, why, false);
}

/// Starts a grace period of at least `lease.max-ttl` now: leases were lost in a way no
/// persistence setting covers (eviction; `Node::start_grace_for_lost_state`).
pub fn start_grace_for_lost_state(ctx: &Context, why: &str) {
    begin_grace(ctx, why, true);
}

/// When the running grace is due to end (monotonic µs; 0 = none scheduled).
static GRACE_END_US: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn begin_grace(ctx: &Context, why: &str, lost_state: bool) {
    GRACE_END_US.store(0, Ordering::Relaxed);
    let now = ffi::now();
    node::set_grace_start(now, lost_state);
    let ms = node::snapshot().grace_len_ms();
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
    let now = ffi::now();
    // A grace whose scheduled end has passed is over even if its (ms-granular) timer has not
    // fired yet: a raise of its settings in that instant must not reopen it either.
    let scheduled_end = GRACE_END_US.load(Ordering::Relaxed);
    if scheduled_end != 0 && now.mono_us >= scheduled_end && node::end_grace() {
        ctx.log_notice("lease: grace period ended");
    }
    let left = node::grace_ms_left(now);
    if left == 0 {
        // Over (by time, or a setting lowered to end it): recorded, so that raising the
        // setting later does not reopen it (`Node::grace_over`), and logged once.
        if node::end_grace() {
            ctx.log_notice("lease: grace period ended");
        }
        blocking::wake_all_waiters(ctx);
        return;
    }
    GRACE_END_US.store(
        now.mono_us.saturating_add(left.saturating_mul(1000)),
        Ordering::Relaxed,
    );
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
        if node::end_grace() {
            ctx.log_notice("lease: grace period ended");
        }
        blocking::wake_all_waiters(ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The heap pops the earliest instant first (the `Ord` is reversed on purpose), and an
    /// entry gives back the db and key it was made with.
    #[test]
    fn heap_pops_earliest_entry_first() {
        let mut heap = BinaryHeap::new();
        for (at, db, key) in [(30, 1, "c"), (10, 0, "a"), (20, 15, "b"), (10, 2, "a2")] {
            heap.push(Entry::new(at, db, key.as_bytes()));
        }
        let mut got = vec![];
        while let Some(e) = heap.pop() {
            got.push((e.at, e.key.db(), e.key.key().to_vec()));
        }
        let instants: Vec<u64> = got.iter().map(|g| g.0).collect();
        assert_eq!(instants, [10, 10, 20, 30]);
        assert!(got.contains(&(10, 2, b"a2".to_vec())) && got.contains(&(10, 0, b"a".to_vec())));
        assert_eq!(got[2], (20, 15, b"b".to_vec()));
        assert_eq!(got[3], (30, 1, b"c".to_vec()));
        assert_eq!(std::mem::size_of::<Entry>(), 16);
    }
}
