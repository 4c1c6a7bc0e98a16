//! `LEASE.GET` and `LEASE.INFO`: read-only, never an effect (they run on replicas too).

use super::testing::*;
use super::Reply;
use crate::request::Request;

#[test]
fn table() {
    let n = node();
    let (held, t) = held_by("a", 0, 100);
    let (reply, _, fx) = run(&n, Some(held.clone()), at(40), client(), Request::Get);
    assert_eq!(
        reply,
        Reply::Holder {
            owner: b"a".to_vec(),
            token: t,
            pttl_ms: 60
        }
    );
    assert!(fx.is_empty());
    // Lapsed: reported as no lease, but not freed (that is a write).
    let (reply, lease, fx) = run(&n, Some(held.clone()), at(100), client(), Request::Get);
    assert_eq!((reply, fx.len()), (Reply::Null, 0));
    assert!(lease.is_some_and(|l| l.is_held()));
    let (reply, _, _) = run(&n, None, at(0), client(), Request::Get);
    assert_eq!(reply, Reply::Null);

    let (reply, _, fx) = run(&n, Some(held.clone()), at(40), client(), Request::Info);
    assert_eq!(
        reply,
        Reply::Info {
            holder: Some((b"a".to_vec(), t, 60)),
            last_token: t,
            grants: 1,
            membership: None
        }
    );
    assert!(fx.is_empty());
    let (reply, _, _) = run(&n, Some(held), at(100), client(), Request::Info);
    assert_eq!(
        reply,
        Reply::Info {
            holder: None,
            last_token: t,
            grants: 1,
            membership: None
        }
    );
    let (reply, _, _) = run(&n, None, at(0), client(), Request::Info);
    assert_eq!(reply, Reply::Null);
}
