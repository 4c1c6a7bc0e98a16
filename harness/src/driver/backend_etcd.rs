//! The etcd backend (`--topology etcd`, issue 26): one etcd server (Debian's `etcd-server`
//! 3.4, or `ETCD_BIN`), client and peer URLs on 127.0.0.1 only, its data folder kept under the
//! run's folder so that a restart comes back with it (etcd fsyncs its WAL before it answers a
//! write) and a wipe starts a new, empty cluster. Only peer electors speak etcd
//! (`--elector-cmd`, peers/); they get `--redis http://127.0.0.1:PORT` (their proxy), the
//! conventional option name with this backend's URL.

use super::backend::Backend;
use crate::procs::{die_with_parent, signal};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) struct EtcdBackend {
    bin: String,
    dir: PathBuf,
    client_port: u16,
    peer_port: u16,
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

impl EtcdBackend {
    /// Start etcd in `<run>/etcd` on free loopback ports; returns once it is healthy.
    pub fn start(run_dir: &std::path::Path) -> Result<EtcdBackend, String> {
        let mut e = EtcdBackend {
            bin: std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".into()),
            dir: run_dir.join("etcd"),
            client_port: free_port()?,
            peer_port: free_port()?,
            child: None,
        };
        std::fs::create_dir_all(&e.dir).map_err(|err| format!("{}: {err}", e.dir.display()))?;
        e.spawn()?;
        Ok(e)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let data = self.dir.join("data");
        let mut cmd = Command::new(&self.bin);
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
            .arg(self.dir.join("etcd.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        die_with_parent(&mut cmd);
        self.child = Some(
            cmd.spawn()
                .map_err(|e| format!("spawn {} (apt-get install etcd-server): {e}", self.bin))?,
        );
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(Ok(Some(st))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return Err(format!(
                    "etcd exited ({st}) at start; log:\n{}",
                    self.log(0)
                ));
            }
            if self.answers(0) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "etcd not healthy after 15 s; log:\n{}",
                    self.log(0)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Backend for EtcdBackend {
    fn nodes(&self) -> usize {
        1
    }

    fn node_name(&self, _k: usize) -> String {
        "etcd".into()
    }

    fn node_addr(&self, _k: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.client_port))
    }

    fn node_url(&self, addr: SocketAddr) -> String {
        format!("http://{addr}")
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
        healthy(self.node_addr(k), Duration::from_millis(500))
    }

    fn set_clock(&self, _k: usize, _offset_s: f64) -> Result<(), String> {
        Err("etcd is a Go program: it reads the clock through the vDSO, which libfaketime does not reach".into())
    }

    fn kept(&self) -> &'static str {
        "data folder kept (etcd fsyncs its WAL before answering a write)"
    }

    fn log(&self, _k: usize) -> String {
        let s = std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for EtcdBackend {
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

    /// The backend's operations on a real etcd: a restart keeps what was written, a wipe
    /// loses it, kill and SIGSTOP make the probe fail and SIGCONT brings it back.
    #[test]
    #[ignore = "needs etcd-server (scripts/setup --peers); run with --ignored"]
    fn etcd_restart_keeps_data_wipe_loses_it_and_the_probe_follows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut e = EtcdBackend::start(dir.path()).expect("etcd start");
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
        assert_eq!(e.node_url(addr), format!("http://{addr}"));
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
