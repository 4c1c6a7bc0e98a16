//! `LEASE.RAISE`: only the live owner+token; the raised token is replicated as the lease's
//! new state, becomes the node's watermark, and every later grant on the key is above it.

use super::testing::*;
use super::{Counter::*, Effect::*, Event, Reply};
use crate::request::Request;
use crate::state::Apply;

fn raise(owner: &str, token: u64, new_token: u64) -> Request<'_> {
    Request::Raise {
        owner: owner.as_bytes(),
        token,
        new_token,
        membership: None,
    }
}

#[test]
fn table() {
    let n = node();
    let (held, t) = held_by("a", 0, 100);
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, bool, u64, Request, Reply, Vec<super::Effect>, u64)> =
        vec![
        (
            "live owner+token: new token replicated with the unchanged expiry, watermark raised",
            true,
            40,
            raise("a", t, t + 500),
            Reply::Int(1),
            vec![
                Replicate(Apply::Hold {
                    owner: b"a".to_vec(),
                    token: t + 500,
                    expires_wall_ms: WALL0 + 100,
                    membership: None,
                }),
                ObserveToken(t + 500),
            ],
            t + 500,
        ),
        (
            "same token: accepted, nothing changes but it is replicated (idempotent retry)",
            true,
            40,
            raise("a", t, t),
            Reply::Int(1),
            vec![
                Replicate(Apply::Hold {
                    owner: b"a".to_vec(),
                    token: t,
                    expires_wall_ms: WALL0 + 100,
                    membership: None,
                }),
                ObserveToken(t),
            ],
            t,
        ),
        (
            "wrong token",
            true,
            40,
            raise("a", t + 1, t + 500),
            Reply::Int(0),
            vec![],
            t,
        ),
        (
            "wrong owner",
            true,
            40,
            raise("b", t, t + 500),
            Reply::Int(0),
            vec![],
            t,
        ),
        (
            "exactly at the deadline: expired (and freed), never raised",
            true,
            100,
            raise("a", t, t + 500),
            Reply::Int(0),
            vec![
                Count(Expired),
                Replicate(Apply::Free { token: t, membership: None }),
                Notify(Event::Expired),
                WakeWaiters,
            ],
            t,
        ),
        ("no key", false, 0, raise("a", t, t + 5), Reply::Int(0), vec![], 0),
    ];
    for (name, present, ms, req, want_reply, want_fx, want_last) in cases {
        let lease = present.then(|| held.clone());
        let (reply, after, fx) = run(&n, lease, at(ms), client(), req);
        assert_eq!((reply, fx), (want_reply, want_fx), "{name}");
        assert_eq!(after.map_or(0, |l| l.last_token()), want_last, "{name}");
    }
}

/// After a raise the key's next grant is above the raised token, even when the wall-clock
/// term is far below it (a raise to a token another node issued with a faster wall clock).
#[test]
fn next_grant_is_above_the_raised_token() {
    let n = node();
    let (held, t) = held_by("a", 0, 100);
    let high = t + 10_000_000;
    let (reply, lease, _) = run(&n, Some(held), at(10), client(), raise("a", t, high));
    assert_eq!(reply, Reply::Int(1));
    let (reply, lease, _) = run(
        &n,
        lease,
        at(20),
        client(),
        Request::Release {
            owner: b"a",
            token: high,
        },
    );
    assert_eq!(reply, Reply::Int(1), "released with the raised token");
    let (reply, _, fx) = run(
        &n,
        lease,
        at(30),
        client(),
        Request::Acquire {
            owner: b"b",
            ttl_ms: 100,
            block: None,
            membership: None,
        },
    );
    assert_eq!(reply, Reply::Int(high as i64 + 1));
    assert!(fx.contains(&Count(Acquired)));
}
