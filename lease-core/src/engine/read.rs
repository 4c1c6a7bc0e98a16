//! The read-only requests, `LEASE.GET` and `LEASE.INFO`. A lapsed holder is reported as no
//! lease but not freed here (freeing is a write, done by the timer or the next write
//! command; GET is allowed on replicas). Cases: `read_test.rs`.

use super::effects::{Effect, Outcome, Reply};
use crate::state::{Lease, Now};

pub(super) fn get(fx: Vec<Effect>, lease: Option<&mut Lease>, now: Now) -> Outcome {
    let reply = match lease.and_then(|l| l.holder(now)) {
        Some(h) => Reply::Holder {
            owner: h.owner.to_vec(),
            token: h.token,
            pttl_ms: h.pttl_ms,
        },
        None => Reply::Null,
    };
    Outcome::new(fx, reply)
}

pub(super) fn info(fx: Vec<Effect>, lease: Option<&mut Lease>, now: Now) -> Outcome {
    let reply = match lease {
        Some(l) => Reply::Info {
            holder: l
                .holder(now)
                .map(|h| (h.owner.to_vec(), h.token, h.pttl_ms)),
            last_token: l.last_token(),
            grants: l.grants(),
            membership: l.membership(),
        },
        None => Reply::Null,
    };
    Outcome::new(fx, reply)
}
