//! Refusals decided before the engine from facts about the server, not about the key
//! (issue 24): lease writes sent to a replica, and grants while the eviction policy can
//! delete lease keys. Pure: the module reads the facts (`src/module/policy.rs`, the context
//! flags) and asks here.

use crate::error::LeaseError;
use crate::request::Request;

/// What the module knows about the server when a request arrives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Facts<'p> {
    /// This server is a replica and the request does not come from its primary's
    /// replication stream or from loading (AOF/RDB).
    pub replica_client: bool,
    /// `Some(policy)` while `maxmemory` is set and `maxmemory-policy` can evict keys
    /// without a TTL (lease keys have none), see [`policy_evicts_leases`].
    pub evicting_policy: Option<&'p str>,
}

/// Whether `policy` (a `maxmemory-policy` value) can evict a lease key. Lease keys carry no
/// Redis TTL, so `volatile-*` never picks them; `noeviction` evicts nothing. Anything else
/// (`allkeys-lru`, `allkeys-lfu`, `allkeys-random`, and any policy a later server adds) is
/// taken as evicting: an unknown policy must not pass as safe.
pub fn policy_evicts_leases(policy: &str) -> bool {
    !(policy == "noeviction" || policy.starts_with("volatile-"))
}

/// `Err` if the request must be refused before the engine sees it.
pub fn admit(req: &Request<'_>, facts: Facts<'_>) -> Result<(), LeaseError> {
    // SAFETY (of the lease, issue 24): a replica's view lags its primary's. A grant there is
    // a second lease the primary never hears of (two holders of one key), a renew or release
    // changes a copy the primary overwrites, and a FENCE check there can pass a token the
    // primary has already replaced. Redis refuses `write` commands on a read-only replica
    // itself; with `replica-read-only no` it does not, so the module does. The primary's
    // own effects (LEASE.APPLY from the stream or the AOF) are not client requests.
    let writes = matches!(
        req,
        Request::Acquire { .. }
            | Request::AcquireRetry { .. }
            | Request::Renew { .. }
            | Request::Release { .. }
            | Request::Raise { .. }
            | Request::Membership { .. }
            | Request::Fence { .. }
    );
    if writes && facts.replica_client {
        return Err(LeaseError::ReadOnlyReplica);
    }
    // SAFETY: an evicted lease key is a forced release nobody is told about: the next
    // ACQUIRE would grant a second owner at once while the first still holds a live lease.
    // Refusing every grant while eviction can happen means an eviction can only end a
    // lease, never hand it to someone else (a renew of an evicted key answers 0, so its
    // holder steps down). When the policy becomes safe again the module starts a grace
    // period, which covers the holders of leases evicted meanwhile.
    if let (Request::Acquire { .. } | Request::AcquireRetry { .. }, Some(p)) =
        (req, facts.evicting_policy)
    {
        return Err(LeaseError::EvictingPolicy(p.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ACQ: Request<'static> = Request::Acquire {
        owner: b"a",
        ttl_ms: 10,
        block: None,
        membership: None,
    };

    #[test]
    fn policies_that_can_evict_a_key_without_ttl() {
        for p in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "allkeys-new",
        ] {
            assert!(policy_evicts_leases(p), "{p}");
        }
        for p in [
            "noeviction",
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
        ] {
            assert!(!policy_evicts_leases(p), "{p}");
        }
    }

    #[test]
    fn replica_clients_may_read_but_not_write() {
        let replica = Facts {
            replica_client: true,
            ..Facts::default()
        };
        let writes = [
            ACQ,
            Request::AcquireRetry {
                owner: b"a",
                ttl_ms: 10,
            },
            Request::Renew {
                owner: b"a",
                token: 1,
                ttl_ms: 10,
                membership: None,
            },
            Request::Release {
                owner: b"a",
                token: 1,
            },
            Request::Raise {
                owner: b"a",
                token: 1,
                new_token: 2,
                membership: None,
            },
            Request::Fence {
                token: 1,
                with_command: false,
            },
            Request::Fence {
                token: 1,
                with_command: true,
            },
        ];
        for r in &writes {
            assert_eq!(admit(r, replica), Err(LeaseError::ReadOnlyReplica), "{r:?}");
            assert_eq!(admit(r, Facts::default()), Ok(()), "{r:?}");
        }
        for r in [Request::Get, Request::Info, Request::Expire, Request::Rearm] {
            assert_eq!(admit(&r, replica), Ok(()), "{r:?}");
        }
    }

    #[test]
    fn evicting_policy_refuses_grants_only() {
        let evicting = Facts {
            evicting_policy: Some("allkeys-lru"),
            ..Facts::default()
        };
        assert_eq!(
            admit(&ACQ, evicting),
            Err(LeaseError::EvictingPolicy("allkeys-lru".into()))
        );
        let renew = Request::Renew {
            owner: b"a",
            token: 1,
            ttl_ms: 10,
            membership: None,
        };
        assert_eq!(admit(&renew, evicting), Ok(()));
        assert!(admit(&ACQ, evicting)
            .unwrap_err()
            .to_string()
            .contains("allkeys-lru"));
    }
}
