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
                Replicate(Apply::Free { token: t }),
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
