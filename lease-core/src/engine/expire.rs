//! The module's own timer-side requests: an expiry timer or the cron safety net
//! (`Request::Expire`), re-arming after load, promotion or a key move (`Request::Rearm`), and
//! a lease that arrived by MIGRATE/RESTORE (`Request::Migrated`). Cases: `expire_test.rs`.

use super::effects::{arm_timer, expire_lazily, Effect, Outcome, Reply};
use crate::state::{Lease, Now};

pub(super) fn expire(mut fx: Vec<Effect>, lease: Option<&mut Lease>, now: Now) -> Outcome {
    if let Some(lease) = lease {
        if !expire_lazily(lease, now, &mut fx) {
            // Fired early (renewed meanwhile): re-arm for the current deadline.
            arm_timer(lease, &mut fx);
        }
    }
    Outcome::new(fx, Reply::Nothing)
}

pub(super) fn rearm(mut fx: Vec<Effect>, lease: Option<&mut Lease>) -> Outcome {
    if let Some(lease) = lease {
        arm_timer(lease, &mut fx);
    }
    Outcome::new(fx, Reply::Nothing)
}

pub(super) fn migrated(
    mut fx: Vec<Effect>,
    lease: Option<&mut Lease>,
    now: Now,
    min_ms: u64,
) -> Outcome {
    // SAFETY (issue 24): the source's absolute expiry read against this server's
    // wall clock is short by however far this clock runs ahead; a lapse here would
    // let a second owner in while the first still leads. The floor is replicated as
    // a HOLD so replicas and the AOF carry it too (they received the raw RESTORE).
    if let Some(lease) = lease {
        if lease.hold_at_least(now, min_ms) {
            fx.push(Effect::Replicate(lease.to_apply(now)));
        }
        arm_timer(lease, &mut fx);
    }
    Outcome::new(fx, Reply::Nothing)
}
