//! The election loop's decisions as plain functions of `(config, times, reply)`. No I/O and no
//! clock reads: every instant is passed in, so each rule is unit-tested with a table of cases.
//! The async loop ([`crate::Elector::run`]) only executes what these functions return.
//!
//! The rules are specified language-neutrally in `docs/client-protocol.md`, and their tests
//! are the shared decision vectors in `conformance/vectors/*.json`, which every client (this
//! one: `client/tests/vectors.rs`) loads; there is deliberately no second table here.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::ElectorConfig;
use crate::error::{CommandError, ErrorKind};
use crate::transport::{Replicated, WaitFor};

/// Why leadership ended (also the `reason` label of `lease_transitions_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepDownReason {
    /// `LEASE.RENEW` answered 0: the server says we do not hold the lease (expired, taken).
    RenewRejected,
    /// Renewals kept failing (errors, timeouts, unacknowledged by replicas) until the local
    /// deadline minus the stop budget.
    DeadlinePassed,
    /// `resign()` / shutdown.
    Resigned,
    /// The leader task returned (or panicked) on its own.
    TaskExited,
}

impl StepDownReason {
    pub fn label(self) -> &'static str {
        match self {
            StepDownReason::RenewRejected => "renew_rejected",
            StepDownReason::DeadlinePassed => "deadline",
            StepDownReason::Resigned => "resigned",
            StepDownReason::TaskExited => "task_exited",
        }
    }

    /// Whether to send `LEASE.RELEASE` after the task stopped. Why not after RenewRejected:
    /// the server already told us we do not hold it; a release would only cost a round trip.
    pub fn release_after(self) -> bool {
        !matches!(self, StepDownReason::RenewRejected)
    }
}

/// Longest configured owner (the base of R17), in UTF-8 bytes: the base, `#` and the
/// largest reign number (16 digits) fill the server's default `lease.max-owner-len` of 256.
pub const MAX_BASE_OWNER_BYTES: usize = 239;

/// Largest reign number, 2^53 - 1: exact in every client language.
pub const MAX_REIGN: u64 = (1 << 53) - 1;

/// The owner sent on the wire for `reign` (R17, `reign_owner.json`): `base#reign`. `None`
/// for a base the configuration refuses (empty, over 239 bytes) or a reign outside
/// `1..=2^53-1`: never truncated, since two reigns must never share an owner.
///
/// Why per reign: every command the loop abandons may still execute later (the kernel
/// delivers what was written, even after the connection closed). With one owner for the
/// whole process, a new campaign's ACQUIRE refreshes a lease the previous reign still held
/// on the server (same token), and that reign's late RELEASE then frees the *new* reign
/// while it acts: two leaders (docs/client-protocol.md R17). A new owner per reign makes
/// every late command of an earlier reign miss.
pub fn reign_owner(base: &str, reign: u64) -> Option<String> {
    if base.is_empty() || base.len() > MAX_BASE_OWNER_BYTES || !(1..=MAX_REIGN).contains(&reign) {
        return None;
    }
    Some(format!("{base}#{reign}"))
}

/// What happened in the election loop, as far as the reign counter cares (`next_reign.json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReignEvent {
    /// A grant the loop uses (the reign starts with the campaign's owner).
    Granted,
    /// A grant not used yet (late, or not acknowledged by replicas): re-asked, same owner.
    Unconfirmed,
    /// Nil reply.
    NotGranted,
    /// Error or timeout of an ACQUIRE (it may have been granted: R16 re-asks, same owner).
    Error,
    /// The loop left the leader state, for any reason.
    SteppedDown,
}

/// The reign counter after `event` (R17): only a step-down advances it. Within a campaign
/// the owner must stay the same, so that the R7/R16 re-asks refresh the campaign's own
/// grant instead of waiting a TTL for it to expire. Saturates at `MAX_REIGN + 1`, which
/// [`reign_owner`] refuses (2^53 reigns do not happen).
pub fn next_reign(reign: u64, event: ReignEvent) -> u64 {
    match event {
        ReignEvent::SteppedDown => reign.saturating_add(1).min(MAX_REIGN + 1),
        ReignEvent::Granted
        | ReignEvent::Unconfirmed
        | ReignEvent::NotGranted
        | ReignEvent::Error => reign,
    }
}

/// The `WAIT` to attach to grants/renewals, if `min_replicas` asks for one.
pub fn wait_for(cfg: &ElectorConfig) -> Option<WaitFor> {
    (cfg.min_replicas > 0).then_some(WaitFor {
        replicas: cfg.min_replicas,
        timeout: cfg.wait_timeout,
    })
}

/// The first rule a configuration breaks, as `(rule, why)`; `None` if it is usable. Rule
/// names are shared with every client (`conformance/vectors/config_validate.json`).
pub fn config_problem(cfg: &ElectorConfig) -> Option<(&'static str, &'static str)> {
    let ms1 = Duration::from_millis(1);
    if cfg.key.is_empty() {
        return Some(("key", "key is empty"));
    }
    // Bytes, not characters: the module counts bytes (`lease.max-owner-len`, default 256),
    // and the wire owner is `base#reign` (R17): 239 + '#' + 16 digits = 256.
    if cfg.owner.is_empty() || cfg.owner.len() > MAX_BASE_OWNER_BYTES {
        return Some((
            "owner",
            "owner must be 1..=239 bytes (R17: '#' and the reign number must fit in 256)",
        ));
    }
    if cfg.ttl < ms1 {
        return Some(("ttl", "ttl must be at least 1 ms"));
    }
    // Why 2^53: every number on the wire must stay exact in JSON and JavaScript clients.
    if cfg.ttl.as_millis() >= (1u128 << 53) {
        return Some(("ttl", "ttl must be below 2^53 ms"));
    }
    // Why: a negative drift would push the local deadline past the server's expiry.
    if !(0.0..0.5).contains(&cfg.drift) {
        return Some(("drift", "drift must be in [0, 0.5)"));
    }
    if cfg.renew_interval.is_zero() {
        return Some(("renew_interval", "renew_interval must be positive"));
    }
    if cfg.block_timeout < ms1 {
        return Some((
            "block_timeout",
            "block_timeout must be at least 1 ms (BLOCK 0 blocks forever)",
        ));
    }
    // Why: the task is told to stop at `deadline - stop_budget`; if that is not after the
    // first renewal, a leader would be cancelled before it ever renews.
    if cfg.stop_budget + cfg.renew_interval >= cfg.lead_time() {
        return Some((
            "stop_window",
            "renew_interval + stop_budget must be below ttl*(1-drift)-margin",
        ));
    }
    if cfg.op_timeout.is_zero() {
        return Some(("op_timeout", "op_timeout must be positive"));
    }
    if cfg.backoff_min.is_zero() || cfg.backoff_max < cfg.backoff_min {
        return Some(("backoff", "backoff needs 0 < min <= max"));
    }
    // Why: WAIT takes whole ms and `WAIT n 0` waits forever.
    if cfg.min_replicas > 0 && cfg.wait_timeout < ms1 {
        return Some((
            "wait_timeout",
            "wait_timeout must be at least 1 ms when min_replicas > 0",
        ));
    }
    None
}

/// Local deadline of a grant/renewal whose command was *sent* at `sent_at`.
///
/// Why `sent_at` (taken before sending) and not the reply time: the server starts its TTL
/// when it executes the command, which is after we sent it, so `sent_at + ttl` is never later
/// than the server's expiry as long as clock rates agree. Why `(1 - drift)`: they may not
/// agree exactly; our clock may run slow relative to the server's by up to `drift`. Why
/// `- margin`: time passes between checking the deadline and the work that relies on it.
pub fn local_deadline(cfg: &ElectorConfig, sent_at: Instant) -> Instant {
    sent_at + cfg.lead_time()
}

/// When the task is told to stop: `stop_budget` before the deadline, so that it *has*
/// stopped by the deadline.
pub fn stop_at(cfg: &ElectorConfig, deadline: Instant) -> Instant {
    deadline.checked_sub(cfg.stop_budget).unwrap_or(deadline)
}

/// Time limit for one command: the loop's own bound (the server may never answer).
pub fn op_limit(cfg: &ElectorConfig, block: Option<Duration>) -> Duration {
    let wait = if cfg.min_replicas > 0 {
        cfg.wait_timeout
    } else {
        Duration::ZERO
    };
    block.unwrap_or(Duration::ZERO) + cfg.op_timeout + wait
}

/// Time limit for opening a connection (TCP, TLS handshake, AUTH, HELLO): the command budget
/// `op_timeout`, but never below 100 ms. Why a floor: `op_timeout` defaults to T/5 and can be
/// 50 ms, which a loaded machine's TLS handshake alone can exceed, and an elector that can
/// never connect never leads. It does not touch safety: a grant's deadline is counted from
/// the instant before its command is sent, never from the connect.
pub fn connect_timeout(cfg: &ElectorConfig) -> Duration {
    cfg.op_timeout.max(CONNECT_TIMEOUT_FLOOR)
}

/// The floor of [`connect_timeout`].
pub const CONNECT_TIMEOUT_FLOOR: Duration = Duration::from_millis(100);

/// Capped exponential backoff with full jitter: uniform in `[0, min(max, min * 2^attempt)]`.
/// `unit` is a uniform random number in `[0, 1)` (passed in so tests are deterministic).
/// Why full jitter: after a Redis restart, 50 followers that all lost their connection at the
/// same moment must not reconnect in the same millisecond.
pub fn backoff(cfg: &ElectorConfig, attempt: u32, unit: f64) -> Duration {
    backoff_cap(cfg, attempt).mul_f64(unit.clamp(0.0, 1.0))
}

/// The upper bound of [`backoff`] for `attempt`: `min(max, min * 2^min(attempt, 20))`. The
/// exponent is clamped first so a long outage cannot overflow the multiplication.
pub fn backoff_cap(cfg: &ElectorConfig, attempt: u32) -> Duration {
    cfg.backoff_min
        .saturating_mul(1u32 << attempt.min(20))
        .min(cfg.backoff_max)
}

/// Pause after a nil `LEASE.ACQUIRE` reply (`block` = the BLOCK it was sent with).
///
/// Why: BLOCK answers nil only after its timeout, so a follower normally asks again at once.
/// A BLOCKing ask that came back nil in less than half its timeout means something else is
/// going on (a proxy, a server that does not block) and the follower must not spin on it.
pub fn not_granted_pause(
    cfg: &ElectorConfig,
    block: Option<Duration>,
    sent_at: Instant,
    now: Instant,
    unit: f64,
) -> Duration {
    if block.is_some_and(|b| now.saturating_duration_since(sent_at) < b / 2) {
        backoff(cfg, 0, unit) + cfg.backoff_min
    } else {
        Duration::ZERO
    }
}

/// A duration as the whole milliseconds the module and `WAIT` take: floored, at least 1.
/// Why at least 1: `BLOCK 0` and `WAIT n 0` mean "forever", and the module refuses a ttl of 0.
pub fn wire_ms(d: Duration) -> u64 {
    (d.as_millis().min(u64::MAX as u128) as u64).max(1)
}

/// Why a grant does not count yet (the `why` of `on_acquire.json`'s `unconfirmed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unconfirmed {
    /// The reply came after its own stop point (R7).
    LateReply,
    /// Fewer replicas acknowledged it than `min_replicas` (R11).
    ReplicasNotAcked,
}

impl Unconfirmed {
    /// The name the vectors, logs and metrics use.
    pub fn label(self) -> &'static str {
        match self {
            Unconfirmed::LateReply => "late_reply",
            Unconfirmed::ReplicasNotAcked => "replicas_not_acked",
        }
    }
}

/// Why a renewal did not count (the `why` of `on_renew.json`'s `retry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryWhy {
    /// No reply within the op limit (R5).
    Timeout,
    /// Any other failure.
    Error,
    /// Fewer replicas acknowledged it than `min_replicas` (R11).
    ReplicasNotAcked,
}

impl RetryWhy {
    /// The name the vectors, logs and metrics use.
    pub fn label(self) -> &'static str {
        match self {
            RetryWhy::Timeout => "timeout",
            RetryWhy::Error => "error",
            RetryWhy::ReplicasNotAcked => "replicas_not_acked",
        }
    }
}

/// What a follower does after an `LEASE.ACQUIRE` reply.
#[derive(Clone, Debug, PartialEq)]
pub enum AcquireDecision {
    /// Confirmed grant: lead until `deadline`, renew at `next_renew`.
    Lead {
        token: u64,
        deadline: Instant,
        next_renew: Instant,
    },
    /// The server granted `token`, but it does not count (replicas did not acknowledge it, or
    /// the reply came back too late to leave any leadership time). Do not run the task; ask
    /// again without BLOCK after `retry_in` (same owner: the server refreshes and confirms).
    Unconfirmed {
        token: u64,
        retry_in: Duration,
        why: Unconfirmed,
    },
    /// Not granted (BLOCK timed out): ask again right away.
    NotGranted,
    /// The server is in its grace period for this long.
    Grace(Duration),
    /// Error: back off (exponentially, with jitter) and retry.
    Backoff(ErrorKind),
}

pub fn on_acquire(
    cfg: &ElectorConfig,
    sent_at: Instant,
    now: Instant,
    result: &Result<Replicated<Option<u64>>, CommandError>,
) -> AcquireDecision {
    match result {
        Ok(Replicated { value: None, .. }) => AcquireDecision::NotGranted,
        Ok(Replicated {
            value: Some(token),
            acked,
        }) => {
            let token = *token;
            // Why: with min_replicas, a grant only the primary knows can vanish in a failover
            // to a replica that never saw it, and the new primary would grant it again. Never
            // lead on it.
            if cfg.min_replicas > 0 && acked.unwrap_or(0) < cfg.min_replicas {
                return AcquireDecision::Unconfirmed {
                    token,
                    // Why not faster: each retry refreshes our (unused) grant on the primary;
                    // replicas catching up take time, there is no point in hammering.
                    retry_in: retry_interval(cfg),
                    why: Unconfirmed::ReplicasNotAcked,
                };
            }
            let deadline = local_deadline(cfg, sent_at);
            // Why: a reply that took so long that the stop point already passed leaves no
            // safe leadership time; starting the task would mean starting it to kill it.
            if now >= stop_at(cfg, deadline) {
                return AcquireDecision::Unconfirmed {
                    token,
                    retry_in: Duration::ZERO,
                    why: Unconfirmed::LateReply,
                };
            }
            AcquireDecision::Lead {
                token,
                deadline,
                next_renew: sent_at + cfg.renew_interval,
            }
        }
        Err(e) => match &e.kind {
            ErrorKind::Grace(d) => AcquireDecision::Grace(*d),
            k => AcquireDecision::Backoff(k.clone()),
        },
    }
}

/// What a leader does after a `LEASE.RENEW` reply (or failure).
#[derive(Clone, Debug, PartialEq)]
pub enum RenewDecision {
    /// Renewed and confirmed: new deadline, next renewal.
    Renewed {
        deadline: Instant,
        next_renew: Instant,
    },
    /// Stop leading now.
    StepDown(StepDownReason),
    /// The renewal did not count; keep the *old* deadline and try again at `at`.
    Retry { at: Instant, why: RetryWhy },
}

/// How soon a failed renewal is retried (bounded below so a dead server is not hammered).
pub fn retry_interval(cfg: &ElectorConfig) -> Duration {
    (cfg.renew_interval / 4).max(Duration::from_millis(10))
}

pub fn on_renew(
    cfg: &ElectorConfig,
    deadline: Instant,
    sent_at: Instant,
    now: Instant,
    result: &Result<Replicated<bool>, CommandError>,
) -> RenewDecision {
    let stop = stop_at(cfg, deadline);
    let retry = |why| {
        // Why: errors and timeouts say nothing about the lease; the last confirmed deadline
        // still holds, so keep leading and retrying until the stop point, then step down.
        if now >= stop {
            RenewDecision::StepDown(StepDownReason::DeadlinePassed)
        } else {
            RenewDecision::Retry {
                at: (now + retry_interval(cfg)).min(stop),
                why,
            }
        }
    };
    match result {
        // Why: 0 is the server's word that we no longer hold the lease (it expired or someone
        // else has it). Our local deadline may still be in the future, but it is no longer
        // backed by anything: step down at once.
        Ok(Replicated { value: false, .. }) => {
            RenewDecision::StepDown(StepDownReason::RenewRejected)
        }
        Ok(Replicated { value: true, acked }) => {
            // Why: an unacknowledged renewal may be lost in a failover; the new primary then
            // expires the lease at the *old* expiry, so only the old deadline is backed.
            if cfg.min_replicas > 0 && acked.unwrap_or(0) < cfg.min_replicas {
                return retry(RetryWhy::ReplicasNotAcked);
            }
            let new_deadline = local_deadline(cfg, sent_at).max(deadline);
            if now >= stop_at(cfg, new_deadline) {
                return RenewDecision::StepDown(StepDownReason::DeadlinePassed);
            }
            RenewDecision::Renewed {
                deadline: new_deadline,
                next_renew: sent_at + cfg.renew_interval,
            }
        }
        Err(e) if matches!(e.kind, ErrorKind::Timeout) => retry(RetryWhy::Timeout),
        Err(_) => retry(RetryWhy::Error),
    }
}

/// Is it time to stop leading on the clock alone (checked whenever the loop wakes up, e.g.
/// after the process was paused)?
pub fn must_stop(cfg: &ElectorConfig, deadline: Instant, now: Instant) -> bool {
    now >= stop_at(cfg, deadline)
}

#[cfg(test)]
mod connect_tests {
    use super::*;

    #[test]
    fn connect_timeout_is_the_op_timeout_with_a_floor() {
        let cfg = ElectorConfig::new("redis://127.0.0.1/", "k", Duration::from_millis(250));
        // T/5 = 50 ms: below the floor.
        assert_eq!(connect_timeout(&cfg), CONNECT_TIMEOUT_FLOOR);
        let cfg = cfg.with_op_timeout(Duration::from_millis(700));
        assert_eq!(connect_timeout(&cfg), Duration::from_millis(700));
    }
}
