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
    /// Kept inside the value's own allocation up to `OWNER_INLINE` bytes (issue 16: one
    /// allocation per lease instead of two, see `Owner`).
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

/// Owners up to this many bytes live inside the `Lease` itself. 38 makes `Owner` 40 bytes
/// and `Lease` 64, one jemalloc size class: with a 27-byte owner (a hostname-pid-random id)
/// the value was a 48-byte `Lease` plus a 32-byte owner allocation (80 B); it is 64 B now.
/// A longer owner costs a separate allocation as before (and 16 B more than before).
pub const OWNER_INLINE: usize = 38;

/// A small-owner-optimised byte string. Canonical: `Inline` exactly when the length is at
/// most `OWNER_INLINE`, and the inline bytes past `len` are zero; equality and hashing go
/// through `as_slice` anyway, so they never depend on the representation.
#[derive(Clone)]
enum Owner {
    Inline { len: u8, bytes: [u8; OWNER_INLINE] },
    Heap(Box<[u8]>),
}

impl Owner {
    const EMPTY: Owner = Owner::Inline {
        len: 0,
        bytes: [0; OWNER_INLINE],
    };

    fn new(owner: &[u8]) -> Owner {
        if owner.len() <= OWNER_INLINE {
            let mut bytes = [0; OWNER_INLINE];
            bytes[..owner.len()].copy_from_slice(owner);
            Owner::Inline {
                len: owner.len() as u8,
                bytes,
            }
        } else {
            Owner::Heap(owner.into())
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            // `len <= OWNER_INLINE` by construction; `get` keeps even a broken invariant
            // from panicking.
            Owner::Inline { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or(&[]),
            Owner::Heap(b) => b,
        }
    }

    /// Bytes allocated outside the `Lease` (for `MEMORY USAGE`).
    fn heap_len(&self) -> usize {
        match self {
            Owner::Inline { .. } => 0,
            Owner::Heap(b) => b.len(),
        }
    }
}

impl PartialEq for Owner {
    fn eq(&self, other: &Owner) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Owner {}

impl std::hash::Hash for Owner {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}
const GRANTS_MAX: u64 = TIMER_PENDING - 1;

/// One `LEASE.APPLY`: what a replica or an AOF replays, the decision already taken by the
/// primary, with an absolute wall-clock expiry, so nobody downstream re-judges it against its own clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Apply {
    Hold {
        owner: Vec<u8>,
        token: u64,
        expires_wall_ms: u64,
    },
    Free {
        token: u64,
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

/// Fields as stored in RDB / DUMP payloads, validated before they become a `Lease`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Persisted {
    pub token: u64,
    pub held: Option<(Vec<u8>, u64)>,
    pub grants: u64,
}

/// The fields an RDB/DUMP payload holds, read one at a time in order (the module reads them
/// from Redis' IO; the fuzz target from bytes). `None` = the payload ends or has the wrong
/// kind of field there.
pub trait PersistedSource {
    fn unsigned(&mut self) -> Option<u64>;
    fn bytes(&mut self) -> Option<Vec<u8>>;
}

impl Persisted {
    /// Encoding version 1: unsigned token, unsigned grants, unsigned held (0|1), if held:
    /// string owner, unsigned expires_wall_ms. `None` for anything a healthy save cannot
    /// produce (`Lease::from_persisted` then checks the values).
    pub fn decode_v1(src: &mut impl PersistedSource) -> Option<Persisted> {
        let token = src.unsigned()?;
        let grants = src.unsigned()?;
        let held = match src.unsigned()? {
            0 => None,
            1 => {
                let owner = src.bytes()?;
                if owner.is_empty() || owner.len() > OWNER_HARD_CAP {
                    return None;
                }
                let wall = src.unsigned()?;
                Some((owner, wall))
            }
            _ => return None,
        };
        Some(Persisted {
            token,
            held,
            grants,
        })
    }

    /// Encoding version 2: the whole value in ONE module string buffer (one
    /// `RedisModule_SaveStringBuffer` per key instead of five field calls: issue 16, each
    /// field call costs its own opcode, length encoding and rio write), little endian:
    ///
    /// ```text
    ///   offset 0   u8   flags: bit 0 = held; every other bit must be 0
    ///   offset 1   u64  token (held: the live token; free: the last token issued)
    ///   offset 9   u64  grants
    ///   free: the buffer ends here (exactly 17 bytes)
    ///   held: offset 17  u64  expires_wall_ms (absolute, Unix ms)
    ///         offset 25  owner, the rest of the buffer (1..=OWNER_HARD_CAP bytes)
    /// ```
    ///
    /// The owner needs no length of its own: the string buffer carries one. `None` for
    /// anything `encode_v2` cannot produce (a short or long buffer, an unknown flag bit, an
    /// owner out of bounds); as in v1, `Lease::from_persisted` then checks the values (token
    /// below 2^53, expiry within the TTL cap).
    pub fn decode_v2(buf: &[u8]) -> Option<Persisted> {
        let (&flags, rest) = buf.split_first()?;
        let (token, rest) = take_u64(rest)?;
        let (grants, rest) = take_u64(rest)?;
        let held = match flags {
            0 => {
                // Trailing bytes after a free lease: not something a save wrote.
                if !rest.is_empty() {
                    return None;
                }
                None
            }
            V2_HELD => {
                let (wall, owner) = take_u64(rest)?;
                if owner.is_empty() || owner.len() > OWNER_HARD_CAP {
                    return None;
                }
                Some((owner.to_vec(), wall))
            }
            // Unknown flag bits: a newer layout or corruption; refuse rather than guess.
            _ => return None,
        };
        Some(Persisted {
            token,
            held,
            grants,
        })
    }

    /// Writes these fields in encoding version 2 (see `decode_v2`) into `out`, replacing
    /// what it held.
    pub fn encode_v2(&self, out: &mut Vec<u8>) {
        let held = self.held.as_ref().map(|(o, w)| (o.as_slice(), *w));
        encode_v2(self.token, self.grants, held, out);
    }
}

/// Flag bit 0 of encoding version 2: the lease is held (owner and expiry follow).
const V2_HELD: u8 = 1;

/// Length of a free lease in encoding version 2, and of a held one without its owner.
pub const V2_FREE_LEN: usize = 17;
pub const V2_HELD_FIXED_LEN: usize = 25;

fn take_u64(b: &[u8]) -> Option<(u64, &[u8])> {
    let (head, rest) = b.split_first_chunk::<8>()?;
    Some((u64::from_le_bytes(*head), rest))
}

/// Encoding version 2 of the given fields into `out` (cleared first), so the module's
/// save can reuse one buffer for every key instead of allocating per key.
pub fn encode_v2(token: u64, grants: u64, held: Option<(&[u8], u64)>, out: &mut Vec<u8>) {
    out.clear();
    out.push(if held.is_some() { V2_HELD } else { 0 });
    out.extend_from_slice(&token.to_le_bytes());
    out.extend_from_slice(&grants.to_le_bytes());
    if let Some((owner, wall)) = held {
        out.extend_from_slice(&wall.to_le_bytes());
        out.extend_from_slice(owner);
    }
}

/// Longest remaining time a lease can legitimately carry: `lease.max-ttl` is capped at
/// 2^31 ms. Loaded or replicated deadlines beyond it are corrupt (or hostile) input.
pub const TTL_HARD_CAP_MS: u64 = i32::MAX as u64;

/// Hard cap on a stored owner's length, independent of `lease.max-owner-len` (which can be
/// lowered at run time and must not make existing data unloadable).
pub const OWNER_HARD_CAP: usize = 64 * 1024;

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
            self.owner = Owner::EMPTY;
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
        self.owner = Owner::new(owner);
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

    /// `LEASE.RELEASE`. The token is kept as the last issued, so the next grant is above it.
    pub fn release(&mut self, owner: &[u8], token: u64, now: Now) -> bool {
        if self.is_live(now) && self.owner.as_slice() == owner && self.token == token {
            self.owner = Owner::EMPTY;
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
            },
            None => Apply::Free { token: self.token },
        }
    }

    /// A held lease's absolute wall-clock expiry as `to_apply` and `to_persisted` give it
    /// (`None` when free): what leaves this process. The module's RDB save writes it with
    /// `owner()` directly, without building a `Persisted` (an owner copy per key).
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
            } => {
                // A new token is a grant, except for the same holder keeping its lease with
                // a raised token (`LEASE.RAISE`, which the primary does not count either). A
                // grant always finds the lease free here: the primary frees a lapsed lease
                // (a `FREE` effect) before it grants it anew.
                let raised = self.is_held() && self.owner.as_slice() == owner.as_slice();
                if *token != self.token && !raised {
                    self.count_grant();
                }
                self.owner = Owner::new(owner);
                self.token = *token;
                self.set_deadline(Self::mono_deadline(*expires_wall_ms, now));
            }
            Apply::Free { token } => {
                self.owner = Owner::EMPTY;
                self.token = *token;
            }
        }
    }

    /// Checks an effect's fields before it is applied (AOF and replication input is data).
    pub fn validate_effect(effect: &Apply) -> Result<(), LeaseError> {
        match effect {
            Apply::Hold { owner, token, .. } => {
                if owner.is_empty()
                    || owner.len() > OWNER_HARD_CAP
                    || *token == 0
                    || *token >= TOKEN_LIMIT
                {
                    return Err(LeaseError::BadEffect);
                }
            }
            Apply::Free { token } => {
                if *token >= TOKEN_LIMIT {
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
        }
    }

    /// This lease in encoding version 2 (the fields of `to_persisted`), written from the
    /// value itself: no `Persisted` and so no owner copy per key (issue 16, a save of 1M
    /// leases).
    pub fn encode_v2(&self, now: Now, out: &mut Vec<u8>) {
        let held = self.expires_wall_ms(now).map(|w| (self.owner(), w));
        encode_v2(self.token, self.grants(), held, out);
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
        if p.token >= TOKEN_LIMIT {
            return None;
        }
        let mut lease = Lease {
            owner: Owner::EMPTY,
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
            lease.owner = Owner::new(&owner);
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
mod tests {
    use super::*;

    const WALL0: u64 = 1_800_000_000_000; // 2027, ms

    fn at(ms: u64) -> Now {
        Now {
            mono_us: 5_000_000 + ms * 1000,
            wall_ms: WALL0 + ms,
        }
    }

    /// Wall clock stepped by `step_ms` relative to the monotonic clock.
    fn stepped(ms: u64, step_ms: i64) -> Now {
        let n = at(ms);
        Now {
            mono_us: n.mono_us,
            wall_ms: (n.wall_ms as i64 + step_ms) as u64,
        }
    }

    #[derive(Debug)]
    enum Op {
        Acq(&'static str, u64),
        AcqGrace(&'static str, u64, u64),
        Renew(&'static str, u64, u64),
        Release(&'static str, u64),
        Fence(u64),
    }

    #[derive(Debug, PartialEq)]
    enum Out {
        Granted,
        Refreshed,
        Busy,
        InGrace(u64),
        Bool(bool),
        FenceOk(u64),
        Fenced,
    }

    /// Table of cases: (time ms, op, expected). Tokens are checked separately below; here
    /// "Granted" also asserts the token rose.
    #[test]
    fn state_machine_table() {
        use Op::*;
        use Out::*;
        type Case<'a> = (&'a str, &'a [(u64, Op, Out)]);
        let cases: &[Case] = &[
            (
                "grant, other busy, refresh keeps token",
                &[
                    (0, Acq("a", 100), Granted),
                    (10, Acq("b", 100), Busy),
                    (20, Acq("a", 100), Refreshed),
                    (110, Acq("b", 100), Busy), // refresh at 20 pushed expiry to 120
                    (120, Acq("b", 100), Granted),
                ],
            ),
            (
                "expired lease is never renewed, even if nobody took it",
                &[
                    (0, Acq("a", 100), Granted),
                    (99, Renew("a", 0, 100), Bool(true)),
                    (198, Fence(0), FenceOk(1)),
                    (198, Renew("a", 0, 100), Bool(true)),
                    (298, Renew("a", 0, 100), Bool(false)), // exactly at deadline: expired
                    (300, Acq("a", 100), Granted),          // same owner after expiry: new token
                ],
            ),
            (
                "release frees at once, wrong token or owner does not",
                &[
                    (0, Acq("a", 1000), Granted),
                    (1, Release("b", 0), Bool(false)),
                    (1, Release("a", 99), Bool(false)),
                    (2, Release("a", 0), Bool(true)),
                    (2, Release("a", 0), Bool(false)),
                    (3, Fence(0), Fenced),
                    (3, Acq("b", 1000), Granted),
                ],
            ),
            (
                "grace blocks new grants only",
                &[
                    (0, Acq("a", 100), Granted),
                    (50, AcqGrace("a", 100, 500), Refreshed),
                    (60, AcqGrace("b", 100, 500), Busy),
                    (200, AcqGrace("b", 100, 300), InGrace(300)),
                    (200, Renew("a", 0, 100), Bool(false)),
                    (201, Acq("b", 100), Granted),
                ],
            ),
            (
                "fence reports remaining ms rounded up",
                &[
                    (0, Acq("a", 100), Granted),
                    (40, Fence(0), FenceOk(60)),
                    (40, Fence(7), Fenced),
                    (100, Fence(0), Fenced),
                ],
            ),
        ];
        for (name, steps) in cases {
            let mut lease = Lease::new();
            let mut live_token = 0;
            for (t, op, want) in steps.iter() {
                let now = at(*t);
                let tok = |x: u64| if x == 0 { live_token } else { x };
                let got = match op {
                    Acq(o, ttl) | AcqGrace(o, ttl, _) => {
                        let g = if let AcqGrace(_, _, g) = op { *g } else { 0 };
                        lease.expire_due(now);
                        match lease.acquire(o.as_bytes(), *ttl, now, g, 0).unwrap() {
                            Acquire::Granted { token } => {
                                assert!(token > live_token, "{name}: token did not rise");
                                live_token = token;
                                Granted
                            }
                            Acquire::Refreshed { token } => {
                                assert_eq!(token, live_token, "{name}");
                                Refreshed
                            }
                            Acquire::Busy => Busy,
                            Acquire::InGrace { ms_left } => InGrace(ms_left),
                        }
                    }
                    Renew(o, k, ttl) => Bool(lease.renew(o.as_bytes(), tok(*k), *ttl, now)),
                    Release(o, k) => Bool(lease.release(o.as_bytes(), tok(*k), now)),
                    Fence(k) => match lease.fence(tok(*k), now) {
                        Ok(ms) => FenceOk(ms),
                        Err(_) => Fenced,
                    },
                };
                assert_eq!(&got, want, "{name} at t={t} {op:?}");
            }
        }
    }

    #[test]
    fn tokens_rise_across_release_expiry_and_loss_of_state() {
        let mut l = Lease::new();
        let Acquire::Granted { token: t1 } = l.acquire(b"a", 100, at(0), 0, 0).unwrap() else {
            panic!()
        };
        assert!((WALL0 * 1000..TOKEN_LIMIT).contains(&t1));
        assert!(l.release(b"a", t1, at(0)));
        // Same millisecond, wall clock unchanged: last + 1 still rises.
        let Acquire::Granted { token: t2 } = l.acquire(b"b", 100, at(0), 0, 0).unwrap() else {
            panic!()
        };
        assert_eq!(t2, t1 + 1);
        // Expiry then grant.
        assert_eq!(l.expire_due(at(200)), Some(t2));
        let Acquire::Granted { token: t3 } = l.acquire(b"c", 100, at(200), 0, 0).unwrap() else {
            panic!()
        };
        assert!(t3 > t2);
        // Wall clock stepped back an hour: last + 1 wins.
        let Acquire::Granted { token: t4 } = l
            .acquire(b"d", 100, stepped(400, -3_600_000), 0, 0)
            .unwrap()
        else {
            panic!()
        };
        assert_eq!(t4, t3 + 1);
        // State lost (DEL, restart without persistence): a fresh lease one second later in
        // wall time still issues a larger token.
        let mut fresh = Lease::new();
        let Acquire::Granted { token: t5 } = fresh.acquire(b"e", 100, at(1400), 0, 0).unwrap()
        else {
            panic!()
        };
        assert!(t5 > t4);
    }

    #[test]
    fn floor_keeps_tokens_unique_when_history_is_lost_within_a_millisecond() {
        let mut a = Lease::new();
        let Acquire::Granted { token: t1 } = a.acquire(b"a", 100, at(0), 0, 0).unwrap() else {
            panic!()
        };
        // The key is deleted and recreated in the same millisecond: without the process-wide
        // floor the wall-clock term alone would reissue t1.
        let mut b = Lease::new();
        let Acquire::Granted { token: t2 } = b.acquire(b"b", 100, at(0), 0, 0).unwrap() else {
            panic!()
        };
        assert_eq!(t2, t1, "this is the hazard the floor exists for");
        let mut c = Lease::new();
        let Acquire::Granted { token: t3 } = c.acquire(b"c", 100, at(0), 0, t1 + 1).unwrap() else {
            panic!()
        };
        assert!(t3 > t1);
    }

    #[test]
    fn token_space_exhaustion_is_an_error_not_a_wrap() {
        let mut l = Lease::from_persisted(
            Persisted {
                token: TOKEN_LIMIT - 1,
                held: None,
                grants: 0,
            },
            at(0),
        )
        .unwrap();
        assert_eq!(
            l.acquire(b"a", 10, at(0), 0, 0),
            Err(LeaseError::TokenSpaceExhausted)
        );
        assert!(!l.is_held());
    }

    #[test]
    fn wall_clock_steps_neither_end_nor_extend_a_live_lease() {
        let mut l = Lease::new();
        let Acquire::Granted { token } = l.acquire(b"a", 1000, at(0), 0, 0).unwrap() else {
            panic!()
        };
        // +1 h and -1 h on the wall clock at 500 ms: still live, 500 ms left.
        for step in [3_600_000i64, -3_600_000] {
            let now = stepped(500, step);
            assert_eq!(l.holder(now).map(|h| h.pttl_ms), Some(500));
            assert_eq!(l.fence(token, now), Ok(500));
        }
        assert!(l.holder(stepped(1000, -3_600_000)).is_none());
    }

    #[test]
    fn effects_round_trip_through_a_replica_clock() {
        let mut primary = Lease::new();
        primary.acquire(b"owner-1", 3000, at(0), 0, 0).unwrap();
        let eff = primary.to_apply(at(0));
        assert_eq!(
            eff,
            Apply::Hold {
                owner: b"owner-1".to_vec(),
                token: primary.last_token(),
                expires_wall_ms: WALL0 + 3000
            }
        );
        // The replica's monotonic clock has another origin; its wall clock agrees.
        let replica_now = Now {
            mono_us: 42,
            wall_ms: WALL0 + 10,
        };
        let mut replica = Lease::new();
        Lease::validate_effect(&eff).unwrap();
        replica.apply(&eff, replica_now);
        assert_eq!(replica.holder(replica_now).map(|h| h.pttl_ms), Some(2990));
        replica.apply(
            &Apply::Free {
                token: primary.last_token(),
            },
            replica_now,
        );
        assert!(replica.holder(replica_now).is_none());
        assert_eq!(replica.last_token(), primary.last_token());
        // Malformed effects are refused before apply.
        assert!(Lease::validate_effect(&Apply::Hold {
            owner: vec![],
            token: 1,
            expires_wall_ms: 0
        })
        .is_err());
        assert!(Lease::validate_effect(&Apply::Free { token: TOKEN_LIMIT }).is_err());
    }

    #[test]
    fn persisted_round_trip_and_rejection() {
        let mut l = Lease::new();
        l.acquire(b"x", 5000, at(0), 0, 0).unwrap();
        let p = l.to_persisted(at(1000));
        assert_eq!(p.held, Some((b"x".to_vec(), WALL0 + 5000)));
        assert_eq!(l.expires_wall_ms(at(1000)), Some(WALL0 + 5000));
        assert_eq!(Lease::new().expires_wall_ms(at(1000)), None);
        // Loaded 2 s later in wall time on a server whose monotonic clock restarted at 0.
        let later = Now {
            mono_us: 0,
            wall_ms: WALL0 + 3000,
        };
        let back = Lease::from_persisted(p.clone(), later).unwrap();
        assert_eq!(
            back.holder(later).map(|h| (h.token, h.pttl_ms)),
            Some((l.last_token(), 2000))
        );
        // Expired while down: loads as free with its token history.
        let back = Lease::from_persisted(
            p.clone(),
            Now {
                mono_us: 0,
                wall_ms: WALL0 + 9000,
            },
        )
        .unwrap();
        assert!(back.holder(later).is_none() && back.last_token() == l.last_token());
        for bad in [
            Persisted {
                token: TOKEN_LIMIT,
                held: None,
                grants: 0,
            },
            Persisted {
                token: 5,
                held: Some((vec![], 1)),
                grants: 0,
            },
            Persisted {
                token: 0,
                held: Some((b"a".to_vec(), 1)),
                grants: 0,
            },
            Persisted {
                token: 5,
                held: Some((vec![b'a'; OWNER_HARD_CAP + 1], 1)),
                grants: 0,
            },
        ] {
            assert!(
                Lease::from_persisted(bad.clone(), later).is_none(),
                "{bad:?}"
            );
        }
    }

    /// Encoding version 2 (`decode_v2`): round trips, every truncation, wrong lengths,
    /// unknown flags, owner bounds, and the value checks of `from_persisted` behind it.
    #[test]
    fn v2_encoding_round_trips_and_refuses_what_a_save_cannot_write() {
        let mut held = Lease::new();
        held.acquire(b"owner-\x00\xff", 5000, at(0), 0, 0).unwrap();
        let mut buf = Vec::new();
        // The exact layout: flags, token, grants, expiry, owner, all little endian.
        held.encode_v2(at(1000), &mut buf);
        let mut want = vec![1u8];
        want.extend_from_slice(&held.last_token().to_le_bytes());
        want.extend_from_slice(&1u64.to_le_bytes());
        want.extend_from_slice(&(WALL0 + 5000).to_le_bytes());
        want.extend_from_slice(b"owner-\x00\xff");
        assert_eq!(buf, want);
        assert_eq!(buf.len(), V2_HELD_FIXED_LEN + 8);
        let p = held.to_persisted(at(1000));
        assert_eq!(Persisted::decode_v2(&buf), Some(p.clone()));
        // `Persisted::encode_v2` writes the same bytes as the save path, into a used buffer.
        let mut again = vec![9u8; 100];
        p.encode_v2(&mut again);
        assert_eq!(again, buf);
        let back = Lease::from_persisted(p.clone(), at(1000)).unwrap();
        assert_eq!(back.to_persisted(at(1000)), p);

        let free = Persisted {
            token: 77,
            held: None,
            grants: 3,
        };
        let mut fbuf = Vec::new();
        free.encode_v2(&mut fbuf);
        assert_eq!(fbuf.len(), V2_FREE_LEN);
        assert_eq!(fbuf[0], 0);
        assert_eq!(Persisted::decode_v2(&fbuf), Some(free.clone()));

        // Every truncation is refused. (A held buffer cut inside its owner still decodes,
        // to a shorter owner: the string buffer's own length is the owner's, as for the v1
        // owner string; the DUMP CRC and the RDB checksum guard the bytes themselves.)
        for cut in 0..=V2_HELD_FIXED_LEN {
            assert_eq!(Persisted::decode_v2(&buf[..cut]), None, "held cut at {cut}");
        }
        for cut in 0..V2_FREE_LEN {
            assert_eq!(
                Persisted::decode_v2(&fbuf[..cut]),
                None,
                "free cut at {cut}"
            );
        }
        // Wrong lengths: a free lease with trailing bytes.
        for extra in [1usize, 8, 9] {
            let mut b = fbuf.clone();
            b.resize(V2_FREE_LEN + extra, 0);
            assert_eq!(Persisted::decode_v2(&b), None, "free + {extra}");
        }
        // Unknown flag bits, alone or beside the held bit.
        for flags in [2u8, 3, 0x80, 0x81, 0xff] {
            for base in [&buf, &fbuf] {
                let mut b = base.clone();
                b[0] = flags;
                assert_eq!(Persisted::decode_v2(&b), None, "flags {flags:#x}");
            }
        }
        // Owner bounds: 1 and OWNER_HARD_CAP bytes load, OWNER_HARD_CAP + 1 does not.
        for (len, ok) in [
            (1, true),
            (OWNER_HARD_CAP, true),
            (OWNER_HARD_CAP + 1, false),
        ] {
            let owner = vec![b'o'; len];
            let mut b = Vec::new();
            encode_v2(5, 1, Some((&owner, WALL0 + 10)), &mut b);
            assert_eq!(
                Persisted::decode_v2(&b).is_some(),
                ok,
                "owner of {len} bytes"
            );
        }
        // Values the structure allows but a lease cannot have: same checks as v1.
        for (token, held) in [
            (TOKEN_LIMIT, None),
            (u64::MAX, None),
            (TOKEN_LIMIT, Some((&b"a"[..], WALL0 + 10))),
            (0, Some((&b"a"[..], WALL0 + 10))),
        ] {
            let mut b = Vec::new();
            encode_v2(token, 1, held, &mut b);
            let p = Persisted::decode_v2(&b).expect("structurally fine");
            assert!(
                Lease::from_persisted(p, at(1000)).is_none(),
                "{token} {held:?}"
            );
        }
        // An expiry beyond the TTL cap from the load's wall clock (the loading server's clock
        // weeks behind) loads, its remaining time clamped, its token kept (issue 24).
        let far = WALL0 + 1000 + TTL_HARD_CAP_MS + 1;
        let mut b = Vec::new();
        encode_v2(5, 3, Some((&b"a"[..], far)), &mut b);
        let p = Persisted::decode_v2(&b).expect("structurally fine");
        let (l, clamped) = Lease::load_persisted(p.clone(), at(1000), 30_000).expect("loads");
        assert_eq!(clamped, Some(TTL_HARD_CAP_MS + 1));
        assert_eq!(
            l.holder(at(1000))
                .map(|h| (h.owner.to_vec(), h.token, h.pttl_ms)),
            Some((b"a".to_vec(), 5, 30_000))
        );
        assert_eq!(l.grants(), 3);
        let l = Lease::from_persisted(p, at(1000)).expect("loads");
        assert_eq!(l.holder(at(1000)).map(|h| h.pttl_ms), Some(TTL_HARD_CAP_MS));
        // Within the cap nothing is clamped.
        let mut b = Vec::new();
        encode_v2(
            5,
            3,
            Some((&b"a"[..], WALL0 + 1000 + TTL_HARD_CAP_MS)),
            &mut b,
        );
        let p = Persisted::decode_v2(&b).expect("structurally fine");
        let (l, clamped) = Lease::load_persisted(p, at(1000), 30_000).expect("loads");
        assert_eq!(clamped, None);
        assert_eq!(l.holder(at(1000)).map(|h| h.pttl_ms), Some(TTL_HARD_CAP_MS));
        // The largest valid token loads.
        let mut b = Vec::new();
        encode_v2(TOKEN_LIMIT - 1, 1, None, &mut b);
        let p = Persisted::decode_v2(&b).unwrap();
        assert_eq!(
            Lease::from_persisted(p, at(1000)).map(|l| l.last_token()),
            Some(TOKEN_LIMIT - 1)
        );
    }

    #[test]
    fn grace_follows_the_configured_length_live() {
        let g = Grace::starting_at(1_000_000);
        assert_eq!(g.ms_left(1_000_000, 30_000), 30_000);
        assert_eq!(g.ms_left(1_000_000 + 29_999_500, 30_000), 1);
        assert_eq!(g.ms_left(1_000_000 + 30_000_000, 30_000), 0);
        // Lowering the config shortens it; 0 ends it at once.
        assert_eq!(g.ms_left(1_000_000 + 5_000_000, 4_000), 0);
        assert_eq!(g.ms_left(1_000_000, 0), 0);
    }

    /// The timer bookkeeping bit: kept while the deadline moves later (renew), dropped when
    /// it moves earlier (a shorter renew, a re-grant after release), and invisible in
    /// `grants` and the persisted form.
    #[test]
    fn timer_pending_survives_later_deadlines_only() {
        let mut l = Lease::new();
        assert_eq!(
            l.acquire(b"o", 1000, at(0), 0, 0),
            Ok(Acquire::Granted { token: l.token })
        );
        l.set_timer_pending(true);
        assert_eq!(l.grants(), 1);
        assert_eq!(l.to_persisted(at(0)).grants, 1);
        assert!(l.renew(b"o", l.token, 2000, at(10)));
        assert!(l.timer_pending(), "later deadline keeps the entry");
        assert!(l.renew(b"o", l.token, 100, at(20)));
        assert!(!l.timer_pending(), "earlier deadline drops it");
        l.set_timer_pending(true);
        assert!(l.release(b"o", l.token, at(30)));
        assert!(l.timer_pending(), "release does not move the deadline");
        assert!(matches!(
            l.acquire(b"p", 10, at(40), 0, 0),
            Ok(Acquire::Granted { .. })
        ));
        assert!(!l.timer_pending(), "a re-grant ending earlier drops it");
        assert_eq!(l.grants(), 2);
        let mut p = l.to_persisted(at(40));
        p.grants = u64::MAX;
        let loaded = Lease::from_persisted(p, at(40)).expect("loads");
        assert!(!loaded.timer_pending());
        assert_eq!(loaded.grants(), u64::MAX >> 1);
    }

    /// One 64-byte allocation per lease for owners up to `OWNER_INLINE` bytes (issue 16's
    /// memory target); longer owners still work, with a separate allocation.
    #[test]
    fn memory_usage_is_small() {
        assert_eq!(std::mem::size_of::<Lease>(), 64);
        let mut l = Lease::new();
        l.acquire(&[b'o'; 27], 100, at(0), 0, 0).unwrap();
        assert_eq!(l.mem_usage(), 64);
        for len in [1, OWNER_INLINE - 1, OWNER_INLINE, OWNER_INLINE + 1, 1000] {
            let owner = vec![b'x'; len];
            let mut l = Lease::new();
            let Acquire::Granted { token } = l.acquire(&owner, 100, at(0), 0, 0).unwrap() else {
                panic!()
            };
            assert_eq!(l.owner(), &owner[..], "{len}");
            let extra = if len > OWNER_INLINE { len } else { 0 };
            assert_eq!(l.mem_usage(), 64 + extra, "{len}");
            // Equality and hashing see the bytes, not the representation.
            let mut same = Lease::new();
            same.apply(
                &Apply::Hold {
                    owner: owner.clone(),
                    token,
                    expires_wall_ms: WALL0 + 100,
                },
                at(0),
            );
            assert_eq!(same.owner(), l.owner());
            assert!(l.renew(&owner, token, 100, at(1)), "{len}");
            assert!(!l.renew(&owner[1..], token, 100, at(1)), "{len}");
            assert!(l.release(&owner, token, at(2)));
            assert!(!l.is_held() && l.owner().is_empty());
        }
    }

    /// A replica counts grants as the primary does: a raised token (`LEASE.RAISE`, same
    /// holder) is not a grant; a new holder after a `FREE` is, also the same owner again.
    #[test]
    fn applied_effects_count_grants_like_the_primary() {
        let hold = |owner: &str, token: u64| Apply::Hold {
            owner: owner.as_bytes().to_vec(),
            token,
            expires_wall_ms: WALL0 + 10_000,
        };
        let mut l = Lease::new();
        l.apply(&hold("a", 1), at(0));
        assert_eq!(l.grants(), 1);
        l.apply(&hold("a", 1), at(1)); // renew
        l.apply(&hold("a", 900), at(2)); // raise
        assert_eq!(l.grants(), 1);
        l.apply(&Apply::Free { token: 900 }, at(3));
        l.apply(&hold("a", 901), at(4));
        assert_eq!(l.grants(), 2);
        l.apply(&Apply::Free { token: 901 }, at(5));
        l.apply(&hold("b", 902), at(6));
        assert_eq!(l.grants(), 3);
    }
}
