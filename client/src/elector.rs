//! The async election loop: executes what [`crate::decide`] decides, talks to Redis through a
//! [`Transport`], runs the leader task, publishes [`Role`], logs and counts.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{sleep, sleep_until, timeout, timeout_at, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::config::ElectorConfig;
use crate::decide::{self, AcquireDecision, RenewDecision, RetryWhy, StepDownReason, Unconfirmed};
use crate::error::{CommandError, LeaseError};
use crate::metrics::Metrics;
use crate::transport::{RedisTransport, Transport};

/// What this instance is right now (leader or follower), as the loop last published it on
/// the watch channel: a snapshot, it does not re-check the clock (use
/// [`LeaderContext::is_leader`] for that).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Follower,
    /// Leading with `token` until the local `deadline` (moves forward with every confirmed
    /// renewal). The task is cancelled `stop_budget` before it.
    Leader {
        token: u64,
        deadline: Instant,
    },
}

impl Role {
    pub fn is_leader(&self) -> bool {
        matches!(self, Role::Leader { .. })
    }
    pub fn token(&self) -> Option<u64> {
        match self {
            Role::Leader { token, .. } => Some(*token),
            Role::Follower => None,
        }
    }
}

/// How [`Elector::run`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum RunOutcome<R> {
    /// [`ElectorHandle::resign`] was called; the task (if any) stopped and the lease was
    /// released.
    Resigned,
    /// The leader task returned `R` by itself; the lease was released. Call `run` again to
    /// campaign again.
    TaskFinished(R),
}

/// How [`Elector::run_once`] ended: one reign, whatever ended it.
#[derive(Debug, PartialEq, Eq)]
pub enum OnceOutcome<R> {
    /// The leader task returned `R` by itself while leading; the lease was released.
    Finished(R),
    /// Leadership ended first (renewal refused, stop point reached): the task was cancelled
    /// and has stopped (or was aborted at the local deadline). Its value, if it returned one
    /// after the loss, is dropped: its work may have outlived the lease, so the caller must
    /// not take it as done under leadership.
    Lost(StepDownReason),
    /// [`ElectorHandle::resign`] was called, before the election or during the reign (the
    /// task stopped first, then the lease was released).
    Resigned,
}

/// What the leader task gets: its fencing token and when to stop.
///
/// The task must stop promptly once [`LeaderContext::cancelled`] fires; it fires
/// `stop_budget` before the local deadline, so a task that stops within `stop_budget` has
/// stopped before leadership can end. Work that cannot be fenced should also call
/// [`LeaderContext::is_leader`] between steps (it re-checks the clock, so it is right even
/// right after the process was paused).
#[derive(Clone, Debug)]
pub struct LeaderContext {
    token: u64,
    key: String,
    owner: String,
    stop_budget: Duration,
    cancel: CancellationToken,
    leadership: watch::Receiver<Role>,
    /// Set by [`LeaderContext::keep_lease`]: the loop must not RELEASE after this reign.
    keep: Arc<AtomicBool>,
}

impl LeaderContext {
    /// Fencing token of this reign; pass it to the protected resource (`LEASE.FENCE`).
    pub fn token(&self) -> u64 {
        self.token
    }
    pub fn key(&self) -> &str {
        &self.key
    }
    /// This reign's owner as the server knows it: `base#reign` (protocol R17).
    pub fn owner(&self) -> &str {
        &self.owner
    }
    /// Resolves when the task must stop.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
    }
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
    /// A clone of the cancellation token (to hand to sub-tasks).
    pub fn cancellation_token(&self) -> CancellationToken {
        self.cancel.clone()
    }
    /// Current local deadline of this reign; `None` once it ended.
    pub fn deadline(&self) -> Option<Instant> {
        match *self.leadership.borrow() {
            Role::Leader { token, deadline } if token == self.token => Some(deadline),
            _ => None,
        }
    }
    /// The role channel (deadline updates); `lease-run` feeds its watchdog from it.
    pub fn subscribe(&self) -> watch::Receiver<Role> {
        self.leadership.clone()
    }
    /// Tell the loop not to `LEASE.RELEASE` when this reign ends: something the task started
    /// may still be running (its stop could not be confirmed), so the lease must end on the
    /// server's own expiry, which comes after the local deadline, instead of being handed to a
    /// successor at once. R13: release only after the task's work has stopped. `lease-run`
    /// calls it when it cannot confirm that every process of the command is gone.
    pub fn keep_lease(&self) {
        self.keep.store(true, Ordering::SeqCst);
    }
    /// A handle that does the same as [`LeaderContext::keep_lease`] from a destructor or
    /// another thread (a drop guard that outlives the borrow of the context).
    pub fn keep_lease_flag(&self) -> Arc<AtomicBool> {
        self.keep.clone()
    }
    /// `LEASE.FENCE key token command...` with this reign's key and token on the
    /// application's connection (see [`crate::fence`]): the command's reply, or
    /// `ErrorKind::Fenced` and nothing written when the token is no longer the live one.
    pub async fn fence<C, A>(
        &self,
        conn: &mut C,
        command: &[A],
    ) -> Result<redis::Value, crate::CommandError>
    where
        C: redis::aio::ConnectionLike + Send,
        A: redis::ToRedisArgs,
    {
        crate::fence::fence(conn, &self.key, self.token, command).await
    }
    /// "Check the deadline after every step": true only if not cancelled and the stop point
    /// (`deadline - stop_budget`) is still ahead on the local monotonic clock.
    pub fn is_leader(&self) -> bool {
        if self.cancel.is_cancelled() {
            return false;
        }
        match self.deadline() {
            Some(d) => Instant::now() + self.stop_budget < d,
            None => false,
        }
    }
}

/// Cloneable remote control of an [`Elector`]: observe, resign.
#[derive(Clone, Debug)]
pub struct ElectorHandle {
    resign: CancellationToken,
    leadership: watch::Receiver<Role>,
}

impl ElectorHandle {
    /// Graceful stop: cancel the task, wait for it to stop, `LEASE.RELEASE` (so a waiting
    /// follower takes over at once), and make `run` return [`RunOutcome::Resigned`]. Final:
    /// a resigned elector does not campaign again.
    pub fn resign(&self) {
        self.resign.cancel();
    }
    pub fn subscribe(&self) -> watch::Receiver<Role> {
        self.leadership.clone()
    }
    /// The last published role (a snapshot).
    pub fn role(&self) -> Role {
        *self.leadership.borrow()
    }
}

/// One candidate for one lease key. See the crate docs for the whole picture.
pub struct Elector<T: Transport = RedisTransport> {
    cfg: ElectorConfig,
    transport: T,
    tx: watch::Sender<Role>,
    resign: CancellationToken,
    metrics: Metrics,
    /// Last known reachability of Redis, for "unreachable"/"recovered" logs (None = unknown).
    redis_up: Option<bool>,
    /// The reign counter (R17): starts at 1, advances after every step-down.
    reign: u64,
    /// The owner on the wire for the current campaign and reign: `base#reign`.
    wire_owner: String,
}

enum LeadEnd<R> {
    Lost(StepDownReason),
    Resigned,
    Finished(R),
    Panicked(String),
}

impl Elector<RedisTransport> {
    /// An elector talking to `config.redis_url`. Does not connect yet (`run` does, with
    /// backoff), so it never fails because Redis is down.
    pub fn new(config: ElectorConfig) -> Result<Self, LeaseError> {
        config.validate()?;
        let transport = RedisTransport::new(&config.redis_url, decide::connect_timeout(&config))?;
        Elector::with_transport(config, transport)
    }
}

impl<T: Transport> Elector<T> {
    /// An elector over any [`Transport`] (tests use a scripted fake).
    pub fn with_transport(config: ElectorConfig, transport: T) -> Result<Self, LeaseError> {
        config.validate()?;
        let (tx, _) = watch::channel(Role::Follower);
        let metrics = Metrics::new(&config.key);
        let wire_owner = decide::reign_owner(&config.owner, 1)
            .ok_or_else(|| LeaseError::Config("owner: not a valid base owner".into()))?;
        Ok(Elector {
            cfg: config,
            transport,
            tx,
            resign: CancellationToken::new(),
            metrics,
            redis_up: None,
            reign: 1,
            wire_owner,
        })
    }

    pub fn config(&self) -> &ElectorConfig {
        &self.cfg
    }
    /// The configured owner: the base of every reign's owner (as in every client).
    pub fn owner(&self) -> &str {
        &self.cfg.owner
    }
    /// The owner sent on the wire for the current (or next) reign: `base#reign` (R17).
    pub fn current_owner(&self) -> &str {
        &self.wire_owner
    }
    /// The reign counter: 1 for the first reign, one more after every step-down (R17).
    pub fn reign(&self) -> u64 {
        self.reign
    }

    /// After a step-down (any reason): the next campaign uses a new owner, so that no late
    /// command of the reign that just ended (an abandoned RENEW or RELEASE, still in the
    /// network or in a closed connection's kernel buffer) can match the next reign, and no
    /// ACQUIRE of ours can refresh a lease that reign may still hold (docs/client-protocol.md
    /// R17).
    fn end_reign(&mut self) -> Result<(), LeaseError> {
        self.reign = decide::next_reign(self.reign, decide::ReignEvent::SteppedDown);
        match decide::reign_owner(&self.cfg.owner, self.reign) {
            Some(o) => {
                self.wire_owner = o;
                Ok(())
            }
            // 2^53 reigns: refuse to campaign rather than reuse an owner.
            None => Err(LeaseError::Config(
                "reign counter exhausted (2^53 - 1)".into(),
            )),
        }
    }
    pub fn metrics(&self) -> Metrics {
        self.metrics.clone()
    }
    pub fn subscribe(&self) -> watch::Receiver<Role> {
        self.tx.subscribe()
    }
    pub fn handle(&self) -> ElectorHandle {
        ElectorHandle {
            resign: self.resign.clone(),
            leadership: self.tx.subscribe(),
        }
    }
    /// Same as `handle().resign()`.
    pub fn resign(&self) {
        self.resign.cancel();
    }

    /// Campaign; whenever elected, spawn `task(ctx)` and keep the lease renewed while it runs.
    /// On losing the lease the task is cancelled (and aborted if still running at the
    /// deadline) and the elector campaigns again. Returns on resign or when the task returns
    /// by itself (after releasing the lease in both cases). Errors talking to Redis are never
    /// returned: they are retried, logged and counted; only a panicking task ends `run` with
    /// an error.
    pub async fn run<F, Fut, R>(&mut self, mut task: F) -> Result<RunOutcome<R>, LeaseError>
    where
        F: FnMut(LeaderContext) -> Fut,
        Fut: Future<Output = R> + Send + 'static,
        R: Send + 'static,
    {
        loop {
            match self.one_reign(&mut task).await? {
                // run() campaigns again after a lost term; the next reign has its own owner.
                OnceOutcome::Lost(_) => {}
                OnceOutcome::Resigned => return Ok(RunOutcome::Resigned),
                OnceOutcome::Finished(r) => return Ok(RunOutcome::TaskFinished(r)),
            }
        }
    }

    /// One-shot: campaign until elected, run `task(ctx)` for that one reign while keeping the
    /// lease renewed, and return when the reign is over; never campaign a second time (unlike
    /// [`Elector::run`], which campaigns again after a lost term). Whatever ended the reign,
    /// the task has stopped (or was aborted and confirmed stopped at the local deadline)
    /// before this returns, and the lease is released only after that (R13). Call it again
    /// for another reign (a new owner on the wire, R17). Errors talking to Redis are retried,
    /// as in `run`; a panicking task ends it with [`LeaseError::TaskPanicked`].
    pub async fn run_once<F, Fut, R>(&mut self, task: F) -> Result<OnceOutcome<R>, LeaseError>
    where
        F: FnOnce(LeaderContext) -> Fut,
        Fut: Future<Output = R> + Send + 'static,
        R: Send + 'static,
    {
        // One reign calls the task once: an FnOnce behind the FnMut the loop takes.
        let mut task = Some(task);
        let mut once = move |ctx: LeaderContext| {
            let fut = task.take().map(|f| f(ctx));
            async move {
                match fut {
                    Some(fut) => Some(fut.await),
                    // Unreachable: `one_reign` starts at most one task.
                    None => None,
                }
            }
        };
        Ok(match self.one_reign(&mut once).await? {
            OnceOutcome::Finished(Some(r)) => OnceOutcome::Finished(r),
            OnceOutcome::Finished(None) => {
                return Err(LeaseError::Config(
                    "run_once started its task twice (a bug in this crate)".into(),
                ))
            }
            OnceOutcome::Lost(why) => OnceOutcome::Lost(why),
            OnceOutcome::Resigned => OnceOutcome::Resigned,
        })
    }

    /// Campaign until one reign ended (or resign, before any): the body of both `run` (which
    /// calls it again after a loss) and `run_once`.
    async fn one_reign<F, Fut, R>(&mut self, task: &mut F) -> Result<OnceOutcome<R>, LeaseError>
    where
        F: FnMut(LeaderContext) -> Fut,
        Fut: Future<Output = R> + Send + 'static,
        R: Send + 'static,
    {
        if decide::reign_owner(&self.cfg.owner, self.reign).is_none() {
            return Err(LeaseError::Config(
                "reign counter exhausted (2^53 - 1)".into(),
            ));
        }
        let mut attempt: u32 = 0;
        // A grant the server gave us that we may not use yet (not acked by replicas, or too
        // late). We hold it on the server, so we re-ask without BLOCK; same owner = refresh.
        let mut unconfirmed: Option<u64> = None;
        loop {
            if self.resign.is_cancelled() {
                self.release_stray(unconfirmed.is_some()).await;
                return Ok(OnceOutcome::Resigned);
            }
            let block = if unconfirmed.is_some() {
                None
            } else {
                Some(self.cfg.block_timeout)
            };
            let limit = decide::op_limit(&self.cfg, block);
            let wait = decide::wait_for(&self.cfg);
            // Why before sending: the deadline must be measured from a point no later than
            // the moment the server starts the TTL.
            let sent_at = Instant::now();
            let res = tokio::select! {
                biased;
                _ = self.resign.cancelled() => None,
                r = timeout(limit, self.transport.acquire(&self.cfg.key, &self.wire_owner, self.cfg.ttl, block, wait)) => {
                    Some(r.unwrap_or_else(|_| Err(CommandError::timeout(limit))))
                }
            };
            let Some(res) = res else {
                // The abandoned ACQUIRE may still have been granted on the server.
                self.release_stray(true).await;
                return Ok(OnceOutcome::Resigned);
            };
            let now = Instant::now();
            // Q10: a quorum grant made by a round that started after a wait is measured from
            // that round's start (never earlier than our own `sent_at`).
            let sent_at = self
                .transport
                .take_round_start()
                .map_or(sent_at, |t| t.max(sent_at));
            self.observe("acquire", &res);
            // Q4 + R17: a round that released partial grants retired its owner; the next
            // round must not send it again (its RELEASE may still execute late).
            if self.transport.take_retired_owner() {
                self.end_reign()?;
            }
            match decide::on_acquire(&self.cfg, sent_at, now, &res) {
                AcquireDecision::Lead {
                    token,
                    deadline,
                    next_renew,
                } => {
                    self.metrics.acquire("granted");
                    let end = self.lead(token, deadline, next_renew, task).await;
                    // Why here, after `lead` returned: the reign's RELEASE (sent by `lead`
                    // once the task stopped) must still carry the reign's own owner.
                    let advanced = self.end_reign();
                    return match end {
                        LeadEnd::Lost(why) => advanced.map(|()| OnceOutcome::Lost(why)),
                        LeadEnd::Resigned => Ok(OnceOutcome::Resigned),
                        LeadEnd::Finished(r) => Ok(OnceOutcome::Finished(r)),
                        LeadEnd::Panicked(m) => Err(LeaseError::TaskPanicked(m)),
                    };
                }
                AcquireDecision::Unconfirmed {
                    token,
                    retry_in,
                    why,
                } => {
                    attempt = 0;
                    unconfirmed = Some(token);
                    // `late`: the reply came after the stop point (typically a BLOCK that waited
                    // longer than the stop window); `unconfirmed`: replicas did not ack.
                    self.metrics.acquire(if why == Unconfirmed::LateReply {
                        "late"
                    } else {
                        "unconfirmed"
                    });
                    // Why two levels: a late reply after a long BLOCK is the normal path of a
                    // hand-over (protocol R7: one extra non-blocking round trip, counted as
                    // result="late"); replicas not acknowledging a grant is worth a warning.
                    if why == Unconfirmed::LateReply {
                        debug!(key = %self.cfg.key, owner = %self.wire_owner, token, reason = why.label(),
                            "grant arrived after its stop point; re-asking without BLOCK");
                    } else {
                        warn!(key = %self.cfg.key, owner = %self.wire_owner, token, reason = why.label(),
                            "grant not confirmed; not leading on it");
                    }
                    self.pause(retry_in).await;
                }
                AcquireDecision::NotGranted => {
                    attempt = 0;
                    unconfirmed = None;
                    self.metrics.acquire("not_granted");
                    // Why: BLOCK answers nil only after its timeout; a much faster nil means
                    // something else is going on, and we must not spin on it.
                    let d =
                        decide::not_granted_pause(&self.cfg, block, sent_at, now, fastrand::f64());
                    if !d.is_zero() {
                        self.pause(d).await;
                    }
                }
                AcquireDecision::Grace(d) => {
                    self.metrics.acquire("grace");
                    info!(key = %self.cfg.key, owner = %self.wire_owner, grace_ms = d.as_millis() as u64,
                        "server in grace period; waiting");
                    self.pause(d).await;
                }
                AcquireDecision::Backoff(_) => {
                    self.metrics.acquire("error");
                    let d = decide::backoff(&self.cfg, attempt, fastrand::f64());
                    attempt = attempt.saturating_add(1);
                    debug!(key = %self.cfg.key, backoff_ms = d.as_millis() as u64, attempt, "acquire failed; backing off");
                    self.pause(d).await;
                }
            }
        }
    }

    /// Sleep `d` or until resign, whichever comes first.
    async fn pause(&self, d: Duration) {
        tokio::select! {
            _ = self.resign.cancelled() => {}
            _ = sleep(d) => {}
        }
    }

    /// Count errors; log when Redis becomes unreachable and when it is back.
    fn observe<V>(&mut self, op: &'static str, res: &Result<V, CommandError>) {
        let up = match res {
            Ok(_) => true,
            Err(e) => {
                self.metrics.redis_error(op, e.kind.label());
                // GRACE has its own log line; unreachability is logged on the transition.
                if !e.kind.is_unreachable() && !matches!(e.kind, crate::error::ErrorKind::Grace(_))
                {
                    warn!(key = %self.cfg.key, owner = %self.wire_owner, op, error = %e, "redis error");
                }
                !e.kind.is_unreachable()
            }
        };
        if self.redis_up != Some(up) {
            match (up, res) {
                (true, _) if self.redis_up == Some(false) => {
                    info!(key = %self.cfg.key, owner = %self.wire_owner, "redis reachable again")
                }
                (false, Err(e)) => {
                    warn!(key = %self.cfg.key, owner = %self.wire_owner, op, error = %e, "redis unreachable")
                }
                _ => {}
            }
            self.redis_up = Some(up);
            self.metrics.redis_up(up);
        }
    }

    async fn lead<F, Fut, R>(
        &mut self,
        token: u64,
        mut deadline: Instant,
        mut next_renew: Instant,
        task: &mut F,
    ) -> LeadEnd<R>
    where
        F: FnMut(LeaderContext) -> Fut,
        Fut: Future<Output = R> + Send + 'static,
        R: Send + 'static,
    {
        let cancel = CancellationToken::new();
        self.tx.send_replace(Role::Leader { token, deadline });
        self.metrics.leader(token, deadline, "acquired");
        info!(key = %self.cfg.key, owner = %self.wire_owner, token, reason = "acquired",
            lead_ms = deadline.saturating_duration_since(Instant::now()).as_millis() as u64, "became leader");
        let keep = Arc::new(AtomicBool::new(false));
        let ctx = LeaderContext {
            token,
            key: self.cfg.key.clone(),
            owner: self.wire_owner.clone(),
            stop_budget: self.cfg.stop_budget,
            cancel: cancel.clone(),
            leadership: self.tx.subscribe(),
            keep: keep.clone(),
        };
        let mut handle = tokio::spawn(task(ctx));
        let mut finished = None;
        let reason = loop {
            let stop = decide::stop_at(&self.cfg, deadline);
            enum Ev<R> {
                Stop,
                Resign,
                Task(Result<R, tokio::task::JoinError>),
                Renew,
            }
            let ev = tokio::select! {
                biased;
                // Why first: past the stop point nothing else matters, not even a renewal
                // that could still succeed (the task would be running on an unbacked lease).
                _ = sleep_until(stop) => Ev::Stop,
                _ = self.resign.cancelled() => Ev::Resign,
                r = &mut handle => Ev::Task(r),
                _ = sleep_until(next_renew) => Ev::Renew,
            };
            match ev {
                Ev::Stop => break StepDownReason::DeadlinePassed,
                Ev::Resign => break StepDownReason::Resigned,
                Ev::Task(r) => {
                    finished = Some(r);
                    break StepDownReason::TaskExited;
                }
                Ev::Renew => {}
            }
            let sent_at = Instant::now();
            // Why: this may be the first instruction after a long pause (SIGSTOP, GC, VM
            // freeze); re-check the clock before trusting the leadership we think we have.
            if decide::must_stop(&self.cfg, deadline, sent_at) {
                break StepDownReason::DeadlinePassed;
            }
            let limit = decide::op_limit(&self.cfg, None);
            let wait = decide::wait_for(&self.cfg);
            enum RenewEv {
                Stop,
                Resign,
                Reply(Result<crate::transport::Replicated<bool>, CommandError>),
            }
            let ev = tokio::select! {
                biased;
                _ = sleep_until(stop) => RenewEv::Stop,
                _ = self.resign.cancelled() => RenewEv::Resign,
                r = timeout(limit, self.transport.renew(&self.cfg.key, &self.wire_owner, token, self.cfg.ttl, wait)) => {
                    RenewEv::Reply(r.unwrap_or_else(|_| Err(CommandError::timeout(limit))))
                }
            };
            let res = match ev {
                RenewEv::Stop => break StepDownReason::DeadlinePassed,
                RenewEv::Resign => break StepDownReason::Resigned,
                RenewEv::Reply(r) => r,
            };
            let now = Instant::now();
            self.observe("renew", &res);
            match decide::on_renew(&self.cfg, deadline, sent_at, now, &res) {
                RenewDecision::Renewed {
                    deadline: d,
                    next_renew: n,
                } => {
                    self.metrics.renew("renewed", now - sent_at);
                    deadline = d;
                    next_renew = n;
                    self.tx.send_replace(Role::Leader { token, deadline });
                    self.metrics.deadline(Some(deadline));
                }
                RenewDecision::StepDown(r) => {
                    self.metrics.renew(
                        if r == StepDownReason::RenewRejected {
                            "rejected"
                        } else {
                            "error"
                        },
                        now - sent_at,
                    );
                    break r;
                }
                RenewDecision::Retry { at, why } => {
                    self.metrics.renew(
                        if why == RetryWhy::ReplicasNotAcked {
                            "unconfirmed"
                        } else {
                            "error"
                        },
                        now - sent_at,
                    );
                    debug!(key = %self.cfg.key, token, reason = why.label(), "renewal did not count; retrying");
                    next_renew = at;
                }
            }
        };

        // Step down. Why publish Follower before the task has stopped: nobody (observers, the
        // task's own `is_leader()` checks) may believe we lead past this point.
        self.tx.send_replace(Role::Follower);
        cancel.cancel();
        self.metrics.follower(reason.label());
        match reason {
            StepDownReason::RenewRejected | StepDownReason::DeadlinePassed => {
                warn!(key = %self.cfg.key, owner = %self.wire_owner, token, reason = reason.label(), "lost leadership")
            }
            _ => {
                info!(key = %self.cfg.key, owner = %self.wire_owner, token, reason = reason.label(), "stepping down")
            }
        }
        let outcome = match finished {
            Some(r) => Some(r),
            // The task was told at `deadline - stop_budget`; give it until the deadline.
            None => match timeout_at(deadline.max(Instant::now()), &mut handle).await {
                Ok(r) => Some(r),
                Err(_) => {
                    handle.abort();
                    self.metrics.task_overrun();
                    // Why wait for the abort: `abort()` only asks; the future is dropped at its
                    // next await point, and code that blocks the thread (or a sub-task it
                    // spawned) goes on until then. R13: release only once the forced stop is
                    // confirmed. Bounded by the margin: past it the lease is nearly over on
                    // the server anyway, and an unconfirmed stop keeps it until expiry.
                    let confirm = self.cfg.margin.max(Duration::from_millis(10));
                    if timeout(confirm, &mut handle).await.is_err() {
                        keep.store(true, Ordering::SeqCst);
                        error!(key = %self.cfg.key, owner = %self.wire_owner, token,
                            "leader task still running at the local deadline and did not stop when aborted; not releasing (the lease ends on the server's expiry)");
                    } else {
                        error!(key = %self.cfg.key, owner = %self.wire_owner, token,
                            "leader task still running at the local deadline; aborted (it ignores cancellation)");
                    }
                    None
                }
            },
        };
        // Why release only now: the lease must stay ours until our task has stopped,
        // otherwise the next leader could start while we still work. After a rejected
        // renewal a single server does not hold it for us any more; a quorum transport may
        // still hold a minority of nodes, freed now so the next leader need not wait.
        if keep.load(Ordering::SeqCst) {
            warn!(key = %self.cfg.key, owner = %self.wire_owner, token,
                "not releasing: the task's work may still run; the lease ends on the server's expiry");
        } else if reason.release_after() || self.transport.holds_after_rejection() {
            self.release(token).await;
        }
        match (reason, outcome) {
            (StepDownReason::TaskExited, Some(Ok(r))) => LeadEnd::Finished(r),
            (StepDownReason::TaskExited, Some(Err(e))) => LeadEnd::Panicked(e.to_string()),
            (StepDownReason::Resigned, _) => LeadEnd::Resigned,
            (r, _) => LeadEnd::Lost(r),
        }
    }

    /// Best-effort `LEASE.RELEASE` (bounded by `op_timeout`). If it fails the lease simply
    /// expires on the server.
    async fn release(&mut self, token: u64) {
        let limit = self.cfg.op_timeout;
        let r = timeout(
            limit,
            self.transport
                .release(&self.cfg.key, &self.wire_owner, token),
        )
        .await
        .unwrap_or_else(|_| Err(CommandError::timeout(limit)));
        self.observe("release", &r);
        match r {
            Ok(released) => {
                info!(key = %self.cfg.key, owner = %self.wire_owner, token, released, "released lease")
            }
            Err(e) => warn!(key = %self.cfg.key, owner = %self.wire_owner, token, error = %e,
                "release failed; the lease will expire on the server"),
        }
    }

    /// After resigning as a follower: an abandoned ACQUIRE may have been granted after all
    /// (or we held an unconfirmed grant). Look, and release it if it is ours.
    async fn release_stray(&mut self, maybe_granted: bool) {
        if !maybe_granted {
            return;
        }
        let limit = self.cfg.op_timeout;
        let r = timeout(limit, self.transport.get(&self.cfg.key))
            .await
            .unwrap_or_else(|_| Err(CommandError::timeout(limit)));
        if let Ok(Some(info)) = r {
            if info.owner == self.wire_owner {
                self.release(info.token).await;
            }
        }
    }
}
