//! The consensus stores the peer electors use (`--backend etcd|zookeeper`, issue 26): one
//! server, client (and peer) ports on 127.0.0.1 only, its data folder under the run's folder
//! so that a restart comes back with it (both fsync their log before they answer a write) and
//! a wipe starts empty. Only peer electors speak these (`--elector-cmd`, peers/); they get
//! `--redis tcp://127.0.0.1:PORT/` (their proxy), the conventional option name with the host
//! and port they read from it (peers/etcd-election, peers/curator).
//! - etcd: Debian's `etcd-server` 3.4 (`ETCD_BIN`); probe `GET /health` (etcd serves HTTP/1
//!   beside gRPC on its client port).
//! - ZooKeeper: Debian's `zookeeper` 3.8 jars, `ZooKeeperServerMain` standalone; probe the
//!   four-letter word `srvr` (statistics only while it serves); tickTime = TTL/2 capped at 1 s, so that a
//!   session of one TTL is within the 2..20 ticks the server grants (else it stretches it).

use super::backend::Backend;
use crate::procs::{die_with_parent, signal};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Faults of `--backend etcd|zookeeper` (their default set): the elector faults through the
/// proxy and what one server can suffer (kill -9 with its data kept or wiped, down for a
/// while, SIGSTOP, every elector cut from it).
pub const STORE_FAULTS: &[&str] = &[
    "kill",
    "pause",
    "partition",
    "blackhole",
    "delay",
    "resign",
    "restart",
    "restart-aof",
    "node-kill",
    "node-pause",
    "node-partition",
];

/// Why a fault of another topology does not apply to `store` (printed when asked for).
pub fn store_why_not(store: Store, kind: &str) -> Option<&'static str> {
    Some(match (kind, store) {
        ("clock-jump" | "node-clock-jump", Store::Etcd) => {
            "etcd is a Go program: it reads the clock through the vDSO, which libfaketime does not reach"
        }
        ("clock-jump" | "node-clock-jump", Store::ZooKeeper) => {
            "not wired for ZooKeeper: its session expiry runs on the monotonic clock (System.nanoTime), which a wall-clock jump leaves alone"
        }
        ("late-delivery", Store::Etcd) => {
            "the proxy holds Redis commands by name (RESP); etcd speaks gRPC over HTTP/2"
        }
        ("late-delivery", Store::ZooKeeper) => {
            "the proxy holds Redis commands by name (RESP); ZooKeeper speaks its own binary protocol"
        }
        (
            "failover" | "node-failover" | "node-split-brain" | "failover-coordinated"
            | "split-brain",
            _,
        ) => "one server has no replica to promote",
        ("client-pause", _) => "CLIENT PAUSE is a Redis command",
        ("sentinel-failover", _) => "Redis Sentinel only",
        ("split", _) => "split cuts an elector from a majority of several nodes; here is one",
        _ => return None,
    })
}

/// Which store.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Store {
    Etcd,
    ZooKeeper,
}

impl Store {
    pub fn name(self) -> &'static str {
        match self {
            Store::Etcd => "etcd",
            Store::ZooKeeper => "zookeeper",
        }
    }

    /// Is the store's server installed? `Err` names the package.
    pub fn check_installed(self) -> Result<(), String> {
        match self {
            Store::Etcd => {
                let bin = std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".into());
                let ok = Command::new(&bin)
                    .arg("--version")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                ok.then_some(()).ok_or(format!(
                    "{bin} not found or not working (scripts/setup --peers installs etcd-server, or set ETCD_BIN)"
                ))
            }
            Store::ZooKeeper => std::path::Path::new(ZK_JAR)
                .exists()
                .then_some(())
                .ok_or(format!(
                    "{ZK_JAR} missing (scripts/setup --peers installs zookeeper)"
                )),
        }
    }
}

const ZK_JAR: &str = "/usr/share/java/zookeeper.jar";
const ZK_SLF4J: &str = "/usr/share/java/slf4j-simple.jar";

pub(crate) struct StoreBackend {
    store: Store,
    dir: PathBuf,
    client_port: u16,
    peer_port: u16,
    tick_ms: u64,
    child: Option<Child>,
}

fn free_port() -> Result<u16, String> {
    testsupport::try_free_port().map_err(|e| format!("free port: {e}"))
}

/// One HTTP/1.0 request on a fresh connection, every step bounded by `timeout`; the whole
/// reply (status line, headers, body), or None when the server does not answer. etcd serves
/// plain HTTP/1 on its client port beside gRPC (`/health`, and the JSON gateway `/v3/...`).
pub(crate) fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    timeout: Duration,
) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    let req = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut reply = String::new();
    s.take(1024 * 1024).read_to_string(&mut reply).ok()?;
    Some(reply)
}

/// `GET /health` answered `"health":"true"` within `timeout`: etcd reports healthy once it
/// has a raft leader (itself) and can serve a linearizable read.
pub(crate) fn healthy(addr: SocketAddr, timeout: Duration) -> bool {
    http(addr, "GET", "/health", "", timeout).is_some_and(|r| is_healthy_reply(&r))
}

/// The pure half of [`healthy`]: an HTTP 200 whose JSON says `"health":"true"`.
fn is_healthy_reply(reply: &str) -> bool {
    let status_ok = reply
        .lines()
        .next()
        .is_some_and(|l| l.split_whitespace().nth(1) == Some("200"));
    let compact: String = reply.chars().filter(|c| !c.is_whitespace()).collect();
    status_ok && compact.contains("\"health\":\"true\"")
}

/// `srvr` answered with the server's statistics within `timeout` (ZooKeeper's four-letter
/// word). Not `ruok`: that says `imok` as soon as the process listens, also while it answers
/// every other request with "not currently serving requests" (seen at start-up).
fn zk_serving(addr: SocketAddr, timeout: Duration) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, timeout) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    let mut reply = String::new();
    s.write_all(b"srvr").is_ok()
        && s.take(64 * 1024).read_to_string(&mut reply).is_ok()
        && reply.lines().any(|l| l.starts_with("Zxid: "))
}

impl StoreBackend {
    /// Start `store` in `<run>/<name>` on free loopback ports; returns once it answers.
    pub fn start(
        store: Store,
        run_dir: &std::path::Path,
        ttl_ms: u64,
    ) -> Result<StoreBackend, String> {
        let mut e = StoreBackend {
            store,
            dir: run_dir.join(store.name()),
            client_port: free_port()?,
            peer_port: free_port()?,
            tick_ms: (ttl_ms / 2).clamp(100, 1000),
            child: None,
        };
        std::fs::create_dir_all(&e.dir).map_err(|err| format!("{}: {err}", e.dir.display()))?;
        e.spawn()?;
        Ok(e)
    }

    fn command(&self) -> Result<Command, String> {
        let data = self.dir.join("data");
        let log = self.dir.join(format!("{}.log", self.store.name()));
        let mut cmd = match self.store {
            Store::Etcd => {
                let client = format!("http://127.0.0.1:{}", self.client_port);
                let peer = format!("http://127.0.0.1:{}", self.peer_port);
                let mut cmd =
                    Command::new(std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".into()));
                cmd.args(["--name", "n0"])
                    .arg("--data-dir")
                    .arg(&data)
                    .args(["--listen-client-urls", &client])
                    .args(["--advertise-client-urls", &client])
                    .args(["--listen-peer-urls", &peer])
                    .args(["--initial-advertise-peer-urls", &peer])
                    .args(["--initial-cluster", &format!("n0={peer}")])
                    .args(["--initial-cluster-state", "new"])
                    .args(["--logger", "zap", "--log-outputs"])
                    .arg(&log)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                cmd
            }
            Store::ZooKeeper => {
                std::fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
                let cfg = self.dir.join("zoo.cfg");
                let lines = [
                    format!("tickTime={}", self.tick_ms),
                    format!("dataDir={}", data.display()),
                    format!("clientPort={}", self.client_port),
                    "clientPortAddress=127.0.0.1".into(),
                    "maxClientCnxns=0".into(),
                    "admin.enableServer=false".into(),
                    "4lw.commands.whitelist=srvr,stat".into(),
                ];
                std::fs::write(&cfg, lines.join("\n") + "\n").map_err(|e| e.to_string())?;
                let mut cp = ZK_JAR.to_string();
                if std::path::Path::new(ZK_SLF4J).exists() {
                    cp = format!("{cp}:{ZK_SLF4J}");
                }
                let out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
                let err = out.try_clone().map_err(|e| e.to_string())?;
                let mut cmd = Command::new("java");
                cmd.args([
                    "-Xmx256m",
                    "-XX:+UseSerialGC",
                    "-Dzookeeper.admin.enableServer=false",
                ])
                .args([
                    "-cp",
                    &cp,
                    "org.apache.zookeeper.server.ZooKeeperServerMain",
                ])
                .arg(&cfg)
                .stdout(out)
                .stderr(err);
                cmd
            }
        };
        cmd.stdin(Stdio::null());
        die_with_parent(&mut cmd);
        Ok(cmd)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let name = self.store.name();
        let mut cmd = self.command()?;
        self.child = Some(cmd.spawn().map_err(|e| format!("spawn {name}: {e}"))?);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(Ok(Some(st))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return Err(format!(
                    "{name} exited ({st}) at start; log:\n{}",
                    self.log(0)
                ));
            }
            if self.answers(0) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{name} not answering after 20 s; log:\n{}",
                    self.log(0)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Backend for StoreBackend {
    fn nodes(&self) -> usize {
        1
    }

    fn node_name(&self, _k: usize) -> String {
        self.store.name().into()
    }

    fn node_addr(&self, _k: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.client_port))
    }

    fn node_url(&self, addr: SocketAddr) -> String {
        format!("tcp://{addr}/")
    }

    fn kill(&mut self, _k: usize) {
        if let Some(mut c) = self.child.take() {
            signal(c.id(), libc::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn wipe(&mut self, _k: usize) {
        let _ = std::fs::remove_dir_all(self.dir.join("data"));
    }

    fn restart(&mut self, k: usize) -> Result<(), String> {
        self.kill(k);
        self.spawn()
    }

    fn signal(&self, _k: usize, sig: i32) {
        if let Some(c) = &self.child {
            signal(c.id(), sig);
        }
    }

    fn answers(&self, k: usize) -> bool {
        let t = Duration::from_millis(500);
        match self.store {
            Store::Etcd => healthy(self.node_addr(k), t),
            Store::ZooKeeper => zk_serving(self.node_addr(k), t),
        }
    }

    fn set_clock(&self, _k: usize, _offset_s: f64) -> Result<(), String> {
        Err(store_why_not(self.store, "clock-jump")
            .unwrap_or("no clock control")
            .into())
    }

    fn kept(&self) -> &'static str {
        match self.store {
            Store::Etcd => "data folder kept, etcd fsyncs its WAL before answering a write",
            Store::ZooKeeper => "data folder kept, ZooKeeper fsyncs its log before acknowledging",
        }
    }

    fn log(&self, _k: usize) -> String {
        let log = self.dir.join(format!("{}.log", self.store.name()));
        let s = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for StoreBackend {
    fn drop(&mut self) {
        self.kill(0);
        // Keep the log, drop the data (a campaign's data folders add up).
        self.wipe(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(2);

    /// `foo` = base64 of the key, through etcd's JSON gateway.
    fn put_foo(addr: SocketAddr) -> bool {
        let r = http(
            addr,
            "POST",
            "/v3/kv/put",
            r#"{"key":"Zm9v","value":"YmFy"}"#,
            T,
        );
        r.is_some_and(|r| r.starts_with("HTTP/1.0 200"))
    }

    fn has_foo(addr: SocketAddr) -> bool {
        let r = http(addr, "POST", "/v3/kv/range", r#"{"key":"Zm9v"}"#, T).unwrap_or_default();
        assert!(r.starts_with("HTTP/1.0 200"), "range: {r}");
        r.contains("\"kvs\"")
    }

    fn wait(what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !f() {
            assert!(Instant::now() < deadline, "{what}: not within 15 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// ZooKeeper's `srvr` four-letter word: its last zxid (every transaction raises it).
    fn zxid(addr: SocketAddr) -> u64 {
        let mut s = TcpStream::connect_timeout(&addr, T).expect("connect");
        s.set_read_timeout(Some(T)).expect("timeout");
        s.write_all(b"srvr").expect("srvr");
        let mut reply = String::new();
        let _ = s.read_to_string(&mut reply);
        let hex = reply
            .lines()
            .find_map(|l| l.strip_prefix("Zxid: 0x"))
            .unwrap_or_else(|| panic!("no Zxid in {reply:?}"));
        u64::from_str_radix(hex.trim(), 16).expect("hex zxid")
    }

    /// A raw ZooKeeper ConnectRequest (jute: protocol 0, last zxid 0, timeout 2000 ms, session
    /// 0, a 16-byte zero password, not read-only): the server logs a createSession
    /// transaction, so the zxid rises.
    fn open_session(addr: SocketAddr) {
        let mut body = vec![];
        body.extend(0i32.to_be_bytes());
        body.extend(0i64.to_be_bytes());
        body.extend(2000i32.to_be_bytes());
        body.extend(0i64.to_be_bytes());
        body.extend(16i32.to_be_bytes());
        body.extend([0u8; 16]);
        body.push(0);
        let mut s = TcpStream::connect_timeout(&addr, T).expect("connect");
        s.set_read_timeout(Some(T)).expect("timeout");
        s.write_all(&(body.len() as i32).to_be_bytes())
            .expect("len");
        s.write_all(&body).expect("connect request");
        let mut len = [0u8; 4];
        s.read_exact(&mut len).expect("connect response");
    }

    /// The backend's operations on a real ZooKeeper, as for etcd below; what survives is
    /// read as the zxid (raised by a session we open, kept by a restart, back to the first
    /// start's value after a wipe).
    #[test]
    #[ignore = "needs zookeeper (scripts/setup --peers); run with --ignored"]
    fn zookeeper_restart_keeps_data_wipe_loses_it_and_the_probe_follows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut z = StoreBackend::start(Store::ZooKeeper, dir.path(), 2000).expect("zk start");
        let addr = z.node_addr(0);
        let fresh = zxid(addr);
        open_session(addr);
        wait("zxid raised by a session", || zxid(addr) > fresh);
        let seen = zxid(addr);
        z.kill(0);
        assert!(!z.answers(0), "answers after kill -9");
        z.restart(0).expect("restart");
        assert!(zxid(addr) >= seen, "the log did not survive a restart");
        z.signal(0, libc::SIGSTOP);
        assert!(!z.answers(0), "answers while stopped");
        z.signal(0, libc::SIGCONT);
        wait("serving after SIGCONT", || z.answers(0));
        z.kill(0);
        z.wipe(0);
        z.restart(0).expect("restart after wipe");
        assert_eq!(zxid(addr), fresh, "the log survived a wipe");
        assert!(z.set_clock(0, 60.0).is_err());
    }

    /// The backend's operations on a real etcd: a restart keeps what was written, a wipe
    /// loses it, kill and SIGSTOP make the probe fail and SIGCONT brings it back.
    #[test]
    #[ignore = "needs etcd-server (scripts/setup --peers); run with --ignored"]
    fn etcd_restart_keeps_data_wipe_loses_it_and_the_probe_follows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut e = StoreBackend::start(Store::Etcd, dir.path(), 2000).expect("etcd start");
        let addr = e.node_addr(0);
        assert!(e.answers(0));
        assert!(put_foo(addr), "put");
        assert!(has_foo(addr));
        e.kill(0);
        assert!(!e.answers(0), "answers after kill -9");
        e.restart(0).expect("restart");
        assert!(has_foo(addr), "the key did not survive a restart with data");
        e.signal(0, libc::SIGSTOP);
        assert!(!e.answers(0), "answers while stopped");
        e.signal(0, libc::SIGCONT);
        wait("healthy after SIGCONT", || e.answers(0));
        e.kill(0);
        e.wipe(0);
        e.restart(0).expect("restart after wipe");
        assert!(!has_foo(addr), "the key survived a wipe");
        assert!(e.set_clock(0, 60.0).is_err());
        assert_eq!(e.node_url(addr), format!("tcp://{addr}/"));
    }

    #[test]
    fn health_needs_200_and_true() {
        let ok = "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"health\":\"true\"}";
        assert!(is_healthy_reply(ok));
        let no_leader = "HTTP/1.0 503 Service Unavailable\r\n\r\n{\"health\":\"false\"}";
        assert!(!is_healthy_reply(no_leader));
        assert!(!is_healthy_reply(
            "HTTP/1.0 200 OK\r\n\r\n{\"health\":\"false\"}"
        ));
        assert!(!is_healthy_reply(""));
    }
}
