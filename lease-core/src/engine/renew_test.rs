//! `LEASE.RENEW`: only the live owner+token; an expired lease is never renewed.

use super::testing::*;
use super::{Counter::*, Effect::*, Event, Reply};
use crate::request::Request;
use crate::state::Apply;

fn renew(owner: &str, token: u64, ttl: u64) -> Request<'_> {
    Request::Renew {
        owner: owner.as_bytes(),
        token,
        ttl_ms: ttl,
        membership: None,
    }
}

#[test]
fn table() {
    let n = node();
    let (held, t) = held_by("a", 0, 100);
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, bool, u64, Request, Reply, Vec<super::Effect>)> = vec![
        (
            "live owner+token: new expiry replicated, timer armed, counted",
            true,
            99,
            renew("a", t, 200),
            Reply::Int(1),
            vec![
                Replicate(Apply::Hold {
                    owner: b"a".to_vec(),
                    token: t,
                    expires_wall_ms: WALL0 + 299,
                    membership: None,
                }),
                ArmTimer {
                    deadline_mono_us: deadline(99, 200),
                },
                Count(Renewed),
            ],
        ),
        (
            "wrong token",
            true,
            50,
            renew("a", t + 1, 100),
            Reply::Int(0),
            vec![Count(RenewRejected)],
        ),
        (
            "wrong owner",
            true,
            50,
            renew("b", t, 100),
            Reply::Int(0),
            vec![Count(RenewRejected)],
        ),
        (
            "exactly at the deadline: expired (and freed), never renewed",
            true,
            100,
            renew("a", t, 100),
            Reply::Int(0),
            vec![
                Count(Expired),
                Replicate(Apply::Free {
                    token: t,
                    membership: None,
                }),
                Notify(Event::Expired),
                WakeWaiters,
                Count(RenewRejected),
            ],
        ),
        (
            "no key",
            false,
            0,
            renew("a", t, 100),
            Reply::Int(0),
            vec![Count(RenewRejected)],
        ),
    ];
    for (name, present, ms, req, want_reply, want_fx) in cases {
        let lease = present.then(|| held.clone());
        let (reply, _, fx) = run(&n, lease, at(ms), client(), req);
        assert_eq!((reply, fx), (want_reply, want_fx), "{name}");
    }
}

/// The engine decides whether a renewal arms a timer (the module passes in, through the
/// value's record, whether an expiry-timer entry is still pending): a renew moves the
/// deadline later, so a pending entry fires early and re-arms; none is added. Without a
/// pending entry (it fired, or was forgotten) the renewal arms one and records it.
#[test]
fn a_renew_arms_a_timer_only_when_none_is_pending() {
    let n = node();
    let (mut held, t) = held_by("a", 0, 100);
    held.set_timer_pending(true);
    let (reply, after, fx) = run(&n, Some(held.clone()), at(50), client(), renew("a", t, 200));
    assert_eq!(reply, Reply::Int(1));
    assert!(
        !fx.iter().any(|e| matches!(e, ArmTimer { .. })),
        "pending entry: no new one, {fx:?}"
    );
    assert!(
        after.expect("still held").timer_pending(),
        "the record stays"
    );
    held.set_timer_pending(false);
    let (_, after, fx) = run(&n, Some(held), at(50), client(), renew("a", t, 200));
    assert!(
        fx.contains(&ArmTimer {
            deadline_mono_us: deadline(50, 200)
        }),
        "{fx:?}"
    );
    assert!(after.expect("still held").timer_pending(), "recorded");
}
