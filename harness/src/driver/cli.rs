//! `lease-harness run ...`: the command line of a campaign, checked once into a [`Config`].
//! The topology is a value ([`Topology`]); each names the faults it knows, and an option or a
//! fault that does not apply to it is refused with a one-line reason, never dropped.

pub use super::backend_store::{store_why_not, Store, STORE_FAULTS};
use super::summary::parse_min_faults;
use crate::args::Args;
use crate::procs::{faketime_lib, newer_server};
use lease_harness::clock::mono_ns;
use std::path::PathBuf;

/// Faults of the replica topology (its default set); `none` (quiet periods only) is accepted
/// by every topology.
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
/// Sentinel and connect to it directly, without a per-elector proxy (see `docs/deploy.md`), so
/// the network faults of the proxy do not exist there.
pub const SENTINEL_FAULTS: &[&str] = &["kill", "pause", "resign", "sentinel-failover"];

/// Opt-in faults, never drawn by default: `split-brain` (replica topology, needs
/// `--min-replicas-max-lag`) is the grace-sizing experiment and is *meant* to show a double
/// leader when grace is below max TTL + replication lag.
pub const OPT_IN_FAULTS: &[&str] = &["split-brain"];

/// Faults of the kernel's network (`--netns`, issue 30): opt-in, drawn by default only with
/// `--netns`, which they need (each elector's veth link, see `netns.rs`), in every Redis
/// topology. Each hits one elector's link (mostly the leader's), one direction or both;
/// "Redis" is every node's proxy in quorum mode and every server and Sentinel under
/// Sentinel:
/// - `loss`: nftables random loss 5..100 % on one direction or both;
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

/// Faults of the quorum topologies (docs/quorum.md; their default set). Node faults hit one
/// of the N primaries, drawn from the seed; elector faults as in the replica topology, on
/// every node's proxy at once; `split` cuts the leader from a random majority.
pub const QUORUM_FAULTS: &[&str] = &[
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
    "late-delivery",
];

/// Quorum faults drawn only when named: `node-split-brain` (a node answering as two servers)
/// is outside quorum mode's fault model when the leader reigns on a bare majority
/// (docs/quorum.md §5.3), so a default campaign with `--node-replicas` drawing it would report
/// violations the design accepts; the evidence runs it by name, recorded, not asserted.
pub const QUORUM_OPT_IN_FAULTS: &[&str] = &["node-split-brain"];

/// How the coordination service of a run is laid out.
#[derive(Clone, Debug, PartialEq)]
pub enum Topology {
    /// A primary and its replica (through a link proxy); each elector reaches the primary
    /// through its own proxy.
    Replica,
    /// 3 Sentinels, a primary and 2 replicas; electors address the primary through Sentinel
    /// (`redis+sentinel://`), without proxies. `down_after_ms`: Sentinel's
    /// down-after-milliseconds.
    Sentinel { down_after_ms: u64 },
    /// N independent primaries (quorum mode; `quorum1` is the single-primary protocol in this
    /// same layout); each elector has its own proxy to every node. `node_replicas`: every node
    /// has a replica (the node-failover faults need one).
    Quorum { nodes: usize, node_replicas: bool },
    /// `--backend etcd|zookeeper`: one server of that store (backend_store.rs); only peer
    /// electors (`--elector-cmd`) speak them.
    Store(Store),
}

impl Topology {
    /// The faults drawn when `--fault` is not given.
    pub fn default_faults(&self) -> &'static [&'static str] {
        match self {
            Topology::Replica => FAULTS,
            Topology::Sentinel { .. } => SENTINEL_FAULTS,
            Topology::Quorum { .. } => QUORUM_FAULTS,
            Topology::Store(_) => STORE_FAULTS,
        }
    }

    /// Every fault this topology can inject (defaults and opt-in ones).
    pub fn known_faults(&self) -> Vec<&'static str> {
        match self {
            Topology::Replica => FAULTS
                .iter()
                .chain(OPT_IN_FAULTS)
                .chain(NETNS_FAULTS)
                .copied()
                .collect(),
            // Every Redis topology puts electors behind links under `--netns`.
            Topology::Sentinel { .. } => self
                .default_faults()
                .iter()
                .chain(NETNS_FAULTS)
                .copied()
                .collect(),
            Topology::Quorum { .. } => self
                .default_faults()
                .iter()
                .chain(QUORUM_OPT_IN_FAULTS)
                .chain(NETNS_FAULTS)
                .copied()
                .collect(),
            t => t.default_faults().to_vec(),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Topology::Replica => "replica",
            Topology::Sentinel { .. } => "sentinel",
            Topology::Quorum { .. } => "quorum",
            Topology::Store(s) => s.name(),
        }
    }

    pub fn is_quorum(&self) -> bool {
        matches!(self, Topology::Quorum { .. })
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    pub topology: Topology,
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
    /// The newer redis-server and libfaketime, when both exist (clock faults need them).
    pub faketime_server: Option<(PathBuf, PathBuf)>,
    /// `--elector-cmd`: run this program (split on whitespace) for every elector slot instead
    /// of our own `elector` subcommand (docs/conformance.md); it gets one `--redis` per node.
    pub elector_cmd: Option<Vec<String>>,
    /// `--netns`: each elector in its own network namespace (netns.rs).
    pub netns: bool,
    /// `--elector-clock-rate R`: electors run under libfaketime at rate R (`FAKETIME="+0 xR"`),
    /// their monotonic clock runs R times as fast as the real one.
    pub clock_rate: Option<(f64, PathBuf)>,
    /// `--min-faults KIND=N,...`.
    pub min_faults: Vec<(String, u64)>,
    /// Quorum: `--quorum-control correct|no-unify|minority` (the built-in elector's negative
    /// controls) and `--skew-ms` (the last node's wall clock runs that far ahead).
    pub control: String,
    pub skew_ms: u64,
    /// `--min-replicas-max-lag S` (replica and Sentinel topologies): every data node runs with
    /// `min-replicas-to-write 1` and `min-replicas-max-lag S`.
    pub min_replicas_max_lag: Option<u64>,
}

impl Config {
    /// The header line of a campaign (`chaos: topology=...`).
    pub fn header(&self) -> String {
        let topology = match &self.topology {
            Topology::Sentinel { down_after_ms } => {
                format!("sentinel(down_after_ms={down_after_ms})")
            }
            Topology::Replica => match self.min_replicas_max_lag {
                Some(l) => format!("replica(min_replicas_max_lag={l})"),
                None => "replica".into(),
            },
            Topology::Quorum { nodes, .. } => format!("quorum{nodes}"),
            Topology::Store(s) => s.name().into(),
        };
        let modes = if self.topology.is_quorum() {
            format!("control={} skew_ms={}", self.control, self.skew_ms)
        } else {
            format!("mode={}", self.elector_mode)
        };
        format!(
            "chaos: topology={topology}{}{} runs={} electors={} seconds={} ttl_ms={} grace_ms={} seed={} faults={} {modes} fence={} out={}",
            if self.netns { "+netns" } else { "" },
            match &self.clock_rate {
                Some((r, _)) => format!(" elector_clock_rate={r}"),
                None => String::new(),
            },
            self.runs,
            self.electors,
            self.seconds,
            self.ttl_ms,
            self.grace_ms,
            self.seed,
            self.faults.join(","),
            self.fence,
            self.out.display()
        )
    }
}

/// `Some(value)` of an option that only `applies` to some topologies; given elsewhere it is
/// an error naming the topologies it belongs to.
fn only_for(
    args: &mut Args,
    name: &str,
    applies: bool,
    where_: &str,
) -> Result<Option<String>, String> {
    match args.value(name)? {
        Some(_) if !applies => Err(format!("{name} applies to the {where_} topology only")),
        v => Ok(v),
    }
}

fn parse_u64(name: &str, v: Option<String>) -> Result<Option<u64>, String> {
    v.map(|v| {
        v.parse::<u64>()
            .map_err(|_| format!("{name}: cannot parse {v:?}"))
    })
    .transpose()
}

pub fn parse(mut args: Args) -> Result<Config, String> {
    let topology = match args.value("--topology")?.as_deref() {
        None | Some("replica") => Topology::Replica,
        Some("sentinel") => Topology::Sentinel { down_after_ms: 0 },
        Some("quorum1") => Topology::Quorum {
            nodes: 1,
            node_replicas: false,
        },
        Some("quorum3") => Topology::Quorum {
            nodes: 3,
            node_replicas: false,
        },
        Some("quorum5") => Topology::Quorum {
            nodes: 5,
            node_replicas: false,
        },
        Some(t) => {
            return Err(format!(
                "unknown --topology {t} (replica, sentinel, quorum1, quorum3, quorum5)"
            ))
        }
    };
    // The coordination service: Redis in one of the topologies above, or one server of a
    // consensus store the peer electors use.
    let topology = match args.value("--backend")?.as_deref() {
        None | Some("redis") => topology,
        Some(b @ ("etcd" | "zookeeper")) => {
            if topology != Topology::Replica {
                return Err(format!(
                    "--topology {} is a Redis topology; --backend {b} runs one {b} server",
                    topology.name()
                ));
            }
            Topology::Store(if b == "etcd" {
                Store::Etcd
            } else {
                Store::ZooKeeper
            })
        }
        Some(b) => return Err(format!("unknown --backend {b} (redis, etcd, zookeeper)")),
    };
    let quorum = topology.is_quorum();
    let runs = args.parsed("--runs", 1u32)?;
    // Defaults as each topology always had them: quorum rounds cost more per elector.
    let electors = args.parsed("--electors", if quorum { 3u32 } else { 5 })?;
    let seconds = args.parsed("--seconds", if quorum { 20u64 } else { 30 })?;
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
    let real_clock = args.flag("--elector-real-clock");
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
    let sentinel = matches!(topology, Topology::Sentinel { .. });
    let replica = topology == Topology::Replica;
    let down_after = only_for(&mut args, "--down-after-ms", sentinel, "sentinel")?;
    let lag = only_for(
        &mut args,
        "--min-replicas-max-lag",
        replica || sentinel,
        "replica or sentinel",
    )?;
    let min_replicas_max_lag = parse_u64("--min-replicas-max-lag", lag)?;
    let control = only_for(&mut args, "--quorum-control", quorum, "quorum")?
        .unwrap_or_else(|| "correct".into());
    let skew_ms = parse_u64(
        "--skew-ms",
        only_for(&mut args, "--skew-ms", quorum, "quorum")?,
    )?
    .unwrap_or(0);
    let node_replicas = args.flag("--node-replicas");
    if node_replicas && !quorum {
        return Err("--node-replicas applies to the quorum topology only".into());
    }
    let topology = match topology {
        Topology::Sentinel { .. } => Topology::Sentinel {
            down_after_ms: parse_u64("--down-after-ms", down_after)?.unwrap_or(1000),
        },
        Topology::Quorum { nodes, .. } => Topology::Quorum {
            nodes,
            node_replicas,
        },
        t => t,
    };
    let module = match args.value("--module")? {
        Some(m) => PathBuf::from(m),
        None => default_module()?,
    };
    args.done()?;

    if netns {
        if let Topology::Store(store) = topology {
            // Not refused for a reason of principle: nobody has run a peer elector across
            // the links yet, and an untried path must not pass as evidence.
            return Err(format!(
                "--netns is implemented for the Redis topologies (replica, sentinel, \
                 quorum1/3/5), not --backend {}",
                store.name()
            ));
        }
    }
    let explicit_faults = !faults.is_empty();
    if faults.is_empty() {
        faults = default_fault_set(&topology, netns);
    }
    if let Some(f) = faults
        .iter()
        .find(|f| !netns && NETNS_FAULTS.contains(&f.as_str()))
    {
        return Err(format!("fault {f} needs --netns"));
    }
    if real_clock && elector_cmd.is_none() {
        return Err("--elector-real-clock describes an --elector-cmd elector".into());
    }
    if clock_rate.is_some() && elector_cmd.is_some() && !real_clock {
        // An elector that reads CLOCK_MONOTONIC through libc would stamp its history with the
        // faked clock, and the checker would compare skewed times: not evidence. Only one
        // that says it records on the real clock (a raw clock_gettime syscall, as our Rust
        // elector does; scripts/conformance knows which) may run faked.
        return Err(
            "--elector-clock-rate with --elector-cmd needs --elector-real-clock: the elector \
             must record its history on the real clock (a raw clock_gettime syscall)"
                .into(),
        );
    }
    if let Topology::Store(store) = topology {
        // Asked for by name (or a shared list): say why each is left out, never drop it
        // silently; nothing left is a mistake.
        faults.retain(|f| match store_why_not(store, f) {
            Some(why) => {
                println!("notice: {f} left out: {why}");
                false
            }
            None => true,
        });
        let name = store.name();
        if faults.is_empty() {
            return Err(format!("no fault left that applies to the {name} topology"));
        }
        if elector_cmd.is_none() {
            return Err(format!(
                "--backend {name} needs --elector-cmd (a peer elector that speaks {name}, \
                 peers/); ours speaks Redis"
            ));
        }
        store.check_installed()?;
    }
    let known = topology.known_faults();
    if let Some(bad) = faults
        .iter()
        .find(|f| f.as_str() != "none" && !known.contains(&f.as_str()))
    {
        return Err(format!(
            "fault {bad} is not available in the {} topology; known there: {} none",
            topology.name(),
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
    // After the checks of the command line alone (a wrong fault name is a one-line
    // answer without root), before anything touches the system.
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
    let max_electors = if quorum { 20 } else { 50 };
    if !(1..=max_electors).contains(&electors) || runs == 0 || seconds < 5 || ttl_ms < 100 {
        return Err(format!(
            "need 1..={max_electors} electors, runs >= 1, seconds >= 5, ttl-ms >= 100"
        ));
    }
    // Every topology takes every mode: the elector's work loop (and its unsafe detached
    // writer, the negative control of each language's loop) is the same over one primary and
    // over a quorum of them.
    let modes: &[&str] = &["safe", "ignore-deadline", "reuse-owner"];
    if !modes.contains(&elector_mode.as_str()) {
        return Err(format!(
            "unknown --elector-mode {elector_mode} ({})",
            modes.join(", ")
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
    // Absolute: redis-server changes into its --dir before loading modules.
    let module = std::fs::canonicalize(&module).unwrap_or(module);
    if !module.exists() && !matches!(topology, Topology::Store(_)) {
        return Err(format!(
            "module not found at {} (cargo build -p redis-lease, or --module)",
            module.display()
        ));
    }
    let faketime_server = match (newer_server(), faketime_lib()) {
        (Ok(server), Some(lib)) => Some((server, lib)),
        (server, lib) => {
            if skew_ms > 0 || faults.iter().any(|f| f.ends_with("clock-jump")) {
                let why = match (server, lib) {
                    (Err(e), _) => e,
                    (_, None) => "libfaketime not found (apt-get install libfaketime)".into(),
                    _ => unreachable!("both present is the other arm"),
                };
                println!(
                    "notice: clock-jump faults{} skipped: {why}",
                    if skew_ms > 0 { " and --skew-ms" } else { "" }
                );
            }
            None
        }
    };
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    // Absolute: redis-server resolves --dir and --logfile after changing directory.
    let out = std::fs::canonicalize(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(Config {
        topology,
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
        netns,
        clock_rate,
        min_faults,
        control,
        skew_ms,
        min_replicas_max_lag,
    })
}

/// The faults drawn when `--fault` is not given: the topology's own, and with `--netns` the
/// kernel's (every Redis topology has them; `delay-jitter` leaves later without tc netem).
fn default_fault_set(topology: &Topology, netns: bool) -> Vec<String> {
    let mut faults: Vec<String> = topology
        .default_faults()
        .iter()
        .map(|s| s.to_string())
        .collect();
    if netns {
        faults.extend(NETNS_FAULTS.iter().map(|s| s.to_string()));
    }
    faults
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_err(words: &str) -> String {
        let argv = words.split_whitespace().map(str::to_string).collect();
        parse(Args::new(argv)).err().unwrap_or_default()
    }

    #[test]
    fn an_option_of_another_topology_is_refused_by_name() {
        assert!(parse_err("--skew-ms 5").contains("--skew-ms applies to the quorum"));
        let e = parse_err("--topology quorum3 --down-after-ms 9");
        assert!(e.contains("--down-after-ms applies to the sentinel"), "{e}");
        let e = parse_err("--topology quorum3 --min-replicas-max-lag 1");
        assert!(e.contains("replica or sentinel"), "{e}");
        let e = parse_err("--backend etcd --netns --elector-cmd x");
        assert!(e.contains("Redis topologies"), "{e}");
        assert!(parse_err("--topology nope").contains("unknown --topology nope"));
        let e = parse_err("--topology quorum3 --backend etcd");
        assert!(e.contains("is a Redis topology"), "{e}");
        assert!(parse_err("--backend consul").contains("unknown --backend consul"));
    }

    #[test]
    fn a_faked_clock_runs_another_elector_only_if_it_records_on_the_real_clock() {
        let e = parse_err("--elector-clock-rate 1.005 --elector-cmd x");
        assert!(e.contains("needs --elector-real-clock"), "{e}");
        let e = parse_err("--elector-real-clock");
        assert!(e.contains("describes an --elector-cmd elector"), "{e}");
    }

    #[test]
    fn netns_covers_every_redis_topology() {
        let q3 = Topology::Quorum {
            nodes: 3,
            node_replicas: false,
        };
        let sentinel = Topology::Sentinel {
            down_after_ms: 1000,
        };
        for t in [Topology::Replica, q3.clone(), sentinel.clone()] {
            let set = default_fault_set(&t, true);
            let known = t.known_faults();
            for f in NETNS_FAULTS {
                assert!(set.iter().any(|s| s == f), "{} draws {f}", t.name());
                assert!(known.contains(f), "{} knows {f}", t.name());
            }
            // The topology's own faults stay in the default set.
            for f in t.default_faults() {
                assert!(set.iter().any(|s| s == f), "{} keeps {f}", t.name());
            }
            assert!(!default_fault_set(&t, false)
                .iter()
                .any(|f| NETNS_FAULTS.contains(&f.as_str())));
        }
        assert!(!Topology::Store(Store::Etcd)
            .known_faults()
            .contains(&"loss"));
        // Refused on the command line alone, before root or the system is asked (the
        // known-faults check comes first): the kernel faults are known there now.
        for t in ["quorum3", "sentinel"] {
            let e = parse_err(&format!("--topology {t} --netns --fault oneway,nope"));
            assert!(e.contains("fault nope is not available"), "{e}");
            assert!(e.contains(" oneway "), "{e}");
            let e = parse_err(&format!("--topology {t} --fault loss"));
            assert_eq!(e, "fault loss needs --netns");
        }
    }

    #[test]
    fn quorum_split_brain_of_a_node_is_drawn_only_when_named() {
        let q = Topology::Quorum {
            nodes: 3,
            node_replicas: true,
        };
        assert!(!q.default_faults().contains(&"node-split-brain"));
        assert!(q.known_faults().contains(&"node-split-brain"));
        assert!(q.default_faults().contains(&"node-failover"));
    }

    #[test]
    fn stores_leave_out_what_they_cannot_do_and_say_why() {
        let other = [
            "clock-jump",
            "late-delivery",
            "failover",
            "client-pause",
            "split",
        ];
        for store in [Store::Etcd, Store::ZooKeeper] {
            for f in other {
                assert!(store_why_not(store, f).is_some(), "{f}");
                assert!(!STORE_FAULTS.contains(&f), "{f}");
            }
            assert!(STORE_FAULTS
                .iter()
                .all(|f| store_why_not(store, f).is_none()));
        }
        let e = parse_err("--backend etcd --fault clock-jump,late-delivery");
        assert_eq!(e, "no fault left that applies to the etcd topology");
        let e = parse_err("--backend zookeeper --fault kill");
        assert!(e.contains("--backend zookeeper needs --elector-cmd"), "{e}");
    }
}
