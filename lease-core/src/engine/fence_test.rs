//! `LEASE.FENCE`: only the live token passes; with a command the reply is delegated.

use super::testing::*;
use super::{Counter::*, Effect::*, Event, Reply};
use crate::request::Request;
use crate::state::Apply;
use crate::LeaseError;

#[test]
fn table() {
    let n = node();
    let (held, t) = held_by("a", 0, 100);
    let fence = |token, with_command| Request::Fence {
        token,
        with_command,
    };
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, bool, u64, Request, Reply, Vec<super::Effect>)> = vec![
        (
            "live token: remaining ms, rounded up",
            true,
            40,
            fence(t, false),
            Reply::Int(60),
            vec![Count(FenceOk)],
        ),
        (
            "live token with a command: the command's reply (counted by the executor)",
            true,
            40,
            fence(t, true),
            Reply::RunFenced,
            vec![],
        ),
        (
            "stale token",
            true,
            40,
            fence(t + 1, true),
            Reply::Error(LeaseError::Fenced),
            vec![Count(FenceRejected)],
        ),
        (
            "no key",
            false,
            40,
            fence(t, false),
            Reply::Error(LeaseError::Fenced),
            vec![Count(FenceRejected)],
        ),
        (
            "deadline passed: expired on the spot, then refused",
            true,
            100,
            fence(t, true),
            Reply::Error(LeaseError::Fenced),
            vec![
                Count(Expired),
                Replicate(Apply::Free {
                    token: t,
                    membership: None,
                }),
                Notify(Event::Expired),
                WakeWaiters,
                Count(FenceRejected),
            ],
        ),
    ];
    for (name, present, ms, req, want_reply, want_fx) in cases {
        let (reply, _, fx) = run(&n, present.then(|| held.clone()), at(ms), client(), req);
        assert_eq!((reply, fx), (want_reply, want_fx), "{name}");
    }
}
