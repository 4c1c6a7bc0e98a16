//! The engine's vocabulary: what a caller tells it (`Call`), what it answers (`Outcome`:
//! `Reply`, `Store`, the ordered `Effect`s) and the effect sequences several handlers share
//! (a lazily found expiry, a lease held anew). The handlers (one file per request, next to
//! its `*_test.rs`) build on this; `engine/mod.rs` dispatches to them.

use crate::error::LeaseError;
use crate::state::{Apply, Lease, Now};

/// Facts about the caller that the engine may not find out itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Call {
    /// The client may block (not inside MULTI, Lua, a function, or a deny-blocking context).
    pub can_block: bool,
    /// The command comes from the primary's replication stream or from loading the AOF:
    /// the only sources allowed to send `LEASE.APPLY`.
    pub from_primary_or_loading: bool,
    /// The command comes from the primary's replication stream (not the AOF).
    pub replicated: bool,
    /// `min-replicas-to-write` is met right now. Only consulted for `AcquireRetry`: Redis
    /// checks it when a command arrives, not when a blocked client is served later.
    pub replicas_ok: bool,
}

/// `INFO lease` counters, in the order `INFO` lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    Acquired,
    Refreshed,
    Contended,
    GraceRejected,
    Renewed,
    RenewRejected,
    Released,
    ReleaseRejected,
    Expired,
    FenceOk,
    FenceRejected,
    BlockTimeouts,
    /// ACQUIRE, RENEW or RAISE refused because the key is bound to another membership.
    MembershipRejected,
}

impl Counter {
    pub const ALL: [Counter; 13] = [
        Counter::Acquired,
        Counter::Refreshed,
        Counter::Contended,
        Counter::GraceRejected,
        Counter::Renewed,
        Counter::RenewRejected,
        Counter::Released,
        Counter::ReleaseRejected,
        Counter::Expired,
        Counter::FenceOk,
        Counter::FenceRejected,
        Counter::BlockTimeouts,
        Counter::MembershipRejected,
    ];

    /// Field name in `INFO lease` (after the `lease_` prefix).
    pub fn name(self) -> &'static str {
        match self {
            Counter::Acquired => "acquired",
            Counter::Refreshed => "refreshed",
            Counter::Contended => "contended",
            Counter::GraceRejected => "grace_rejected",
            Counter::Renewed => "renewed",
            Counter::RenewRejected => "renew_rejected",
            Counter::Released => "released",
            Counter::ReleaseRejected => "release_rejected",
            Counter::Expired => "expired",
            Counter::FenceOk => "fence_ok",
            Counter::FenceRejected => "fence_rejected",
            Counter::BlockTimeouts => "block_timeouts",
            Counter::MembershipRejected => "membership_rejected",
        }
    }
}

/// Keyspace notifications (module event class) for subscribers (docs/protocol.md §6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    Acquired,
    Released,
    Expired,
}

/// A side effect, always about the request's key unless it says otherwise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Send this decision to replicas and the AOF as `LEASE.APPLY` (never the command a
    /// replica would re-judge against its own clock, docs/protocol.md §4).
    Replicate(Apply),
    /// Propagate the command as received (a replica's `LEASE.APPLY`, so that the replica's
    /// own AOF records it; module commands are never propagated implicitly).
    ReplicateVerbatim,
    Notify(Event),
    /// Signal the key ready: Redis retries its blocked acquirers, in arrival order, right
    /// after the current command or callback.
    WakeWaiters,
    /// Make sure the key's expiry timer fires no later than this monotonic instant.
    ArmTimer {
        deadline_mono_us: u64,
    },
    /// Block the calling client on the key for `timeout_ms` (0 = forever); it is retried
    /// as `Request::AcquireRetry { owner, ttl_ms }` whenever the key is signalled.
    Block {
        owner: Vec<u8>,
        ttl_ms: u64,
        timeout_ms: u64,
    },
    Count(Counter),
    /// Raise the node's token watermark to at least this token.
    ObserveToken(u64),
}

/// What the client is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Int(i64),
    Null,
    /// `+OK`
    Ok,
    Error(LeaseError),
    /// `LEASE.GET` of a live lease: `[owner, token, pttl]` (a map under RESP3).
    Holder {
        owner: Vec<u8>,
        token: u64,
        pttl_ms: u64,
    },
    /// `LEASE.INFO` of an existing key; `holder` is `(owner, token, pttl_ms)` while live.
    Info {
        holder: Option<(Vec<u8>, u64, u64)>,
        last_token: u64,
        grants: u64,
        /// The key's quorum membership binding (`LEASE.MEMBERSHIP`), if any.
        membership: Option<u64>,
    },
    /// The client was blocked (see `Effect::Block`): it is answered later.
    Blocked,
    /// A retried blocked acquirer was not granted: it stays blocked, nothing is sent.
    StayBlocked,
    /// The token checked out: the reply is the fenced inner command's own, and `FenceOk` is
    /// counted only if that command could be run.
    RunFenced,
    /// Internal requests (`Expire`, `Rearm`, `Migrated`) have no client.
    Nothing,
}

/// What to store at the key. A present lease is changed in place by the engine (the caller
/// lent it `&mut`); an absent key is only created when the engine says so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Store {
    Keep,
    Create(Lease),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub reply: Reply,
    pub store: Store,
    pub effects: Vec<Effect>,
}

impl Outcome {
    pub(super) fn new(effects: Vec<Effect>, reply: Reply) -> Outcome {
        Outcome {
            reply,
            store: Store::Keep,
            effects,
        }
    }
}

/// Frees the lease if its deadline passed, with every effect of an expiry. Write commands
/// call this first so that they never act on a lapsed holder. Returns whether it expired.
pub(super) fn expire_lazily(lease: &mut Lease, now: Now, fx: &mut Vec<Effect>) -> bool {
    match lease.expire_due(now) {
        Some(token) => {
            fx.push(Effect::Count(Counter::Expired));
            fx.push(Effect::Replicate(Apply::Free {
                token,
                membership: lease.membership(),
            }));
            fx.push(Effect::Notify(Event::Expired));
            fx.push(Effect::WakeWaiters);
            true
        }
        None => false,
    }
}

/// After a grant, refresh or renew (or the creation of a free lease key for waiters):
/// replicate the new state and, if held, make sure a timer will fire at the deadline. A
/// renew never moves the timer back: one that fires early just re-arms (see `Expire`).
pub(super) fn held(lease: &mut Lease, now: Now, fx: &mut Vec<Effect>) {
    fx.push(Effect::Replicate(lease.to_apply(now)));
    arm_timer(lease, fx);
}

/// `ArmTimer` for the lease's current deadline, unless an expiry-timer entry is already
/// pending at or before it (`Lease::timer_pending`), and records that one now is. The engine
/// decides this, so a table test shows it; the module passes the fact in through the value:
/// before the engine runs it clears the record when that entry has just fired or was
/// forgotten (a key move, a promotion), and `Lease::set_deadline` clears it when the deadline
/// moves earlier. Why skip: a renew moves the deadline later, so the pending entry fires
/// early and re-arms for the then current deadline (`expire`); one entry per lease suffices.
pub(super) fn arm_timer(lease: &mut Lease, fx: &mut Vec<Effect>) {
    if let Some(deadline_mono_us) = lease.deadline_mono_us() {
        if !lease.timer_pending() {
            lease.set_timer_pending(true);
            fx.push(Effect::ArmTimer { deadline_mono_us });
        }
    }
}
