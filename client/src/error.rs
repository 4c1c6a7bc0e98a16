//! Errors. One place classifies every Redis reply error (`CommandError` / `ErrorKind`), and one
//! `thiserror` enum (`LeaseError`) names the operation that failed.

use std::time::Duration;

/// What kind of failure a single command hit. The election loop decides on this alone, and
/// metrics label `redis_errors_total{kind}` with [`ErrorKind::label`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Could not connect, or the connection broke (the server may or may not have run it).
    Connection,
    /// No reply within the loop's own time limit (the server may or may not have run it).
    Timeout,
    /// `GRACE <ms> ...`: the server is in its start/promotion grace period; free leases are
    /// granted again after this long.
    Grace(Duration),
    /// `READONLY`: we talk to a replica (failover in progress or wrong URL).
    ReadOnly,
    /// `NOREPLICAS`: `min-replicas-to-write` refused the write.
    NoReplicas,
    /// `LOADING`: the server is loading its dataset.
    Loading,
    /// `FENCED`: a stale token was used with `LEASE.FENCE`.
    Fenced,
    /// `MEMBERSHIP`: quorum mode, the node's key is bound to another node list (membership
    /// id) than ours (docs/client-protocol.md Q9). Counts as "not granted" / "not renewed"
    /// from that node, never as an error of the round: an operator must act, retrying fast
    /// or slow changes nothing.
    Membership,
    /// `ERR ...` / `WRONGTYPE ...`: our request is wrong (bad key type, ttl above
    /// `lease.max-ttl`, ...). Retrying does not help; the loop keeps retrying slowly and logs it.
    Rejected(String),
    /// Any other server error code (`MASTERDOWN`, `BUSY`, `OOM`, ...).
    Server(String),
    /// The reply had an unexpected shape (module/client version mismatch).
    Protocol,
}

impl ErrorKind {
    /// Stable, low-cardinality label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            ErrorKind::Connection => "connection",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Grace(_) => "grace",
            ErrorKind::ReadOnly => "readonly",
            ErrorKind::NoReplicas => "noreplicas",
            ErrorKind::Loading => "loading",
            ErrorKind::Fenced => "fenced",
            ErrorKind::Membership => "membership",
            ErrorKind::Rejected(_) => "rejected",
            ErrorKind::Server(_) => "server",
            ErrorKind::Protocol => "protocol",
        }
    }

    /// True when the server could not be reached at all (drives "Redis unreachable" logs and
    /// reconnect backoff), as opposed to the server answering with an error.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, ErrorKind::Connection | ErrorKind::Timeout)
    }
}

/// One failed command: its kind plus the server's or the I/O layer's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{} ({message})", kind.label())]
pub struct CommandError {
    pub kind: ErrorKind,
    pub message: String,
}

impl CommandError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        CommandError {
            kind,
            message: message.into(),
        }
    }

    pub fn timeout(after: Duration) -> Self {
        CommandError::new(ErrorKind::Timeout, format!("no reply within {after:?}"))
    }

    pub fn protocol(what: impl Into<String>) -> Self {
        CommandError::new(ErrorKind::Protocol, what)
    }

    /// Classify an error reply by its code (the first word), e.g. `GRACE 2345 ms left: ...`.
    pub fn from_server(code: &str, detail: &str) -> Self {
        let message = if detail.is_empty() {
            code.to_string()
        } else {
            format!("{code} {detail}")
        };
        let kind = match code {
            "GRACE" => {
                // The module's contract: `GRACE <ms> ...`. An unparsable number still means
                // "grace"; wait a short default rather than hammering the server.
                let ms = detail
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(100);
                ErrorKind::Grace(Duration::from_millis(ms))
            }
            "READONLY" => ErrorKind::ReadOnly,
            "NOREPLICAS" => ErrorKind::NoReplicas,
            "LOADING" => ErrorKind::Loading,
            "FENCED" => ErrorKind::Fenced,
            "MEMBERSHIP" => ErrorKind::Membership,
            "ERR" | "WRONGTYPE" => ErrorKind::Rejected(message.clone()),
            other => ErrorKind::Server(other.to_string()),
        };
        CommandError { kind, message }
    }
}

impl From<redis::RedisError> for CommandError {
    fn from(e: redis::RedisError) -> Self {
        if e.is_timeout() {
            return CommandError::new(ErrorKind::Timeout, e.to_string());
        }
        if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
            return CommandError::new(ErrorKind::Connection, e.to_string());
        }
        match e.code() {
            Some(code) => CommandError::from_server(code, e.detail().unwrap_or("")),
            None => CommandError::new(ErrorKind::Protocol, e.to_string()),
        }
    }
}

/// The error type of this crate: which operation failed, and why.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The configuration is unusable (checked by [`crate::ElectorConfig::validate`]).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Opening a connection (bad URL, refused, timed out).
    #[error("connect: {0}")]
    Connect(CommandError),
    #[error("LEASE.ACQUIRE: {0}")]
    Acquire(CommandError),
    #[error("LEASE.RENEW: {0}")]
    Renew(CommandError),
    #[error("LEASE.RELEASE: {0}")]
    Release(CommandError),
    #[error("LEASE.GET: {0}")]
    Get(CommandError),
    #[error("WAIT: {0}")]
    Wait(CommandError),
    /// The leader task panicked (the lease was released before this was returned).
    #[error("leader task panicked: {0}")]
    TaskPanicked(String),
}
