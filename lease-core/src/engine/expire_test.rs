//! The expiry timer (`Expire`) and re-arming after load, promotion, RENAME or SWAPDB
//! (`Rearm`).

use super::testing::*;
use super::{Counter::*, Effect::*, Event, Reply};
use crate::lease::request::Request;
use crate::lease::state::{Apply, Lease};

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
                Replicate(Apply::Free { token: t }),
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
