//! `LEASE.ACQUIRE` (with or without BLOCK), and the grant it shares with a blocked client's
//! retry (`block.rs`). Cases: `acquire_test.rs`, `block_test.rs`, `grace_test.rs`.

use super::effects::{expire_lazily, held, Call, Counter, Effect, Event, Outcome, Reply, Store};
use crate::error::LeaseError;
use crate::node::Node;
use crate::state::{Acquire, Lease, Now};

// The engine's inputs plus the request's three fields, spelled out as every handler takes them.
#[allow(clippy::too_many_arguments)]
pub(super) fn acquire(
    mut fx: Vec<Effect>,
    node: &Node,
    lease: Option<&mut Lease>,
    now: Now,
    call: Call,
    owner: &[u8],
    ttl_ms: u64,
    block: Option<u64>,
    membership: Option<u64>,
) -> Outcome {
    // MULTI, Lua and functions cannot block: BLOCK then behaves like a zero wait.
    let will_block = block.is_some() && call.can_block;
    let tried = try_acquire(
        node, lease, now, owner, ttl_ms, will_block, membership, &mut fx,
    );
    let (out, store) = match tried {
        Ok(x) => x,
        Err(e) => return Outcome::new(fx, Reply::Error(e)),
    };
    let reply = match out {
        Acquire::Granted { token } | Acquire::Refreshed { token } => Reply::Int(token as i64),
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

/// Shared by `Acquire` and `AcquireRetry`. `keep_key` creates the key of a free lease when
/// absent, because Redis only wakes clients blocked on keys that exist. `membership`
/// (quorum mode): a key bound to another id refuses before anything else happens, and a
/// grant or refresh binds a key bound to nothing (docs/quorum.md §4.1).
// The engine's inputs plus the request's fields, spelled out as every handler takes them.
#[allow(clippy::too_many_arguments)]
pub(super) fn try_acquire(
    node: &Node,
    lease: Option<&mut Lease>,
    now: Now,
    owner: &[u8],
    ttl_ms: u64,
    keep_key: bool,
    membership: Option<u64>,
    fx: &mut Vec<Effect>,
) -> Result<(Acquire, Store), LeaseError> {
    let grace = node.grace_ms_left(now);
    let (out, store) = match lease {
        Some(lease) => {
            // SAFETY (issue 32): checked even when the key is free. An elector with another
            // node list would find the node free exactly where it is the one node two
            // majorities of different lists must share; the binding is what keeps the two
            // lists apart. Checked first: a refused request changes nothing.
            if let Err(e) = lease.check_membership(membership) {
                fx.push(Effect::Count(Counter::MembershipRejected));
                return Err(e);
            }
            expire_lazily(lease, now, fx);
            let out = lease.acquire(owner, ttl_ms, now, grace, node.token_floor())?;
            if matches!(out, Acquire::Granted { .. } | Acquire::Refreshed { .. }) {
                lease.bind_membership(membership);
                held(lease, now, fx);
            }
            (out, Store::Keep)
        }
        None => {
            let mut lease = Lease::new();
            let out = lease.acquire(owner, ttl_ms, now, grace, node.token_floor())?;
            if matches!(out, Acquire::Granted { .. }) {
                lease.bind_membership(membership);
            }
            if matches!(out, Acquire::Granted { .. }) || keep_key {
                held(&mut lease, now, fx);
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
