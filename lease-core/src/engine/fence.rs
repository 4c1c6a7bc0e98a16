//! `LEASE.FENCE` (with or without a command to run). Cases: `fence_test.rs`.

use super::effects::{expire_lazily, Counter, Effect, Outcome, Reply};
use crate::error::LeaseError;
use crate::state::{Lease, Now};

pub(super) fn fence(
    mut fx: Vec<Effect>,
    lease: Option<&mut Lease>,
    now: Now,
    token: u64,
    with_command: bool,
) -> Outcome {
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
