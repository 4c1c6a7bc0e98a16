//! `LEASE.RAISE`. Cases: `raise_test.rs`.

use super::effects::{expire_lazily, Counter, Effect, Outcome, Reply};
use crate::state::{Lease, Now};

pub(super) fn raise(
    mut fx: Vec<Effect>,
    lease: Option<&mut Lease>,
    now: Now,
    owner: &[u8],
    token: u64,
    new_token: u64,
    membership: Option<u64>,
) -> Outcome {
    // Quorum mode (docs/quorum.md): the elector unifies the tokens a majority issued
    // to their maximum before it acts. The raised token is the key's last token and
    // the node's watermark, so this node's next grant (on any key) is above it: that
    // is what makes the next reign's token higher whichever majority it gets.
    let raised = match lease {
        Some(lease) => {
            if let Err(e) = lease.check_membership(membership) {
                fx.push(Effect::Count(Counter::MembershipRejected));
                return Outcome::new(fx, Reply::Error(e));
            }
            expire_lazily(lease, now, &mut fx);
            let ok = lease.raise(owner, token, new_token, now);
            if ok {
                lease.bind_membership(membership);
                fx.push(Effect::Replicate(lease.to_apply(now)));
                fx.push(Effect::ObserveToken(lease.last_token()));
            }
            ok
        }
        None => false,
    };
    Outcome::new(fx, Reply::Int(i64::from(raised)))
}
