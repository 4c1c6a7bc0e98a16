//! The one `RedisServer` guard every integration test uses (module tests, client tests,
//! harness tests). Each server gets its own temp `--dir`, a free loopback port, a log file
//! that is printed when start-up fails, and is killed and reaped on drop.
//!
//! Environment:
//! - `REDIS_SERVER_BIN`: server binary (default `redis-server`, Debian's 7.0). CI runs the
//!   suite once more against a newer server by setting this.
//! - `REDIS_LEASE_MODULE`: path of the module `.so` (default: `libredis_lease.so` next to the
//!   test binary's profile folder, i.e. what `cargo build` produced).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What to start. `Default` is a primary with the module loaded, grace disabled (most tests
/// are not about grace), no persistence.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Arguments after the module path in `--loadmodule` (e.g. `lease.grace-ms 0`).
    pub module_args: Vec<String>,
    /// Extra `redis-server` arguments, e.g. `["--appendonly", "yes"]`.
    pub extra_args: Vec<String>,
    /// Load the module at all.
    pub load_module: bool,
    /// Fixed port (restart keeps the old one); `None` picks a free one.
    pub port: Option<u16>,
    /// Environment variables for the server process (libfaketime, for example).
    pub env: Vec<(String, String)>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            module_args: vec!["lease.grace-ms".into(), "0".into()],
            extra_args: vec![],
            load_module: true,
            port: None,
            env: vec![],
        }
    }
}

impl ServerOptions {
    pub fn module_args(mut self, args: &[&str]) -> Self {
        self.module_args = args.iter().map(|s| s.to_string()).collect();
        self
    }
    pub fn extra_args(mut self, args: &[&str]) -> Self {
        self.extra_args.extend(args.iter().map(|s| s.to_string()));
        self
    }
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }
}

pub struct RedisServer {
    pub port: u16,
    pub opts: ServerOptions,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// Binary for this server when not `server_bin()` (see `start_with_bin`).
    bin: Option<String>,
}

/// Binary under test.
pub fn server_bin() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into())
}

/// Major version of the server under test (7 for Debian's 7.0.15).
pub fn server_major() -> u32 {
    let out = Command::new(server_bin()).arg("--version").output();
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default();
    // "Redis server v=7.0.15 ..." / "Valkey server v=9.1.2 ..."
    text.split("v=")
        .nth(1)
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse().ok())
        .unwrap_or(0)
}

/// Path of the module shared object.
pub fn module_path() -> PathBuf {
    if let Ok(p) = std::env::var("REDIS_LEASE_MODULE") {
        return PathBuf::from(p);
    }
    // target/<profile>/deps/<test-binary> -> target/<profile>/libredis_lease.so
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let candidate = dir.join("libredis_lease.so");
    assert!(
        candidate.exists(),
        "module not built at {} (run `cargo build` first or set REDIS_LEASE_MODULE)",
        candidate.display()
    );
    candidate
}

/// A port nobody listens on right now. The tiny race between dropping the probe listener and
/// the server binding it is accepted; `start` retries on a bind failure.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind probe");
    l.local_addr().expect("addr").port()
}

impl RedisServer {
    /// Start a server; retries on a fresh port a few times (port races), then panics with
    /// every attempt's log.
    pub fn start(opts: ServerOptions) -> RedisServer {
        Self::start_inner(None, opts)
    }

    /// Like `start`, but runs `bin` instead of `REDIS_SERVER_BIN` (and keeps it across
    /// `restart`): for tests that need one particular server whatever the suite runs on
    /// (libfaketime works only with some builds).
    pub fn start_with_bin(bin: &str, opts: ServerOptions) -> RedisServer {
        Self::start_inner(Some(bin.to_string()), opts)
    }

    fn start_inner(bin: Option<String>, opts: ServerOptions) -> RedisServer {
        let mut errs = vec![];
        for _ in 0..5 {
            let dir = tempfile::Builder::new()
                .prefix("redis-lease-test")
                .tempdir()
                .expect("tempdir");
            let port = opts.port.unwrap_or_else(free_port);
            let mut s = RedisServer {
                port,
                opts: opts.clone(),
                dir,
                child: None,
                bin: bin.clone(),
            };
            match s.spawn() {
                Ok(()) => return s,
                Err(e) => errs.push(e),
            }
        }
        panic!("redis-server did not start:\n{}", errs.join("\n---\n"));
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The server's stdout/stderr (the module reports caught panics there).
    pub fn stdio(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stdio.log")).unwrap_or_default()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Command line for this server (exposed so tests can assert on it in failures).
    fn command(&self) -> Command {
        let mut cmd = Command::new(self.bin.clone().unwrap_or_else(server_bin));
        cmd.arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path())
            .arg("--save")
            .arg("")
            .arg("--daemonize")
            .arg("no")
            .arg("--protected-mode")
            .arg("no")
            // DEBUG RELOAD / DIGEST-VALUE are part of the persistence tests.
            .arg("--enable-debug-command")
            .arg("yes");
        if self.opts.load_module {
            let mut load = vec![module_path().display().to_string()];
            load.extend(self.opts.module_args.iter().cloned());
            cmd.arg("--loadmodule").args(load);
        }
        cmd.args(&self.opts.extra_args);
        for (k, v) in &self.opts.env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }

    fn spawn(&mut self) -> Result<(), String> {
        let child = self.command().spawn().map_err(|e| {
            let bin = self.bin.clone().unwrap_or_else(server_bin);
            format!("spawn {bin}: {e}")
        })?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    self.child = None;
                    return Err(format!(
                        "server exited ({status}) during start-up; log:\n{}",
                        self.log()
                    ));
                }
            }
            if let Ok(mut con) = self.try_connection() {
                if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(format!(
                    "server not answering after 10 s; log:\n{}",
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn try_connection(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(self.url())?;
        client.get_connection_with_timeout(Duration::from_millis(500))
    }

    /// A fresh connection; panics with the server log attached if it cannot connect.
    pub fn connection(&self) -> redis::Connection {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match self.try_connection() {
                Ok(c) => return c,
                Err(e) if Instant::now() > deadline => {
                    panic!(
                        "cannot connect to {}: {e}; log:\n{}",
                        self.url(),
                        self.log()
                    )
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// Is the process still running? (used by "the server stays up" assertions)
    pub fn alive(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Panics with the log when the server died (for example after a crash in the module).
    pub fn assert_alive(&mut self) {
        if !self.alive() {
            panic!("redis-server died; log:\n{}", self.log());
        }
    }

    pub fn signal(&self, sig: i32) {
        if let Some(pid) = self.pid() {
            // SAFETY: plain kill(2) on our own child's pid.
            unsafe {
                libc::kill(pid as i32, sig);
            }
        }
    }

    /// kill -9 and reap; the directory (RDB/AOF) stays for `restart`.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM (Redis saves/fsyncs per its config) and reap.
    pub fn shutdown(&mut self) {
        if let Some(mut c) = self.child.take() {
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start again on the same port and directory (after `kill` or `shutdown`), optionally
    /// with changed options.
    pub fn restart_with(&mut self, opts: ServerOptions) {
        self.kill();
        self.opts = opts;
        if let Err(e) = self.spawn() {
            panic!("restart failed: {e}");
        }
    }

    pub fn restart(&mut self) {
        let opts = self.opts.clone();
        self.restart_with(opts);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SIGCONT first: a test may leave the server stopped.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGCONT);
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
