//! The engine: every decision a lease command (or one of the module's own callbacks) takes,
//! with every side effect as a value. `handle(node, lease at key, now, call, request)`
//! returns the reply, what to store, and the effects in the order the executor
//! (`src/module/executor.rs`) must carry them out. Nothing here touches FFI or reads a clock,
//! so each handler is tested by a table `(now, node, lease, request) -> (reply, effects)`.
//! As in openraft's engine, each request has its own function in its own file, next to its
//! table (`acquire.rs` and `acquire_test.rs`, ...); `handle_with` only dispatches, and
//! `effects.rs` holds the vocabulary and the effect sequences handlers share.
//!
//! Order matters and is part of the contract: the replication stream, keyspace events and
//! waiter wake-ups leave the server in exactly the order of the effect list (a lazily found
//! expiry is replicated as `FREE` before the grant that follows it, for example).

use crate::node::Node;
use crate::request::Request;
use crate::state::{Lease, Now};

pub use effects::{Call, Counter, Effect, Event, Outcome, Reply, Store};

mod acquire;
mod apply;
mod block;
mod effects;
mod expire;
mod fence;
mod membership;
mod raise;
mod read;
mod release;
mod renew;

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
mod membership_test;
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
            membership,
        } => acquire::acquire(fx, node, lease, now, call, owner, ttl_ms, block, membership),
        Request::AcquireRetry { owner, ttl_ms } => {
            block::acquire_retry(fx, node, lease, now, call, owner, ttl_ms)
        }
        Request::BlockTimeout => block::block_timeout(fx),
        Request::Renew {
            owner,
            token,
            ttl_ms,
            membership,
        } => renew::renew(fx, lease, now, owner, token, ttl_ms, membership),
        Request::Raise {
            owner,
            token,
            new_token,
            membership,
        } => raise::raise(fx, lease, now, owner, token, new_token, membership),
        Request::Membership { old, new, token } => {
            membership::change(fx, lease, now, old, new, token)
        }
        Request::Release { owner, token } => release::release(fx, lease, now, owner, token),
        Request::Fence {
            token,
            with_command,
        } => fence::fence(fx, lease, now, token, with_command),
        Request::Get => read::get(fx, lease, now),
        Request::Info => read::info(fx, lease, now),
        Request::Apply(ref eff) => apply::apply(fx, lease, now, call, eff),
        Request::Expire => expire::expire(fx, lease, now),
        Request::Rearm => expire::rearm(fx, lease),
        Request::Migrated { min_ms } => expire::migrated(fx, lease, now, min_ms),
    }
}
