//! `lease-run`: run a command only while holding a redis-lease lease (like `consul lock` /
//! `etcdctl lock`, without their known failures). See `--help` and docs/operations.md.

mod contain;
mod http;
mod security;
mod sys;
mod watchdog;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use nix::sys::signal::Signal;
use redis_lease_client::{
    Elector, ElectorConfig, LeaderContext, Nodes, QuorumControl, RedisTransport, Role, RunOutcome,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::{error, info, warn};

/// Exit codes (also in docs/operations.md).
const EXIT_INTERNAL: i32 = 1;
const EXIT_USAGE: i32 = 2;
const EXIT_LOST: i32 = 75;

const AFTER_HELP: &str = "\
CMD runs only while this process holds the lease KEY, with LEASE_TOKEN (fencing token),
LEASE_KEY and LEASE_OWNER in its environment and stdin from /dev/null. When leadership ends,
CMD and everything it started get SIGTERM at `deadline - stop-budget` and SIGKILL shortly
before the local deadline. A watchdog process (named lease-watchdog, so `killall lease-run`
does not reach it) enforces that even when lease-run itself is paused or killed.

What is contained (--containment):
  pidns      CMD runs under a small init (lease-init) as PID 1 of its own PID namespace.
             No descendant can leave it, whatever its process group or session (setsid,
             start_new_session, setpgid, daemonizers); the kernel kills all of it when the
             watchdog dies, even if both lease-run processes are SIGKILLed. Needs
             CAP_SYS_ADMIN (root). CMD sees namespace PIDs ($$ is small).
  subreaper  The watchdog is a child subreaper: orphaned descendants come back to it, it
             signals the whole tree under it and exits only when all of it is gone. Keeps
             host PIDs. Escapes only if the watchdog itself is SIGKILLed: then lease-run
             does not release the lease (it expires on the server).
  auto       pidns where the system allows it, else subreaper (the default; the log line
             `command starting` names the one in force).
When lease-run cannot confirm that every process of CMD is gone it does not release the lease:
the lease then ends on the server's own expiry, shortly after the local deadline.

Exit codes:
  N        CMD exited by itself with code N (128+S if killed by signal S); lease released
  75       leadership was lost (CMD was stopped) and --restart was not given (--lost-exit-code
           changes it, for a CMD that exits 75 itself)
  130/143  lease-run got SIGINT/SIGTERM (forwarded to CMD); CMD stopped, lease released
  126/127  CMD could not be executed / was not found (126 also: --containment pidns refused)
  2        usage or configuration error
  1        internal error

With --restart, lease-run never exits on its own: after CMD exits or leadership is lost it
releases and campaigns again (after --restart-delay).";

#[derive(Parser, Debug)]
#[command(name = "lease-run", version, about = "Run a command only while holding a redis-lease lease", after_help = AFTER_HELP)]
struct Cli {
    /// Redis URL. Repeat it (3 or 5 independent primaries) for quorum mode (docs/quorum.md).
    #[arg(long, env = "LEASE_REDIS", default_value = "redis://127.0.0.1:6379/")]
    redis: Vec<String>,
    /// PEM CA certificate(s) that sign the server's certificate (rediss:// URLs)
    /// [default: the system trust store].
    #[arg(long, env = "LEASE_TLS_CA_CERT_FILE")]
    tls_ca_cert_file: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (with --tls-key-file).
    #[arg(long, env = "LEASE_TLS_CERT_FILE", requires = "tls_key_file")]
    tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file.
    #[arg(long, env = "LEASE_TLS_KEY_FILE", requires = "tls_cert_file")]
    tls_key_file: Option<PathBuf>,
    /// ACL user name (instead of in the URL).
    #[arg(long, env = "LEASE_REDIS_USERNAME")]
    redis_username: Option<String>,
    /// File holding the Redis password (one line). Or set LEASE_REDIS_PASSWORD. Never on the
    /// command line; a password in the URL works but shows in `ps`.
    #[arg(long, env = "LEASE_REDIS_PASSWORD_FILE")]
    redis_password_file: Option<PathBuf>,
    /// Find the primary through these Sentinels (repeat, or comma-separated) instead of
    /// --redis; follows failovers. Same as --redis redis+sentinel://H:P,H:P/NAME.
    #[arg(
        long,
        value_name = "HOST:PORT",
        env = "LEASE_SENTINEL",
        value_delimiter = ',',
        requires = "master_name"
    )]
    sentinel: Vec<String>,
    /// Sentinel's name of the primary (with --sentinel).
    #[arg(
        long,
        value_name = "NAME",
        env = "LEASE_MASTER_NAME",
        requires = "sentinel"
    )]
    master_name: Option<String>,
    /// Lease key.
    #[arg(
        long,
        required_unless_present = "print_membership_id",
        default_value = ""
    )]
    key: String,
    /// Print the membership id of the --redis node list and exit (quorum mode: the ids
    /// `LEASE.MEMBERSHIP key old new` takes when the node set changes, docs/quorum.md §4.1).
    #[arg(long)]
    print_membership_id: bool,
    /// Lease TTL (e.g. 10s, 500ms).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    ttl: Duration,
    /// Renew interval [default: ttl/3].
    #[arg(long, value_parser = humantime::parse_duration)]
    renew_interval: Option<Duration>,
    /// How long before the local deadline CMD gets SIGTERM [default: ttl/5].
    #[arg(long, value_parser = humantime::parse_duration)]
    stop_budget: Option<Duration>,
    /// On SIGINT/SIGTERM/resign: SIGKILL this long after SIGTERM [default: most of
    /// stop-budget]. Never later than shortly before the local deadline.
    #[arg(long, value_parser = humantime::parse_duration)]
    kill_after: Option<Duration>,
    /// Assumed maximum clock-rate difference to the Redis server.
    #[arg(long, default_value_t = 0.01)]
    drift: f64,
    /// Safety margin subtracted from the local deadline [default: min(ttl/100, 50ms)].
    #[arg(long, value_parser = humantime::parse_duration)]
    margin: Option<Duration>,
    /// Owner id base, 1..=239 bytes [default: host-pid-random]; each reign sends
    /// `BASE#N` (protocol R17), which CMD gets as LEASE_OWNER.
    #[arg(long)]
    owner: Option<String>,
    /// Require this many replicas to acknowledge grants and renewals (WAIT).
    #[arg(long, default_value_t = 0)]
    min_replicas: u32,
    /// WAIT timeout [default: ttl/10]. Only with --min-replicas above 0; ignored otherwise
    /// (no WAIT is sent).
    #[arg(long, value_parser = humantime::parse_duration)]
    wait_timeout: Option<Duration>,
    /// Followers wait in LEASE.ACQUIRE ... BLOCK for this long per call.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    block_timeout: Duration,
    /// Reconnect backoff cap (full jitter between 0 and the capped exponential). The backoff
    /// starts at 50 ms, or at this cap when it is below 50 ms.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    backoff_max: Duration,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9464).
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
    /// Campaign again after CMD exits or leadership is lost, instead of exiting.
    #[arg(long)]
    restart: bool,
    /// Pause before campaigning again with --restart.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    restart_delay: Duration,
    /// How every process CMD starts is kept from outliving the lease (see below).
    #[arg(long, value_enum, default_value = "auto")]
    containment: contain::Wanted,
    /// Exit code when leadership was lost (default 75, EX_TEMPFAIL).
    #[arg(long, default_value_t = EXIT_LOST)]
    lost_exit_code: i32,
    /// Command and arguments.
    #[arg(
        trailing_var_arg = true,
        required_unless_present = "print_membership_id",
        num_args = 1..,
        value_name = "CMD"
    )]
    cmd: Vec<OsString>,
}

/// State shared between the signal handling in `main` and the leader task.
#[derive(Default)]
struct Shared {
    /// Process group of the running CMD (0 = none).
    pgid: AtomicI32,
    /// A shutdown (signal) is in progress: a cancelled task is not a lost lease.
    stopping: AtomicBool,
    /// Leadership was lost while CMD ran.
    lost: AtomicBool,
    /// Signal to stop CMD with (the operator's, forwarded); 0 = SIGTERM.
    forward_sig: AtomicI32,
    /// `--restart`: a lost lease is not the end.
    restart: bool,
    lost_notify: Notify,
    /// Pid of the current watchdog (0 = none): the PID 1 reaper leaves it to tokio.
    watchdog: AtomicI32,
    /// Containment the watchdog reported: 0 unknown, 1 pidns, 2 subreaper.
    mode: AtomicU8,
}

/// How the leader task ended.
#[derive(Debug)]
enum ChildEnd {
    /// CMD exited by itself while we led: its exit code.
    Exited(i32),
    /// We (or the watchdog, at the deadline) stopped it.
    Stopped,
    /// Not started (a stop was already under way).
    Skipped,
}

/// Timing of the two kill steps relative to a deadline.
#[derive(Clone, Copy, Debug)]
struct KillPlan {
    stop_budget: Duration,
    /// SIGKILL this long before the local deadline.
    kill_margin: Duration,
    /// After a graceful SIGTERM (signal/resign): SIGKILL this much later.
    kill_after: Duration,
}

impl KillPlan {
    /// Watchdog schedule for a deadline. Why the watchdog's SIGTERM is a little *after* the
    /// elector's stop point: it is the backstop for a paused or dead elector, and must not
    /// race a healthy elector that has just renewed (its new schedule is on the way).
    fn schedule(&self, deadline: Instant) -> (u64, u64) {
        let stop = deadline.checked_sub(self.stop_budget).unwrap_or(deadline);
        let slack = ((self.stop_budget.saturating_sub(self.kill_margin)) / 4)
            .min(Duration::from_millis(50));
        let kill = deadline.checked_sub(self.kill_margin).unwrap_or(deadline);
        (sys::mono_ns_of(stop + slack), sys::mono_ns_of(kill))
    }
}

fn main() {
    let mut args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == watchdog::ARG) {
        watchdog::main(args.split_off(2));
    }
    if args.get(1).is_some_and(|a| a == contain::INIT_ARG) {
        contain::init_main(args.split_off(2));
    }
    let mut cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            std::process::exit(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    if let (false, Some(name)) = (cli.sentinel.is_empty(), &cli.master_name) {
        cli.redis = vec![redis_lease_client::sentinel::url(&cli.sentinel, name)];
    }
    if cli.print_membership_id {
        match redis_lease_client::membership_id_of(&cli.redis) {
            Ok(id) => {
                println!("{id}");
                std::process::exit(0);
            }
            Err(e) => {
                eprintln!("lease-run: {e}");
                std::process::exit(EXIT_USAGE);
            }
        }
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    // Why current_thread: the watchdog is spawned from this (main) thread, and all timers
    // and signals are handled on it; nothing here needs parallelism.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lease-run: cannot start runtime: {e}");
            std::process::exit(EXIT_INTERNAL);
        }
    };
    let code = rt.block_on(run(cli));
    std::process::exit(code);
}

fn config(cli: &Cli) -> ElectorConfig {
    let mut c = ElectorConfig::new(cli.redis[0].clone(), cli.key.clone(), cli.ttl)
        .with_drift(cli.drift)
        .with_block_timeout(cli.block_timeout)
        .with_backoff(
            Duration::from_millis(50).min(cli.backoff_max),
            cli.backoff_max,
        );
    if let Some(d) = cli.renew_interval {
        c = c.with_renew_interval(d);
    }
    if let Some(d) = cli.stop_budget {
        c = c.with_stop_budget(d);
    }
    if let Some(d) = cli.margin {
        c = c.with_margin(d);
    }
    if let Some(o) = &cli.owner {
        c = c.with_owner(o.clone());
    }
    if cli.min_replicas > 0 {
        let w = cli.wait_timeout.unwrap_or(cli.ttl / 10);
        c = c.with_min_replicas(cli.min_replicas, w);
    }
    c
}

async fn run(cli: Cli) -> i32 {
    let cfg = config(&cli);
    let kill_margin = (cfg.stop_budget / 4).min(Duration::from_millis(100));
    let plan = KillPlan {
        stop_budget: cfg.stop_budget,
        kill_margin,
        kill_after: cli
            .kill_after
            .unwrap_or(cfg.stop_budget.saturating_sub(kill_margin)),
    };
    let opts = security::connect_options(security::Flags {
        ca_cert_file: cli.tls_ca_cert_file.clone(),
        cert_file: cli.tls_cert_file.clone(),
        key_file: cli.tls_key_file.clone(),
        username: cli.redis_username.clone(),
        password_file: cli.redis_password_file.clone(),
    });
    // The connect timeout every transport uses.
    let connect_timeout = redis_lease_client::decide::connect_timeout(&cfg);
    let elector = opts.and_then(|o| {
        if cli.redis.len() > 1 {
            // Quorum mode (docs/quorum.md): the same TLS files and credentials on every node.
            Elector::with_nodes_options(cfg, &cli.redis, QuorumControl::Correct, &o)
                .map_err(|e| e.to_string())
        } else {
            RedisTransport::with_options(&cli.redis[0], &o, connect_timeout)
                .and_then(|t| Elector::with_transport(cfg, Nodes::One(t)))
                .map_err(|e| e.to_string())
        }
    });
    let mut elector = match elector {
        Ok(e) => e,
        Err(e) => {
            eprintln!("lease-run: {e}");
            return EXIT_USAGE;
        }
    };
    if let Some(addr) = cli.metrics_addr {
        match http::bind(addr).await {
            Ok(l) => {
                tokio::spawn(http::serve(l, elector.metrics()));
            }
            Err(e) => {
                eprintln!("lease-run: metrics address {addr}: {e}");
                return EXIT_USAGE;
            }
        }
    }
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("lease-run: cannot find own executable: {e}");
            return EXIT_INTERNAL;
        }
    };
    let (mut sigint, mut sigterm) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(a), Ok(b)) => (a, b),
        _ => {
            eprintln!("lease-run: cannot install signal handlers");
            return EXIT_INTERNAL;
        }
    };
    let shared = Arc::new(Shared {
        restart: cli.restart,
        ..Shared::default()
    });
    if std::process::id() == 1 {
        // As a container's entrypoint we are PID 1: orphans of the watchdog's line (an init
        // or CMD whose watchdog was killed) are re-parented to us and must be reaped.
        tokio::spawn(reap_orphans(shared.clone()));
    }
    let handle = elector.handle();
    let cmd = Arc::new(cli.cmd.clone());
    let containment = cli.containment;
    let mut got_signal: Option<i32> = None;
    loop {
        let task = {
            let shared = shared.clone();
            let cmd = cmd.clone();
            let exe = exe.clone();
            move |ctx: LeaderContext| {
                leader_task(
                    ctx,
                    exe.clone(),
                    cmd.clone(),
                    plan,
                    shared.clone(),
                    containment,
                )
            }
        };
        let fut = elector.run(task);
        tokio::pin!(fut);
        let outcome = loop {
            let sig = tokio::select! {
                r = &mut fut => break r,
                _ = sigint.recv() => Signal::SIGINT,
                _ = sigterm.recv() => Signal::SIGTERM,
                _ = shared.lost_notify.notified(), if !cli.restart => {
                    info!("leadership lost; exiting (no --restart)");
                    shared.stopping.store(true, Ordering::SeqCst);
                    handle.resign();
                    continue;
                }
            };
            let pgid = shared.pgid.load(Ordering::SeqCst);
            if got_signal.is_some() {
                // Second signal: no more patience.
                warn!(signal = %sig, "second signal; killing the command now");
                sys::killpg(pgid, Signal::SIGKILL);
                continue;
            }
            info!(signal = %sig, "signal received; stopping the command and releasing the lease");
            got_signal = Some(sig as i32);
            // Forward the signal itself (CMD sees what the operator sent): the leader task
            // hands it to the watchdog as the stop signal, which knows CMD's group even if we
            // have not heard its pid yet.
            shared.forward_sig.store(sig as i32, Ordering::SeqCst);
            shared.stopping.store(true, Ordering::SeqCst);
            handle.resign();
        };
        match outcome {
            Ok(RunOutcome::TaskFinished(ChildEnd::Exited(code))) if got_signal.is_none() => {
                if cli.restart {
                    info!(code, "command exited; campaigning again (--restart)");
                    tokio::select! {
                        _ = tokio::time::sleep(cli.restart_delay) => continue,
                        _ = sigint.recv() => return 128 + Signal::SIGINT as i32,
                        _ = sigterm.recv() => return 128 + Signal::SIGTERM as i32,
                    }
                }
                return code;
            }
            Ok(RunOutcome::TaskFinished(_)) | Ok(RunOutcome::Resigned) => {
                if let Some(s) = got_signal {
                    return 128 + s;
                }
                if shared.lost.load(Ordering::SeqCst) {
                    return cli.lost_exit_code;
                }
                // With --restart a Skipped start is impossible (nothing sets `stopping`).
                return EXIT_INTERNAL;
            }
            Err(e) => {
                error!(error = %e, "election loop failed");
                return EXIT_INTERNAL;
            }
        }
    }
}

/// Runs while we lead: start CMD under the watchdog, keep the watchdog's deadline current,
/// stop CMD when cancelled.
async fn leader_task(
    ctx: LeaderContext,
    exe: std::path::PathBuf,
    cmd: Arc<Vec<OsString>>,
    plan: KillPlan,
    shared: Arc<Shared>,
    containment: contain::Wanted,
) -> ChildEnd {
    // Why: once a stop is decided (signal, or a loss without --restart), a new reign that
    // raced in must not start CMD again.
    if shared.stopping.load(Ordering::SeqCst)
        || (shared.lost.load(Ordering::SeqCst) && !shared.restart)
    {
        return ChildEnd::Skipped;
    }
    let Some(deadline) = ctx.deadline() else {
        return ChildEnd::Skipped;
    };
    let (term_ns, kill_ns) = plan.schedule(deadline);
    // Control channel: a socket pair, one end becomes the watchdog's fd 0. Why not pipes on
    // stdin/stdout: CMD inherits the watchdog's stdout, and must write to ours, not into
    // the control channel.
    let (ours, theirs) = match std::os::unix::net::UnixStream::pair() {
        Ok(p) => p,
        Err(e) => {
            error!(error = %e, "cannot create the watchdog control socket");
            return ChildEnd::Exited(EXIT_INTERNAL);
        }
    };
    let ours = match ours
        .set_nonblocking(true)
        .and_then(|_| tokio::net::UnixStream::from_std(ours))
    {
        Ok(s) => s,
        Err(e) => {
            error!(error = %e, "cannot set up the watchdog control socket");
            return ChildEnd::Exited(EXIT_INTERNAL);
        }
    };
    let mut w = {
        let mut command = tokio::process::Command::new(&exe);
        command
            .arg0("lease-watchdog")
            .arg(watchdog::ARG)
            .arg(term_ns.to_string())
            .arg(kill_ns.to_string())
            .arg(containment.arg())
            .arg("--")
            .args(cmd.iter())
            .env("LEASE_TOKEN", ctx.token().to_string())
            .env("LEASE_KEY", ctx.key())
            .env("LEASE_OWNER", ctx.owner())
            // The elector's secret is not CMD's business (CMD gets its own if it needs Redis).
            .env_remove(security::PASSWORD_ENV)
            .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
                theirs,
            )))
            // Own process group: terminal signals reach lease-run (which forwards them), and
            // a stop of lease-run's group does not stop the watchdog.
            .process_group(0)
            .kill_on_drop(true);
        // `command` (holding the watchdog's end of the socket) is dropped at the end of this
        // block, so the watchdog's death shows up here as end of file, and ours there.
        match command.spawn() {
            Ok(w) => w,
            Err(e) => {
                error!(error = %e, "cannot start the watchdog");
                return ChildEnd::Exited(EXIT_INTERNAL);
            }
        }
    };
    let wd_pid = w.id().map_or(0, |p| p as i32);
    shared.watchdog.store(wd_pid, Ordering::SeqCst);
    // Runs when this task ends in any way, including the elector aborting it at the local
    // deadline (a watchdog stuck behind a command in uninterruptible sleep): the cleanup
    // must not depend on reaching the end of this function.
    let mut guard = StopGuard {
        watchdog: wd_pid,
        shared: shared.clone(),
        keep: ctx.keep_lease_flag(),
        armed: true,
    };
    let (from_w, mut to_w) = ours.into_split();
    let mut lines = BufReader::new(from_w).lines();
    let mut leadership = ctx.subscribe();
    let mut stopping = false;
    let mut fired = false;
    let mut lines_open = true;
    let mut cur_deadline = deadline;
    let token = ctx.token();
    info!(token, "command starting");
    let status = loop {
        tokio::select! {
            st = w.wait() => break st,
            line = lines.next_line(), if lines_open => match line {
                Ok(Some(l)) => on_line(&l, &shared, &mut fired),
                _ => lines_open = false,
            },
            r = leadership.changed() => {
                if r.is_err() {
                    continue;
                }
                let now_leading = *leadership.borrow_and_update();
                if let Role::Leader { token: t, deadline } = now_leading {
                    if t == token && !stopping {
                        cur_deadline = deadline;
                        let (term_ns, kill_ns) = plan.schedule(deadline);
                        let _ = to_w.write_all(format!("D {term_ns} {kill_ns}\n").as_bytes()).await;
                        let _ = to_w.flush().await;
                    }
                }
            },
            _ = ctx.cancelled(), if !stopping => {
                stopping = true;
                if !shared.stopping.load(Ordering::SeqCst) {
                    shared.lost.store(true, Ordering::SeqCst);
                    shared.lost_notify.notify_one();
                }
                let now = Instant::now();
                // SIGKILL after kill_after, but in any case before the (last known) deadline.
                let kill_at = (now + plan.kill_after).min(cur_deadline.checked_sub(plan.kill_margin).unwrap_or(now));
                let sig = match shared.forward_sig.load(Ordering::SeqCst) {
                    0 => Signal::SIGTERM as i32,
                    s => s,
                };
                info!(token, signal = sig, "stopping the command (signal to its group)");
                let _ = to_w.write_all(format!("S {} {sig}\n", sys::mono_ns_of(kill_at)).as_bytes()).await;
                let _ = to_w.flush().await;
            },
        }
    };
    // Read what the watchdog said before it exited (`fired ...`).
    while lines_open {
        match tokio::time::timeout(Duration::from_millis(100), lines.next_line()).await {
            Ok(Ok(Some(l))) => on_line(&l, &shared, &mut fired),
            _ => lines_open = false,
        }
    }
    // Why: the watchdog normally leaves nothing behind, but if it was killed itself (kill -9
    // by someone), CMD died of its death signal while CMD's own children may live on in its
    // group. Clear the group before reporting anything.
    let killed_watchdog =
        matches!(&status, Ok(st) if std::os::unix::process::ExitStatusExt::signal(st).is_some());
    guard.armed = false;
    let pgid = shared.pgid.swap(0, Ordering::SeqCst);
    sys::killpg(pgid, Signal::SIGKILL);
    shared.watchdog.store(0, Ordering::SeqCst);
    // A watchdog that exited by itself has seen every process of CMD end (that is when it
    // exits). One that was killed could not: confirm, or keep the lease until it expires.
    if killed_watchdog && !confirm_gone(&shared, pgid) {
        ctx.keep_lease();
        warn!(token, "cannot confirm that every process of the command is gone; not releasing the lease (it expires on the server)");
    }
    let code = match status {
        Ok(st) => watchdog::exit_code(st),
        Err(_) => EXIT_INTERNAL,
    };
    if stopping || fired || ctx.is_cancelled() || !ctx.is_leader() {
        info!(token, code, "command stopped");
        if !shared.stopping.load(Ordering::SeqCst) && !shared.lost.swap(true, Ordering::SeqCst) {
            shared.lost_notify.notify_one();
        }
        return ChildEnd::Stopped;
    }
    info!(token, code, "command exited by itself");
    ChildEnd::Exited(code)
}

/// Ends what the watchdog contained when the leader task is dropped before it finished
/// (aborted at the local deadline): SIGKILL the watchdog and CMD's group (pidns: the init,
/// whose death kills its namespace), then confirm it, or veto the release.
struct StopGuard {
    watchdog: i32,
    shared: Arc<Shared>,
    keep: Arc<AtomicBool>,
    armed: bool,
}

impl Drop for StopGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if self.watchdog > 1 {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.watchdog), Signal::SIGKILL);
        }
        let pgid = self.shared.pgid.swap(0, Ordering::SeqCst);
        sys::killpg(pgid, Signal::SIGKILL);
        if !confirm_gone(&self.shared, pgid) {
            self.keep.store(true, Ordering::SeqCst);
            error!("the command could not be confirmed stopped at the local deadline; not releasing the lease (it expires on the server)");
        }
    }
}

/// After the watchdog died: is every process of the command gone? Under pidns the group of
/// lease-init (`pid`) holds the namespace's init, which exits only after the kernel has killed
/// its namespace, so "no live member of that group" means yes.
/// Under subreaper, descendants that left CMD's group are unknown once the watchdog is gone:
/// never confirmed. Bounded wait (a SIGKILLed process ends within milliseconds unless it
/// sits in uninterruptible sleep).
fn confirm_gone(shared: &Shared, pid: i32) -> bool {
    if shared.mode.load(Ordering::SeqCst) != 1 {
        return false;
    }
    let end = std::time::Instant::now() + Duration::from_millis(300);
    while contain::group_alive(pid) {
        if std::time::Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}

/// PID 1 only: reap zombies re-parented to us, except the current watchdog (tokio waits for
/// that one itself).
async fn reap_orphans(shared: Arc<Shared>) {
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let wd = shared.watchdog.load(Ordering::SeqCst);
        for pid in contain::zombie_children(1) {
            if pid != wd {
                let _ = nix::sys::wait::waitpid(
                    nix::unistd::Pid::from_raw(pid),
                    Some(nix::sys::wait::WaitPidFlag::WNOHANG),
                );
            }
        }
    }
}

fn on_line(line: &str, shared: &Shared, fired: &mut bool) {
    if let Some(mode) = line.strip_prefix("containment ") {
        let m = match mode.trim() {
            "pidns" => 1,
            "subreaper" => 2,
            _ => 0,
        };
        shared.mode.store(m, Ordering::SeqCst);
        info!(
            containment = mode.trim(),
            "command starting under containment"
        );
    } else if let Some(pid) = line.strip_prefix("pid ") {
        if let Ok(p) = pid.trim().parse::<i32>() {
            shared.pgid.store(p, Ordering::SeqCst);
        }
    } else if line.starts_with("fired ") {
        *fired = true;
        warn!(what = line, "watchdog acted on the deadline");
    }
}
