//! The expiry timer (`Expire`) and re-arming after load, promotion, RENAME or SWAPDB
//! (`Rearm`).

use super::testing::*;
use super::{Counter::*, Effect::*, Event, Reply};
use crate::request::Request;
use crate::state::{Apply, Lease};

#[test]
fn expire_table() {
    let n = node();
    let (held, t) = held_by("a", 0, 100);
    let free = Lease::new();
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, Option<Lease>, u64, Vec<super::Effect>)> = vec![
        (
            "due: freed, FREE replicated, event, waiters woken",
            Some(held.clone()),
            100,
            vec![
                Count(Expired),
                Replicate(Apply::Free {
                    token: t,
                    membership: None,
                }),
                Notify(Event::Expired),
                WakeWaiters,
            ],
        ),
        (
            "fired early (renewed meanwhile): re-armed for the deadline",
            Some(held.clone()),
            60,
            vec![ArmTimer {
                deadline_mono_us: deadline(0, 100),
            }],
        ),
        ("free lease: nothing", Some(free), 60, vec![]),
        ("key gone: nothing", None, 60, vec![]),
    ];
    for (name, lease, ms, want) in cases {
        let (reply, _, fx) = run(&n, lease, at(ms), client(), Request::Expire);
        assert_eq!((reply, fx), (Reply::Nothing, want), "{name}");
    }
}

#[test]
fn expired_lease_keeps_its_key_and_token_history() {
    let (held, t) = held_by("a", 0, 100);
    let (_, lease, _) = run(&node(), Some(held), at(100), client(), Request::Expire);
    let lease = lease.expect("key kept");
    assert!(!lease.is_held());
    assert_eq!(lease.last_token(), t);
}

#[test]
fn rearm_arms_held_leases_only() {
    let (held, _) = held_by("a", 0, 100);
    let (_, _, fx) = run(&node(), Some(held), at(10), client(), Request::Rearm);
    assert_eq!(
        fx,
        vec![ArmTimer {
            deadline_mono_us: deadline(0, 100)
        }]
    );
    let (_, _, fx) = run(
        &node(),
        Some(Lease::new()),
        at(10),
        client(),
        Request::Rearm,
    );
    assert!(fx.is_empty());
    let (_, _, fx) = run(&node(), None, at(10), client(), Request::Rearm);
    assert!(fx.is_empty());
}

/// A lease that arrived by a client's RESTORE is held at least `min_ms` from its arrival
/// (issue 24: a target clock ahead of the source's shortened it); the floor is replicated,
/// a lease already longer is left alone, a free one stays free.
#[test]
fn migrated_lease_is_held_at_least_the_floor() {
    let (held, t) = held_by("a", 0, 100);
    let req = Request::Migrated { min_ms: 1000 };
    let (_, after, fx) = run(&node(), Some(held), at(10), client(), req.clone());
    assert_eq!(
        fx,
        vec![
            Replicate(Apply::Hold {
                owner: b"a".to_vec(),
                token: t,
                expires_wall_ms: WALL0 + 1010,
                membership: None,
            }),
            ArmTimer {
                deadline_mono_us: deadline(10, 1000)
            }
        ]
    );
    assert_eq!(
        after.and_then(|l| l.holder(at(1009)).map(|h| h.token)),
        Some(t)
    );
    let (long, _) = held_by("a", 0, 5000);
    let (_, _, fx) = run(&node(), Some(long), at(10), client(), req.clone());
    assert_eq!(
        fx,
        vec![ArmTimer {
            deadline_mono_us: deadline(0, 5000)
        }]
    );
    let (_, free, fx) = run(&node(), Some(Lease::new()), at(10), client(), req.clone());
    assert!(fx.is_empty() && free.is_some_and(|l| !l.is_held()));
    let (_, _, fx) = run(&node(), None, at(10), client(), req);
    assert!(fx.is_empty());
}
