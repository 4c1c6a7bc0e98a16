//! A Sentinel topology on loopback: a primary and replicas (the module loaded on every data
//! node) and Sentinels monitoring them, all through the one [`RedisServer`] guard.
//!
//! Sentinels run as `<bin> sentinel.conf --sentinel` with the same binary as the data nodes
//! (Debian's `redis-sentinel` is that binary under another name), so a run on Redis 8.2 or
//! Valkey 9 gets that server's Sentinel too.

use crate::{RedisServer, ServerOptions};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The master name every test and the harness use.
pub const MASTER_NAME: &str = "leasemaster";

#[derive(Clone, Debug)]
pub struct SentinelOptions {
    pub replicas: usize,
    pub sentinels: usize,
    pub quorum: usize,
    /// `sentinel down-after-milliseconds`: how long a primary must not answer before a
    /// Sentinel considers it down (the main term of the leaderless time after a crash).
    pub down_after_ms: u64,
    /// `sentinel failover-timeout`: also the wait before a failed failover is retried (2x).
    pub failover_timeout_ms: u64,
    /// Options of every data node (module arguments such as grace, persistence, module
    /// path, kept folder base). `replica_of` and `port` are set per node; `dir`, when set, is
    /// the parent of one folder per node (`redis-a`, `redis-b`, ...).
    pub data: ServerOptions,
    /// Server binary (None: `REDIS_SERVER_BIN`).
    pub bin: Option<String>,
    /// Every data node and Sentinel also listens on this address and Sentinel names the
    /// servers by it (`replica-announce-ip`, `sentinel announce-ip`, the monitored address,
    /// the URLs below); see [`ServerOptions::announce_ip`]. `None`: 127.0.0.1 throughout.
    pub announce_ip: Option<String>,
}

impl Default for SentinelOptions {
    fn default() -> Self {
        SentinelOptions {
            replicas: 2,
            sentinels: 3,
            quorum: 2,
            down_after_ms: 1000,
            failover_timeout_ms: 5000,
            // The full sync starts at once (the default diskless delay is 5 s).
            data: ServerOptions::default().extra_args(&["--repl-diskless-sync-delay", "0"]),
            bin: None,
            announce_ip: None,
        }
    }
}

pub struct SentinelTopology {
    /// Data nodes; `nodes[0]` is the primary at start, the others its replicas. After a
    /// failover, ask [`SentinelTopology::primary_index`].
    pub nodes: Vec<RedisServer>,
    pub sentinels: Vec<RedisServer>,
    pub opts: SentinelOptions,
}

/// The options of data node `i` (its own folder under `opts.data.dir`, if set).
pub fn node_options(opts: &SentinelOptions, i: usize, replica_of: Option<u16>) -> ServerOptions {
    let mut o = opts
        .data
        .clone()
        .replica_of(replica_of)
        .announce_ip(opts.announce_ip.as_deref());
    if let Some(base) = &opts.data.dir {
        o.dir = Some(base.join(format!("redis-{}", (b'a' + i as u8) as char)));
    }
    o
}

impl SentinelTopology {
    pub fn start(opts: SentinelOptions) -> SentinelTopology {
        match Self::try_start(opts) {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        }
    }

    /// Data nodes first (replicas synced), then the Sentinels, then a bounded wait until
    /// every Sentinel knows the primary, every replica and every other Sentinel (before that,
    /// a failover could pick nobody or lack its quorum).
    pub fn try_start(opts: SentinelOptions) -> Result<SentinelTopology, String> {
        let primary = RedisServer::try_start_with(opts.bin.clone(), node_options(&opts, 0, None))?;
        let mut nodes = vec![primary];
        for i in 1..=opts.replicas {
            let r = RedisServer::try_start_with(
                opts.bin.clone(),
                node_options(&opts, i, Some(nodes[0].port)),
            )?;
            nodes.push(r);
        }
        for r in &nodes[1..] {
            wait_link(r, Duration::from_secs(20))?;
        }
        let mut sentinels = vec![];
        let host = opts.announce_ip.as_deref().unwrap_or("127.0.0.1");
        for i in 0..opts.sentinels {
            let mut lines = vec![
                format!(
                    "sentinel monitor {MASTER_NAME} {host} {} {}",
                    nodes[0].port, opts.quorum
                ),
                format!(
                    "sentinel down-after-milliseconds {MASTER_NAME} {}",
                    opts.down_after_ms
                ),
                format!(
                    "sentinel failover-timeout {MASTER_NAME} {}",
                    opts.failover_timeout_ms
                ),
                format!("sentinel parallel-syncs {MASTER_NAME} 1"),
            ];
            if let Some(ip) = &opts.announce_ip {
                // What the Sentinels tell each other (hello messages) and clients.
                lines.push(format!("sentinel announce-ip {ip}"));
            }
            let mut so = ServerOptions::sentinel(&lines).announce_ip(opts.announce_ip.as_deref());
            so.die_with_parent = opts.data.die_with_parent;
            if let Some(base) = &opts.data.dir {
                so.dir = Some(base.join(format!("sentinel-{i}")));
            }
            sentinels.push(RedisServer::try_start_with(opts.bin.clone(), so)?);
        }
        let t = SentinelTopology {
            nodes,
            sentinels,
            opts,
        };
        t.wait_ready(Duration::from_secs(30))?;
        Ok(t)
    }

    /// `redis+sentinel://127.0.0.1:p1,127.0.0.1:p2,.../leasemaster`: the client's Sentinel URL
    /// (the announced address instead of 127.0.0.1 when there is one).
    pub fn sentinel_url(&self) -> String {
        format!(
            "redis+sentinel://{}/{MASTER_NAME}",
            self.sentinel_addrs().join(",")
        )
    }

    /// `host:port` of every Sentinel (for `lease-run --sentinel`).
    pub fn sentinel_addrs(&self) -> Vec<String> {
        let host = self.opts.announce_ip.as_deref().unwrap_or("127.0.0.1");
        self.sentinels
            .iter()
            .map(|s| format!("{host}:{}", s.port))
            .collect()
    }

    /// The primary's port as the first Sentinel that answers reports it.
    pub fn master_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            let v: Vec<String> = s
                .query(&["SENTINEL", "get-master-addr-by-name", MASTER_NAME])
                .ok()?;
            v.get(1)?.parse().ok()
        })
    }

    /// Index in `nodes` of the primary Sentinel reports.
    pub fn primary_index(&self) -> Option<usize> {
        let port = self.master_port()?;
        self.nodes.iter().position(|n| n.port == port)
    }

    /// Bounded wait until every Sentinel reports a primary other than `old_port` and that
    /// node answers `ROLE` as master. Returns its index in `nodes`.
    pub fn wait_promotion(&self, old_port: u16, limit: Duration) -> Result<usize, String> {
        let end = Instant::now() + limit;
        loop {
            let ports: Vec<Option<u16>> = self
                .sentinels
                .iter()
                .map(|s| {
                    let v: Vec<String> = s
                        .query(&["SENTINEL", "get-master-addr-by-name", MASTER_NAME])
                        .ok()?;
                    v.get(1)?.parse().ok()
                })
                .collect();
            if let Some(Some(p)) = ports.first() {
                if *p != old_port && ports.iter().all(|q| *q == Some(*p)) {
                    if let Some(i) = self.nodes.iter().position(|n| n.port == *p) {
                        if role(&self.nodes[i]).as_deref() == Some("master") {
                            return Ok(i);
                        }
                    }
                }
            }
            if Instant::now() > end {
                return Err(format!(
                    "no promotion away from port {old_port} within {limit:?} (sentinels report \
                     {ports:?}); sentinel log:\n{}",
                    self.sentinels[0].log_tail(40)
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Bounded wait until every Sentinel sees the primary up, `replicas` replicas up and
    /// every other Sentinel.
    pub fn wait_ready(&self, limit: Duration) -> Result<(), String> {
        let end = Instant::now() + limit;
        let want_replicas = self.nodes.len() - 1;
        let want_others = self.sentinels.len() - 1;
        loop {
            let mut last = String::new();
            let ok = self.sentinels.iter().all(|s| {
                let fields = match master_fields(s) {
                    Some(f) => f,
                    None => {
                        last = format!("sentinel {} has no master info", s.port);
                        return false;
                    }
                };
                let get = |k: &str| {
                    fields
                        .iter()
                        .position(|x| x == k)
                        .and_then(|i| fields.get(i + 1))
                        .cloned()
                        .unwrap_or_default()
                };
                let replicas_up = up_replicas(s);
                let good = get("flags") == "master"
                    && replicas_up == want_replicas
                    && get("num-other-sentinels").parse::<usize>().ok() == Some(want_others);
                if !good {
                    last = format!(
                        "sentinel {}: flags={} replicas up={replicas_up} other sentinels={}",
                        s.port,
                        get("flags"),
                        get("num-other-sentinels")
                    );
                }
                good
            });
            if ok {
                return Ok(());
            }
            if Instant::now() > end {
                return Err(format!(
                    "sentinels not ready within {limit:?}: {last}; log:\n{}",
                    self.sentinels[0].log_tail(40)
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Folder of data node `i` when the options keep folders.
    pub fn node_dir(&self, i: usize) -> Option<PathBuf> {
        node_options(&self.opts, i, None).dir
    }
}

/// `ROLE`'s first element ("master", "slave", "sentinel").
pub fn role(s: &RedisServer) -> Option<String> {
    let v: redis::Value = s.query(&["ROLE"]).ok()?;
    match v {
        redis::Value::Array(items) => match items.first()? {
            redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            redis::Value::SimpleString(s) => Some(s.clone()),
            _ => None,
        },
        _ => None,
    }
}

fn master_fields(s: &RedisServer) -> Option<Vec<String>> {
    let v: redis::Value = s.query(&["SENTINEL", "master", MASTER_NAME]).ok()?;
    flat_strings(&v)
}

/// Replicas this Sentinel knows and does not flag as down.
fn up_replicas(s: &RedisServer) -> usize {
    let v: redis::Value = match s.query(&["SENTINEL", "replicas", MASTER_NAME]) {
        Ok(v) => v,
        Err(_) => return 0,
    };
    let redis::Value::Array(items) = v else {
        return 0;
    };
    items
        .iter()
        .filter_map(flat_strings)
        .filter(|f| {
            f.iter()
                .position(|x| x == "flags")
                .and_then(|i| f.get(i + 1))
                .is_some_and(|fl| fl == "slave")
        })
        .count()
}

/// A flat array of strings, or a RESP3 map flattened to `k, v, k, v`.
fn flat_strings(v: &redis::Value) -> Option<Vec<String>> {
    let s = |x: &redis::Value| match x {
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(s) => Some(s.clone()),
        redis::Value::Int(i) => Some(i.to_string()),
        _ => None,
    };
    match v {
        redis::Value::Array(items) => items.iter().map(s).collect(),
        redis::Value::Map(kv) => {
            let mut out = vec![];
            for (k, v) in kv {
                out.push(s(k)?);
                out.push(s(v)?);
            }
            Some(out)
        }
        _ => None,
    }
}

/// Bounded wait until `replica` reports its link to the primary up.
pub fn wait_link(replica: &RedisServer, limit: Duration) -> Result<(), String> {
    let end = Instant::now() + limit;
    loop {
        let info: Option<String> = replica.query(&["INFO", "replication"]).ok();
        if info.is_some_and(|i| i.contains("master_link_status:up")) {
            return Ok(());
        }
        if Instant::now() > end {
            return Err(format!(
                "replica {} did not sync within {limit:?}; log:\n{}",
                replica.port,
                replica.log_tail(30)
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
