//! `LEASE.RENEW`. Cases: `renew_test.rs`.

use super::effects::{expire_lazily, held, Counter, Effect, Outcome, Reply};
use crate::state::{Lease, Now};

pub(super) fn renew(
    mut fx: Vec<Effect>,
    lease: Option<&mut Lease>,
    now: Now,
    owner: &[u8],
    token: u64,
    ttl_ms: u64,
    membership: Option<u64>,
) -> Outcome {
    let renewed = match lease {
        Some(lease) => {
            // Quorum mode (docs/quorum.md §4.1): a reign is bound to one membership; a key
            // rebound by the operator (LEASE.MEMBERSHIP) no longer renews the old one's reign.
            if let Err(e) = lease.check_membership(membership) {
                fx.push(Effect::Count(Counter::MembershipRejected));
                return Outcome::new(fx, Reply::Error(e));
            }
            expire_lazily(lease, now, &mut fx);
            let ok = lease.renew(owner, token, ttl_ms, now);
            if ok {
                lease.bind_membership(membership);
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
