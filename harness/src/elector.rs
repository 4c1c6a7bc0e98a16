//! One elector process: the client library's election loop, plus the "work" a leader does
//! (write to the protected resource with its token), recorded as a history.
//!
//! # Work loop of a reign (safe mode)
//! ```text
//! grant -> loop { check: ctx.is_leader()?  -> record Check(t)
//!                 prepare (PREP_MS: the window where a pause turns a write stale)
//!                 write(token) to the resource -> record Ack(ok/fenced)
//!                 sleep PERIOD_MS or stop when cancelled }
//! ```
//! The check is the library's "check the deadline after every step" (`is_leader()` reads the
//! monotonic clock, so it is right even after a pause). The prepare step between check and
//! write is deliberate: it is where a GC pause / SIGSTOP lands in real systems, and where only
//! fencing can save the resource.
//!
//! # Unsafe mode (negative control)
//! `ignore-deadline`: the writes run in a detached task that ignores cancellation and the
//! deadline and keeps writing for `LINGER_TTLS` TTLs after the library told it to stop (a
//! worker thread nobody joins). The checker must flag it.
//!
//! `reuse-owner` (negative control of protocol R17, issue 23): the library's loop is
//! unchanged, but every owner it sends loses its `#reign` suffix on the way out
//! ([`ReuseOwner`]), so every reign of the process uses one owner on the wire, as every
//! client did before R17. A new campaign then refreshes a lease the previous reign still
//! holds (same token) and a late RELEASE of that reign frees the new one; under the
//! `late-delivery` fault the checker must flag it.
//!
//! # API (`--api`, docs/conformance.md)
//! `run` (default): the library's `Elector::run`. `oneshot`: `Elector::run_once`, called again
//! after each reign, every grant recorded with its call's number (`call`; the checker's
//! `reigns_per_call` allows one reign per call). `oneshot-twice`, that rule's negative
//! control: `run` (which campaigns again after a lost term) with every reign recorded as call 1.

use crate::args::Args;
use lease_harness::clock::{instant_to_ns, mono_ns};
use lease_harness::history::{ElectorEvent, JsonlWriter};
use lease_harness::resource::{ResourceClient, WriteResult};
use redis_lease_client::{
    CommandError, Elector, ElectorConfig, LeaderContext, LeaseError, LeaseInfo, Nodes, OnceOutcome,
    QuorumControl, QuorumTransport, RedisTransport, Replicated, RunOutcome, Transport, WaitFor,
};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const PREP_MS: u64 = 15;
const PERIOD_MS: u64 = 25;
const LINGER_TTLS: u32 = 3;

#[derive(Clone)]
struct Rec(Arc<Mutex<JsonlWriter>>);

impl Rec {
    fn write(&self, e: ElectorEvent) {
        let mut w = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(err) = w.write(&e) {
            eprintln!("elector: cannot record {e:?}: {err}");
        }
    }
}

#[derive(Clone)]
struct Work {
    id: String,
    resource: String,
    rec: Rec,
    ttl: Duration,
    unsafe_linger: bool,
}

/// The environment variable through which the orchestrator gives every elector of a quorum
/// campaign the membership id of the real node list (docs/conformance.md).
pub const MEMBERSHIP_ENV: &str = "LEASE_HARNESS_MEMBERSHIP_ID";

pub fn main(mut args: Args) -> Result<ExitCode, String> {
    // First: the origin of the clock-rate measurement (deadlines recorded on the real clock
    // under --elector-clock-rate; clock.rs).
    lease_harness::clock::init();
    let id = args.required("--id")?;
    // Several `--redis`: quorum mode over independent primaries (docs/quorum.md).
    let redis = args.repeated("--redis")?;
    if redis.is_empty() {
        return Err("--redis is required".into());
    }
    let control = args
        .value("--quorum-control")?
        .unwrap_or_else(|| "correct".into());
    let control =
        QuorumControl::parse(&control).ok_or(format!("unknown --quorum-control {control}"))?;
    let resource = args.required("--resource")?;
    let out = PathBuf::from(args.required("--out")?);
    let ttl = Duration::from_millis(args.parsed("--ttl-ms", 1000u64)?);
    let key = args
        .value("--key")?
        .unwrap_or_else(|| "chaos:leader".into());
    let mode = args.value("--mode")?.unwrap_or_else(|| "safe".into());
    let api = args.value("--api")?.unwrap_or_else(|| "run".into());
    args.done()?;
    let api = match api.as_str() {
        "run" => Api::Run,
        "oneshot" => Api::OneShot,
        "oneshot-twice" => Api::OneShotTwice,
        a => return Err(format!("unknown --api {a} (run, oneshot, oneshot-twice)")),
    };
    let (unsafe_linger, reuse_owner) = match mode.as_str() {
        "safe" => (false, false),
        "ignore-deadline" => (true, false),
        "reuse-owner" => (false, true),
        m => return Err(format!("unknown --mode {m}")),
    };
    // Library logs (transitions, errors) go to stderr, which the orchestrator keeps per process.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();

    let log = JsonlWriter::create(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let rec = Rec(Arc::new(Mutex::new(log)));
    // The owner starts with our id so that server-side views (LEASE.GET, MONITOR) read back to
    // the slot; the orchestrator itself finds the leader from the histories (leader.rs).
    let owner = format!("{id}-{}-{:08x}", std::process::id(), fastrand::u32(..));
    rec.write(ElectorEvent::Start {
        t: mono_ns(),
        elector: id.clone(),
        pid: std::process::id(),
        owner: owner.clone(),
        mode,
    });

    let cfg = ElectorConfig::new(redis[0].clone(), key, ttl)
        .with_owner(owner)
        // Reconnect backoff capped at one TTL (library default 5 s): the harness measures
        // "Redis back -> next grant", which the cap bounds.
        .with_backoff(Duration::from_millis(50), ttl)
        // Quorum campaigns: every elector uses this one TTL, so the longest lease a restarted
        // or wiped node can have lost is one TTL; that is the quarantine of a node whose
        // identity changed (docs/quorum.md §4.1).
        .with_node_quarantine(ttl);
    // Quorum topologies: each elector reaches the nodes through proxies of its own, so the
    // id computed from its URLs would differ per elector and the first to bind a key would
    // shut the others out; the orchestrator passes the id of the real node list to all.
    let cfg = match std::env::var(MEMBERSHIP_ENV) {
        Ok(id) if !id.is_empty() => cfg.with_membership_id(id),
        _ => cfg,
    };
    let work = Work {
        id,
        resource,
        rec: rec.clone(),
        ttl,
        unsafe_linger,
    };

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let rec_main = rec.clone();
    let why = rt.block_on(async move {
        if reuse_owner {
            let t = ReuseOwner::new(nodes(&cfg, &redis, control).map_err(|e| e.to_string())?);
            let elector = Elector::with_transport(cfg, t).map_err(|e| e.to_string())?;
            Ok::<String, String>(campaign(elector, rec, work, api).await)
        } else {
            let elector =
                Elector::with_nodes_control(cfg, &redis, control).map_err(|e| e.to_string())?;
            Ok(campaign(elector, rec, work, api).await)
        }
    })?;
    rec_main.write(ElectorEvent::Exit { t: mono_ns(), why });
    // Detached unsafe writers must not outlive the process's intent; dropping the runtime
    // cancels them.
    rt.shutdown_timeout(Duration::from_millis(100));
    Ok(ExitCode::SUCCESS)
}

/// Which library API takes the reigns (`--api`).
#[derive(Clone, Copy)]
enum Api {
    Run,
    OneShot,
    OneShotTwice,
}

/// Run the library's loop until resign (SIGTERM) or an error; returns why it ended.
async fn campaign<T: Transport>(mut elector: Elector<T>, rec: Rec, work: Work, api: Api) -> String {
    let handle = elector.handle();
    let rec2 = rec.clone();
    tokio::spawn(async move {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            return;
        };
        term.recv().await;
        rec2.write(ElectorEvent::Resign { t: mono_ns() });
        handle.resign();
    });
    if let Api::OneShot = api {
        // One run_once call per reign until resigned; a lost reign ends a call and the next
        // call campaigns.
        for call in 1u64.. {
            let w = work.clone();
            match elector
                .run_once(move |ctx| async move { w.reign(ctx, Some(call)).await })
                .await
            {
                Ok(OnceOutcome::Lost(_)) => {}
                Ok(OnceOutcome::Resigned) => return "resigned".into(),
                Ok(OnceOutcome::Finished(())) => return "task finished".into(),
                Err(e) => return format!("error: {e}"),
            }
        }
        return "out of call numbers".into();
    }
    let call = match api {
        Api::OneShotTwice => Some(1),
        _ => None,
    };
    let outcome = elector
        .run(move |ctx| {
            let w = work.clone();
            async move { w.reign(ctx, call).await }
        })
        .await;
    match outcome {
        Ok(RunOutcome::Resigned) => "resigned".into(),
        Ok(RunOutcome::TaskFinished(())) => "task finished".into(),
        Err(e) => format!("error: {e}"),
    }
}

/// The transport `Elector::with_nodes_control` would build (one node, or quorum mode).
fn nodes(
    cfg: &ElectorConfig,
    urls: &[String],
    control: QuorumControl,
) -> Result<Nodes, LeaseError> {
    cfg.validate()?;
    match urls {
        [] => Err(LeaseError::Config("no redis url".into())),
        [one] => Ok(Nodes::One(RedisTransport::new(
            one,
            cfg.op_timeout.max(Duration::from_millis(100)),
        )?)),
        many => Ok(Nodes::Quorum(QuorumTransport::new(many, cfg, control)?)),
    }
}

/// `--mode reuse-owner`: sends every command with the base owner (the loop's owner without
/// its `#reign` suffix), i.e. one owner for every reign of the process: the behaviour R17
/// forbids, kept as a negative control. `get` maps the base back to the loop's current
/// owner, so that the loop still recognises (and releases) a stray grant of its own.
struct ReuseOwner<T> {
    inner: T,
    /// The last owner the loop sent (with its suffix).
    last: String,
}

impl<T> ReuseOwner<T> {
    fn new(inner: T) -> Self {
        ReuseOwner {
            inner,
            last: String::new(),
        }
    }
}

fn base_of(owner: &str) -> &str {
    owner.rsplit_once('#').map_or(owner, |(base, _)| base)
}

impl<T: Transport + Sync> Transport for ReuseOwner<T> {
    async fn acquire(
        &mut self,
        key: &str,
        owner: &str,
        ttl: Duration,
        block: Option<Duration>,
        wait: Option<WaitFor>,
    ) -> Result<Replicated<Option<u64>>, CommandError> {
        self.last = owner.to_string();
        self.inner
            .acquire(key, base_of(owner), ttl, block, wait)
            .await
    }

    async fn renew(
        &mut self,
        key: &str,
        owner: &str,
        token: u64,
        ttl: Duration,
        wait: Option<WaitFor>,
    ) -> Result<Replicated<bool>, CommandError> {
        self.inner
            .renew(key, base_of(owner), token, ttl, wait)
            .await
    }

    async fn release(&mut self, key: &str, owner: &str, token: u64) -> Result<bool, CommandError> {
        self.inner.release(key, base_of(owner), token).await
    }

    async fn get(&mut self, key: &str) -> Result<Option<LeaseInfo>, CommandError> {
        let mut r = self.inner.get(key).await;
        if let Ok(Some(info)) = &mut r {
            if info.owner == base_of(&self.last) {
                info.owner = self.last.clone();
            }
        }
        r
    }

    fn holds_after_rejection(&self) -> bool {
        self.inner.holds_after_rejection()
    }

    fn take_retired_owner(&mut self) -> bool {
        self.inner.take_retired_owner()
    }

    fn take_round_start(&mut self) -> Option<tokio::time::Instant> {
        self.inner.take_round_start()
    }
}

impl Work {
    /// One reign's work; `call`: the one-shot call it runs in (recorded on its grant).
    async fn reign(self, ctx: LeaderContext, call: Option<u64>) {
        let token = ctx.token();
        let deadline_ns = |ctx: &LeaderContext| {
            ctx.deadline()
                .map(|d| instant_to_ns(d.into_std()))
                .unwrap_or(0)
        };
        self.rec.write(ElectorEvent::Grant {
            t: mono_ns(),
            token,
            deadline: deadline_ns(&ctx),
            call,
        });
        if self.unsafe_linger {
            // The bug under test: work detached from the lease's lifetime.
            let me = self.clone();
            let c = ctx.clone();
            tokio::spawn(async move { me.unsafe_loop(c).await });
            ctx.cancelled().await;
            return;
        }
        let mut res: Option<ResourceClient> = None;
        let mut seq = 0u64;
        let why = loop {
            // The check: decided here, on the monotonic clock, right before acting.
            if !ctx.is_leader() {
                break "not leader at check";
            }
            seq += 1;
            self.rec.write(ElectorEvent::Check {
                t: mono_ns(),
                token,
                seq,
                deadline: deadline_ns(&ctx),
            });
            tokio::time::sleep(Duration::from_millis(PREP_MS)).await;
            self.write(&mut res, token, seq).await;
            tokio::select! {
                _ = ctx.cancelled() => break "cancelled",
                _ = tokio::time::sleep(Duration::from_millis(PERIOD_MS)) => {}
            }
        };
        self.rec.write(ElectorEvent::Stop {
            t: mono_ns(),
            token,
            why: why.into(),
        });
    }

    async fn unsafe_loop(self, ctx: LeaderContext) {
        let token = ctx.token();
        let mut res: Option<ResourceClient> = None;
        let mut seq = 0u64;
        let mut stop_after: Option<tokio::time::Instant> = None;
        // Bounded: stops LINGER_TTLS after the cancellation it ignores, and after 10 min anyway.
        let hard_stop = tokio::time::Instant::now() + Duration::from_secs(600);
        while tokio::time::Instant::now() < hard_stop {
            if ctx.is_cancelled() && stop_after.is_none() {
                stop_after = Some(tokio::time::Instant::now() + self.ttl * LINGER_TTLS);
            }
            if stop_after.is_some_and(|s| tokio::time::Instant::now() >= s) {
                break;
            }
            seq += 1;
            let d = ctx
                .deadline()
                .map(|d| instant_to_ns(d.into_std()))
                .unwrap_or(0);
            self.rec.write(ElectorEvent::Check {
                t: mono_ns(),
                token,
                seq,
                deadline: d,
            });
            tokio::time::sleep(Duration::from_millis(PREP_MS)).await;
            self.write(&mut res, token, seq).await;
            tokio::time::sleep(Duration::from_millis(PERIOD_MS)).await;
        }
        self.rec.write(ElectorEvent::Stop {
            t: mono_ns(),
            token,
            why: "unsafe linger over".into(),
        });
    }

    /// One write; records the resource's answer. A resource error is recorded as not ok and
    /// the connection is re-made on the next write.
    async fn write(&self, res: &mut Option<ResourceClient>, token: u64, seq: u64) {
        if res.is_none() {
            *res = ResourceClient::connect(&self.resource).await.ok();
        }
        let ok = match res.as_mut() {
            Some(c) => match c.write(token, &self.id, seq).await {
                Ok(WriteResult::Ok) => true,
                Ok(WriteResult::Fenced(_)) => false,
                Err(_) => {
                    *res = None;
                    false
                }
            },
            None => false,
        };
        self.rec.write(ElectorEvent::Ack {
            t: mono_ns(),
            token,
            seq,
            ok,
        });
    }
}
