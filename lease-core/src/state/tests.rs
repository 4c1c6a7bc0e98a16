//! The lease rules' unit tests (the table, tokens, clocks, persistence, memory).

use super::*;
use crate::owner::{OWNER_HARD_CAP, OWNER_INLINE};
use crate::rdb::Persisted;

const WALL0: u64 = 1_800_000_000_000; // 2027, ms

fn at(ms: u64) -> Now {
    Now {
        mono_us: 5_000_000 + ms * 1000,
        wall_ms: WALL0 + ms,
    }
}

/// Wall clock stepped by `step_ms` relative to the monotonic clock.
fn stepped(ms: u64, step_ms: i64) -> Now {
    let n = at(ms);
    Now {
        mono_us: n.mono_us,
        wall_ms: (n.wall_ms as i64 + step_ms) as u64,
    }
}

#[derive(Debug)]
enum Op {
    Acq(&'static str, u64),
    AcqGrace(&'static str, u64, u64),
    Renew(&'static str, u64, u64),
    Release(&'static str, u64),
    Fence(u64),
}

#[derive(Debug, PartialEq)]
enum Out {
    Granted,
    Refreshed,
    Busy,
    InGrace(u64),
    Bool(bool),
    FenceOk(u64),
    Fenced,
}

/// Table of cases: (time ms, op, expected). Tokens are checked separately below; here
/// "Granted" also asserts the token rose.
#[test]
fn state_machine_table() {
    use Op::*;
    use Out::*;
    type Case<'a> = (&'a str, &'a [(u64, Op, Out)]);
    let cases: &[Case] = &[
        (
            "grant, other busy, refresh keeps token",
            &[
                (0, Acq("a", 100), Granted),
                (10, Acq("b", 100), Busy),
                (20, Acq("a", 100), Refreshed),
                (110, Acq("b", 100), Busy), // refresh at 20 pushed expiry to 120
                (120, Acq("b", 100), Granted),
            ],
        ),
        (
            "expired lease is never renewed, even if nobody took it",
            &[
                (0, Acq("a", 100), Granted),
                (99, Renew("a", 0, 100), Bool(true)),
                (198, Fence(0), FenceOk(1)),
                (198, Renew("a", 0, 100), Bool(true)),
                (298, Renew("a", 0, 100), Bool(false)), // exactly at deadline: expired
                (300, Acq("a", 100), Granted),          // same owner after expiry: new token
            ],
        ),
        (
            "release frees at once, wrong token or owner does not",
            &[
                (0, Acq("a", 1000), Granted),
                (1, Release("b", 0), Bool(false)),
                (1, Release("a", 99), Bool(false)),
                (2, Release("a", 0), Bool(true)),
                (2, Release("a", 0), Bool(false)),
                (3, Fence(0), Fenced),
                (3, Acq("b", 1000), Granted),
            ],
        ),
        (
            "grace blocks new grants only",
            &[
                (0, Acq("a", 100), Granted),
                (50, AcqGrace("a", 100, 500), Refreshed),
                (60, AcqGrace("b", 100, 500), Busy),
                (200, AcqGrace("b", 100, 300), InGrace(300)),
                (200, Renew("a", 0, 100), Bool(false)),
                (201, Acq("b", 100), Granted),
            ],
        ),
        (
            "fence reports remaining ms rounded up",
            &[
                (0, Acq("a", 100), Granted),
                (40, Fence(0), FenceOk(60)),
                (40, Fence(7), Fenced),
                (100, Fence(0), Fenced),
            ],
        ),
    ];
    for (name, steps) in cases {
        let mut lease = Lease::new();
        let mut live_token = 0;
        for (t, op, want) in steps.iter() {
            let now = at(*t);
            let tok = |x: u64| if x == 0 { live_token } else { x };
            let got = match op {
                Acq(o, ttl) | AcqGrace(o, ttl, _) => {
                    let g = if let AcqGrace(_, _, g) = op { *g } else { 0 };
                    lease.expire_due(now);
                    match lease.acquire(o.as_bytes(), *ttl, now, g, 0).unwrap() {
                        Acquire::Granted { token } => {
                            assert!(token > live_token, "{name}: token did not rise");
                            live_token = token;
                            Granted
                        }
                        Acquire::Refreshed { token } => {
                            assert_eq!(token, live_token, "{name}");
                            Refreshed
                        }
                        Acquire::Busy => Busy,
                        Acquire::InGrace { ms_left } => InGrace(ms_left),
                    }
                }
                Renew(o, k, ttl) => Bool(lease.renew(o.as_bytes(), tok(*k), *ttl, now)),
                Release(o, k) => Bool(lease.release(o.as_bytes(), tok(*k), now)),
                Fence(k) => match lease.fence(tok(*k), now) {
                    Ok(ms) => FenceOk(ms),
                    Err(_) => Fenced,
                },
            };
            assert_eq!(&got, want, "{name} at t={t} {op:?}");
        }
    }
}

#[test]
fn tokens_rise_across_release_expiry_and_loss_of_state() {
    let mut l = Lease::new();
    let Acquire::Granted { token: t1 } = l.acquire(b"a", 100, at(0), 0, 0).unwrap() else {
        panic!()
    };
    assert!((WALL0 * 1000..TOKEN_LIMIT).contains(&t1));
    assert!(l.release(b"a", t1, at(0)));
    // Same millisecond, wall clock unchanged: last + 1 still rises.
    let Acquire::Granted { token: t2 } = l.acquire(b"b", 100, at(0), 0, 0).unwrap() else {
        panic!()
    };
    assert_eq!(t2, t1 + 1);
    // Expiry then grant.
    assert_eq!(l.expire_due(at(200)), Some(t2));
    let Acquire::Granted { token: t3 } = l.acquire(b"c", 100, at(200), 0, 0).unwrap() else {
        panic!()
    };
    assert!(t3 > t2);
    // Wall clock stepped back an hour: last + 1 wins.
    let Acquire::Granted { token: t4 } = l
        .acquire(b"d", 100, stepped(400, -3_600_000), 0, 0)
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(t4, t3 + 1);
    // State lost (DEL, restart without persistence): a fresh lease one second later in
    // wall time still issues a larger token.
    let mut fresh = Lease::new();
    let Acquire::Granted { token: t5 } = fresh.acquire(b"e", 100, at(1400), 0, 0).unwrap() else {
        panic!()
    };
    assert!(t5 > t4);
}

#[test]
fn floor_keeps_tokens_unique_when_history_is_lost_within_a_millisecond() {
    let mut a = Lease::new();
    let Acquire::Granted { token: t1 } = a.acquire(b"a", 100, at(0), 0, 0).unwrap() else {
        panic!()
    };
    // The key is deleted and recreated in the same millisecond: without the process-wide
    // floor the wall-clock term alone would reissue t1.
    let mut b = Lease::new();
    let Acquire::Granted { token: t2 } = b.acquire(b"b", 100, at(0), 0, 0).unwrap() else {
        panic!()
    };
    assert_eq!(t2, t1, "this is the hazard the floor exists for");
    let mut c = Lease::new();
    let Acquire::Granted { token: t3 } = c.acquire(b"c", 100, at(0), 0, t1 + 1).unwrap() else {
        panic!()
    };
    assert!(t3 > t1);
}

#[test]
fn token_space_exhaustion_is_an_error_not_a_wrap() {
    let mut l = Lease::from_persisted(
        Persisted {
            token: TOKEN_LIMIT - 1,
            held: None,
            grants: 0,
            membership: None,
        },
        at(0),
    )
    .unwrap();
    assert_eq!(
        l.acquire(b"a", 10, at(0), 0, 0),
        Err(LeaseError::TokenSpaceExhausted)
    );
    assert!(!l.is_held());
}

#[test]
fn wall_clock_steps_neither_end_nor_extend_a_live_lease() {
    let mut l = Lease::new();
    let Acquire::Granted { token } = l.acquire(b"a", 1000, at(0), 0, 0).unwrap() else {
        panic!()
    };
    // +1 h and -1 h on the wall clock at 500 ms: still live, 500 ms left.
    for step in [3_600_000i64, -3_600_000] {
        let now = stepped(500, step);
        assert_eq!(l.holder(now).map(|h| h.pttl_ms), Some(500));
        assert_eq!(l.fence(token, now), Ok(500));
    }
    assert!(l.holder(stepped(1000, -3_600_000)).is_none());
}

#[test]
fn effects_round_trip_through_a_replica_clock() {
    let mut primary = Lease::new();
    primary.acquire(b"owner-1", 3000, at(0), 0, 0).unwrap();
    let eff = primary.to_apply(at(0));
    assert_eq!(
        eff,
        Apply::Hold {
            owner: b"owner-1".to_vec(),
            token: primary.last_token(),
            expires_wall_ms: WALL0 + 3000,
            membership: None,
        }
    );
    // The replica's monotonic clock has another origin; its wall clock agrees.
    let replica_now = Now {
        mono_us: 42,
        wall_ms: WALL0 + 10,
    };
    let mut replica = Lease::new();
    Lease::validate_effect(&eff).unwrap();
    replica.apply(&eff, replica_now);
    assert_eq!(replica.holder(replica_now).map(|h| h.pttl_ms), Some(2990));
    replica.apply(
        &Apply::Free {
            token: primary.last_token(),
            membership: None,
        },
        replica_now,
    );
    assert!(replica.holder(replica_now).is_none());
    assert_eq!(replica.last_token(), primary.last_token());
    // Malformed effects are refused before apply.
    assert!(Lease::validate_effect(&Apply::Hold {
        owner: vec![],
        token: 1,
        expires_wall_ms: 0,
        membership: None,
    })
    .is_err());
    assert!(Lease::validate_effect(&Apply::Free {
        token: TOKEN_LIMIT,
        membership: None
    })
    .is_err());
}

#[test]
fn persisted_round_trip_and_rejection() {
    let mut l = Lease::new();
    l.acquire(b"x", 5000, at(0), 0, 0).unwrap();
    let p = l.to_persisted(at(1000));
    assert_eq!(p.held, Some((b"x".to_vec(), WALL0 + 5000)));
    assert_eq!(l.expires_wall_ms(at(1000)), Some(WALL0 + 5000));
    assert_eq!(Lease::new().expires_wall_ms(at(1000)), None);
    // Loaded 2 s later in wall time on a server whose monotonic clock restarted at 0.
    let later = Now {
        mono_us: 0,
        wall_ms: WALL0 + 3000,
    };
    let back = Lease::from_persisted(p.clone(), later).unwrap();
    assert_eq!(
        back.holder(later).map(|h| (h.token, h.pttl_ms)),
        Some((l.last_token(), 2000))
    );
    // Expired while down: loads as free with its token history.
    let back = Lease::from_persisted(
        p.clone(),
        Now {
            mono_us: 0,
            wall_ms: WALL0 + 9000,
        },
    )
    .unwrap();
    assert!(back.holder(later).is_none() && back.last_token() == l.last_token());
    for bad in [
        Persisted {
            token: TOKEN_LIMIT,
            held: None,
            grants: 0,
            membership: None,
        },
        Persisted {
            token: 5,
            held: Some((vec![], 1)),
            grants: 0,
            membership: None,
        },
        Persisted {
            token: 0,
            held: Some((b"a".to_vec(), 1)),
            grants: 0,
            membership: None,
        },
        Persisted {
            token: 5,
            held: Some((vec![b'a'; OWNER_HARD_CAP + 1], 1)),
            grants: 0,
            membership: None,
        },
    ] {
        assert!(
            Lease::from_persisted(bad.clone(), later).is_none(),
            "{bad:?}"
        );
    }
}

#[test]
fn grace_follows_the_configured_length_live() {
    let g = Grace::starting_at(1_000_000);
    assert_eq!(g.ms_left(1_000_000, 30_000), 30_000);
    assert_eq!(g.ms_left(1_000_000 + 29_999_500, 30_000), 1);
    assert_eq!(g.ms_left(1_000_000 + 30_000_000, 30_000), 0);
    // Lowering the config shortens it; 0 ends it at once.
    assert_eq!(g.ms_left(1_000_000 + 5_000_000, 4_000), 0);
    assert_eq!(g.ms_left(1_000_000, 0), 0);
}

/// The timer bookkeeping bit: kept while the deadline moves later (renew), dropped when
/// it moves earlier (a shorter renew, a re-grant after release), and invisible in
/// `grants` and the persisted form.
#[test]
fn timer_pending_survives_later_deadlines_only() {
    let mut l = Lease::new();
    assert_eq!(
        l.acquire(b"o", 1000, at(0), 0, 0),
        Ok(Acquire::Granted { token: l.token })
    );
    l.set_timer_pending(true);
    assert_eq!(l.grants(), 1);
    assert_eq!(l.to_persisted(at(0)).grants, 1);
    assert!(l.renew(b"o", l.token, 2000, at(10)));
    assert!(l.timer_pending(), "later deadline keeps the entry");
    assert!(l.renew(b"o", l.token, 100, at(20)));
    assert!(!l.timer_pending(), "earlier deadline drops it");
    l.set_timer_pending(true);
    assert!(l.release(b"o", l.token, at(30)));
    assert!(l.timer_pending(), "release does not move the deadline");
    assert!(matches!(
        l.acquire(b"p", 10, at(40), 0, 0),
        Ok(Acquire::Granted { .. })
    ));
    assert!(!l.timer_pending(), "a re-grant ending earlier drops it");
    assert_eq!(l.grants(), 2);
    let mut p = l.to_persisted(at(40));
    p.grants = u64::MAX;
    let loaded = Lease::from_persisted(p, at(40)).expect("loads");
    assert!(!loaded.timer_pending());
    assert_eq!(loaded.grants(), u64::MAX >> 1);
}

/// One 64-byte allocation per lease for owners up to `OWNER_INLINE` bytes (issue 16's
/// memory target); longer owners still work, with a separate allocation.
#[test]
fn memory_usage_is_small() {
    assert_eq!(std::mem::size_of::<Lease>(), 64);
    let mut l = Lease::new();
    l.acquire(&[b'o'; 27], 100, at(0), 0, 0).unwrap();
    assert_eq!(l.mem_usage(), 64);
    // Bound to a membership id (quorum mode): still 64 bytes up to OWNER_INLINE - 8, the id
    // in the inline bytes; past that the owner and the id share one heap allocation. The
    // binding survives release and a new holder without changing the size.
    assert!(l.bind_membership(Some(0xabcd)));
    assert_eq!((l.mem_usage(), l.membership()), (64, Some(0xabcd)));
    for len in [1, OWNER_INLINE - 8, OWNER_INLINE - 7, OWNER_INLINE, 1000] {
        let owner = vec![b'y'; len];
        let mut b = Lease::new();
        b.change_membership(None, 0xabcd);
        assert_eq!(b.mem_usage(), 64, "free and bound");
        let Acquire::Granted { token } = b.acquire(&owner, 100, at(0), 0, 0).unwrap() else {
            panic!()
        };
        let extra = if len > OWNER_INLINE - 8 { len + 8 } else { 0 };
        assert_eq!(b.mem_usage(), 64 + extra, "bound, {len}");
        assert_eq!((b.owner(), b.membership()), (&owner[..], Some(0xabcd)));
        assert!(b.release(&owner, token, at(1)));
        assert_eq!((b.mem_usage(), b.membership()), (64, Some(0xabcd)));
    }
    for len in [1, OWNER_INLINE - 1, OWNER_INLINE, OWNER_INLINE + 1, 1000] {
        let owner = vec![b'x'; len];
        let mut l = Lease::new();
        let Acquire::Granted { token } = l.acquire(&owner, 100, at(0), 0, 0).unwrap() else {
            panic!()
        };
        assert_eq!(l.owner(), &owner[..], "{len}");
        let extra = if len > OWNER_INLINE { len } else { 0 };
        assert_eq!(l.mem_usage(), 64 + extra, "{len}");
        // Equality and hashing see the bytes, not the representation.
        let mut same = Lease::new();
        same.apply(
            &Apply::Hold {
                owner: owner.clone(),
                token,
                expires_wall_ms: WALL0 + 100,
                membership: None,
            },
            at(0),
        );
        assert_eq!(same.owner(), l.owner());
        assert!(l.renew(&owner, token, 100, at(1)), "{len}");
        assert!(!l.renew(&owner[1..], token, 100, at(1)), "{len}");
        assert!(l.release(&owner, token, at(2)));
        assert!(!l.is_held() && l.owner().is_empty());
    }
}

/// A replica counts grants as the primary does: a raised token (`LEASE.RAISE`, same
/// holder) is not a grant; a new holder after a `FREE` is, also the same owner again.
#[test]
fn applied_effects_count_grants_like_the_primary() {
    let hold = |owner: &str, token: u64| Apply::Hold {
        owner: owner.as_bytes().to_vec(),
        token,
        expires_wall_ms: WALL0 + 10_000,
        membership: None,
    };
    let mut l = Lease::new();
    l.apply(&hold("a", 1), at(0));
    assert_eq!(l.grants(), 1);
    l.apply(&hold("a", 1), at(1)); // renew
    l.apply(&hold("a", 900), at(2)); // raise
    assert_eq!(l.grants(), 1);
    l.apply(
        &Apply::Free {
            token: 900,
            membership: None,
        },
        at(3),
    );
    l.apply(&hold("a", 901), at(4));
    assert_eq!(l.grants(), 2);
    l.apply(
        &Apply::Free {
            token: 901,
            membership: None,
        },
        at(5),
    );
    l.apply(&hold("b", 902), at(6));
    assert_eq!(l.grants(), 3);
}
