//! The two requests of a blocked acquirer: its retry when the key is signalled
//! (`Request::AcquireRetry`) and its timeout (`Request::BlockTimeout`). Cases: `block_test.rs`.

use super::acquire::try_acquire;
use super::effects::{Call, Counter, Effect, Outcome, Reply};
use crate::error::LeaseError;
use crate::node::Node;
use crate::state::{Acquire, Lease, Now};

pub(super) fn acquire_retry(
    mut fx: Vec<Effect>,
    node: &Node,
    lease: Option<&mut Lease>,
    now: Now,
    call: Call,
    owner: &[u8],
    ttl_ms: u64,
) -> Outcome {
    // Redis applied min-replicas-to-write when the command arrived, not now; a grant
    // here is a new write, so it is checked again (a grant that exists on no replica
    // is exactly what the setting is there to stop).
    if !call.replicas_ok {
        return Outcome::new(fx, Reply::Error(LeaseError::NoReplicas));
    }
    // No membership: BLOCK and MEMBERSHIP are never combined (the parser refuses it).
    match try_acquire(node, lease, now, owner, ttl_ms, false, None, &mut fx) {
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

pub(super) fn block_timeout(mut fx: Vec<Effect>) -> Outcome {
    fx.push(Effect::Count(Counter::BlockTimeouts));
    Outcome::new(fx, Reply::Null)
}
