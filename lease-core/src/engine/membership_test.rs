//! Quorum mode's membership binding (issue 32, docs/quorum.md §4.1): ACQUIRE, RENEW and
//! RAISE naming another membership than the key's are refused with the `MEMBERSHIP` error and
//! change nothing, also on a free key; a key bound to nothing takes the first id that
//! succeeds; commands without the option behave as before; only `LEASE.MEMBERSHIP` (a
//! compare-and-set) rebinds, and it never ends a live lease.

use super::testing::*;
use super::{Counter::*, Effect::*, Event, Reply};
use crate::error::LeaseError;
use crate::request::Request;
use crate::state::{Apply, Lease};

const M: u64 = 0x1111_2222_3333_4444;
const M2: u64 = 0x5555_6666_7777_8888;

fn acquire(owner: &str, membership: Option<u64>) -> Request<'_> {
    Request::Acquire {
        owner: owner.as_bytes(),
        ttl_ms: 100,
        block: None,
        membership,
    }
}

fn renew(owner: &str, token: u64, membership: Option<u64>) -> Request<'_> {
    Request::Renew {
        owner: owner.as_bytes(),
        token,
        ttl_ms: 100,
        membership,
    }
}

fn raise(owner: &str, token: u64, membership: Option<u64>) -> Request<'static> {
    let owner: &'static str = if owner == "a" { "a" } else { "b" };
    Request::Raise {
        owner: owner.as_bytes(),
        token,
        new_token: token + 10,
        membership,
    }
}

fn mismatch(stored: u64, sent: u64) -> Reply {
    Reply::Error(LeaseError::MembershipMismatch { stored, sent })
}

/// A key bound to `M` whose lease `a` held from 0 for 100 ms and released at 10: free, with
/// its token history, exactly the state of node B in issue 32.
fn free_bound() -> (Lease, u64) {
    let n = node();
    let (r, l, _) = run(&n, None, at(0), client(), acquire("a", Some(M)));
    let Reply::Int(t) = r else { panic!("{r:?}") };
    let t = t as u64;
    let rel = Request::Release {
        owner: b"a",
        token: t,
    };
    let (r, l, _) = run(&n, l, at(10), client(), rel);
    assert_eq!(r, Reply::Int(1));
    let l = l.expect("key kept");
    assert!(!l.is_held() && l.membership() == Some(M));
    (l, t)
}

#[test]
fn the_first_grant_binds_and_is_replicated_with_the_id() {
    let (r, l, fx) = run(&node(), None, at(0), client(), acquire("a", Some(M)));
    let Reply::Int(t) = r else { panic!("{r:?}") };
    let t = t as u64;
    assert_eq!(l.as_ref().and_then(Lease::membership), Some(M));
    assert_eq!(
        fx,
        vec![
            Replicate(Apply::Hold {
                owner: b"a".to_vec(),
                token: t,
                expires_wall_ms: WALL0 + 100,
                membership: Some(M),
            }),
            ArmTimer {
                deadline_mono_us: deadline(0, 100)
            },
            ObserveToken(t),
            Count(Acquired),
            Notify(Event::Acquired),
        ]
    );
    // A key from before membership ids (bound to nothing) is bound by its next grant too.
    let (old, _) = held_by("z", 0, 100);
    let (r, l, _) = run(&node(), Some(old), at(200), client(), acquire("a", Some(M)));
    assert!(matches!(r, Reply::Int(_)), "{r:?}");
    assert_eq!(l.and_then(|l| l.membership()), Some(M));
}

#[test]
fn another_membership_is_refused_on_a_free_key_and_nothing_changes() {
    let (before, t) = free_bound();
    let n = node();
    for req in [
        acquire("b", Some(M2)),
        renew("a", t, Some(M2)),
        raise("a", t, Some(M2)),
    ] {
        let (r, l, fx) = run(&n, Some(before.clone()), at(20), client(), req.clone());
        assert_eq!(r, mismatch(M, M2), "{req:?}");
        assert_eq!(fx, vec![Count(MembershipRejected)], "{req:?}");
        assert_eq!(l.as_ref(), Some(&before), "{req:?}: state unchanged");
    }
    // Refused before the lazy expiry too: a lapsed holder is not even freed.
    let (r, l, _) = run(&n, None, at(0), client(), acquire("a", Some(M)));
    assert!(matches!(r, Reply::Int(_)));
    let lapsed = l.expect("created");
    let (r, l, fx) = run(
        &n,
        Some(lapsed.clone()),
        at(500),
        client(),
        acquire("b", Some(M2)),
    );
    assert_eq!((r, fx), (mismatch(M, M2), vec![Count(MembershipRejected)]));
    assert_eq!(l, Some(lapsed));
    // The same id is granted, above the kept token.
    let (r, l, _) = run(
        &n,
        Some(before.clone()),
        at(20),
        client(),
        acquire("b", Some(M)),
    );
    let Reply::Int(t2) = r else { panic!("{r:?}") };
    assert!(t2 as u64 > t);
    assert_eq!(l.and_then(|l| l.membership()), Some(M));
}

#[test]
fn commands_without_the_option_ignore_the_binding() {
    let (before, t) = free_bound();
    let n = node();
    let (r, l, _) = run(&n, Some(before), at(20), client(), acquire("b", None));
    let Reply::Int(t2) = r else { panic!("{r:?}") };
    let l = l.expect("kept");
    assert!(t2 as u64 > t);
    assert_eq!(l.membership(), Some(M), "kept, not cleared");
    let (r, l, _) = run(&n, Some(l), at(30), client(), renew("b", t2 as u64, None));
    assert_eq!(r, Reply::Int(1));
    assert_eq!(l.and_then(|l| l.membership()), Some(M));
}

#[test]
fn the_binding_outlives_expiry_and_is_in_the_free_effect() {
    let n = node();
    let (_, l, _) = run(&n, None, at(0), client(), acquire("a", Some(M)));
    let (r, l, fx) = run(&n, l, at(100), client(), Request::Expire);
    assert_eq!(r, Reply::Nothing);
    assert!(fx.contains(&Replicate(Apply::Free {
        token: l.as_ref().map_or(0, Lease::last_token),
        membership: Some(M),
    })));
    assert_eq!(l.and_then(|l| l.membership()), Some(M));
}

#[test]
fn lease_membership_is_a_compare_and_set_that_never_ends_a_live_lease() {
    let n = node();
    let cas = |old, new| Request::Membership {
        old,
        new,
        token: None,
    };
    // Wrong old id: 0, nothing changes, nothing replicated.
    let (free, t) = free_bound();
    let (r, l, fx) = run(&n, Some(free.clone()), at(20), client(), cas(Some(M2), M2));
    assert_eq!((r, fx, l.as_ref()), (Reply::Int(0), vec![], Some(&free)));
    let (r, _, fx) = run(&n, Some(free.clone()), at(20), client(), cas(None, M2));
    assert_eq!(
        (r, fx),
        (Reply::Int(0), vec![]),
        "NONE does not match a bound key"
    );
    // Right old id: rebound and replicated as the whole (free) state.
    let (r, l, fx) = run(&n, Some(free.clone()), at(20), client(), cas(Some(M), M2));
    assert_eq!(r, Reply::Int(1));
    assert_eq!(
        fx,
        vec![Replicate(Apply::Free {
            token: t,
            membership: Some(M2)
        })]
    );
    let l = l.expect("kept");
    assert_eq!((l.membership(), l.last_token()), (Some(M2), t));
    // Retried: 1 again, no effect.
    let (r, l, fx) = run(&n, Some(l), at(21), client(), cas(Some(M), M2));
    assert_eq!((r, fx), (Reply::Int(1), vec![]));
    // Now the new list is granted and the old refused.
    let (r, _, _) = run(&n, l.clone(), at(22), client(), acquire("x", Some(M)));
    assert_eq!(r, mismatch(M2, M));
    let (r, _, _) = run(&n, l, at(22), client(), acquire("y", Some(M2)));
    assert!(matches!(r, Reply::Int(_)), "{r:?}");

    // No key: NONE creates it free and bound (a node added to the set, bound in advance).
    let (r, l, fx) = run(&n, None, at(0), client(), cas(None, M2));
    assert_eq!(r, Reply::Int(1));
    assert_eq!(
        fx,
        vec![Replicate(Apply::Free {
            token: 0,
            membership: Some(M2)
        })]
    );
    assert_eq!(l.and_then(|l| l.membership()), Some(M2));
    let (r, l, fx) = run(&n, None, at(0), client(), cas(Some(M), M2));
    assert_eq!((r, l, fx), (Reply::Int(0), None, vec![]));

    // On a live lease: the holder keeps the node until expiry (nobody else is granted), but
    // its renewals under the old id are refused from now on.
    let (r, l, _) = run(&n, None, at(0), client(), acquire("a", Some(M)));
    let Reply::Int(t) = r else { panic!("{r:?}") };
    let (r, l, _) = run(&n, l, at(10), client(), cas(Some(M), M2));
    assert_eq!(r, Reply::Int(1));
    let (r, l, _) = run(&n, l, at(20), client(), acquire("b", Some(M2)));
    assert_eq!(r, Reply::Null, "still held by a");
    let (r, l, _) = run(&n, l, at(30), client(), renew("a", t as u64, Some(M)));
    assert_eq!(r, mismatch(M2, M));
    let (r, _, _) = run(&n, l, at(100), client(), acquire("b", Some(M2)));
    assert!(
        matches!(r, Reply::Int(_)),
        "granted once a's lease expired: {r:?}"
    );
}

#[test]
fn effects_carry_the_binding_both_ways() {
    let from_primary = super::Call {
        from_primary_or_loading: true,
        ..super::Call::default()
    };
    let n = node();
    let (_, l, _) = run(
        &n,
        None,
        at(0),
        from_primary,
        Request::Apply(Apply::Free {
            token: 5,
            membership: Some(M),
        }),
    );
    assert_eq!(l.as_ref().and_then(Lease::membership), Some(M));
    // The effect is the whole state: one without the option replays as bound to nothing.
    let (_, l, _) = run(
        &n,
        l,
        at(1),
        from_primary,
        Request::Apply(Apply::Free {
            token: 5,
            membership: None,
        }),
    );
    assert_eq!(l.and_then(|l| l.membership()), None);
}

/// `TOKEN t` carries the old list's highest token over to a server the new list may reign
/// on without it: the key's next grant is above `t`, the free state is replicated with it,
/// the node's watermark rises; refused on a live lease (state unchanged), and never
/// lowers a token.
#[test]
fn lease_membership_token_floor() {
    let n = node();
    let with = |old, new, t| Request::Membership {
        old,
        new,
        token: Some(t),
    };
    let (free, t) = free_bound();
    let high = t + 1_000_000;
    let (r, l, fx) = run(
        &n,
        Some(free.clone()),
        at(20),
        client(),
        with(Some(M), M2, high),
    );
    assert_eq!(r, Reply::Int(1));
    assert_eq!(
        fx,
        vec![
            ObserveToken(high),
            Replicate(Apply::Free {
                token: high,
                membership: Some(M2)
            })
        ]
    );
    let (r, _, _) = run(&n, l.clone(), at(21), client(), acquire("y", Some(M2)));
    let Reply::Int(t2) = r else { panic!("{r:?}") };
    assert!(t2 as u64 > high, "the next grant is above the floor");
    // Never lowers: a floor below the last token leaves it.
    let (r, l2, _) = run(&n, l, at(21), client(), with(Some(M2), M2, 5));
    assert_eq!(r, Reply::Int(1));
    assert_eq!(l2.map(|l| l.last_token()), Some(high));
    // On a live lease: refused, nothing changes.
    let (r, live, _) = run(&n, None, at(0), client(), acquire("a", Some(M)));
    assert!(matches!(r, Reply::Int(_)));
    let live = live.expect("created");
    let (r, l, fx) = run(
        &n,
        Some(live.clone()),
        at(10),
        client(),
        with(Some(M), M2, high),
    );
    assert_eq!(r, Reply::Error(LeaseError::TokenOnLiveLease));
    assert_eq!((fx, l), (vec![], Some(live.clone())));
    // Once it lapsed: freed first (its effects), then rebound with the floor.
    let (r, l, fx) = run(&n, Some(live), at(100), client(), with(Some(M), M2, high));
    assert_eq!(r, Reply::Int(1));
    assert_eq!(fx.first(), Some(&Count(Expired)));
    assert_eq!(
        l.map(|l| (l.last_token(), l.membership())),
        Some((high, Some(M2)))
    );
    // No key: created with the floor.
    let (r, l, _) = run(&n, None, at(0), client(), with(None, M2, high));
    assert_eq!(r, Reply::Int(1));
    assert_eq!(l.map(|l| l.last_token()), Some(high));
}
