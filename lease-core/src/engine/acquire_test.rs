//! `LEASE.ACQUIRE` without BLOCK: grant, refresh, busy, lazy expiry, token space.

use super::testing::*;
use super::{Counter::*, Effect::*, Event, Reply, Store};
use crate::rdb::Persisted;
use crate::request::Request;
use crate::state::{Apply, Lease, TOKEN_LIMIT};
use crate::LeaseError;

fn acq(owner: &str, ttl: u64) -> Request<'_> {
    Request::Acquire {
        owner: owner.as_bytes(),
        ttl_ms: ttl,
        block: None,
        membership: None,
    }
}

#[test]
fn grant_on_a_missing_key_creates_it_and_tells_everyone() {
    let n = node();
    let (reply, lease, fx) = run(&n, None, at(0), client(), acq("a", 100));
    let token = WALL0 * 1000; // wall-clock term of the token rule
    assert_eq!(reply, Reply::Int(token as i64));
    assert_eq!(lease.map(|l| l.last_token()), Some(token));
    assert_eq!(
        fx,
        vec![
            Replicate(Apply::Hold {
                owner: b"a".to_vec(),
                token,
                expires_wall_ms: WALL0 + 100,
                membership: None,
            }),
            ArmTimer {
                deadline_mono_us: deadline(0, 100)
            },
            ObserveToken(token),
            Count(Acquired),
            Notify(Event::Acquired),
        ]
    );
}

#[test]
fn table() {
    let n = node();
    let (held, t1) = held_by("a", 0, 100);
    // (name, lease before, now ms, owner, reply, effects)
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, Option<Lease>, u64, &str, Reply, Vec<super::Effect>)> = vec![
        (
            "same owner refreshes: token kept, new expiry replicated, timer armed",
            Some(held.clone()),
            20,
            "a",
            Reply::Int(t1 as i64),
            vec![
                Replicate(Apply::Hold {
                    owner: b"a".to_vec(),
                    token: t1,
                    expires_wall_ms: WALL0 + 120,
                    membership: None,
                }),
                ArmTimer {
                    deadline_mono_us: deadline(20, 100),
                },
                Count(Refreshed),
            ],
        ),
        (
            "other owner while live: nil, counted as contended, nothing replicated",
            Some(held.clone()),
            99,
            "b",
            Reply::Null,
            vec![Count(Contended)],
        ),
        (
            "at the deadline: the lapsed holder is expired first, then the grant",
            Some(held.clone()),
            100,
            "b",
            Reply::Int((WALL0 + 100) as i64 * 1000),
            vec![
                Count(Expired),
                Replicate(Apply::Free {
                    token: t1,
                    membership: None,
                }),
                Notify(Event::Expired),
                WakeWaiters,
                Replicate(Apply::Hold {
                    owner: b"b".to_vec(),
                    token: (WALL0 + 100) * 1000,
                    expires_wall_ms: WALL0 + 200,
                    membership: None,
                }),
                ArmTimer {
                    deadline_mono_us: deadline(100, 100),
                },
                ObserveToken((WALL0 + 100) * 1000),
                Count(Acquired),
                Notify(Event::Acquired),
            ],
        ),
    ];
    for (name, lease, t, owner, want_reply, want_fx) in cases {
        let (reply, _, fx) = run(&n, lease, at(t), client(), acq(owner, 100));
        assert_eq!(reply, want_reply, "{name}");
        assert_eq!(fx, want_fx, "{name}");
    }
}

#[test]
fn same_owner_after_expiry_gets_a_new_token() {
    let (held, t1) = held_by("a", 0, 100);
    let (reply, lease, _) = run(&node(), Some(held), at(150), client(), acq("a", 100));
    let Reply::Int(t2) = reply else {
        panic!("{reply:?}")
    };
    assert!(t2 as u64 > t1);
    assert_eq!(lease.map(|l| l.grants()), Some(2));
}

#[test]
fn the_node_watermark_is_the_floor() {
    let mut n = node();
    n.token_watermark = WALL0 * 1000 + 41;
    let (reply, _, fx) = run(&n, None, at(0), client(), acq("a", 100));
    assert_eq!(reply, Reply::Int((WALL0 * 1000 + 42) as i64));
    assert!(fx.contains(&ObserveToken(WALL0 * 1000 + 42)));
}

#[test]
fn exhausted_token_space_is_an_error_and_stores_nothing() {
    let spent = Lease::from_persisted(
        Persisted {
            token: TOKEN_LIMIT - 1,
            held: None,
            grants: 0,
            membership: None,
        },
        at(0),
    );
    let (reply, lease, fx) = run(&node(), spent, at(0), client(), acq("a", 10));
    assert_eq!(reply, Reply::Error(LeaseError::TokenSpaceExhausted));
    assert!(fx.is_empty());
    assert!(lease.is_some_and(|l| !l.is_held()));
    let mut n = node();
    n.token_watermark = TOKEN_LIMIT - 1;
    let out = super::handle(&n, None, at(0), client(), &acq("a", 10));
    assert_eq!(out.store, Store::Keep, "no key for a failed grant");
    assert_eq!(out.reply, Reply::Error(LeaseError::TokenSpaceExhausted));
}
