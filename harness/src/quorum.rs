//! `lease-harness run --topology quorum3|quorum5`: quorum mode (docs/quorum.md) under faults.
//!
//! Per run, all on 127.0.0.1: N independent Redis primaries with the module (AOF `everysec`,
//! no replication between them), the resource process, M elector processes in quorum mode
//! (`lease-harness elector --redis URL0 --redis URL1 ...`), each with its own fault-injecting
//! proxy to every node, so that a fault can cut one elector from some nodes, or one node from
//! every elector. Faults are drawn from the seed; one at a time, each followed by recovery
//! time, so at most a minority of nodes is faulty at any moment (the protocol's assumption).
//! The checker, the history format, the resource and the proxy are the single-primary
//! topology's own (`orchestrate.rs`), unchanged.
//!
//! Node faults: `node-kill` (kill -9, down 1.5..3 TTL, restart with its AOF),
//! `node-restart` (kill -9, data wiped, restart: lost state, grace), `node-restart-aof`
//! (kill -9, restart at once with AOF everysec), `node-partition` (every elector cut from
//! it), `node-pause` (SIGSTOP), `node-clock-jump` (wall clock ±10..120 min under libfaketime),
//! `node-failover` (the node's replica is cut off, in half of the cases the leader resigns
//! meanwhile so that the replica misses a grant and its raise, then the node is killed and
//! the replica promoted; every elector's proxy for that node moves to it; only with
//! `--node-replicas`, which gives every node a replica), `node-split-brain` (the same, but the
//! old node stays up: even electors keep talking to it and odd ones are moved to the
//! promoted replica for 2..3 TTL, then the old node is killed). `--topology quorum1` is the
//! single-primary protocol in this same harness (one URL: the ordinary client), for side by
//! side runs of these faults.
//! Elector faults: `kill`, `pause`, `partition` (cut from every node), `split` (the leader
//! cut from a random majority of nodes), `resign`, `late-delivery` (the leader's RENEW and
//! RELEASE, in a third of the cases its ACQUIRE and RAISE too, held 0.3..0.7 TTL on every
//! node, delivered even after it closed the connection: issue 23).
//!
//! `--elector-mode safe|reuse-owner` is passed to every elector as `--mode` (reuse-owner: the
//! negative control of protocol R17, one owner for every reign).
//!
//! Negative controls (must be caught): `--grace-ms 0` with node restarts; `--quorum-control
//! no-unify` (no raise; with `--skew-ms`, one node's wall clock runs ahead); `--quorum-control
//! minority` (lead on one grant).

use crate::args::Args;
use crate::check_one;
use crate::procs::{
    die_with_parent, faketime_lib, leader_slot, newer_server, shut_down, signal, spawn_resource,
    Proc,
};
use lease_harness::checker::Summary;
use lease_harness::clock::mono_ns;
use lease_harness::history::{JsonlWriter, RunEvent};
use lease_harness::proxy::{Held, Mode, Proxy};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Duration;
use tokio::time::{sleep, Instant};

pub const FAULTS: &[&str] = &[
    "kill",
    "pause",
    "partition",
    "split",
    "resign",
    "node-kill",
    "node-restart",
    "node-restart-aof",
    "node-partition",
    "node-pause",
    "node-clock-jump",
    "node-failover",
    "node-split-brain",
    "late-delivery",
];

const KEY: &str = "chaos:leader";

/// Is this `lease-harness run` invocation for a quorum topology? Looked up without consuming
/// anything, so every other topology reaches `orchestrate::main` untouched.
pub fn wanted(argv: &[String]) -> bool {
    argv.iter().enumerate().any(|(i, a)| {
        a.strip_prefix("--topology=")
            .or_else(|| (a == "--topology").then(|| argv.get(i + 1).map_or("", |s| s.as_str())))
            .is_some_and(|t| t.starts_with("quorum"))
    })
}

#[derive(Clone, Debug)]
struct Config {
    nodes: usize,
    runs: u32,
    electors: u32,
    seconds: u64,
    faults: Vec<String>,
    seed: u64,
    out: PathBuf,
    ttl_ms: u64,
    grace_ms: u64,
    fence: bool,
    module: PathBuf,
    control: String,
    elector_mode: String,
    skew_ms: u64,
    node_replicas: bool,
    server_bin: String,
    faketime: Option<(PathBuf, PathBuf)>,
    /// `--elector-cmd`: another language's elector (docs/conformance.md, "Quorum
    /// topologies"), given `--redis URL` once per node in node order; `None` = our own
    /// `elector` subcommand.
    elector_cmd: Option<Vec<String>>,
}

pub fn main(mut args: Args) -> Result<ExitCode, String> {
    let topology = args.required("--topology")?;
    let nodes: usize = match topology.as_str() {
        "quorum1" => 1,
        "quorum3" => 3,
        "quorum5" => 5,
        t => return Err(format!("unknown --topology {t} (quorum1|quorum3|quorum5)")),
    };
    let runs = args.parsed("--runs", 1u32)?;
    let electors = args.parsed("--electors", 3u32)?;
    let seconds = args.parsed("--seconds", 20u64)?;
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
    let fence = !args.flag("--no-fence");
    let control = args
        .value("--quorum-control")?
        .unwrap_or_else(|| "correct".into());
    let skew_ms = args.parsed("--skew-ms", 0u64)?;
    let elector_mode = args
        .value("--elector-mode")?
        .unwrap_or_else(|| "safe".into());
    let node_replicas = args.flag("--node-replicas");
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
        None => {
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let dir = exe.parent().ok_or("no exe dir")?.to_path_buf();
            std::env::var("REDIS_LEASE_MODULE")
                .map(PathBuf::from)
                .unwrap_or_else(|_| dir.join("libredis_lease.so"))
        }
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
            "unknown quorum fault {bad}; known: {} none",
            FAULTS.join(" ")
        ));
    }
    if !["correct", "no-unify", "minority"].contains(&control.as_str()) {
        return Err(format!("unknown --quorum-control {control}"));
    }
    if elector_cmd.is_some() && control != "correct" {
        // Why refused: the convention gives an external elector no `--quorum-control`, so a
        // negative control would silently run the correct protocol and "pass".
        return Err(format!(
            "--quorum-control {control} needs the built-in elector (no --elector-cmd)"
        ));
    }
    if !["safe", "reuse-owner"].contains(&elector_mode.as_str()) {
        return Err(format!(
            "unknown --elector-mode {elector_mode} (quorum: safe, reuse-owner)"
        ));
    }
    if !(1..=20).contains(&electors) || runs == 0 || seconds < 5 || ttl_ms < 100 {
        return Err("need 1..=20 electors, runs >= 1, seconds >= 5, ttl-ms >= 100".into());
    }
    let module = std::fs::canonicalize(&module).unwrap_or(module);
    if !module.exists() {
        return Err(format!("module not found at {}", module.display()));
    }
    let needs_faketime = skew_ms > 0 || faults.iter().any(|f| f == "node-clock-jump");
    let faketime = if needs_faketime {
        match (newer_server().ok(), faketime_lib()) {
            (Some(s), Some(l)) => Some((s, l)),
            _ => {
                println!("notice: no newer redis-server + libfaketime: clock faults and --skew-ms skipped");
                None
            }
        }
    } else {
        None
    };
    let out_dir = out;
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let out = std::fs::canonicalize(&out_dir).map_err(|e| e.to_string())?;
    let cfg = Config {
        nodes,
        runs,
        electors,
        seconds,
        faults,
        seed,
        out,
        ttl_ms,
        grace_ms,
        fence,
        module,
        control,
        elector_mode,
        skew_ms,
        node_replicas,
        server_bin: std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into()),
        faketime,
        elector_cmd,
    };
    println!(
        "chaos: topology={topology} runs={} electors={} seconds={} ttl_ms={} grace_ms={} seed={} faults={} control={} skew_ms={} fence={} out={}",
        cfg.runs,
        cfg.electors,
        cfg.seconds,
        cfg.ttl_ms,
        cfg.grace_ms,
        cfg.seed,
        cfg.faults.join(","),
        cfg.control,
        cfg.skew_ms,
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

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// One independent primary. Keeps its port across restarts, so the electors' proxies keep
/// pointing at it.
struct Node {
    name: String,
    port: u16,
    dir: PathBuf,
    bin: String,
    module: PathBuf,
    grace_ms: u64,
    /// (libfaketime control file, library, base offset in seconds).
    faketime: Option<(PathBuf, PathBuf, f64)>,
    /// Port of the proxy this node replicates through (a replica), if any.
    replica_of: Option<u16>,
    child: Option<Child>,
}

impl Node {
    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn log(&self) -> String {
        let s = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    fn set_clock(&self, offset_s: f64) -> Result<(), String> {
        if let Some((f, _, _)) = &self.faketime {
            std::fs::write(f, format!("{offset_s:+}\n")).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    async fn start(&mut self) -> Result<(), String> {
        let mut last = String::new();
        for _ in 0..3 {
            match self.start_once().await {
                Ok(()) => return Ok(()),
                Err(e) if e.contains("Address already in use") => {
                    // Only at the first start: a restart must keep its port (the proxies).
                    last = e;
                    sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    async fn start_once(&mut self) -> Result<(), String> {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--daemonize", "no"])
            .args(["--protected-mode", "no"])
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
        if let Some((f, lib, _)) = &self.faketime {
            // Only the wall clock is faked; the monotonic clock (lease expiry) stays real.
            cmd.env("LD_PRELOAD", lib)
                .env("FAKETIME_TIMESTAMP_FILE", f)
                .env("FAKETIME_NO_CACHE", "1")
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        die_with_parent(&mut cmd);
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
                        "node {} exited ({st}) at start; log:\n{}",
                        self.name,
                        self.log()
                    ));
                }
            }
            if self.query(&["PING"]).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("node {} not answering after 10 s", self.name));
            }
            sleep(Duration::from_millis(20)).await;
        }
    }

    fn query(&self, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let c = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?;
        let mut con = c.get_connection_with_timeout(Duration::from_millis(200))?;
        con.set_read_timeout(Some(Duration::from_millis(200)))?;
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut con)
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            signal(c.id(), libc::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn wipe(&self) {
        let _ = std::fs::remove_dir_all(self.dir.join("appendonlydir"));
        let _ = std::fs::remove_file(self.dir.join("dump.rdb"));
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
        self.wipe();
    }
}

struct Slot {
    incarnation: u32,
    proc: Option<Proc>,
    /// One proxy per node.
    proxies: Vec<Proxy>,
}

struct Run<'a> {
    cfg: &'a Config,
    dir: PathBuf,
    log: JsonlWriter,
    rng: fastrand::Rng,
    resource_addr: String,
    slots: Vec<Slot>,
    nodes: Vec<Node>,
    /// With `--node-replicas`: node k's replica and the proxy its replication link runs
    /// through (cutting the link makes it miss grants; freezing the process would not, the
    /// kernel would buffer the stream).
    replicas: Vec<Option<(Node, Proxy)>>,
    next_server: u32,
}

/// A new node process description (not started) in the run folder.
fn new_node(
    cfg: &Config,
    dir: &Path,
    name: &str,
    skewed: bool,
    replica_of: Option<u16>,
) -> Result<Node, String> {
    let ndir = dir.join(format!("redis-{name}"));
    std::fs::create_dir_all(&ndir).map_err(|e| e.to_string())?;
    // The skewed node's wall clock runs `skew_ms` ahead (a static disagreement).
    let base = if skewed {
        cfg.skew_ms as f64 / 1000.0
    } else {
        0.0
    };
    let (bin, faketime) = match &cfg.faketime {
        Some((bin, lib)) => {
            let f = ndir.join("faketime.rc");
            std::fs::write(&f, format!("{base:+}\n")).map_err(|e| e.to_string())?;
            (bin.display().to_string(), Some((f, lib.clone(), base)))
        }
        None => (cfg.server_bin.clone(), None),
    };
    Ok(Node {
        name: name.into(),
        port: free_port()?,
        dir: ndir,
        bin,
        module: cfg.module.clone(),
        grace_ms: cfg.grace_ms,
        faketime,
        replica_of,
        child: None,
    })
}

/// A replica of the node at `primary`, replicating through a proxy; `None` if its link did not
/// come up within 10 s (failovers of that node are then skipped and recorded as such).
async fn start_replica(
    cfg: &Config,
    dir: &Path,
    name: &str,
    skewed: bool,
    primary: SocketAddr,
) -> Result<Option<(Node, Proxy)>, String> {
    let link = Proxy::start(primary).await.map_err(|e| e.to_string())?;
    let mut r = new_node(cfg, dir, name, skewed, Some(link.addr().port()))?;
    r.start().await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(redis::Value::BulkString(b)) = r.query(&["INFO", "replication"]) {
            if String::from_utf8_lossy(&b).contains("master_link_status:up") {
                return Ok(Some((r, link)));
            }
        }
        sleep(Duration::from_millis(50)).await;
    }
    Ok(None)
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
        cmd.args(["--id", &id]);
        // One `--redis` per node, in node order, each through this elector's own proxy to
        // that node (docs/conformance.md, "Quorum topologies").
        for p in &slot.proxies {
            cmd.args(["--redis", &format!("redis://{}/", p.addr())]);
        }
        cmd.args(["--resource", &self.resource_addr])
            .arg("--out")
            .arg(self.dir.join(format!("elector-{id}.jsonl")))
            .args(["--ttl-ms", &self.cfg.ttl_ms.to_string()])
            .args(["--key", KEY]);
        if self.cfg.elector_cmd.is_none() {
            cmd.args(["--quorum-control", &self.cfg.control]);
        }
        cmd.args(["--mode", &self.cfg.elector_mode])
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

    /// The slot whose elector leads now (holds the lease on a majority, by its own
    /// history: its `grant` is recorded once a majority granted).
    fn leader(&mut self) -> Option<usize> {
        leader_slot(&self.dir, self.slots.iter_mut().map(|s| s.proc.as_mut()))
    }

    fn ttl(&self, factor: f64) -> Duration {
        Duration::from_micros((self.cfg.ttl_ms as f64 * factor * 1000.0) as u64)
    }

    fn rand_ttl(&mut self, lo: f64, hi: f64) -> Duration {
        let f = lo + self.rng.f64() * (hi - lo);
        self.ttl(f)
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

    fn slot_id(&self, i: usize) -> String {
        self.slots[i]
            .proc
            .as_ref()
            .map(|p| p.id.clone())
            .unwrap_or_default()
    }

    fn set_node_mode(&self, node: usize, mode: Mode) {
        for s in &self.slots {
            s.proxies[node].set_mode(mode);
        }
    }

    async fn inject(&mut self, kind: &str) -> Result<(), String> {
        let t = mono_ns();
        let leader = self.leader();
        let needs_leader = ["kill", "pause", "resign", "split", "late-delivery"].contains(&kind);
        if needs_leader && leader.is_none() {
            self.fault(kind, t, "-", String::new(), Some("no leader".into()));
            return Ok(());
        }
        let n = self.nodes.len();
        let node = self.rng.usize(..n);
        let node_name = self.nodes[node].name.clone();
        match kind {
            "kill" => {
                let i = leader.unwrap_or(0);
                let id = self.slot_id(i);
                if let Some(mut p) = self.slots[i].proc.take() {
                    let _ = p.child.kill();
                    let _ = p.child.wait();
                }
                self.fault(kind, t, &id, "SIGKILL".into(), None);
                sleep(Duration::from_millis(100)).await;
                self.spawn_elector(i)?;
            }
            "pause" => {
                let i = leader.unwrap_or(0);
                let id = self.slot_id(i);
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
            "partition" | "split" => {
                let i = match leader {
                    Some(l) if kind == "split" || self.rng.f64() < 0.8 => l,
                    _ => self.rng.usize(..self.slots.len()),
                };
                let id = self.slot_id(i);
                // `split`: cut from a random majority (the rest stays reachable: a leader
                // that still renews on a minority must step down).
                let mut cut: Vec<usize> = (0..n).collect();
                if kind == "split" {
                    self.rng.shuffle(&mut cut);
                    cut.truncate(n / 2 + 1);
                }
                let d = self.rand_ttl(1.5, 3.0);
                for &k in &cut {
                    self.slots[i].proxies[k].set_mode(Mode::Partition);
                }
                sleep(d).await;
                for &k in &cut {
                    self.slots[i].proxies[k].set_mode(Mode::Pass);
                }
                // The checker's loss-failover figure counts `partition` of the leader.
                let kind = if kind == "split" { "partition" } else { kind };
                self.fault(
                    kind,
                    t,
                    &id,
                    format!("cut from nodes {cut:?} for {} ms", d.as_millis()),
                    None,
                );
            }
            "late-delivery" => {
                // As in the single-primary topology (orchestrate.rs), on every node at once.
                let i = leader.unwrap_or(0);
                let id = self.slot_id(i);
                let hold = self.rand_ttl(0.3, 0.7);
                let d = self.rand_ttl(2.0, 4.0);
                let more = self.rng.u32(..3) == 0;
                let commands = Held {
                    acquire: more,
                    renew: true,
                    release: true,
                    raise: more,
                };
                for p in &self.slots[i].proxies {
                    p.set_mode(Mode::Late { hold, commands });
                }
                sleep(d).await;
                for p in &self.slots[i].proxies {
                    p.set_mode(Mode::Pass);
                }
                self.fault(
                    kind,
                    t,
                    &id,
                    format!(
                        "{} held {} ms each on every node for {} ms",
                        commands.names(),
                        hold.as_millis(),
                        d.as_millis()
                    ),
                    None,
                );
            }
            "resign" => {
                let i = leader.unwrap_or(0);
                let id = self.slot_id(i);
                if let Some(mut p) = self.slots[i].proc.take() {
                    p.stop(Duration::from_secs(5)).await;
                }
                self.fault(kind, t, &id, "SIGTERM (graceful resign)".into(), None);
                self.spawn_elector(i)?;
            }
            "node-kill" => {
                let d = self.rand_ttl(1.5, 3.0);
                self.nodes[node].kill9();
                sleep(d).await;
                self.nodes[node].start().await?;
                self.fault(
                    kind,
                    t,
                    &node_name,
                    format!("kill -9, down {} ms, restarted with its AOF", d.as_millis()),
                    None,
                );
            }
            "node-restart" | "node-restart-aof" => {
                self.nodes[node].kill9();
                if kind == "node-restart" {
                    self.nodes[node].wipe();
                }
                sleep(Duration::from_millis(50)).await;
                self.nodes[node].start().await?;
                let detail = if kind == "node-restart" {
                    "kill -9, data wiped (lost state: grace)"
                } else {
                    "kill -9, AOF everysec kept"
                };
                self.fault(kind, t, &node_name, detail.into(), None);
            }
            "node-partition" => {
                let d = self.rand_ttl(1.5, 3.0);
                self.set_node_mode(node, Mode::Partition);
                sleep(d).await;
                self.set_node_mode(node, Mode::Pass);
                self.fault(
                    kind,
                    t,
                    &node_name,
                    format!("every elector cut off for {} ms", d.as_millis()),
                    None,
                );
            }
            "node-pause" => {
                let d = self.rand_ttl(1.5, 3.0);
                if let Some(c) = &self.nodes[node].child {
                    signal(c.id(), libc::SIGSTOP);
                }
                sleep(d).await;
                if let Some(c) = &self.nodes[node].child {
                    signal(c.id(), libc::SIGCONT);
                }
                self.fault(
                    kind,
                    t,
                    &node_name,
                    format!("SIGSTOP {} ms", d.as_millis()),
                    None,
                );
            }
            "node-clock-jump" => {
                let Some((_, _, base)) = self.nodes[node].faketime.clone() else {
                    self.fault(
                        kind,
                        t,
                        &node_name,
                        String::new(),
                        Some("no libfaketime".into()),
                    );
                    return Ok(());
                };
                let mag = 600.0 + self.rng.f64() * 6600.0;
                let secs = if self.rng.bool() { mag } else { -mag };
                self.nodes[node].set_clock(base + secs)?;
                let d = self.rand_ttl(2.0, 4.0);
                sleep(d).await;
                self.nodes[node].set_clock(base)?;
                self.fault(
                    kind,
                    t,
                    &node_name,
                    format!(
                        "wall clock {secs:+.0} s for {} ms, then back",
                        d.as_millis()
                    ),
                    None,
                );
            }
            "node-failover" | "node-split-brain" => {
                let Some((replica, link)) = self.replicas.get_mut(node).and_then(|r| r.take())
                else {
                    self.fault(
                        kind,
                        t,
                        &node_name,
                        String::new(),
                        Some("no replica (--node-replicas)".into()),
                    );
                    return Ok(());
                };
                let lag = self.rand_ttl(0.3, 2.0);
                let lose_grant = self.rng.bool();
                link.set_mode(Mode::Blackhole);
                let frozen_at = Instant::now();
                let mut handed_over = String::new();
                if lose_grant {
                    if let Some(i) = leader {
                        handed_over = self.slot_id(i);
                        if let Some(mut p) = self.slots[i].proc.take() {
                            p.stop(Duration::from_secs(5)).await;
                        }
                        self.spawn_elector(i)?;
                    }
                }
                sleep(
                    lag.saturating_sub(frozen_at.elapsed())
                        .max(Duration::from_millis(50)),
                )
                .await;
                let split = kind == "node-split-brain";
                if !split {
                    self.nodes[node].kill9();
                }
                drop(link);
                let mut promoted = false;
                for _ in 0..50 {
                    if replica.query(&["REPLICAOF", "NO", "ONE"]).is_ok() {
                        promoted = true;
                        break;
                    }
                    sleep(Duration::from_millis(20)).await;
                }
                if !promoted {
                    return Err(format!("replica of {node_name} refused REPLICAOF NO ONE"));
                }
                if split {
                    // Two primaries for one node: even slots stay on the old one, odd slots
                    // move to the promoted replica, for 2..3 TTL; then the old one dies.
                    for (k, s) in self.slots.iter().enumerate() {
                        if k % 2 == 1 {
                            s.proxies[node].retarget(replica.addr());
                        }
                    }
                    let d = self.rand_ttl(2.0, 3.0);
                    sleep(d).await;
                    self.nodes[node].kill9();
                }
                for s in &self.slots {
                    s.proxies[node].retarget(replica.addr());
                }
                let mut replica = replica;
                // A primary now: a later restart must not make it a replica of the dead one.
                replica.replica_of = None;
                let new_name = replica.name.clone();
                let old = std::mem::replace(&mut self.nodes[node], replica);
                drop(old);
                self.fault(
                    kind,
                    t,
                    &node_name,
                    format!(
                        "replica {new_name} cut off {} ms{}, {}",
                        frozen_at.elapsed().as_millis(),
                        if handed_over.is_empty() { String::new() } else { format!(", {handed_over} resigned meanwhile (that grant and raise are lost on this node)") },
                        if split {
                            "replica promoted while the node stays up (odd electors moved to it), then the node killed"
                        } else {
                            "node kill -9, replica promoted"
                        }
                    ),
                    None,
                );
                let name = format!("r{}", self.next_server);
                self.next_server += 1;
                let skewed = node + 1 == n;
                let addr = self.nodes[node].addr();
                self.replicas[node] =
                    start_replica(self.cfg, &self.dir, &name, skewed, addr).await?;
            }
            "none" => sleep(self.ttl(2.0)).await,
            other => return Err(format!("unknown fault {other}")),
        }
        Ok(())
    }
}

async fn run_one(cfg: &Config, run: u32, seed: u64, dir: &Path) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let rng = fastrand::Rng::with_seed(seed);
    let mut nodes = vec![];
    let mut replicas = vec![];
    for k in 0..cfg.nodes {
        let skewed = k + 1 == cfg.nodes;
        let mut node = new_node(cfg, dir, &format!("n{k}"), skewed, None)?;
        node.start().await?;
        replicas.push(if cfg.node_replicas {
            start_replica(cfg, dir, &format!("n{k}r"), skewed, node.addr()).await?
        } else {
            None
        });
        nodes.push(node);
    }
    let (resource, resource_addr) = spawn_resource(dir, cfg.fence)?;
    let mut slots = vec![];
    for _ in 0..cfg.electors {
        let mut proxies = vec![];
        for n in &nodes {
            proxies.push(Proxy::start(n.addr()).await.map_err(|e| e.to_string())?);
        }
        slots.push(Slot {
            incarnation: 0,
            proc: None,
            proxies,
        });
    }
    let log = JsonlWriter::create(&dir.join("run.jsonl")).map_err(|e| e.to_string())?;
    let kinds: Vec<String> = cfg.faults.clone();
    let mut r = Run {
        cfg,
        dir: dir.to_path_buf(),
        log,
        rng,
        resource_addr,
        slots,
        nodes,
        replicas,
        next_server: 0,
    };
    r.record(RunEvent::RunStart {
        t: mono_ns(),
        run,
        seed,
        electors: cfg.electors,
        ttl_ms: cfg.ttl_ms,
        grace_ms: cfg.grace_ms,
        seconds: cfg.seconds,
        elector_mode: format!("quorum{}:{}", cfg.nodes, cfg.control),
        fence: cfg.fence,
    });
    let start = Instant::now();
    for i in 0..r.slots.len() {
        r.spawn_elector(i)?;
    }
    let end = start + Duration::from_secs(cfg.seconds);
    let warmup = Duration::from_millis(cfg.grace_ms + 2 * cfg.ttl_ms);
    let tail = r.ttl(3.0);
    sleep(warmup).await;
    let max_faults = cfg.seconds * 1000 / cfg.ttl_ms + 1;
    for _ in 0..max_faults {
        if Instant::now() + r.ttl(4.0) + tail > end {
            break;
        }
        let kind = kinds[r.rng.usize(..kinds.len())].clone();
        r.inject(&kind).await?;
        // Recovery: expiry + grace + a new grant, so the next fault finds at most this
        // node still recovering (at most a minority faulty).
        let rec = Duration::from_millis(2 * cfg.ttl_ms + cfg.grace_ms) + r.rand_ttl(0.0, 1.5);
        sleep(rec).await;
    }
    if Instant::now() < end {
        sleep(end - Instant::now()).await;
    }
    r.record(RunEvent::RunEnd { t: mono_ns() });
    let electors = r.slots.iter_mut().filter_map(|s| s.proc.take()).collect();
    shut_down(electors, resource).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::wanted;

    #[test]
    fn topology_dispatch() {
        let v = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        assert!(wanted(&v("--runs 1 --topology quorum3")));
        assert!(wanted(&v("--topology=quorum5 --runs 1")));
        assert!(!wanted(&v("--topology sentinel")));
        assert!(!wanted(&v("--runs 1")));
        assert!(!wanted(&v("--topology")));
    }
}
