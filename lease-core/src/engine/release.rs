//! `LEASE.RELEASE`. Cases: `release_test.rs`.

use super::effects::{expire_lazily, Counter, Effect, Event, Outcome, Reply};
use crate::state::{Lease, Now};

pub(super) fn release(
    mut fx: Vec<Effect>,
    lease: Option<&mut Lease>,
    now: Now,
    owner: &[u8],
    token: u64,
) -> Outcome {
    let released = match lease {
        Some(lease) => {
            expire_lazily(lease, now, &mut fx);
            let ok = lease.release(owner, token, now);
            if ok {
                fx.push(Effect::Replicate(lease.to_apply(now)));
                fx.push(Effect::Notify(Event::Released));
                // Hand-over: blocked acquirers are served right after this command.
                fx.push(Effect::WakeWaiters);
            }
            ok
        }
        None => false,
    };
    fx.push(Effect::Count(if released {
        Counter::Released
    } else {
        Counter::ReleaseRejected
    }));
    Outcome::new(fx, Reply::Int(i64::from(released)))
}
