//! One run: start the backend, the resource, one proxy per elector and node, the electors;
//! then warm-up, faults drawn from the seed one at a time (the kinds still short of their
//! `--min-faults` first, summary.rs `draw_kind`; each followed by recovery time,
//! so at most one node is faulty at any moment: a minority in quorum mode), a quiet tail,
//! and a graceful stop. The checker runs afterwards, over the folder this fills.

use super::backend::Backend;
use super::backend_redis::RedisBackend;
use super::backend_store::StoreBackend;
use super::cli::{Config, Topology};
use super::summary::draw_kind;
use crate::procs::{die_with_parent, leader_slot, shut_down, spawn_resource, Proc};
use lease_harness::clock::mono_ns;
use lease_harness::history::{JsonlWriter, RunEvent};
use lease_harness::proxy::Proxy;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::time::{sleep, Instant};

pub(crate) const KEY: &str = "chaos:leader";

pub(crate) struct Slot {
    pub incarnation: u32,
    pub proc: Option<Proc>,
    /// The elector's fault proxy to each node, in node order (none when electors reach the
    /// backend directly, as under Sentinel).
    pub proxies: Vec<Proxy>,
    /// `--netns`: the pass-through proxy on the elector's link to the resource (the
    /// resource listens on loopback, which the elector's namespace cannot reach).
    pub resource_proxy: Option<Proxy>,
}

pub(crate) struct Run<'a> {
    pub cfg: &'a Config,
    pub dir: PathBuf,
    log: JsonlWriter,
    pub rng: fastrand::Rng,
    resource_addr: String,
    pub slots: Vec<Slot>,
    pub backend: Box<dyn Backend>,
    /// `--netns`: one veth link per elector slot.
    pub links: Option<crate::netns::Links>,
    /// Faults injected (not skipped) per kind in the campaign so far, this run's included:
    /// what the `--min-faults` draw needs (summary.rs `draw_kind`).
    pub counts: BTreeMap<String, u64>,
}

impl Run<'_> {
    pub fn record(&mut self, e: RunEvent) {
        if let Err(err) = self.log.write(&e) {
            eprintln!("run: cannot record {e:?}: {err}");
        }
    }

    pub fn fault(
        &mut self,
        kind: &str,
        t: u64,
        target: &str,
        detail: String,
        skipped: Option<String>,
    ) {
        if skipped.is_none() {
            *self.counts.entry(kind.to_string()).or_insert(0) += 1;
        }
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

    /// Is the whole backend one primary (its restart or promotion is "Redis back" for the
    /// checker; a quorum node's is not, the others carry on)?
    pub fn single_primary(&self) -> bool {
        matches!(self.cfg.topology, Topology::Replica | Topology::Store(_))
    }

    pub fn spawn_elector(&mut self, i: usize) -> Result<(), String> {
        // One `--redis` per node, in node order, each through this elector's own proxy to
        // that node (docs/conformance.md, "Quorum topologies"); or the backend's own URL.
        let urls: Vec<String> = match self.backend.direct_url() {
            Some(u) => vec![u],
            None => self.slots[i]
                .proxies
                .iter()
                .map(|p| self.backend.node_url(p.addr()))
                .collect(),
        };
        if urls.is_empty() {
            return Err("elector slot without proxy".into());
        }
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
        if self.cfg.topology.is_quorum() {
            // The same membership id for every elector: that of the real node list (each
            // elector's own list names its proxies; docs/conformance.md).
            let real: Vec<String> = (0..self.backend.nodes())
                .map(|k| self.backend.node_url(self.backend.node_addr(k)))
                .collect();
            let id = redis_lease_client::membership_id_of(&real).map_err(|e| e.to_string())?;
            cmd.env(crate::elector::MEMBERSHIP_ENV, id);
        }
        cmd.args(["--id", &id]);
        for u in &urls {
            cmd.args(["--redis", u]);
        }
        cmd.args(["--resource", &resource_addr])
            .arg("--out")
            .arg(self.dir.join(format!("elector-{id}.jsonl")))
            .args(["--ttl-ms", &self.cfg.ttl_ms.to_string()])
            .args(["--key", KEY]);
        if self.cfg.topology.is_quorum() && self.cfg.elector_cmd.is_none() {
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

    /// The slot whose elector leads now, from the electors' own histories.
    pub fn leader(&mut self) -> Option<usize> {
        leader_slot(&self.dir, self.slots.iter_mut().map(|s| s.proc.as_mut()))
    }

    /// The id of slot `i`'s running elector ("" when none).
    pub fn slot_id(&self, i: usize) -> String {
        self.slots[i]
            .proc
            .as_ref()
            .map(|p| p.id.clone())
            .unwrap_or_default()
    }

    pub fn ttl(&self, factor: f64) -> Duration {
        Duration::from_micros((self.cfg.ttl_ms as f64 * factor * 1000.0) as u64)
    }

    pub fn rand_ttl(&mut self, lo: f64, hi: f64) -> Duration {
        let f = self.between(lo, hi);
        self.ttl(f)
    }

    pub fn between(&mut self, lo: f64, hi: f64) -> f64 {
        lo + self.rng.f64() * (hi - lo)
    }
}

/// One run; `counts`: the faults the campaign's earlier runs injected, per kind.
pub(crate) async fn run_one(
    cfg: &Config,
    run: u32,
    seed: u64,
    dir: &Path,
    counts: &BTreeMap<String, u64>,
) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut rng = fastrand::Rng::with_seed(seed);
    let clock_fault = |f: &String| f.ends_with("clock-jump");
    let faketime = if cfg.topology.is_quorum() {
        // Every run: the skewed node needs its offset from the start.
        cfg.faketime_server.is_some() && (cfg.skew_ms > 0 || cfg.faults.iter().any(clock_fault))
    } else {
        // A third of the runs (all, if it is the only fault asked for) run the servers under
        // libfaketime so that clock-jump can be injected there.
        cfg.faults.iter().any(clock_fault)
            && cfg.faketime_server.is_some()
            && (cfg.faults.len() == 1 || rng.u32(..3) == 0)
    };
    // Not under libfaketime: this run draws no clock fault (the campaign said so at start
    // when libfaketime is missing).
    let kinds: Vec<String> = cfg
        .faults
        .iter()
        .filter(|f| faketime || !clock_fault(f))
        .cloned()
        .collect();
    // The links before the servers: under Sentinel the servers listen on the service
    // address the links carry (netns.rs), which must exist when they bind.
    let links = if cfg.netns {
        let sentinel = matches!(cfg.topology, Topology::Sentinel { .. });
        Some(crate::netns::Links::create(
            cfg.electors as usize,
            sentinel,
        )?)
    } else {
        None
    };
    let backend: Box<dyn Backend> = match cfg.topology {
        Topology::Store(store) => Box::new(StoreBackend::start(store, dir, cfg.ttl_ms)?),
        _ => Box::new(RedisBackend::start(cfg, dir, faketime).await?),
    };
    let (resource, resource_addr) = spawn_resource(dir, cfg.fence)?;
    let mut slots = vec![];
    for i in 0..cfg.electors as usize {
        let bind: std::net::IpAddr = match &links {
            Some(l) => l.links[i].host_ip.into(),
            None => std::net::Ipv4Addr::LOCALHOST.into(),
        };
        let mut proxies = vec![];
        for k in 0..backend.nodes() {
            let p = Proxy::start_on(bind, backend.node_addr(k)).await;
            proxies.push(p.map_err(|e| e.to_string())?);
        }
        // Every elector's smallest proxy URL leads to node 0: its wait node (Q10, line_up).
        lease_harness::proxy::line_up(
            &mut proxies,
            |a| backend.node_url(a),
            |k| backend.node_addr(k),
        );
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
            proxies,
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
        backend,
        links,
        counts: counts.clone(),
    };
    r.record(RunEvent::RunStart {
        t: mono_ns(),
        run,
        seed,
        electors: cfg.electors,
        ttl_ms: cfg.ttl_ms,
        grace_ms: cfg.grace_ms,
        seconds: cfg.seconds,
        elector_mode: match cfg.topology {
            Topology::Quorum { nodes, .. } => format!("quorum{nodes}:{}", cfg.control),
            _ => cfg.elector_mode.clone(),
        },
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
        let kind = draw_kind(&kinds, &cfg.min_faults, &r.counts, &mut r.rng).to_string();
        r.inject(&kind).await?;
        // Recovery: long enough for expiry + grace + a new grant, plus jitter (so the next
        // fault finds at most this node still recovering).
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
