//! `LEASE.ACQUIRE ... BLOCK`: blocking, the retry when the key is signalled, the timeout.

use super::testing::*;
use super::{Call, Counter::*, Effect::*, Event, Reply, Store};
use crate::request::Request;
use crate::state::{Apply, Lease};
use crate::LeaseError;

fn acq_block(owner: &str, timeout: u64) -> Request<'_> {
    Request::Acquire {
        owner: owner.as_bytes(),
        ttl_ms: 100,
        block: Some(timeout),
        membership: None,
    }
}

fn retry(owner: &str) -> Request<'_> {
    Request::AcquireRetry {
        owner: owner.as_bytes(),
        ttl_ms: 100,
    }
}

#[test]
fn busy_blocks_and_counts_contention() {
    let (held, _) = held_by("a", 0, 100);
    let (reply, _, fx) = run(&node(), Some(held), at(10), client(), acq_block("b", 250));
    assert_eq!(reply, Reply::Blocked);
    assert_eq!(
        fx,
        vec![
            Count(Contended),
            Block {
                owner: b"b".to_vec(),
                ttl_ms: 100,
                timeout_ms: 250
            }
        ]
    );
}

#[test]
fn free_key_is_granted_at_once_with_block() {
    let (reply, _, _) = run(&node(), None, at(0), client(), acq_block("b", 0));
    assert_eq!(reply, Reply::Int((WALL0 * 1000) as i64));
}

#[test]
fn in_grace_a_missing_key_is_created_free_so_redis_can_wake_the_waiter() {
    let n = node().with_grace_ms(1000).start_grace(at(0));
    let out = super::handle(&n, None, at(10), client(), &acq_block("b", 0));
    assert_eq!(out.reply, Reply::Blocked);
    assert_eq!(out.store, Store::Create(Lease::new()));
    assert_eq!(
        out.effects,
        vec![
            Replicate(Apply::Free {
                token: 0,
                membership: None
            }),
            Block {
                owner: b"b".to_vec(),
                ttl_ms: 100,
                timeout_ms: 0
            }
        ]
    );
}

#[test]
fn busy_where_blocking_is_impossible_is_a_plain_nil() {
    let (held, _) = held_by("a", 0, 100);
    let multi = Call {
        can_block: false,
        ..client()
    };
    let (reply, _, fx) = run(&node(), Some(held), at(10), multi, acq_block("b", 0));
    assert_eq!((reply, fx), (Reply::Null, vec![Count(Contended)]));
}

#[test]
fn retry_table() {
    let n = node();
    let (held, _) = held_by("a", 0, 100);
    let no_replicas = Call {
        replicas_ok: false,
        ..client()
    };
    let granted = (WALL0 + 100) * 1000;
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, u64, Call, Reply, Vec<super::Effect>)> = vec![
        (
            "still held: stays blocked, no effect",
            50,
            client(),
            Reply::StayBlocked,
            vec![],
        ),
        (
            "min-replicas-to-write not met any more: NOREPLICAS, nothing changes",
            100,
            no_replicas,
            Reply::Error(LeaseError::NoReplicas),
            vec![],
        ),
        (
            "expired meanwhile: the expiry, then the grant",
            100,
            client(),
            Reply::Int(granted as i64),
            vec![
                Count(Expired),
                Replicate(Apply::Free {
                    token: WALL0 * 1000,
                    membership: None,
                }),
                Notify(Event::Expired),
                WakeWaiters,
                Replicate(Apply::Hold {
                    owner: b"b".to_vec(),
                    token: granted,
                    expires_wall_ms: WALL0 + 200,
                    membership: None,
                }),
                ArmTimer {
                    deadline_mono_us: deadline(100, 100),
                },
                ObserveToken(granted),
                Count(Acquired),
                Notify(Event::Acquired),
            ],
        ),
    ];
    for (name, ms, call, want_reply, want_fx) in cases {
        let (reply, _, fx) = run(&n, Some(held.clone()), at(ms), call, retry("b"));
        assert_eq!((reply, fx), (want_reply, want_fx), "{name}");
    }
    // Still in grace: stays blocked (woken again at the end of grace).
    let graced = n.with_grace_ms(1000).start_grace(at(0));
    let (reply, _, fx) = run(&graced, Some(Lease::new()), at(10), client(), retry("b"));
    assert_eq!((reply, fx), (Reply::StayBlocked, vec![]));
    // A retry never creates a key.
    let out = super::handle(&graced, None, at(10), client(), &retry("b"));
    assert_eq!(out.store, Store::Keep);
}

#[test]
fn timeout_is_a_nil_and_counted() {
    let (reply, _, fx) = run(&node(), None, at(0), client(), Request::BlockTimeout);
    assert_eq!((reply, fx), (Reply::Null, vec![Count(BlockTimeouts)]));
}
