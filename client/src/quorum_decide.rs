//! Quorum mode's decisions (docs/quorum.md) as plain functions of the replies of one round:
//! no I/O, no clock. [`crate::quorum`] sends the commands and executes what these return; the
//! single-node rules (deadline from the instant before the first send, stop point, backoff)
//! stay those of [`crate::decide`], because the quorum transport sits *under* the same
//! election loop.

use crate::error::ErrorKind;

/// Smallest number of nodes that is more than half of `n`: any two sets of this size share a
/// node, which is what both safety arguments rest on (docs/quorum.md §3).
pub fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// Deliberately broken variants for the harness's negative controls. Never use outside a
/// test: each one breaks a step of the safety argument, and the harness must catch it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QuorumControl {
    /// The protocol as documented.
    #[default]
    Correct,
    /// Skip the raise: act on the token of any one granting node (`pick`, random), as a client
    /// that fences with "the grant it saw first" would; renew each node with its own token
    /// (breaks "one token per reign, above every earlier one").
    NoUnify,
    /// Lead on a single grant (breaks "any two majorities intersect").
    Minority,
    /// Send no membership id (the protocol before Q9, issue 32): electors with different
    /// node lists then find disjoint majorities (breaks "every majority shares a node with
    /// every other", which holds only within one node list).
    NoMembership,
}

impl QuorumControl {
    pub fn parse(s: &str) -> Option<QuorumControl> {
        match s {
            "correct" => Some(QuorumControl::Correct),
            "no-unify" => Some(QuorumControl::NoUnify),
            "minority" => Some(QuorumControl::Minority),
            "no-membership" => Some(QuorumControl::NoMembership),
            _ => None,
        }
    }

    /// Grants (and raise confirmations) a round needs on `n` nodes.
    pub fn need(self, n: usize) -> usize {
        match self {
            QuorumControl::Minority => 1,
            _ => majority(n),
        }
    }
}

/// What the server identity (`run_id` of `INFO server`) a node's new connection reports means
/// for the quorum. Both safety arguments (docs/quorum.md §3) need every majority to share a
/// *server* with every other, and the state a reign left on that server to still be there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdentityCheck {
    /// The first identity seen at this node: remember it.
    First,
    /// The same server as before (a reconnect).
    Same,
    /// Another server answers at this node's address now (a restart, or a VIP, DNS name or
    /// proxy moved to a spare). It has none of the old one's leases, and if it has been up
    /// longer than its grace it grants at once: it counts toward no grant and no renewal for
    /// at least one max TTL, like a node that lost its state.
    Changed,
    /// The same server as node `of` (one URL twice under another spelling, a unix socket and
    /// a TCP port of one server, db 0 and db 1): one server must never count twice.
    Duplicate { of: usize },
}

/// `me`'s new connection reports `seen`; `known[i]` is the identity last seen at node `i`.
pub fn check_identity(me: usize, seen: &str, known: &[Option<String>]) -> IdentityCheck {
    if let Some(of) = known
        .iter()
        .enumerate()
        .position(|(i, k)| i != me && k.as_deref() == Some(seen))
    {
        return IdentityCheck::Duplicate { of };
    }
    match known.get(me).and_then(|k| k.as_deref()) {
        None => IdentityCheck::First,
        Some(k) if k == seen => IdentityCheck::Same,
        Some(_) => IdentityCheck::Changed,
    }
}

/// One node's identity in the membership id (docs/client-protocol.md Q9,
/// `conformance/vectors/quorum/membership_id.json`): `tcp:<host>:<port>` with the host in
/// lower case (an IPv6 address without brackets, a trailing dot removed) and the port
/// number (6379 when the URL has none), or `unix:<path>` with the path as written. The
/// scheme (TLS or not), credentials, db number and query are left out: they do not change
/// which server it is.
pub fn tcp_identity(host: &str, port: u16) -> String {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = host.strip_suffix('.').unwrap_or(host);
    format!("tcp:{}:{port}", host.to_ascii_lowercase())
}

pub fn unix_identity(path: &str) -> String {
    format!("unix:{path}")
}

/// The membership id of a node list (Q9): SHA-256 of the node identities, sorted (byte
/// order) and joined by `\n`, first 8 bytes read big endian; 0 (never seen) becomes 1,
/// because the module reserves 0 for "bound to nothing". Sorted, so the order of the list
/// does not matter; every identity counts, so any change of the set changes the id (up to a
/// 2^-64 collision).
pub fn membership_id(identities: &[String]) -> u64 {
    let mut ids: Vec<&str> = identities.iter().map(String::as_str).collect();
    ids.sort_unstable();
    let joined = ids.join("\n");
    let digest = ring::digest::digest(&ring::digest::SHA256, joined.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest.as_ref()[..8]);
    u64::from_be_bytes(first).max(1)
}

/// A membership id as the wire spells it: 16 lower-case hex digits.
pub fn membership_hex(id: u64) -> String {
    format!("{id:016x}")
}

/// How long a node whose identity changed counts toward nothing, on this elector's clock: at
/// least the longest TTL any elector may have used on it (`configured`, default the module's
/// default `lease.max-ttl`; never less than this elector's own TTL) of the *server's* clock,
/// so stretched by the drift bound: a server duration `d` lasts at most `d / (1 - drift)` on
/// an elector clock within it (the quorum model check uses the same bound).
pub fn quarantine(
    ttl: std::time::Duration,
    configured: std::time::Duration,
    drift: f64,
) -> std::time::Duration {
    let d = ttl.max(configured);
    if drift > 0.0 && drift < 1.0 {
        d.div_f64(1.0 - drift)
    } else {
        d
    }
}

/// One node's reply in a round; `None` = no reply before the round's limit.
pub type NodeReply<T> = Option<Result<T, ErrorKind>>;

/// After the parallel `LEASE.ACQUIRE`s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterAcquire {
    /// Enough grants: raise the lease on `nodes` to `target` (the highest token granted),
    /// then lead on `target` if enough confirm.
    Raise { target: u64, nodes: Vec<usize> },
    /// Negative control `NoUnify`: lead at once on `token`, each node keeping its own token.
    ActUnified {
        token: u64,
        per_node: Vec<Option<u64>>,
    },
    /// Not enough grants: release the partial grants on `release` (node, token), then report
    /// `outcome` to the election loop.
    Abort {
        release: Vec<(usize, u64)>,
        outcome: NotLeading,
    },
}

/// What the election loop is told when a round does not make a reign.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotLeading {
    /// Nobody reachable enough said why not: someone else holds it, or a split vote. A nil
    /// reply, so the loop polls again after its short pause.
    NotGranted,
    /// Not granted, and at least one node refused because its key is bound to another
    /// membership (Q9): to the loop a nil reply like `NotGranted` (polling again is harmless,
    /// and the reign of the other list may end), but the transport reports this reason,
    /// because only an operator can resolve it (docs/quorum.md §4.1).
    WrongMembership,
    /// So many nodes failed (errors, no reply) that a majority was impossible: an error, so
    /// the loop backs off exponentially. Carries the first error seen (a GRACE if all that
    /// stood in the way were nodes in grace).
    Error(ErrorKind),
}

/// Step 1. `replies[i]` is node i's `LEASE.ACQUIRE` reply (`Ok(Some(token))` = granted).
/// Why the maximum: every node of the previous reign's raise-majority has that reign's token
/// as its watermark, any majority contains one of them, and that node only grants above it;
/// the maximum over our majority is therefore above every earlier reign's token.
/// `pick` only matters for the `NoUnify` control (which grant it acts on, modulo the count).
pub fn after_acquire(
    control: QuorumControl,
    replies: &[NodeReply<Option<u64>>],
    pick: usize,
) -> AfterAcquire {
    let n = replies.len();
    let need = control.need(n);
    let granted: Vec<(usize, u64)> = replies
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r {
            Some(Ok(Some(t))) => Some((i, *t)),
            _ => None,
        })
        .collect();
    if granted.len() >= need && n > 0 {
        if control == QuorumControl::NoUnify {
            let mut per_node = vec![None; n];
            for &(i, t) in &granted {
                per_node[i] = Some(t);
            }
            return AfterAcquire::ActUnified {
                token: granted[pick % granted.len()].1,
                per_node,
            };
        }
        return AfterAcquire::Raise {
            target: granted.iter().map(|g| g.1).max().unwrap_or(0),
            nodes: granted.iter().map(|g| g.0).collect(),
        };
    }
    // A membership refusal (Q9) is a refusal like "held by someone else", not an error: that
    // node will not grant us, whatever we retry.
    let wrong_membership = replies
        .iter()
        .filter(|r| matches!(r, Some(Err(ErrorKind::Membership))))
        .count();
    let refused = wrong_membership
        + replies
            .iter()
            .filter(|r| matches!(r, Some(Ok(None))))
            .count();
    let failed: Vec<&ErrorKind> = replies
        .iter()
        .filter_map(|r| match r {
            Some(Err(ErrorKind::Membership)) => None,
            Some(Err(e)) => Some(e),
            _ => None,
        })
        .collect();
    let silent = replies.iter().filter(|r| r.is_none()).count();
    // Why an error only when refusals alone cannot explain it: if enough nodes answered "held
    // by someone else", polling again soon is right; if a majority was out of reach because
    // of errors and silence, backing off is (and GRACE tells the loop how long).
    let outcome = if refused + need > n || failed.len() + silent <= n - need {
        if wrong_membership > 0 {
            NotLeading::WrongMembership
        } else {
            NotLeading::NotGranted
        }
    } else {
        let grace = failed.iter().find_map(|e| match e {
            ErrorKind::Grace(d) => Some(ErrorKind::Grace(*d)),
            _ => None,
        });
        let first = failed
            .first()
            .map(|e| (*e).clone())
            .unwrap_or(ErrorKind::Timeout);
        NotLeading::Error(grace.unwrap_or(first))
    };
    AfterAcquire::Abort {
        release: granted,
        outcome,
    }
}

/// Step 2: did enough nodes confirm the raise (`Ok(true)`) to lead on the target token?
/// Why the raise must reach a majority before we act: the next reign's token is above ours
/// only because its majority meets a node that *knows* ours (docs/quorum.md §3, step T3).
pub fn raise_confirmed(control: QuorumControl, replies: &[NodeReply<bool>], n: usize) -> bool {
    replies
        .iter()
        .filter(|r| matches!(r, Some(Ok(true))))
        .count()
        >= control.need(n)
}

/// After a renewal round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterRenew {
    /// A majority extended the lease: the new local deadline counts from this round's send.
    Renewed,
    /// So many nodes said "not held" (0) that a majority can no longer confirm: the lease is
    /// lost, step down now.
    Lost,
    /// Neither yet (errors, silence): keep the old deadline, retry until the stop point.
    Unknown,
}

/// A renewal reply that means "this node does not renew us": 0, or (Q9) a refusal because
/// the node's key is now bound to another membership (the operator moved it).
pub fn renew_refused(r: &NodeReply<bool>) -> bool {
    matches!(r, Some(Ok(false)) | Some(Err(ErrorKind::Membership)))
}

pub fn after_renew(control: QuorumControl, replies: &[NodeReply<bool>]) -> AfterRenew {
    let n = replies.len();
    let need = control.need(n);
    let ones = replies
        .iter()
        .filter(|r| matches!(r, Some(Ok(true))))
        .count();
    let zeros = replies.iter().filter(|r| renew_refused(r)).count();
    if ones >= need && n > 0 {
        AfterRenew::Renewed
    } else if zeros > n - need {
        AfterRenew::Lost
    } else {
        AfterRenew::Unknown
    }
}

/// The node every follower waits on (protocol Q10): the one with the smallest URL, so that
/// every elector of one membership (the same node set, in any order) picks the same node.
/// Why one node and not all: waiting with `BLOCK` on every node would let a release wake a
/// *different* follower on each node (each node wakes its own first waiter), a split vote
/// every time; on one node exactly one follower wakes, holding that node, and its next round
/// meets the other nodes just freed by the same release round.
pub fn wait_node(urls: &[String]) -> usize {
    (0..urls.len())
        .min_by(|&a, &b| urls[a].cmp(&urls[b]))
        .unwrap_or(0)
}

/// How long to wait on the wait node after a round that made no reign (Q10), or `None` to
/// return "not granted" at once (the loop then pauses and polls, as before Q10).
///
/// Wait only when the round released nothing (a round that released partial grants retired
/// its owner: the loop must take the next one first, Q4) and the wait node itself answered
/// "held" (someone holds it: its release or expiry is what wakes us; a node that was silent
/// or failed would only make us wait for nothing). The wait is the loop's BLOCK budget minus
/// two steps (the round before and the round after the wake must fit in the loop's limit for
/// one blocking acquire, `block + op_timeout`), and at most `cap` (the renew interval): only
/// the wait node can wake us, so if it stops answering while the rest of the nodes free up
/// (frozen, cut off), the next round comes after at most `cap` instead of the whole BLOCK.
pub fn wait_after_refusal(
    replies: &[NodeReply<Option<u64>>],
    wait_node: usize,
    released_any: bool,
    block: Option<std::time::Duration>,
    op_timeout: std::time::Duration,
    cap: std::time::Duration,
) -> Option<std::time::Duration> {
    let b = block?.checked_sub(op_timeout)?.min(cap);
    let held = matches!(replies.get(wait_node), Some(Some(Ok(None))));
    (held && !released_any && b >= std::time::Duration::from_millis(1)).then_some(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use AfterAcquire::*;
    use QuorumControl::*;

    const G: fn(u64) -> NodeReply<Option<u64>> = |t| Some(Ok(Some(t)));
    const BUSY: NodeReply<Option<u64>> = Some(Ok(None));
    const DOWN: NodeReply<Option<u64>> = Some(Err(ErrorKind::Connection));
    const GRACE: NodeReply<Option<u64>> = Some(Err(ErrorKind::Grace(Duration::from_millis(700))));
    const OTHER_LIST: NodeReply<Option<u64>> = Some(Err(ErrorKind::Membership));

    #[test]
    fn majority_of_n() {
        let got: Vec<usize> = (1..=7).map(majority).collect();
        assert_eq!(got, [1, 2, 2, 3, 3, 4, 4]);
        assert_eq!(Minority.need(5), 1);
        assert_eq!(NoUnify.need(5), 3);
    }

    #[test]
    fn acquire_table() {
        #[allow(clippy::type_complexity)]
        let cases: Vec<(
            &str,
            QuorumControl,
            Vec<NodeReply<Option<u64>>>,
            AfterAcquire,
        )> = vec![
            (
                "all grant: raise all to the maximum",
                Correct,
                vec![G(10), G(30), G(20)],
                Raise {
                    target: 30,
                    nodes: vec![0, 1, 2],
                },
            ),
            (
                "bare majority, one silent",
                Correct,
                vec![G(10), None, G(20)],
                Raise {
                    target: 20,
                    nodes: vec![0, 2],
                },
            ),
            (
                "split vote: one grant, one busy, one down -> release, poll again",
                Correct,
                vec![G(10), BUSY, DOWN],
                Abort {
                    release: vec![(0, 10)],
                    outcome: NotLeading::NotGranted,
                },
            ),
            (
                "held elsewhere on a majority",
                Correct,
                vec![BUSY, BUSY, G(5)],
                Abort {
                    release: vec![(2, 5)],
                    outcome: NotLeading::NotGranted,
                },
            ),
            (
                "majority unreachable: error, back off",
                Correct,
                vec![G(10), DOWN, None],
                Abort {
                    release: vec![(0, 10)],
                    outcome: NotLeading::Error(ErrorKind::Connection),
                },
            ),
            (
                "grace in the way: the loop learns how long",
                Correct,
                vec![DOWN, GRACE, G(3)],
                Abort {
                    release: vec![(2, 3)],
                    outcome: NotLeading::Error(ErrorKind::Grace(Duration::from_millis(700))),
                },
            ),
            (
                "5 nodes, 3 grants",
                Correct,
                vec![G(1), BUSY, G(9), DOWN, G(4)],
                Raise {
                    target: 9,
                    nodes: vec![0, 2, 4],
                },
            ),
            (
                "5 nodes, 2 grants is not enough",
                Correct,
                vec![G(1), BUSY, G(9), BUSY, BUSY],
                Abort {
                    release: vec![(0, 1), (2, 9)],
                    outcome: NotLeading::NotGranted,
                },
            ),
            (
                "issue 32: one node bound to the other list, one busy: not granted, reason given",
                Correct,
                vec![OTHER_LIST, BUSY, G(4)],
                Abort {
                    release: vec![(2, 4)],
                    outcome: NotLeading::WrongMembership,
                },
            ),
            (
                "a membership refusal is no error: with one node down, still not granted",
                Correct,
                vec![OTHER_LIST, DOWN, G(4)],
                Abort {
                    release: vec![(2, 4)],
                    outcome: NotLeading::WrongMembership,
                },
            ),
            (
                "a majority without the refusing node still reigns",
                Correct,
                vec![OTHER_LIST, G(8), G(4)],
                Raise {
                    target: 8,
                    nodes: vec![1, 2],
                },
            ),
            (
                "control minority: one grant leads",
                Minority,
                vec![BUSY, G(7), BUSY],
                Raise {
                    target: 7,
                    nodes: vec![1],
                },
            ),
            (
                "control no-unify: the picked granter's token (pick 7 % 2 = the second), no raise",
                NoUnify,
                vec![None, G(50), G(20)],
                ActUnified {
                    token: 20,
                    per_node: vec![None, Some(50), Some(20)],
                },
            ),
        ];
        for (name, control, replies, want) in cases {
            assert_eq!(after_acquire(control, &replies, 7), want, "{name}");
        }
    }

    #[test]
    fn raise_and_renew_tables() {
        let y = Some(Ok(true));
        let n0 = Some(Ok(false));
        let e = Some(Err(ErrorKind::Timeout));
        assert!(raise_confirmed(
            Correct,
            &[y.clone(), y.clone(), n0.clone()],
            3
        ));
        assert!(!raise_confirmed(Correct, &[y.clone(), None, n0.clone()], 3));
        assert!(raise_confirmed(Minority, &[y.clone(), None, None], 3));
        let cases: Vec<(&str, Vec<NodeReply<bool>>, AfterRenew)> = vec![
            (
                "all renew",
                vec![y.clone(), y.clone(), y.clone()],
                AfterRenew::Renewed,
            ),
            (
                "majority renews",
                vec![y.clone(), n0.clone(), y.clone()],
                AfterRenew::Renewed,
            ),
            (
                "majority says 0",
                vec![y.clone(), n0.clone(), n0.clone()],
                AfterRenew::Lost,
            ),
            (
                "one 1, one 0, one silent",
                vec![y.clone(), n0.clone(), None],
                AfterRenew::Unknown,
            ),
            (
                "errors",
                vec![e.clone(), e.clone(), y.clone()],
                AfterRenew::Unknown,
            ),
            (
                "5 nodes: two 1s and three 0s",
                vec![y.clone(), y.clone(), n0.clone(), n0.clone(), n0.clone()],
                AfterRenew::Lost,
            ),
            (
                "issue 32: a node rebound to another list refuses the renewal: counts as 0",
                vec![
                    y.clone(),
                    Some(Err(ErrorKind::Membership)),
                    Some(Err(ErrorKind::Membership)),
                ],
                AfterRenew::Lost,
            ),
            (
                "5 nodes: two 1s, two 0s, one silent",
                vec![y.clone(), y.clone(), n0.clone(), n0.clone(), None],
                AfterRenew::Unknown,
            ),
        ];
        for (name, replies, want) in cases {
            assert_eq!(after_renew(Correct, &replies), want, "{name}");
        }
    }
}

#[cfg(test)]
mod identity_tests {
    use super::*;

    fn k(v: &[Option<&str>]) -> Vec<Option<String>> {
        v.iter().map(|x| x.map(str::to_string)).collect()
    }

    #[test]
    fn identities_first_same_changed_duplicate() {
        let known = k(&[Some("a"), None, Some("c")]);
        assert_eq!(check_identity(1, "b", &known), IdentityCheck::First);
        assert_eq!(check_identity(0, "a", &known), IdentityCheck::Same);
        assert_eq!(check_identity(2, "s", &known), IdentityCheck::Changed);
        // Node 1 turns out to be node 0's server: it must not count a second time.
        assert_eq!(
            check_identity(1, "a", &known),
            IdentityCheck::Duplicate { of: 0 }
        );
        // A swapped node that lands on another node's server is a duplicate, not a change.
        assert_eq!(
            check_identity(2, "a", &known),
            IdentityCheck::Duplicate { of: 0 }
        );
    }

    /// The identity spelling and the id (the shared vector runs the same through
    /// `tests/membership_vector.rs`); here the properties: order does not matter, any change
    /// of the set does.
    #[test]
    fn membership_id_is_of_the_set() {
        let v = |l: &[&str]| membership_id(&l.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let abc = v(&["tcp:a:1", "tcp:b:1", "tcp:c:1"]);
        assert_eq!(abc, v(&["tcp:c:1", "tcp:a:1", "tcp:b:1"]));
        assert_ne!(abc, v(&["tcp:a:1", "tcp:b:1", "tcp:d:1"]));
        assert_ne!(abc, v(&["tcp:a:1", "tcp:b:1"]));
        assert_ne!(abc, v(&["tcp:a:1", "tcp:b:1", "tcp:c:2"]));
        assert_eq!(
            tcp_identity("Node-1.Example.", 7000),
            "tcp:node-1.example:7000"
        );
        assert_eq!(tcp_identity("[::1]", 7000), "tcp:::1:7000");
        assert_eq!(membership_hex(0xab), "00000000000000ab");
    }

    #[test]
    fn quarantine_is_at_least_the_ttl() {
        use std::time::Duration;
        let s = Duration::from_secs;
        assert_eq!(quarantine(s(1), s(30), 0.0), s(30));
        assert_eq!(quarantine(s(45), s(30), 0.0), s(45));
        // 30 s of the server's clock last up to 30 / 0.99 s on ours.
        assert_eq!(
            quarantine(s(1), s(30), 0.01).as_millis(),
            30_303,
            "stretched by the drift bound"
        );
    }
}

#[cfg(test)]
mod wait_tests {
    use super::*;
    use std::time::Duration;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn every_order_of_one_node_set_waits_on_the_same_node() {
        let a: Vec<String> = ["redis://c:1", "redis://a:1", "redis://b:1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut b = a.clone();
        b.reverse();
        assert_eq!(a[wait_node(&a)], "redis://a:1");
        assert_eq!(b[wait_node(&b)], "redis://a:1");
        assert_eq!(wait_node(&[]), 0);
    }

    #[test]
    fn waits_only_when_the_wait_node_is_held_and_nothing_was_released() {
        let held = vec![Some(Ok(None)), Some(Ok(None)), None];
        let b = Some(ms(5000));
        let op = ms(200);
        assert_eq!(
            wait_after_refusal(&held, 0, false, b, op, ms(9000)),
            Some(ms(4800))
        );
        // The wait node silent or failed: nothing would wake us in time.
        assert_eq!(wait_after_refusal(&held, 2, false, b, op, ms(9000)), None);
        let failed = vec![Some(Err(ErrorKind::Timeout)), Some(Ok(None))];
        assert_eq!(wait_after_refusal(&failed, 0, false, b, op, ms(9000)), None);
        // The round released partial grants: its owner is retired (Q4), the loop goes first.
        assert_eq!(wait_after_refusal(&held, 0, true, b, op, ms(9000)), None);
        // The wait node granted us (a partial grant): not a refusal.
        let granted = vec![Some(Ok(Some(7))), Some(Ok(None)), Some(Ok(None))];
        assert_eq!(
            wait_after_refusal(&granted, 0, false, b, op, ms(9000)),
            None
        );
        // At most the cap: a wait node that stops answering must not hold us for the BLOCK.
        assert_eq!(
            wait_after_refusal(&held, 0, false, b, op, ms(333)),
            Some(ms(333))
        );
        // No BLOCK budget (an unconfirmed grant's re-ask) or too little of it.
        assert_eq!(
            wait_after_refusal(&held, 0, false, None, op, ms(9000)),
            None
        );
        assert_eq!(
            wait_after_refusal(&held, 0, false, Some(ms(200)), op, ms(9000)),
            None
        );
    }
}
