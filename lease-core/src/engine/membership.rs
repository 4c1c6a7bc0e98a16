//! `LEASE.MEMBERSHIP key old new [TOKEN t]`: the operator's step of a quorum membership
//! change (docs/quorum.md §4.1). Cases: `membership_test.rs`.

use super::effects::{expire_lazily, Effect, Outcome, Reply, Store};
use crate::error::LeaseError;
use crate::state::{Lease, Now};

/// Compare-and-set of the key's membership binding; with `token`, the key's last token
/// becomes at least `t` (the new list's first reign must issue above the old list's last
/// token, which a new majority may never have seen). It never ends or grants a lease: a live
/// lease stays live (its holder's renewals under the old id are refused from now on, and
/// nobody else is granted here until it expires); `TOKEN` on a live lease is refused (its
/// token cannot move under its holder). An absent key with `old = None` is created free,
/// bound to `new`: a node added to the set can be bound before any elector uses it.
pub(super) fn change(
    mut fx: Vec<Effect>,
    lease: Option<&mut Lease>,
    now: Now,
    old: Option<u64>,
    new: u64,
    token: Option<u64>,
) -> Outcome {
    match lease {
        Some(lease) => {
            let bound = lease.membership();
            if bound != old && bound != Some(new) {
                return Outcome::new(fx, Reply::Int(0));
            }
            if token.is_some() && lease.is_live(now) {
                return Outcome::new(fx, Reply::Error(LeaseError::TokenOnLiveLease));
            }
            expire_lazily(lease, now, &mut fx);
            let before = (lease.membership(), lease.last_token());
            lease.change_membership(old, new);
            if let Some(t) = token {
                lease.raise_last_token(t);
                fx.push(Effect::ObserveToken(t));
            }
            if before != (lease.membership(), lease.last_token()) {
                fx.push(Effect::Replicate(lease.to_apply(now)));
            }
            Outcome::new(fx, Reply::Int(1))
        }
        None if old.is_none() => {
            let mut lease = Lease::new();
            lease.change_membership(None, new);
            if let Some(t) = token {
                lease.raise_last_token(t);
                fx.push(Effect::ObserveToken(t));
            }
            fx.push(Effect::Replicate(lease.to_apply(now)));
            Outcome {
                reply: Reply::Int(1),
                store: Store::Create(lease),
                effects: fx,
            }
        }
        None => Outcome::new(fx, Reply::Int(0)),
    }
}
