//! The lease state machine: plain Rust over `(state, now, request) -> (new state, outcome)`.
//! No FFI and no clock reads here: "now" is always passed in, so every rule below is unit
//! tested with an injected clock (see the table at the bottom).
//!
//! Two clocks, on purpose:
//! - `Now::mono_us`, the server's monotonic clock, is the only clock that judges whether a
//!   lease is live. A step of the wall clock (NTP, an operator, a VM restore) therefore can
//!   neither end nor extend a live lease on this server.
//! - `Now::wall_ms` is used only where a deadline must leave this process (RDB, AOF, the
//!   replication stream, where another process with another monotonic clock reads it) and
//!   for the token floor. The conversion back to a local monotonic deadline happens once, on
//!   receipt (`apply`) or load (`from_persisted`); Redis cannot do better, because monotonic
//!   clocks of two processes have no common origin.

use crate::error::LeaseError;
use crate::owner::{Owner, OWNER_HARD_CAP};
use crate::rdb::{Persisted, Saved};

/// Tokens stay below 2^53 so every client language (JavaScript numbers included) holds them
/// exactly.
pub const TOKEN_LIMIT: u64 = 1 << 53;

/// A reading of both server clocks, taken once per command by the module layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    /// Server monotonic clock, microseconds, arbitrary origin.
    pub mono_us: u64,
    /// Server wall clock, Unix milliseconds.
    pub wall_ms: u64,
}

/// One lease key's value. A free lease keeps its key (and so its last token): that is what
/// makes tokens keep rising across release and expiry.
// `Hash`: the model checker (model/) stores this in its hashed states.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    /// Holder's owner id; empty when free (an owner is never empty, the parser refuses it).
    /// Kept inside the value's own allocation up to `OWNER_INLINE` bytes (one allocation per
    /// lease instead of two, see `owner::Owner`).
    ///
    /// It also holds quorum mode's membership binding (`membership()`): the id of the node
    /// list (docs/quorum.md §4.1) this key is bound to. Like the last token it outlives
    /// release and expiry, because the free key is exactly what an elector with another node
    /// list could otherwise take (issue 32: X reigns on {A, C}, B is free, Y takes {B, D}).
    /// Only a command naming a membership binds a key that has none; only `LEASE.MEMBERSHIP`
    /// (an operator's compare-and-set) changes it. In the owner's storage, not a field of
    /// its own: a field would move every lease to the 80-byte class (`owner.rs`).
    owner: Owner,
    /// The live token while held; the last token issued on this key while free.
    token: u64,
    /// Local monotonic deadline in µs. Never persisted or replicated as such (see module doc).
    expires_mono_us: u64,
    /// Grants ever made on this key (new tokens issued), for LEASE.INFO, in bits 0..62.
    /// Bit 63 (`TIMER_PENDING`) is module bookkeeping, not lease state: "an expiry-timer
    /// entry is pending for this value at or before `expires_mono_us`". It lets a renew (the
    /// deadline only moves later) skip the timer entirely; every change that moves the
    /// deadline earlier clears it (`set_deadline`). Never persisted or replicated. It lives
    /// in this word because a separate field would grow the value past its 64-byte size
    /// class (see `OWNER_INLINE`); 2^63 grants cannot be reached.
    grants: u64,
}

const TIMER_PENDING: u64 = 1 << 63;

const GRANTS_MAX: u64 = TIMER_PENDING - 1;

/// One `LEASE.APPLY`: what a replica or an AOF replays, the decision already taken by the
/// primary, with an absolute wall-clock expiry, so nobody downstream re-judges it against its own clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Apply {
    Hold {
        owner: Vec<u8>,
        token: u64,
        expires_wall_ms: u64,
        /// The key's membership id (`Lease::membership`); `None` replays as none.
        membership: Option<u64>,
    },
    Free {
        token: u64,
        membership: Option<u64>,
    },
}

/// Result of `acquire`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// A new grant with a new token.
    Granted { token: u64 },
    /// The same owner already held the live lease: expiry refreshed, token kept.
    Refreshed { token: u64 },
    /// Another owner holds the live lease.
    Busy,
    /// Free, but this server is in its grace period and grants nothing new.
    InGrace { ms_left: u64 },
}

/// The live holder as `LEASE.GET` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder<'a> {
    pub owner: &'a [u8],
    pub token: u64,
    pub pttl_ms: u64,
}

/// Longest remaining time a lease can legitimately carry: `lease.max-ttl` is capped at
/// 2^31 ms. Loaded or replicated deadlines beyond it are corrupt (or hostile) input.
pub const TTL_HARD_CAP_MS: u64 = i32::MAX as u64;

fn ms_to_us(ms: u64) -> u64 {
    ms.saturating_mul(1000)
}

/// Remaining ms, rounded up: a lease that is live for 300 µs more reports 1, never 0.
fn ceil_ms(us: u64) -> u64 {
    us.div_ceil(1000)
}

impl Default for Lease {
    fn default() -> Self {
        Lease::new()
    }
}

impl Lease {
    /// A free lease that never issued a token.
    pub fn new() -> Lease {
        Lease {
            owner: Owner::EMPTY,
            token: 0,
            expires_mono_us: 0,
            grants: 0,
        }
    }

    /// Module bookkeeping (see the field `grants`): an expiry-timer entry is pending for
    /// this value at or before its deadline.
    pub fn timer_pending(&self) -> bool {
        self.grants & TIMER_PENDING != 0
    }

    pub fn set_timer_pending(&mut self, pending: bool) {
        if pending {
            self.grants |= TIMER_PENDING;
        } else {
            self.grants &= !TIMER_PENDING;
        }
    }

    /// Moves the deadline; an earlier one may precede the pending timer entry, which then
    /// no longer counts (see the field `grants`).
    fn set_deadline(&mut self, mono_us: u64) {
        if mono_us < self.expires_mono_us {
            self.set_timer_pending(false);
        }
        self.expires_mono_us = mono_us;
    }

    fn count_grant(&mut self) {
        let n = (self.grants & GRANTS_MAX).saturating_add(1).min(GRANTS_MAX);
        self.grants = (self.grants & TIMER_PENDING) | n;
    }

    pub fn is_held(&self) -> bool {
        !self.owner.as_slice().is_empty()
    }

    /// Live = held and the server's monotonic clock has not reached the deadline.
    pub fn is_live(&self, now: Now) -> bool {
        self.is_held() && now.mono_us < self.expires_mono_us
    }

    /// Last token issued on this key (the live one while held).
    pub fn last_token(&self) -> u64 {
        self.token
    }

    pub fn grants(&self) -> u64 {
        self.grants & GRANTS_MAX
    }

    pub fn owner(&self) -> &[u8] {
        self.owner.as_slice()
    }

    /// The membership id this key is bound to (see the field), if any.
    pub fn membership(&self) -> Option<u64> {
        self.owner.membership()
    }

    /// Whether a command naming membership `sent` (`None`: no `MEMBERSHIP` option, as in
    /// single-primary mode) may act on this key: refused only when the key is bound to
    /// another id. Why refuse even a free key: two electors with different node lists must
    /// not both find majorities, and the node they would share is the one whose binding
    /// says which list it belongs to (docs/quorum.md §4.1).
    pub fn check_membership(&self, sent: Option<u64>) -> Result<(), LeaseError> {
        match (self.membership(), sent) {
            (Some(stored), Some(sent)) if stored != sent => {
                Err(LeaseError::MembershipMismatch { stored, sent })
            }
            _ => Ok(()),
        }
    }

    /// After a command naming `sent` succeeded: a key bound to nothing is bound to it (the
    /// first reign under any membership, or a key from before membership ids). True if the
    /// binding changed (the caller replicates the new state).
    pub fn bind_membership(&mut self, sent: Option<u64>) -> bool {
        match sent {
            Some(m) if self.membership().is_none() && m != 0 => {
                self.owner = self.owner.with_membership(Some(m));
                true
            }
            _ => false,
        }
    }

    /// `LEASE.MEMBERSHIP key old new`: the operator's compare-and-set of the binding
    /// (`old = None`: bound to nothing). Already `new` also answers true (a retried command).
    /// It never touches the lease itself: a live holder under the old id keeps this node
    /// until it expires (its renewals are refused from now on), so no second grant here can
    /// overlap it.
    pub fn change_membership(&mut self, old: Option<u64>, new: u64) -> bool {
        if new != 0 && (self.membership() == old || self.membership() == Some(new)) {
            self.owner = self.owner.with_membership(Some(new));
            true
        } else {
            false
        }
    }

    /// Monotonic deadline (µs) if held; the module arms its expiry timer on it.
    pub fn deadline_mono_us(&self) -> Option<u64> {
        self.is_held().then_some(self.expires_mono_us)
    }

    pub fn holder(&self, now: Now) -> Option<Holder<'_>> {
        self.is_live(now).then(|| Holder {
            owner: self.owner.as_slice(),
            token: self.token,
            pttl_ms: ceil_ms(self.expires_mono_us - now.mono_us),
        })
    }

    /// Frees a held lease whose deadline has passed. Returns the expired token, so the caller
    /// can notify `lease.expired`, replicate a `Free` effect and wake waiters.
    pub fn expire_due(&mut self, now: Now) -> Option<u64> {
        if self.is_held() && !self.is_live(now) {
            self.owner = self.owner.with_owner(&[]);
            Some(self.token)
        } else {
            None
        }
    }

    /// Token rule (docs/protocol.md §3): max(last + 1, wall_ms × 1000, floor).
    /// - `last + 1` keeps tokens strictly rising on this key whatever the wall clock does.
    /// - `floor` is one above the highest token this server process has issued, applied or
    ///   loaded on any key. It covers what the wall-clock term cannot: a `DEL` and a new
    ///   grant within the same millisecond would otherwise reissue the same token.
    /// - `wall_ms × 1000` keeps them rising where `last` was lost: restart without
    ///   persistence, `DEL`, promotion of a replica that missed grants. That half rests on
    ///   the one documented assumption: the wall clocks of the servers (and of this server
    ///   across a restart) do not disagree by more than the grace period, which every
    ///   such event waits out before granting.
    fn next_token(&self, now: Now, floor: u64) -> Result<u64, LeaseError> {
        let token = self
            .token
            .saturating_add(1)
            .max(now.wall_ms.saturating_mul(1000))
            .max(floor);
        if token >= TOKEN_LIMIT {
            return Err(LeaseError::TokenSpaceExhausted);
        }
        Ok(token)
    }

    /// `LEASE.ACQUIRE`. `grace_ms_left > 0` means this server may not know every lease the
    /// previous primary (or its previous life) granted, so nothing new is granted; refreshing
    /// a lease it does know is still fine (that holder is the only one who can be leader).
    pub fn acquire(
        &mut self,
        owner: &[u8],
        ttl_ms: u64,
        now: Now,
        grace_ms_left: u64,
        floor: u64,
    ) -> Result<Acquire, LeaseError> {
        if self.is_live(now) {
            if self.owner.as_slice() == owner {
                self.set_deadline(now.mono_us.saturating_add(ms_to_us(ttl_ms)));
                return Ok(Acquire::Refreshed { token: self.token });
            }
            return Ok(Acquire::Busy);
        }
        if grace_ms_left > 0 {
            return Ok(Acquire::InGrace {
                ms_left: grace_ms_left,
            });
        }
        // A lapsed holder (even the same owner) gets a new token: its old one may already be
        // known as stale to a resource that saw a successor.
        let token = self.next_token(now, floor)?;
        self.owner = self.owner.with_owner(owner);
        self.token = token;
        self.set_deadline(now.mono_us.saturating_add(ms_to_us(ttl_ms)));
        self.count_grant();
        Ok(Acquire::Granted { token })
    }

    /// `LEASE.RENEW`. An expired lease is never renewed, even if nobody took it: its holder
    /// has already passed a deadline at which it promised to stop, and a resource may have
    /// seen the key free.
    pub fn renew(&mut self, owner: &[u8], token: u64, ttl_ms: u64, now: Now) -> bool {
        if self.is_live(now) && self.owner.as_slice() == owner && self.token == token {
            self.set_deadline(now.mono_us.saturating_add(ms_to_us(ttl_ms)));
            true
        } else {
            false
        }
    }

    /// `LEASE.RAISE`: the live lease held by owner+token now carries `new_token` (the caller
    /// checked `new_token >= token`). The expiry is unchanged: a raise is not a renew, so it
    /// cannot extend a lease the holder has not asked to keep. Since `token` is also the key's
    /// last-issued token, every later grant on this key is above `new_token`.
    pub fn raise(&mut self, owner: &[u8], token: u64, new_token: u64, now: Now) -> bool {
        if self.is_live(now) && self.owner.as_slice() == owner && self.token == token {
            self.token = self.token.max(new_token);
            true
        } else {
            false
        }
    }

    /// `LEASE.MEMBERSHIP ... TOKEN t` on a free key: its last token becomes at least `t`, so
    /// every later grant on it is above `t`. Why (docs/quorum.md §4.1): after a membership
    /// change a reign of the new list may stand on servers that never saw the old list's
    /// last reign (its token lives on the old majority); the operator carries the highest
    /// token over. False (nothing changes) on a held lease: its live token cannot move.
    pub fn raise_last_token(&mut self, t: u64) -> bool {
        if self.is_held() || t >= TOKEN_LIMIT {
            return false;
        }
        self.token = self.token.max(t);
        true
    }

    /// `LEASE.RELEASE`. The token is kept as the last issued, so the next grant is above it.
    pub fn release(&mut self, owner: &[u8], token: u64, now: Now) -> bool {
        if self.is_live(now) && self.owner.as_slice() == owner && self.token == token {
            self.owner = self.owner.with_owner(&[]);
            true
        } else {
            false
        }
    }

    /// `LEASE.FENCE`: remaining ms when `token` is the live token.
    pub fn fence(&self, token: u64, now: Now) -> Result<u64, LeaseError> {
        match self.holder(now) {
            Some(h) if h.token == token => Ok(h.pttl_ms),
            _ => Err(LeaseError::Fenced),
        }
    }

    /// The current state as an effect for replicas and the AOF. The absolute expiry is
    /// derived from the monotonic deadline at `now`; right after a grant or renew that is
    /// exactly `now.wall_ms + ttl`.
    pub fn to_apply(&self, now: Now) -> Apply {
        match self.expires_wall_ms(now) {
            Some(expires_wall_ms) => Apply::Hold {
                owner: self.owner.as_slice().to_vec(),
                token: self.token,
                expires_wall_ms,
                membership: self.membership(),
            },
            None => Apply::Free {
                token: self.token,
                membership: self.membership(),
            },
        }
    }

    /// A held lease's absolute wall-clock expiry as `to_apply` and `to_persisted` give it
    /// (`None` when free): what leaves this process. The module's RDB save writes it with
    /// `owner()` directly (`saved`), without building a `Persisted` (an owner copy per key).
    pub fn expires_wall_ms(&self, now: Now) -> Option<u64> {
        self.is_held().then(|| {
            let rem_ms = ceil_ms(self.expires_mono_us.saturating_sub(now.mono_us));
            now.wall_ms.saturating_add(rem_ms)
        })
    }

    /// Converts an absolute wall expiry into a local monotonic deadline, once.
    fn mono_deadline(expires_wall_ms: u64, now: Now) -> u64 {
        // Clamped: an effect can only come from a primary whose max-ttl is below the cap.
        let rem_ms = expires_wall_ms
            .saturating_sub(now.wall_ms)
            .min(TTL_HARD_CAP_MS);
        now.mono_us.saturating_add(ms_to_us(rem_ms))
    }

    /// Replays an effect from the primary (replica) or the AOF. Never consults the lease's
    /// own liveness: the primary already decided.
    pub fn apply(&mut self, effect: &Apply, now: Now) {
        match effect {
            Apply::Hold {
                owner,
                token,
                expires_wall_ms,
                membership,
            } => {
                // A new token is a grant, except for the same holder keeping its lease with
                // a raised token (`LEASE.RAISE`, which the primary does not count either). A
                // grant always finds the lease free here: the primary frees a lapsed lease
                // (a `FREE` effect) before it grants it anew.
                let raised = self.is_held() && self.owner.as_slice() == owner.as_slice();
                if *token != self.token && !raised {
                    self.count_grant();
                }
                // The effect carries the whole state: no id replays as none.
                self.owner = Owner::build(owner, *membership);
                self.token = *token;
                self.set_deadline(Self::mono_deadline(*expires_wall_ms, now));
            }
            Apply::Free { token, membership } => {
                self.owner = Owner::build(&[], *membership);
                self.token = *token;
            }
        }
    }

    /// Checks an effect's fields before it is applied (AOF and replication input is data).
    pub fn validate_effect(effect: &Apply) -> Result<(), LeaseError> {
        match effect {
            Apply::Hold {
                owner,
                token,
                membership,
                ..
            } => {
                if owner.is_empty()
                    || owner.len() > OWNER_HARD_CAP
                    || *token == 0
                    || *token >= TOKEN_LIMIT
                    || *membership == Some(0)
                {
                    return Err(LeaseError::BadEffect);
                }
            }
            Apply::Free { token, membership } => {
                if *token >= TOKEN_LIMIT || *membership == Some(0) {
                    return Err(LeaseError::BadEffect);
                }
            }
        }
        Ok(())
    }

    /// What RDB/DUMP store: the absolute wall expiry, derived at save time.
    pub fn to_persisted(&self, now: Now) -> Persisted {
        let held = match self.to_apply(now) {
            Apply::Hold {
                owner,
                expires_wall_ms,
                ..
            } => Some((owner, expires_wall_ms)),
            Apply::Free { .. } => None,
        };
        Persisted {
            token: self.token,
            held,
            grants: self.grants(),
            membership: self.membership(),
        }
    }

    /// The fields of `to_persisted`, borrowed from the value itself for `rdb::encode_v2`: no
    /// `Persisted` and so no owner copy per key (a save of 1M leases).
    pub fn saved(&self, now: Now) -> Saved<'_> {
        Saved {
            token: self.token,
            grants: self.grants(),
            held: self.expires_wall_ms(now).map(|w| (self.owner(), w)),
            membership: self.membership(),
        }
    }

    /// Builds a lease from loaded fields; `None` for anything a healthy save cannot produce,
    /// so a corrupt or hostile payload is refused instead of becoming state. An expiry more
    /// than `TTL_HARD_CAP_MS` away is clamped to the cap (see `load_persisted`).
    pub fn from_persisted(p: Persisted, now: Now) -> Option<Lease> {
        Self::load_persisted(p, now, TTL_HARD_CAP_MS).map(|(lease, _)| lease)
    }

    /// `from_persisted`, with the remaining time of a held lease whose saved expiry lies
    /// more than `TTL_HARD_CAP_MS` beyond `now.wall_ms` set to `clamp_ms` (at most the cap);
    /// the second value is then `Some(saved remaining ms)`, for the caller's warning.
    ///
    /// Why clamp, not refuse (issue 24): no lease is ever granted for more than the cap, so
    /// such an expiry says only that the saving and the loading server's wall clocks
    /// disagree by weeks. Refusing made the whole RDB unloadable (the server would not
    /// start, a replica could not full-sync, MIGRATE answered `Bad data format`), and the
    /// obvious recovery, deleting the RDB, lost every key's token history. The true time
    /// left is at most the TTL it was granted with, so `lease.max-ttl` (the module passes it)
    /// is enough for its holder on the assumption grace already rests on: the granting
    /// server's `lease.max-ttl` was not above this one's. Structural checks stay refusals.
    pub fn load_persisted(p: Persisted, now: Now, clamp_ms: u64) -> Option<(Lease, Option<u64>)> {
        if p.token >= TOKEN_LIMIT || p.membership == Some(0) {
            return None;
        }
        let mut lease = Lease {
            owner: Owner::build(&[], p.membership),
            token: p.token,
            expires_mono_us: 0,
            // Clamped below the bookkeeping bit (only a hostile payload gets near it).
            grants: p.grants.min(GRANTS_MAX),
        };
        let mut clamped = None;
        if let Some((owner, wall)) = p.held {
            if owner.is_empty() || owner.len() > OWNER_HARD_CAP || p.token == 0 {
                return None;
            }
            lease.owner = lease.owner.with_owner(&owner);
            let rem_ms = wall.saturating_sub(now.wall_ms);
            lease.expires_mono_us = if rem_ms > TTL_HARD_CAP_MS {
                clamped = Some(rem_ms);
                now.mono_us
                    .saturating_add(ms_to_us(clamp_ms.min(TTL_HARD_CAP_MS)))
            } else {
                Self::mono_deadline(wall, now)
            };
        }
        Some((lease, clamped))
    }

    /// A held lease that arrived from another server (MIGRATE, a client's RESTORE) stays
    /// held for at least `min_ms` from `now`; true if its deadline moved. Its remaining time
    /// came from the source's absolute wall-clock expiry read against this server's wall
    /// clock, so a target clock ahead by `s` makes it `s` shorter than on the source (a
    /// second owner could be granted while the first still leads). The source's time left
    /// is at most its `lease.max-ttl`, so a floor of that much covers any skew. A lease that
    /// had just lapsed on the source but was not yet freed when it was dumped is held again
    /// for this time: nobody else held it in between, and only its own holder can use it.
    pub fn hold_at_least(&mut self, now: Now, min_ms: u64) -> bool {
        let floor = now
            .mono_us
            .saturating_add(ms_to_us(min_ms.min(TTL_HARD_CAP_MS)));
        if self.is_held() && self.expires_mono_us < floor {
            self.set_deadline(floor);
            true
        } else {
            false
        }
    }

    /// Heap + inline bytes, for `MEMORY USAGE`.
    pub fn mem_usage(&self) -> usize {
        std::mem::size_of::<Lease>() + self.owner.heap_len()
    }
}

/// Grace after start or promotion (docs/protocol.md §5), judged on the monotonic clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grace {
    started_mono_us: u64,
}

impl Grace {
    pub fn starting_at(now_mono_us: u64) -> Grace {
        Grace {
            started_mono_us: now_mono_us,
        }
    }

    /// Milliseconds left with the grace length in force now (so lowering `lease.grace-ms`
    /// shortens a running grace, and 0 ends it at once).
    pub fn ms_left(&self, now_mono_us: u64, grace_ms: u64) -> u64 {
        let end = self.started_mono_us.saturating_add(ms_to_us(grace_ms));
        ceil_ms(end.saturating_sub(now_mono_us))
    }
}

#[cfg(test)]
mod tests;
