//! `LEASE.RELEASE`: frees at once, keeps the token history, wakes waiters.

use super::testing::*;
use super::{Counter::*, Effect::*, Event, Reply};
use crate::request::Request;
use crate::state::Apply;

#[test]
fn table() {
    let n = node();
    let (held, t) = held_by("a", 0, 1000);
    let rel = |owner: &'static str, token| Request::Release {
        owner: owner.as_bytes(),
        token,
    };
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, bool, u64, Request, Reply, Vec<super::Effect>)> = vec![
        (
            "holder releases: FREE replicated, event, waiters woken",
            true,
            5,
            rel("a", t),
            Reply::Int(1),
            vec![
                Replicate(Apply::Free {
                    token: t,
                    membership: None,
                }),
                Notify(Event::Released),
                WakeWaiters,
                Count(Released),
            ],
        ),
        (
            "wrong token",
            true,
            5,
            rel("a", t + 1),
            Reply::Int(0),
            vec![Count(ReleaseRejected)],
        ),
        (
            "wrong owner",
            true,
            5,
            rel("b", t),
            Reply::Int(0),
            vec![Count(ReleaseRejected)],
        ),
        (
            "no key",
            false,
            5,
            rel("a", t),
            Reply::Int(0),
            vec![Count(ReleaseRejected)],
        ),
        (
            "after the deadline: the expiry happens, the release does not",
            true,
            1000,
            rel("a", t),
            Reply::Int(0),
            vec![
                Count(Expired),
                Replicate(Apply::Free {
                    token: t,
                    membership: None,
                }),
                Notify(Event::Expired),
                WakeWaiters,
                Count(ReleaseRejected),
            ],
        ),
    ];
    for (name, present, ms, req, want_reply, want_fx) in cases {
        let (reply, _, fx) = run(&n, present.then(|| held.clone()), at(ms), client(), req);
        assert_eq!((reply, fx), (want_reply, want_fx), "{name}");
    }
}

#[test]
fn released_lease_keeps_its_token_and_the_next_grant_is_above_it() {
    let (held, t) = held_by("a", 0, 1000);
    let req = Request::Release {
        owner: b"a",
        token: t,
    };
    let (_, lease, _) = run(&node(), Some(held), at(0), client(), req);
    let lease = lease.expect("key kept");
    assert!(!lease.is_held());
    assert_eq!(lease.last_token(), t);
    let acq = Request::Acquire {
        owner: b"b",
        ttl_ms: 10,
        block: None,
        membership: None,
    };
    let (reply, _, _) = run(&node(), Some(lease), at(0), client(), acq);
    assert_eq!(reply, Reply::Int(t as i64 + 1), "same ms: last + 1");
}
