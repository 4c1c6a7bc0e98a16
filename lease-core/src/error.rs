//! Every client-visible error string lives here, built by one constructor each, so a test can
//! assert on them and a reader sees the whole error surface at once. Each starts with a code
//! (`ERR`, `GRACE`, `FENCED`, `MEMBERSHIP`, `WRONGTYPE`) as Redis clients expect.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseError {
    /// Arity is checked by the command layer; carries the lower-case command name.
    WrongArity(&'static str),
    /// `ttl` not a positive integer.
    BadTtl,
    /// `ttl` above `lease.max-ttl`.
    TtlTooLarge { max: u64 },
    /// `timeout` not a non-negative integer.
    BadTimeout,
    /// `token` not an integer in 1..2^53.
    BadToken,
    /// owner empty or longer than `lease.max-owner-len`.
    BadOwner { max: usize },
    /// Trailing or unknown option.
    UnknownOption(String),
    /// Key holds another type.
    WrongType,
    /// No new grants during grace; carries the milliseconds left.
    Grace { ms_left: u64 },
    /// Token is not the live lease's token.
    Fenced,
    /// The effect command was sent by an ordinary client.
    ForgedEffect,
    /// A malformed effect (only reachable from a corrupt AOF or replication stream).
    BadEffect,
    /// FENCE's inner command touches a key in another hash slot (Cluster).
    CrossSlot,
    /// FENCE's inner command is unknown or cannot be run through a module.
    BadInnerCommand(String),
    /// A BLOCKed acquirer would be granted on wake-up while `min-replicas-to-write` is not
    /// met (Redis' own wording, so clients see the error they know).
    NoReplicas,
    /// `LEASE.RAISE` with a new token below the current one (tokens never go down).
    TokenBelow,
    /// The token space (2^53) is exhausted for this key; cannot happen before year ~2255 with
    /// the wall-clock rule, but never wrap silently.
    TokenSpaceExhausted,
    /// A command that writes lease state, sent by a client to a replica (also a writable
    /// one, `replica-read-only no`): only the primary decides (issue 24). `READONLY` is the
    /// code clients already map to "talk to the primary".
    ReadOnlyReplica,
    /// `LEASE.ACQUIRE` while `maxmemory-policy` (carried) may evict lease keys: an eviction
    /// is a silent forced release, so nothing is granted (issue 24).
    EvictingPolicy(String),
    /// A `MEMBERSHIP` id that is not 16 hex digits, or is all zero (docs/quorum.md §4.1).
    BadMembership,
    /// `MEMBERSHIP` together with `BLOCK`: quorum electors never block (client-protocol Q2),
    /// and a blocked retry would have to carry the id through the wait.
    MembershipWithBlock,
    /// `LEASE.MEMBERSHIP ... TOKEN t` on a key whose lease is live: its token cannot move
    /// under its holder.
    TokenOnLiveLease,
    /// Quorum mode: the key is bound to another membership (node set) than the one the
    /// command names; carries both ids. Nothing is granted, renewed or raised.
    MembershipMismatch { stored: u64, sent: u64 },
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseError::WrongArity(cmd) => {
                write!(f, "ERR wrong number of arguments for '{cmd}' command")
            }
            LeaseError::BadTtl => write!(f, "ERR ttl must be a positive integer (milliseconds)"),
            LeaseError::TtlTooLarge { max } => {
                write!(f, "ERR ttl exceeds lease.max-ttl ({max} ms)")
            }
            LeaseError::BadTimeout => {
                write!(f, "ERR timeout must be a non-negative integer (milliseconds, 0 = forever)")
            }
            LeaseError::BadToken => {
                write!(f, "ERR token must be a positive integer below 2^53")
            }
            LeaseError::BadOwner { max } => write!(f, "ERR owner must be 1 to {max} bytes"),
            LeaseError::UnknownOption(o) => write!(f, "ERR unknown option '{o}'"),
            LeaseError::WrongType => write!(
                f,
                "WRONGTYPE Operation against a key holding the wrong kind of value"
            ),
            LeaseError::Grace { ms_left } => write!(
                f,
                "GRACE {ms_left} ms left: this server started or was promoted recently and grants no new lease until then (use BLOCK to wait)"
            ),
            LeaseError::Fenced => write!(f, "FENCED token is not the live lease's token"),
            LeaseError::ForgedEffect => write!(
                f,
                "ERR LEASE.APPLY is internal: accepted only from the primary's replication stream or AOF loading"
            ),
            LeaseError::BadEffect => write!(f, "ERR malformed LEASE.APPLY effect"),
            LeaseError::CrossSlot => write!(
                f,
                "CROSSSLOT keys of the fenced command must hash to the lease key's slot"
            ),
            LeaseError::BadInnerCommand(why) => write!(f, "ERR cannot fence this command: {why}"),
            LeaseError::NoReplicas => write!(f, "NOREPLICAS Not enough good replicas to write."),
            LeaseError::TokenBelow => {
                write!(f, "ERR newtoken must not be below token")
            }
            LeaseError::TokenSpaceExhausted => {
                write!(f, "ERR token space exhausted for this key (2^53)")
            }
            LeaseError::ReadOnlyReplica => write!(
                f,
                "READONLY lease commands that write are refused on a replica (also with replica-read-only no): send them to the primary"
            ),
            LeaseError::EvictingPolicy(policy) => write!(
                f,
                "ERR no lease is granted while maxmemory-policy is {policy}: it can evict a held lease (a silent forced release); use noeviction or a volatile-* policy"
            ),
            LeaseError::BadMembership => write!(
                f,
                "ERR membership id must be 16 hex digits, not all zero"
            ),
            LeaseError::TokenOnLiveLease => write!(
                f,
                "ERR TOKEN needs a free lease: this one is live until it is released or expires"
            ),
            LeaseError::MembershipWithBlock => {
                write!(f, "ERR MEMBERSHIP cannot be combined with BLOCK")
            }
            LeaseError::MembershipMismatch { stored, sent } => write!(
                f,
                "MEMBERSHIP this key is bound to membership {stored:016x}, not {sent:016x}: the electors use different node lists (change it with LEASE.MEMBERSHIP, docs/quorum.md 4.1)"
            ),
        }
    }
}

impl std::error::Error for LeaseError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_is_one_line_with_a_code() {
        let all = [
            LeaseError::WrongArity("lease.get"),
            LeaseError::BadTtl,
            LeaseError::TtlTooLarge { max: 5 },
            LeaseError::BadTimeout,
            LeaseError::BadToken,
            LeaseError::BadOwner { max: 256 },
            LeaseError::UnknownOption("X".into()),
            LeaseError::WrongType,
            LeaseError::Grace { ms_left: 7 },
            LeaseError::Fenced,
            LeaseError::ForgedEffect,
            LeaseError::BadEffect,
            LeaseError::CrossSlot,
            LeaseError::BadInnerCommand("x".into()),
            LeaseError::NoReplicas,
            LeaseError::TokenBelow,
            LeaseError::TokenSpaceExhausted,
            LeaseError::ReadOnlyReplica,
            LeaseError::EvictingPolicy("allkeys-lru".into()),
            LeaseError::BadMembership,
            LeaseError::MembershipWithBlock,
            LeaseError::TokenOnLiveLease,
            LeaseError::MembershipMismatch {
                stored: 1,
                sent: u64::MAX,
            },
        ];
        for e in all {
            let s = e.to_string();
            assert!(!s.contains('\n') && !s.contains('\r'), "{s}");
            // ASCII only: Redis passes an error line through as bytes, and a client that
            // reads it as text must not choke on it.
            assert!(s.is_ascii(), "{s}");
            let code = s.split(' ').next().unwrap_or_default();
            assert!(
                code.chars().all(|c| c.is_ascii_uppercase()) && !code.is_empty(),
                "no code: {s}"
            );
        }
        assert!(LeaseError::Grace { ms_left: 1234 }
            .to_string()
            .starts_with("GRACE 1234 ms"));
        assert!(LeaseError::MembershipMismatch {
            stored: 0xab,
            sent: 0xcd
        }
        .to_string()
        .starts_with(
            "MEMBERSHIP this key is bound to membership 00000000000000ab, not 00000000000000cd:"
        ));
    }
}
