//! The Redis backend of every topology: the one `testsupport::RedisServer` guard (shared with
//! every test) per server, in a folder kept under the run's folder, plus what only the harness
//! asks of a server. One spawning path for the replica topology's primary and replica, every
//! quorum node and its replica, and (through testsupport) the Sentinel topology's nodes.

use super::backend::Backend;
use super::cli::{Config, Topology};
use lease_harness::proxy::Proxy;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use testsupport::sentinel::{SentinelOptions, SentinelTopology};
use testsupport::{RedisServer, ServerOptions};
use tokio::time::{sleep, Instant};

pub(crate) struct Server {
    pub name: String,
    pub srv: RedisServer,
    /// libfaketime's control file and this server's base wall-clock offset in seconds (the
    /// skewed quorum node runs `--skew-ms` ahead), when it runs under libfaketime.
    pub faketime: Option<(PathBuf, f64)>,
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
    /// Start server `name` (folder `redis-<name>` of the run) on a free port; under
    /// libfaketime with its wall clock `base` s ahead when `faketime`.
    fn start(
        cfg: &Config,
        run_dir: &Path,
        name: &str,
        faketime: bool,
        base: f64,
        replica_of: Option<u16>,
    ) -> Result<Server, String> {
        let dir = run_dir.join(format!("redis-{name}"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let mut opts = data_options(cfg, &dir).replica_of(replica_of);
        let (bin, faketime) = match (&cfg.faketime_server, faketime) {
            (Some((b, lib)), true) => {
                let f = dir.join("faketime.rc");
                std::fs::write(&f, format!("{base:+}\n")).map_err(|e| e.to_string())?;
                opts = opts.faketime(lib, &f);
                (b.display().to_string(), Some((f, base)))
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

    pub fn addr(&self) -> SocketAddr {
        self.srv.addr()
    }

    pub fn log(&self) -> String {
        self.srv.log_tail(30)
    }

    pub fn query_string(&self, args: &[&str]) -> redis::RedisResult<String> {
        self.srv.query(args)
    }

    /// `role:` of `INFO replication` (`master`, `slave`), empty when it does not answer.
    pub fn role(&self) -> String {
        self.query_string(&["INFO", "replication"])
            .ok()
            .and_then(|i| {
                i.lines()
                    .find_map(|l| l.strip_prefix("role:"))
                    .map(|r| r.trim().to_string())
            })
            .unwrap_or_default()
    }

    pub async fn wait_replica_link(&self) -> bool {
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

    /// `REPLICAOF NO ONE`, retried for up to a second (a replica still loading refuses).
    /// A primary from then on: a later restart must not bring it back as a replica of the
    /// dead one (it would answer READONLY to every acquire).
    pub async fn promote(&mut self) -> Result<(), String> {
        for _ in 0..50 {
            if self.query_string(&["REPLICAOF", "NO", "ONE"]).is_ok() {
                self.srv.opts.replica_of = None;
                return Ok(());
            }
            sleep(Duration::from_millis(20)).await;
        }
        Err(format!(
            "replica {} refused REPLICAOF NO ONE; log:\n{}",
            self.name,
            self.log()
        ))
    }
}

/// Every Redis topology: `primaries` are the nodes electors are given (one in the replica
/// topology, N in quorum mode, none under Sentinel, whose electors find the primary
/// themselves); `replicas[k]` is node k's replica and the proxy its replication link goes
/// through (so that a failover can cut the link: freezing the replica process is not enough,
/// the kernel would still buffer the stream for it and it would apply it after the thaw).
pub(crate) struct RedisBackend {
    cfg: Config,
    dir: PathBuf,
    faketime: bool,
    pub primaries: Vec<Server>,
    pub replicas: Vec<Option<(Server, Proxy)>>,
    pub sentinel: Option<SentinelTopology>,
    next_server: u32,
}

impl RedisBackend {
    /// Start the servers of `cfg.topology` in `dir`; under libfaketime when `faketime`.
    pub async fn start(cfg: &Config, dir: &Path, faketime: bool) -> Result<RedisBackend, String> {
        let mut b = RedisBackend {
            cfg: cfg.clone(),
            dir: dir.to_path_buf(),
            faketime,
            primaries: vec![],
            replicas: vec![],
            sentinel: None,
            next_server: 2,
        };
        match cfg.topology {
            Topology::Sentinel { down_after_ms } => {
                // Blocking waits (start-up, Sentinel discovery) on this thread: it is the
                // runtime's block_on thread, not a worker, and it lives as long as the
                // servers (die_with_parent kills them when the spawning thread ends).
                b.sentinel = Some(SentinelTopology::try_start(SentinelOptions {
                    down_after_ms,
                    failover_timeout_ms: 5000,
                    data: data_options(cfg, dir),
                    bin: Some(cfg.server_bin.clone()),
                    // `--netns`: electors in their namespaces cannot reach loopback; every
                    // server and Sentinel also listens on, and Sentinel hands out, the
                    // harness's address on their links (netns.rs). Without it, unchanged.
                    announce_ip: cfg.netns.then(|| crate::netns::SERVICE_IP.to_string()),
                    ..SentinelOptions::default()
                })?);
            }
            Topology::Replica => {
                let p = Server::start(cfg, dir, "a", faketime, 0.0, None)?;
                let r = b.start_replica("b", p.addr(), 0.0).await?;
                b.primaries.push(p);
                b.replicas.push(r);
            }
            Topology::Quorum {
                nodes,
                node_replicas,
            } => {
                b.next_server = 0;
                for k in 0..nodes {
                    // The last node's wall clock runs `--skew-ms` ahead (a static
                    // disagreement; its replica's too).
                    let base = if k + 1 == nodes {
                        cfg.skew_ms as f64 / 1000.0
                    } else {
                        0.0
                    };
                    let p = Server::start(cfg, dir, &format!("n{k}"), faketime, base, None)?;
                    let r = if node_replicas {
                        b.start_replica(&format!("n{k}r"), p.addr(), base).await?
                    } else {
                        None
                    };
                    b.primaries.push(p);
                    b.replicas.push(r);
                }
            }
            Topology::Store(s) => return Err(format!("the {} topology has no Redis", s.name())),
        }
        Ok(b)
    }

    /// A replica of `primary`, replicating through a proxy; `None` if its link did not come
    /// up (the run goes on; failover faults of that node are then skipped and recorded so).
    pub async fn start_replica(
        &self,
        name: &str,
        primary: SocketAddr,
        base: f64,
    ) -> Result<Option<(Server, Proxy)>, String> {
        let link = Proxy::start(primary).await.map_err(|e| e.to_string())?;
        let r = Server::start(
            &self.cfg,
            &self.dir,
            name,
            self.faketime,
            base,
            Some(link.addr().port()),
        )?;
        if r.wait_replica_link().await {
            Ok(Some((r, link)))
        } else {
            eprintln!("run: replica {name} did not sync; log:\n{}", r.log());
            Ok(None)
        }
    }

    /// The folder name of the next server started during a run.
    pub fn new_name(&mut self) -> String {
        let n = self.next_server;
        self.next_server += 1;
        if self.cfg.topology.is_quorum() {
            format!("r{n}")
        } else {
            ((b'a' + (n % 26) as u8) as char).to_string()
        }
    }

    /// A fresh replica for node `k` (after its replica was promoted).
    pub async fn renew_replica(&mut self, k: usize) -> Result<(), String> {
        let name = self.new_name();
        let base = self.primaries[k].faketime.as_ref().map_or(0.0, |f| f.1);
        let addr = self.primaries[k].addr();
        self.replicas[k] = self.start_replica(&name, addr, base).await?;
        Ok(())
    }
}

impl Backend for RedisBackend {
    fn nodes(&self) -> usize {
        self.primaries.len()
    }

    fn node_name(&self, k: usize) -> String {
        if self.cfg.topology.is_quorum() {
            self.primaries[k].name.clone()
        } else {
            "primary".into()
        }
    }

    fn node_addr(&self, k: usize) -> SocketAddr {
        self.primaries[k].addr()
    }

    fn direct_url(&self) -> Option<String> {
        self.sentinel.as_ref().map(|t| t.sentinel_url())
    }

    fn direct_ports(&self) -> Vec<u16> {
        // Ports stay across the faults (a killed primary comes back on its own port), so the
        // list read at fault time is every server an elector may be talking to.
        self.sentinel.as_ref().map_or_else(Vec::new, |t| {
            t.nodes.iter().chain(&t.sentinels).map(|s| s.port).collect()
        })
    }

    fn kill(&mut self, k: usize) {
        self.primaries[k].srv.kill();
    }

    fn wipe(&mut self, k: usize) {
        self.primaries[k].srv.wipe();
    }

    fn restart(&mut self, k: usize) -> Result<(), String> {
        let s = &mut self.primaries[k];
        let opts = s.srv.opts.clone();
        s.srv
            .try_restart_with(opts)
            .map_err(|e| format!("redis {}: {e}", s.name))
    }

    fn signal(&self, k: usize, sig: i32) {
        self.primaries[k].srv.signal(sig);
    }

    fn answers(&self, k: usize) -> bool {
        self.primaries[k].query_string(&["PING"]).is_ok()
    }

    fn set_clock(&self, k: usize, offset_s: f64) -> Result<(), String> {
        let (f, base) = self.primaries[k]
            .faketime
            .as_ref()
            .ok_or("server not under libfaketime")?;
        std::fs::write(f, format!("{:+}\n", base + offset_s)).map_err(|e| e.to_string())
    }

    fn log(&self, k: usize) -> String {
        self.primaries[k].log()
    }

    fn redis(&mut self) -> Option<&mut RedisBackend> {
        Some(self)
    }
}
