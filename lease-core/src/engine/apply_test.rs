//! `LEASE.APPLY`: the replicated effect, accepted only from the primary or the AOF.

use super::testing::*;
use super::{Call, Effect::*, Reply};
use crate::request::Request;
use crate::state::Apply;
use crate::LeaseError;

fn hold(token: u64) -> Request<'static> {
    Request::Apply(Apply::Hold {
        owner: b"p".to_vec(),
        token,
        expires_wall_ms: WALL0 + 500,
        membership: None,
    })
}

#[test]
fn table() {
    let replica = Call {
        from_primary_or_loading: true,
        replicated: true,
        ..Call::default()
    };
    let aof = Call {
        from_primary_or_loading: true,
        ..Call::default()
    };
    let (reply, lease, fx) = run(&node(), None, at(0), client(), hold(7));
    assert_eq!(
        (reply, lease, fx),
        (Reply::Error(LeaseError::ForgedEffect), None, vec![])
    );

    let (reply, lease, fx) = run(&node(), None, at(0), replica, hold(7));
    assert_eq!(reply, Reply::Ok);
    assert_eq!(fx, vec![ObserveToken(7), ReplicateVerbatim]);
    let lease = lease.expect("created");
    assert_eq!(
        lease.holder(at(100)).map(|h| (h.token, h.pttl_ms)),
        Some((7, 400))
    );

    // AOF loading: applied, not propagated again.
    let free = Request::Apply(Apply::Free {
        token: 7,
        membership: None,
    });
    let (reply, lease, fx) = run(&node(), Some(lease), at(0), aof, free);
    assert_eq!((reply, fx), (Reply::Ok, vec![ObserveToken(7)]));
    assert!(lease.is_some_and(|l| !l.is_held() && l.last_token() == 7));
}
