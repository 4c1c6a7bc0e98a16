//! `LEASE.MEMBERSHIP key old new`: the operator's step of a quorum membership change
//! (docs/quorum.md §4.1). Cases: `membership_test.rs`.

use super::effects::{Effect, Outcome, Reply, Store};
use crate::state::{Lease, Now};

/// Compare-and-set of the key's membership binding. It changes nothing else: a live lease
/// stays live (its holder's renewals under the old id are refused from now on, and nobody
/// else is granted here until it expires), the token history stays. An absent key with
/// `old = None` is created free, bound to `new`: a node added to the set can be bound
/// before any elector uses it.
pub(super) fn change(
    mut fx: Vec<Effect>,
    lease: Option<&mut Lease>,
    now: Now,
    old: Option<u64>,
    new: u64,
) -> Outcome {
    match lease {
        Some(lease) => {
            let before = lease.membership();
            let ok = lease.change_membership(old, new);
            if ok && before != lease.membership() {
                fx.push(Effect::Replicate(lease.to_apply(now)));
            }
            Outcome::new(fx, Reply::Int(i64::from(ok)))
        }
        None if old.is_none() => {
            let mut lease = Lease::new();
            lease.change_membership(None, new);
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
