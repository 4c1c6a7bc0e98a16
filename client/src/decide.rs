//! The election loop's decisions as plain functions of `(config, times, reply)`. No I/O and no
//! clock reads: every instant is passed in, so each rule is unit-tested with a table of cases.
//! The async loop ([`crate::Elector::run`]) only executes what these functions return.

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

/// The `WAIT` to attach to grants/renewals, if `min_replicas` asks for one.
pub fn wait_for(cfg: &ElectorConfig) -> Option<WaitFor> {
    (cfg.min_replicas > 0).then_some(WaitFor {
        replicas: cfg.min_replicas,
        timeout: cfg.wait_timeout,
    })
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

/// Capped exponential backoff with full jitter: uniform in `[0, min(max, min * 2^attempt)]`.
/// `unit` is a uniform random number in `[0, 1)` (passed in so tests are deterministic).
/// Why full jitter: after a Redis restart, 50 followers that all lost their connection at the
/// same moment must not reconnect in the same millisecond.
pub fn backoff(cfg: &ElectorConfig, attempt: u32, unit: f64) -> Duration {
    let cap = cfg
        .backoff_min
        .saturating_mul(1u32 << attempt.min(20))
        .min(cfg.backoff_max);
    cap.mul_f64(unit.clamp(0.0, 1.0))
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
        why: &'static str,
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
                    why: "replicas_not_acked",
                };
            }
            let deadline = local_deadline(cfg, sent_at);
            // Why: a reply that took so long that the stop point already passed leaves no
            // safe leadership time; starting the task would mean starting it to kill it.
            if now >= stop_at(cfg, deadline) {
                return AcquireDecision::Unconfirmed {
                    token,
                    retry_in: Duration::ZERO,
                    why: "late_reply",
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
    Retry { at: Instant, why: &'static str },
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
                return retry("replicas_not_acked");
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
        Err(e) if matches!(e.kind, ErrorKind::Timeout) => retry("timeout"),
        Err(_) => retry("error"),
    }
}

/// Is it time to stop leading on the clock alone (checked whenever the loop wakes up, e.g.
/// after the process was paused)?
pub fn must_stop(cfg: &ElectorConfig, deadline: Instant, now: Instant) -> bool {
    now >= stop_at(cfg, deadline)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::CommandError;

    type AcqCase<'a> = (
        &'a ElectorConfig,
        Duration,
        Result<Replicated<Option<u64>>, CommandError>,
        AcquireDecision,
    );
    type RenewCase<'a> = (
        &'a ElectorConfig,
        Duration,
        Result<Replicated<bool>, CommandError>,
        RenewDecision,
    );

    fn cfg() -> ElectorConfig {
        // ttl 1000 ms: lead_time = 990 - 10 = 980 ms, stop_budget 200 ms, renew 333 ms.
        ElectorConfig::new("redis://x/", "k", Duration::from_millis(1000))
            .with_backoff(Duration::from_millis(50), Duration::from_millis(5000))
    }
    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }
    fn granted(t: u64, acked: Option<u32>) -> Result<Replicated<Option<u64>>, CommandError> {
        Ok(Replicated {
            value: Some(t),
            acked,
        })
    }
    fn renewed(ok: bool, acked: Option<u32>) -> Result<Replicated<bool>, CommandError> {
        Ok(Replicated { value: ok, acked })
    }
    fn err(kind: ErrorKind) -> CommandError {
        CommandError::new(kind, "x")
    }

    #[test]
    fn acquire_table() {
        let c = cfg();
        let c2 = cfg().with_min_replicas(2, ms(50));
        let t0 = Instant::now();
        let lead = |t| AcquireDecision::Lead {
            token: t,
            deadline: t0 + ms(980),
            next_renew: t0 + c.renew_interval,
        };
        let cases: Vec<AcqCase> = vec![
            (&c, ms(1), granted(7, None), lead(7)),
            // A slow reply still leads if it came before the stop point (980 - 200).
            (&c, ms(779), granted(7, None), lead(7)),
            (
                &c,
                ms(780),
                granted(7, None),
                AcquireDecision::Unconfirmed {
                    token: 7,
                    retry_in: ms(0),
                    why: "late_reply",
                },
            ),
            (
                &c,
                ms(1),
                Ok(Replicated {
                    value: None,
                    acked: None,
                }),
                AcquireDecision::NotGranted,
            ),
            (
                &c,
                ms(1),
                Err(err(ErrorKind::Grace(ms(1234)))),
                AcquireDecision::Grace(ms(1234)),
            ),
            (
                &c,
                ms(1),
                Err(err(ErrorKind::Connection)),
                AcquireDecision::Backoff(ErrorKind::Connection),
            ),
            (
                &c,
                ms(1),
                Err(err(ErrorKind::NoReplicas)),
                AcquireDecision::Backoff(ErrorKind::NoReplicas),
            ),
            (
                &c2,
                ms(1),
                granted(7, Some(1)),
                AcquireDecision::Unconfirmed {
                    token: 7,
                    retry_in: retry_interval(&c2),
                    why: "replicas_not_acked",
                },
            ),
            (
                &c2,
                ms(1),
                granted(7, None),
                AcquireDecision::Unconfirmed {
                    token: 7,
                    retry_in: retry_interval(&c2),
                    why: "replicas_not_acked",
                },
            ),
        ];
        for (i, (c, after, res, want)) in cases.into_iter().enumerate() {
            assert_eq!(on_acquire(c, t0, t0 + after, &res), want, "case {i}");
        }
        let c2lead = on_acquire(&c2, t0, t0 + ms(1), &granted(7, Some(2)));
        assert!(matches!(c2lead, AcquireDecision::Lead { token: 7, .. }));
    }

    #[test]
    fn renew_table() {
        let c = cfg();
        let c2 = cfg().with_min_replicas(1, ms(50));
        let t0 = Instant::now();
        let old = t0 + ms(500); // current deadline; stop point t0 + 300
        let sent = t0 + ms(100);
        let cases: Vec<RenewCase> = vec![
            (
                &c,
                ms(101),
                renewed(true, None),
                RenewDecision::Renewed {
                    deadline: sent + ms(980),
                    next_renew: sent + c.renew_interval,
                },
            ),
            (
                &c,
                ms(101),
                renewed(false, None),
                RenewDecision::StepDown(StepDownReason::RenewRejected),
            ),
            // Errors: retry a quarter renew interval later, capped at the stop point...
            (
                &c,
                ms(150),
                Err(err(ErrorKind::Timeout)),
                RenewDecision::Retry {
                    at: t0 + ms(150) + retry_interval(&c),
                    why: "timeout",
                },
            ),
            (
                &c,
                ms(290),
                Err(err(ErrorKind::Connection)),
                RenewDecision::Retry {
                    at: t0 + ms(300),
                    why: "error",
                },
            ),
            // ... and step down once it is reached.
            (
                &c,
                ms(300),
                Err(err(ErrorKind::Connection)),
                RenewDecision::StepDown(StepDownReason::DeadlinePassed),
            ),
            (
                &c2,
                ms(101),
                renewed(true, Some(0)),
                RenewDecision::Retry {
                    at: t0 + ms(101) + retry_interval(&c2),
                    why: "replicas_not_acked",
                },
            ),
            (
                &c2,
                ms(101),
                renewed(true, Some(1)),
                RenewDecision::Renewed {
                    deadline: sent + ms(980),
                    next_renew: sent + c.renew_interval,
                },
            ),
            // A renewal confirmed after its own stop point is useless.
            (
                &c,
                ms(100 + 780),
                renewed(true, None),
                RenewDecision::StepDown(StepDownReason::DeadlinePassed),
            ),
        ];
        for (i, (c, after, res, want)) in cases.into_iter().enumerate() {
            assert_eq!(on_renew(c, old, sent, t0 + after, &res), want, "case {i}");
        }
    }

    #[test]
    fn backoff_is_capped_exponential_with_full_jitter() {
        let c = cfg();
        assert_eq!(backoff(&c, 0, 0.0), ms(0));
        assert_eq!(backoff(&c, 0, 0.999_999), ms(50).mul_f64(0.999_999));
        assert_eq!(backoff(&c, 3, 0.5), ms(200));
        assert_eq!(backoff(&c, 10, 0.5), ms(2500)); // capped at 5 s
        assert_eq!(backoff(&c, u32::MAX, 1.0), ms(5000));
    }

    #[test]
    fn deadline_arithmetic() {
        let c = cfg();
        let t0 = Instant::now();
        assert_eq!(local_deadline(&c, t0), t0 + ms(980));
        assert_eq!(stop_at(&c, t0 + ms(980)), t0 + ms(780));
        assert!(!must_stop(&c, t0 + ms(980), t0 + ms(779)));
        assert!(must_stop(&c, t0 + ms(980), t0 + ms(780)));
        assert_eq!(op_limit(&c, Some(ms(5000))), ms(5200));
        assert_eq!(op_limit(&cfg().with_min_replicas(1, ms(30)), None), ms(230));
    }

    #[test]
    fn grace_message_parses() {
        let e = CommandError::from_server(
            "GRACE",
            "2345 ms left: lease grants resume after the failover grace period",
        );
        assert_eq!(e.kind, ErrorKind::Grace(ms(2345)));
        assert_eq!(
            CommandError::from_server("READONLY", "You can't write").kind,
            ErrorKind::ReadOnly
        );
        assert!(matches!(
            CommandError::from_server("ERR", "ttl too large").kind,
            ErrorKind::Rejected(_)
        ));
    }
}
