//! `LEASE.APPLY`: a decision the primary took, replayed from the replication stream or the
//! AOF. Cases: `apply_test.rs`.

use super::effects::{Call, Effect, Outcome, Reply, Store};
use crate::error::LeaseError;
use crate::state::{Apply, Lease, Now};

pub(super) fn apply(
    mut fx: Vec<Effect>,
    lease: Option<&mut Lease>,
    now: Now,
    call: Call,
    eff: &Apply,
) -> Outcome {
    // From any ordinary client an effect would be a way to forge a lease.
    if !call.from_primary_or_loading {
        return Outcome::new(fx, Reply::Error(LeaseError::ForgedEffect));
    }
    fx.push(Effect::ObserveToken(match eff {
        Apply::Hold { token, .. } | Apply::Free { token, .. } => *token,
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
