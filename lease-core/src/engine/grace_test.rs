//! Grace after start and promotion (docs/protocol.md §5): nothing new is granted, known leases go on.

use super::testing::*;
use super::{Counter::*, Effect::*, Reply};
use crate::node::Node;
use crate::request::Request;
use crate::state::Apply;
use crate::LeaseError;

/// A node whose 1000 ms grace started at `at(0)`.
fn in_grace() -> Node {
    node().with_grace_ms(1000).start_grace(at(0))
}

fn acq(owner: &str, block: Option<u64>) -> Request<'_> {
    Request::Acquire {
        owner: owner.as_bytes(),
        ttl_ms: 100,
        block,
        membership: None,
    }
}

#[test]
fn table() {
    let n = in_grace();
    let (held, t) = held_by("a", 0, 500);
    let cant_block = super::Call {
        can_block: false,
        ..client()
    };
    #[allow(clippy::type_complexity)]
    let cases: Vec<(
        &str,
        bool,
        u64,
        super::Call,
        Request,
        Reply,
        Vec<super::Effect>,
    )> = vec![
        (
            "free key, no BLOCK: the GRACE error says how long",
            false,
            300,
            client(),
            acq("b", None),
            Reply::Error(LeaseError::Grace { ms_left: 700 }),
            vec![Count(GraceRejected)],
        ),
        (
            "BLOCK asked for where it cannot block (MULTI, Lua): nil, not the error",
            false,
            300,
            cant_block,
            acq("b", Some(0)),
            Reply::Null,
            vec![],
        ),
        (
            "known holder refreshes during grace",
            true,
            300,
            client(),
            acq("a", None),
            Reply::Int(t as i64),
            vec![
                Replicate(Apply::Hold {
                    owner: b"a".to_vec(),
                    token: t,
                    expires_wall_ms: WALL0 + 400,
                    membership: None,
                }),
                ArmTimer {
                    deadline_mono_us: deadline(300, 100),
                },
                Count(Refreshed),
            ],
        ),
        (
            "another owner of a live lease: busy (not the grace error)",
            true,
            300,
            client(),
            acq("b", None),
            Reply::Null,
            vec![Count(Contended)],
        ),
        (
            "known holder renews during grace",
            true,
            300,
            client(),
            Request::Renew {
                owner: b"a",
                token: t,
                ttl_ms: 100,
                membership: None,
            },
            Reply::Int(1),
            vec![
                Replicate(Apply::Hold {
                    owner: b"a".to_vec(),
                    token: t,
                    expires_wall_ms: WALL0 + 400,
                    membership: None,
                }),
                ArmTimer {
                    deadline_mono_us: deadline(300, 100),
                },
                Count(Renewed),
            ],
        ),
    ];
    for (name, present, ms, call, req, want_reply, want_fx) in cases {
        let (reply, _, fx) = run(&n, present.then(|| held.clone()), at(ms), call, req);
        assert_eq!((reply, fx), (want_reply, want_fx), "{name}");
    }
}

#[test]
fn grace_ends_on_time_and_follows_the_configuration() {
    let n = in_grace();
    let (reply, _, _) = run(&n, None, at(999), client(), acq("b", None));
    assert_eq!(reply, Reply::Error(LeaseError::Grace { ms_left: 1 }));
    let (reply, _, _) = run(&n, None, at(1000), client(), acq("b", None));
    assert!(matches!(reply, Reply::Int(_)), "{reply:?}");
    // Lowering lease.grace-ms shortens a running grace; 0 ends it at once.
    let (reply, _, _) = run(&n.with_grace_ms(0), None, at(1), client(), acq("b", None));
    assert!(matches!(reply, Reply::Int(_)), "{reply:?}");
    // -1 follows lease.max-ttl (its value when the grace started: 1000 here).
    let mut follows = n.with_grace_ms(-1);
    follows.config.max_ttl = 1000;
    let follows = follows.start_grace(at(0));
    let (reply, _, _) = run(&follows, None, at(500), client(), acq("b", None));
    assert_eq!(reply, Reply::Error(LeaseError::Grace { ms_left: 500 }));
    // Raising max-ttl lengthens the running grace; lowering it never shortens it (issue 24).
    let mut raised = follows;
    raised.config.max_ttl = 2000;
    let (reply, _, _) = run(&raised, None, at(1500), client(), acq("b", None));
    assert_eq!(reply, Reply::Error(LeaseError::Grace { ms_left: 500 }));
    let mut lowered = follows;
    lowered.config.max_ttl = 10;
    let (reply, _, _) = run(&lowered, None, at(500), client(), acq("b", None));
    assert_eq!(reply, Reply::Error(LeaseError::Grace { ms_left: 500 }));
}

/// Promotion: a replica that knew a lease from its primary becomes primary. Its grace
/// restarts; the known holder keeps renewing; a newcomer is refused until grace ends; its
/// timers are re-armed for the leases it loaded.
#[test]
fn promotion() {
    let (held, t) = held_by("a", 0, 800);
    let before = node();
    let (reply, _, _) = run(&before, None, at(100), client(), acq("b", None));
    assert!(matches!(reply, Reply::Int(_)), "no grace before promotion");
    let promoted = before.with_grace_ms(1000).start_grace(at(100));
    let (_, _, fx) = run(
        &promoted,
        Some(held.clone()),
        at(100),
        client(),
        Request::Rearm,
    );
    assert_eq!(
        fx,
        vec![ArmTimer {
            deadline_mono_us: deadline(0, 800)
        }]
    );
    let (reply, _, _) = run(&promoted, None, at(150), client(), acq("b", None));
    assert_eq!(reply, Reply::Error(LeaseError::Grace { ms_left: 950 }));
    let renew = Request::Renew {
        owner: b"a",
        token: t,
        ttl_ms: 800,
        membership: None,
    };
    let (reply, _, _) = run(&promoted, Some(held.clone()), at(150), client(), renew);
    assert_eq!(reply, Reply::Int(1));
    // The known lease lapses during grace: still no grant to anyone until grace ends.
    let (reply, _, _) = run(&promoted, Some(held), at(900), client(), acq("b", None));
    assert_eq!(reply, Reply::Error(LeaseError::Grace { ms_left: 200 }));
}
