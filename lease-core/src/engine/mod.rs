//! The engine: every decision a lease command (or one of the module's own callbacks) takes,
//! with every side effect as a value. `handle(node, lease at key, now, call, request)`
//! returns the reply, what to store, and the effects in the order the executor
//! (`src/module/executor.rs`) must carry them out. Nothing here touches FFI or reads a clock,
//! so each handler is tested by a table `(now, node, lease, request) -> (reply, effects)`
//! (the `*_test.rs` files next to this one, after openraft's per-handler engine tests).
//!
//! Order matters and is part of the contract: the replication stream, keyspace events and
//! waiter wake-ups leave the server in exactly the order of the effect list (a lazily found
//! expiry is replicated as `FREE` before the grant that follows it, for example).

use crate::error::LeaseError;
use crate::node::Node;
use crate::request::Request;
use crate::state::{Acquire, Apply, Lease, Now};

#[cfg(test)]
mod acquire_test;
#[cfg(test)]
mod apply_test;
#[cfg(test)]
mod block_test;
#[cfg(test)]
mod expire_test;
#[cfg(test)]
mod fence_test;
#[cfg(test)]
mod grace_test;
#[cfg(test)]
mod raise_test;
#[cfg(test)]
mod read_test;
#[cfg(test)]
mod release_test;
#[cfg(test)]
mod renew_test;
#[cfg(test)]
mod testing;

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
}

impl Counter {
    pub const ALL: [Counter; 12] = [
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
    fn new(effects: Vec<Effect>, reply: Reply) -> Outcome {
        Outcome {
            reply,
            store: Store::Keep,
            effects,
        }
    }
}

/// Most requests produce at most this many effects (a grant: replicate, notify, arm, count,
/// token = 5; growing the Vec cost a grant ~360 instructions); one allocation covers them.
const TYPICAL_EFFECTS: usize = 6;

/// The engine's one entry point. `lease` is the lease stored at the request's key (`None`:
/// no such key; a key of another type never gets here, the module answers WRONGTYPE).
pub fn handle(
    node: &Node,
    lease: Option<&mut Lease>,
    now: Now,
    call: Call,
    req: &Request<'_>,
) -> Outcome {
    handle_with(Vec::new(), node, lease, now, call, req)
}

/// `handle`, with the effect list built in `fx` (emptied first): the executor hands back
/// the previous command's list, so a command allocates no list of its own (issue 16).
pub fn handle_with(
    fx: Vec<Effect>,
    node: &Node,
    lease: Option<&mut Lease>,
    now: Now,
    call: Call,
    req: &Request<'_>,
) -> Outcome {
    let mut fx = fx;
    fx.clear();
    fx.reserve(TYPICAL_EFFECTS);
    match *req {
        Request::Acquire {
            owner,
            ttl_ms,
            block,
        } => {
            // MULTI, Lua and functions cannot block: BLOCK then behaves like a zero wait.
            let will_block = block.is_some() && call.can_block;
            let (out, store) =
                match try_acquire(node, lease, now, owner, ttl_ms, will_block, &mut fx) {
                    Ok(x) => x,
                    Err(e) => return Outcome::new(fx, Reply::Error(e)),
                };
            let reply = match out {
                Acquire::Granted { token } | Acquire::Refreshed { token } => {
                    Reply::Int(token as i64)
                }
                Acquire::Busy | Acquire::InGrace { .. } if will_block => {
                    if matches!(out, Acquire::Busy) {
                        fx.push(Effect::Count(Counter::Contended));
                    }
                    fx.push(Effect::Block {
                        owner: owner.to_vec(),
                        ttl_ms,
                        timeout_ms: block.unwrap_or(0),
                    });
                    Reply::Blocked
                }
                Acquire::Busy => {
                    fx.push(Effect::Count(Counter::Contended));
                    Reply::Null
                }
                // BLOCK asked for but not possible here: the caller chose to wait, so a nil
                // (as after a timeout) and not the GRACE error.
                Acquire::InGrace { .. } if block.is_some() => Reply::Null,
                Acquire::InGrace { ms_left } => {
                    // A newcomer must see why it is refused, not a silent nil (docs/protocol.md §5).
                    fx.push(Effect::Count(Counter::GraceRejected));
                    Reply::Error(LeaseError::Grace { ms_left })
                }
            };
            Outcome {
                reply,
                store,
                effects: fx,
            }
        }
        Request::AcquireRetry { owner, ttl_ms } => {
            // Redis applied min-replicas-to-write when the command arrived, not now; a grant
            // here is a new write, so it is checked again (a grant that exists on no replica
            // is exactly what the setting is there to stop).
            if !call.replicas_ok {
                return Outcome::new(fx, Reply::Error(LeaseError::NoReplicas));
            }
            match try_acquire(node, lease, now, owner, ttl_ms, false, &mut fx) {
                Ok((Acquire::Granted { token } | Acquire::Refreshed { token }, store)) => Outcome {
                    reply: Reply::Int(token as i64),
                    store,
                    effects: fx,
                },
                Ok((_, store)) => Outcome {
                    reply: Reply::StayBlocked,
                    store,
                    effects: fx,
                },
                Err(e) => Outcome::new(fx, Reply::Error(e)),
            }
        }
        Request::BlockTimeout => {
            fx.push(Effect::Count(Counter::BlockTimeouts));
            Outcome::new(fx, Reply::Null)
        }
        Request::Renew {
            owner,
            token,
            ttl_ms,
        } => {
            let renewed = match lease {
                Some(lease) => {
                    expire_lazily(lease, now, &mut fx);
                    let ok = lease.renew(owner, token, ttl_ms, now);
                    if ok {
                        held(lease, now, &mut fx);
                    }
                    ok
                }
                None => false,
            };
            fx.push(Effect::Count(if renewed {
                Counter::Renewed
            } else {
                Counter::RenewRejected
            }));
            Outcome::new(fx, Reply::Int(i64::from(renewed)))
        }
        Request::Raise {
            owner,
            token,
            new_token,
        } => {
            // Quorum mode (docs/quorum.md): the elector unifies the tokens a majority issued
            // to their maximum before it acts. The raised token is the key's last token and
            // the node's watermark, so this node's next grant (on any key) is above it: that
            // is what makes the next reign's token higher whichever majority it gets.
            let raised = match lease {
                Some(lease) => {
                    expire_lazily(lease, now, &mut fx);
                    let ok = lease.raise(owner, token, new_token, now);
                    if ok {
                        fx.push(Effect::Replicate(lease.to_apply(now)));
                        fx.push(Effect::ObserveToken(lease.last_token()));
                    }
                    ok
                }
                None => false,
            };
            Outcome::new(fx, Reply::Int(i64::from(raised)))
        }
        Request::Release { owner, token } => {
            let released = match lease {
                Some(lease) => {
                    expire_lazily(lease, now, &mut fx);
                    let ok = lease.release(owner, token, now);
                    if ok {
                        fx.push(Effect::Replicate(lease.to_apply(now)));
                        fx.push(Effect::Notify(Event::Released));
                        // Hand-over: blocked acquirers are served right after this command.
                        fx.push(Effect::WakeWaiters);
                    }
                    ok
                }
                None => false,
            };
            fx.push(Effect::Count(if released {
                Counter::Released
            } else {
                Counter::ReleaseRejected
            }));
            Outcome::new(fx, Reply::Int(i64::from(released)))
        }
        Request::Fence {
            token,
            with_command,
        } => {
            let checked = match lease {
                Some(lease) => {
                    expire_lazily(lease, now, &mut fx);
                    lease.fence(token, now)
                }
                None => Err(LeaseError::Fenced),
            };
            let reply = match checked {
                Err(e) => {
                    fx.push(Effect::Count(Counter::FenceRejected));
                    Reply::Error(e)
                }
                Ok(remaining) if !with_command => {
                    fx.push(Effect::Count(Counter::FenceOk));
                    Reply::Int(remaining as i64)
                }
                // Nothing can run between this check and the inner command: Redis executes
                // one command at a time, so check-and-act is atomic.
                Ok(_) => Reply::RunFenced,
            };
            Outcome::new(fx, reply)
        }
        // Read-only: a lapsed holder is reported as no lease but not freed here (freeing is
        // a write, done by the timer or the next write command; GET is allowed on replicas).
        Request::Get => {
            let reply = match lease.and_then(|l| l.holder(now)) {
                Some(h) => Reply::Holder {
                    owner: h.owner.to_vec(),
                    token: h.token,
                    pttl_ms: h.pttl_ms,
                },
                None => Reply::Null,
            };
            Outcome::new(fx, reply)
        }
        Request::Info => {
            let reply = match lease {
                Some(l) => Reply::Info {
                    holder: l
                        .holder(now)
                        .map(|h| (h.owner.to_vec(), h.token, h.pttl_ms)),
                    last_token: l.last_token(),
                    grants: l.grants(),
                },
                None => Reply::Null,
            };
            Outcome::new(fx, reply)
        }
        Request::Apply(ref eff) => {
            // From any ordinary client an effect would be a way to forge a lease.
            if !call.from_primary_or_loading {
                return Outcome::new(fx, Reply::Error(LeaseError::ForgedEffect));
            }
            fx.push(Effect::ObserveToken(match eff {
                Apply::Hold { token, .. } | Apply::Free { token } => *token,
            }));
            let store = match lease {
                Some(lease) => {
                    lease.apply(eff, now);
                    Store::Keep
                }
                None => {
                    let mut lease = Lease::new();
                    lease.apply(eff, now);
                    Store::Create(lease)
                }
            };
            if call.replicated {
                fx.push(Effect::ReplicateVerbatim);
            }
            Outcome {
                reply: Reply::Ok,
                store,
                effects: fx,
            }
        }
        Request::Expire => {
            if let Some(lease) = lease {
                if !expire_lazily(lease, now, &mut fx) {
                    // Fired early (renewed meanwhile): re-arm for the current deadline.
                    if let Some(deadline_mono_us) = lease.deadline_mono_us() {
                        fx.push(Effect::ArmTimer { deadline_mono_us });
                    }
                }
            }
            Outcome::new(fx, Reply::Nothing)
        }
        Request::Rearm => {
            if let Some(deadline_mono_us) = lease.and_then(|l| l.deadline_mono_us()) {
                fx.push(Effect::ArmTimer { deadline_mono_us });
            }
            Outcome::new(fx, Reply::Nothing)
        }
        Request::Migrated { min_ms } => {
            // SAFETY (issue 24): the source's absolute expiry read against this server's
            // wall clock is short by however far this clock runs ahead; a lapse here would
            // let a second owner in while the first still leads. The floor is replicated as
            // a HOLD so replicas and the AOF carry it too (they received the raw RESTORE).
            if let Some(lease) = lease {
                if lease.hold_at_least(now, min_ms) {
                    fx.push(Effect::Replicate(lease.to_apply(now)));
                }
                if let Some(deadline_mono_us) = lease.deadline_mono_us() {
                    fx.push(Effect::ArmTimer { deadline_mono_us });
                }
            }
            Outcome::new(fx, Reply::Nothing)
        }
    }
}

/// Frees the lease if its deadline passed, with every effect of an expiry. Write commands
/// call this first so that they never act on a lapsed holder. Returns whether it expired.
fn expire_lazily(lease: &mut Lease, now: Now, fx: &mut Vec<Effect>) -> bool {
    match lease.expire_due(now) {
        Some(token) => {
            fx.push(Effect::Count(Counter::Expired));
            fx.push(Effect::Replicate(Apply::Free { token }));
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
fn held(lease: &Lease, now: Now, fx: &mut Vec<Effect>) {
    fx.push(Effect::Replicate(lease.to_apply(now)));
    if let Some(deadline_mono_us) = lease.deadline_mono_us() {
        fx.push(Effect::ArmTimer { deadline_mono_us });
    }
}

/// Shared by `Acquire` and `AcquireRetry`. `keep_key` creates the key of a free lease when
/// absent, because Redis only wakes clients blocked on keys that exist.
fn try_acquire(
    node: &Node,
    lease: Option<&mut Lease>,
    now: Now,
    owner: &[u8],
    ttl_ms: u64,
    keep_key: bool,
    fx: &mut Vec<Effect>,
) -> Result<(Acquire, Store), LeaseError> {
    let grace = node.grace_ms_left(now);
    let (out, store) = match lease {
        Some(lease) => {
            expire_lazily(lease, now, fx);
            let out = lease.acquire(owner, ttl_ms, now, grace, node.token_floor())?;
            if matches!(out, Acquire::Granted { .. } | Acquire::Refreshed { .. }) {
                held(lease, now, fx);
            }
            (out, Store::Keep)
        }
        None => {
            let mut lease = Lease::new();
            let out = lease.acquire(owner, ttl_ms, now, grace, node.token_floor())?;
            if matches!(out, Acquire::Granted { .. }) || keep_key {
                held(&lease, now, fx);
                (out, Store::Create(lease))
            } else {
                (out, Store::Keep)
            }
        }
    };
    match out {
        Acquire::Granted { token } => {
            fx.push(Effect::ObserveToken(token));
            fx.push(Effect::Count(Counter::Acquired));
            fx.push(Effect::Notify(Event::Acquired));
        }
        Acquire::Refreshed { .. } => fx.push(Effect::Count(Counter::Refreshed)),
        Acquire::Busy | Acquire::InGrace { .. } => {}
    }
    Ok((out, store))
}
