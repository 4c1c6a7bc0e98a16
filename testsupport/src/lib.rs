//! The one `RedisServer` guard every integration test uses (module tests, client tests,
//! harness tests). Each server gets its own temp `--dir`, a free loopback port, a log file
//! that is printed when start-up fails, and is killed and reaped on drop.
//!
//! The harness (`lease-harness run`) starts its servers through the same guard, with a kept
//! folder (`ServerOptions::dir`), its own module path, `replica_of`, libfaketime's
//! environment and `die_with_parent`; [`sentinel`] adds Sentinel processes and a whole
//! primary + replicas + sentinels topology on top of it.
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
    /// Module `.so` to load instead of [`module_path`] (the harness passes its own).
    pub module: Option<PathBuf>,
    /// Keep the server's files (log, AOF, sentinel.conf) in this folder, created if missing
    /// and left in place on drop (the harness keeps every run's logs). `None`: a temp dir
    /// removed on drop.
    pub dir: Option<PathBuf>,
    /// `--replicaof 127.0.0.1 <port>` (or `--replicaof <announce_ip> <port>`).
    pub replica_of: Option<u16>,
    /// Also listen on this address (`--bind 127.0.0.1 <ip>`) and go by it: a replica
    /// connects to its primary there and reports it as its own (`replica-announce-ip`), so
    /// that Sentinel hands it out. The harness's `--netns` Sentinel topology: an address on
    /// the links it creates, which every elector namespace reaches. `None`: loopback only.
    pub announce_ip: Option<String>,
    /// SIGKILL the server when the *thread* that spawned it exits (PR_SET_PDEATHSIG), so an
    /// interrupted harness leaves no servers behind. Only for spawning threads that live as
    /// long as the server (the harness's main thread), hence off by default.
    pub die_with_parent: bool,
    /// Run as a Sentinel (`<bin> sentinel.conf --sentinel`) with these `sentinel.conf` lines
    /// (port, bind, dir and logfile are added). Sentinel insists on a writable config file:
    /// it records its view of the topology there. The module is never loaded into it.
    pub sentinel: Option<Vec<String>>,
    /// Start from a `redis.conf` with these lines (before every command-line argument), so
    /// that `CONFIG REWRITE` has a file to write. Written on first start only: a restart keeps
    /// what `CONFIG REWRITE` made of it.
    pub conf: Option<Vec<String>>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            module_args: vec!["lease.grace-ms".into(), "0".into()],
            extra_args: vec![],
            load_module: true,
            port: None,
            env: vec![],
            module: None,
            dir: None,
            replica_of: None,
            announce_ip: None,
            die_with_parent: false,
            sentinel: None,
            conf: None,
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
    pub fn module(mut self, path: &Path) -> Self {
        self.module = Some(path.to_path_buf());
        self
    }
    pub fn dir(mut self, dir: &Path) -> Self {
        self.dir = Some(dir.to_path_buf());
        self
    }
    pub fn replica_of(mut self, port: Option<u16>) -> Self {
        self.replica_of = port;
        self
    }
    /// See [`ServerOptions::announce_ip`].
    pub fn announce_ip(mut self, ip: Option<&str>) -> Self {
        self.announce_ip = ip.map(str::to_string);
        self
    }
    pub fn die_with_parent(mut self) -> Self {
        self.die_with_parent = true;
        self
    }
    /// `lease.grace-ms <ms>` as the module's arguments.
    pub fn grace_ms(self, ms: u64) -> Self {
        let ms = ms.to_string();
        self.module_args(&["lease.grace-ms", &ms])
    }
    /// Run under libfaketime with `control` as its timestamp file (`+0` = real time; write
    /// `+3600` into it to step the wall clock). LD_PRELOAD directly: the `faketime` wrapper
    /// forks and would orphan the server. The monotonic clock stays real: only the wall clock
    /// jumps.
    pub fn faketime(self, lib: &Path, control: &Path) -> Self {
        self.env("LD_PRELOAD", &lib.display().to_string())
            .env("FAKETIME_TIMESTAMP_FILE", &control.display().to_string())
            .env("FAKETIME_NO_CACHE", "1")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
    }
    /// Start from a `redis.conf` with these lines (see [`ServerOptions::conf`]).
    pub fn conf(mut self, lines: &[&str]) -> Self {
        self.conf = Some(lines.iter().map(|s| s.to_string()).collect());
        self
    }
    /// A Sentinel (see [`ServerOptions::sentinel`]).
    pub fn sentinel(lines: &[String]) -> Self {
        ServerOptions {
            load_module: false,
            module_args: vec![],
            sentinel: Some(lines.to_vec()),
            ..ServerOptions::default()
        }
    }
}

/// The server's folder: removed on drop, or kept (harness runs).
enum Dir {
    Temp(tempfile::TempDir),
    Kept(PathBuf),
}

impl Dir {
    fn path(&self) -> &Path {
        match self {
            Dir::Temp(t) => t.path(),
            Dir::Kept(p) => p,
        }
    }
}

pub struct RedisServer {
    pub port: u16,
    pub opts: ServerOptions,
    dir: Dir,
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
    try_free_port().expect("bind probe")
}

/// [`free_port`] without the panic (the harness reports errors instead).
pub fn try_free_port() -> std::io::Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
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
        match Self::try_start_with(bin, opts) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }

    /// Like `start_with_bin` (`bin` None: `REDIS_SERVER_BIN`), but returns every attempt's
    /// log as an error instead of panicking (the harness records it and goes on).
    pub fn try_start_with(bin: Option<String>, opts: ServerOptions) -> Result<RedisServer, String> {
        let mut errs = vec![];
        for _ in 0..5 {
            let dir = match &opts.dir {
                Some(d) => {
                    std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
                    Dir::Kept(d.clone())
                }
                None => Dir::Temp(
                    tempfile::Builder::new()
                        .prefix("redis-lease-test")
                        .tempdir()
                        .map_err(|e| format!("tempdir: {e}"))?,
                ),
            };
            let port = match opts.port {
                Some(p) => p,
                None => try_free_port().map_err(|e| format!("free port: {e}"))?,
            };
            let mut s = RedisServer {
                port,
                opts: opts.clone(),
                dir,
                child: None,
                bin: bin.clone(),
            };
            match s.spawn() {
                Ok(()) => return Ok(s),
                Err(e) => errs.push(e),
            }
        }
        Err(format!(
            "redis-server did not start:\n{}",
            errs.join("\n---\n")
        ))
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

    /// The last `n` lines of the log (for error messages).
    pub fn log_tail(&self, n: usize) -> String {
        let s = self.log();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
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
    fn command(&self) -> Result<Command, String> {
        let mut cmd = Command::new(self.bin.clone().unwrap_or_else(server_bin));
        if let Some(lines) = &self.opts.sentinel {
            // Written on first start only: later starts keep what Sentinel recorded there
            // (the current primary, known replicas and sentinels, the epoch), as a restarted
            // Sentinel would in production.
            let conf = self.dir.path().join("sentinel.conf");
            if !conf.exists() {
                std::fs::write(&conf, lines.join("\n") + "\n")
                    .map_err(|e| format!("{}: {e}", conf.display()))?;
            }
            cmd.arg(&conf).arg("--sentinel");
        } else if let Some(lines) = &self.opts.conf {
            let conf = self.dir.path().join("redis.conf");
            if !conf.exists() {
                std::fs::write(&conf, lines.join("\n") + "\n")
                    .map_err(|e| format!("{}: {e}", conf.display()))?;
            }
            cmd.arg(&conf);
        }
        cmd.arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1");
        if let Some(ip) = &self.opts.announce_ip {
            // One `--bind` with both addresses: a second `--bind` would replace the first.
            cmd.arg(ip);
            if self.opts.sentinel.is_none() {
                cmd.args(["--replica-announce-ip", ip]);
            }
        }
        cmd.arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path())
            .arg("--save")
            .arg("")
            .arg("--daemonize")
            .arg("no")
            .arg("--protected-mode")
            .arg("no");
        if self.opts.sentinel.is_none() {
            // DEBUG RELOAD / DIGEST-VALUE are part of the persistence tests.
            cmd.arg("--enable-debug-command").arg("yes");
        }
        if let Some(p) = self.opts.replica_of {
            // The primary's announced address when there is one: Sentinel compares a
            // replica's `master_host` with the primary's address and "fixes" a mismatch.
            let host = self.opts.announce_ip.as_deref().unwrap_or("127.0.0.1");
            cmd.args(["--replicaof", host, &p.to_string()]);
        }
        if self.opts.load_module {
            let module = match &self.opts.module {
                Some(m) => m.clone(),
                None => module_path(),
            };
            let mut load = vec![module.display().to_string()];
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
        if self.opts.die_with_parent {
            use std::os::unix::process::CommandExt;
            // SAFETY: prctl(2) is async-signal-safe and touches only the child's own flags;
            // it runs between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        Ok(cmd)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let child = self.command()?.spawn().map_err(|e| {
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
        if let Err(e) = self.try_restart_with(opts) {
            panic!("restart failed: {e}");
        }
    }

    /// `restart_with` returning the error (with the log) instead of panicking.
    pub fn try_restart_with(&mut self, opts: ServerOptions) -> Result<(), String> {
        self.kill();
        self.opts = opts;
        self.spawn()
    }

    /// Remove the persistence files (AOF folder, RDB) so that the next `restart` starts
    /// empty: a restart "without persistence".
    pub fn wipe(&self) {
        let _ = std::fs::remove_dir_all(self.dir().join("appendonlydir"));
        let _ = std::fs::remove_file(self.dir().join("dump.rdb"));
    }

    /// A connection with read/write timeouts (a stopped server must not hang the caller).
    pub fn try_connection_timeout(&self, t: Duration) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(self.url())?;
        let con = client.get_connection_with_timeout(t)?;
        con.set_read_timeout(Some(t))?;
        con.set_write_timeout(Some(t))?;
        Ok(con)
    }

    /// One command on a fresh connection with 500 ms timeouts; any reply type.
    pub fn query<T: redis::FromRedisValue>(&self, args: &[&str]) -> redis::RedisResult<T> {
        let mut con = self.try_connection_timeout(Duration::from_millis(500))?;
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut con)
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
        if let Dir::Kept(_) = self.dir {
            // Keep the log, drop the data (a campaign's AOF files add up).
            self.wipe();
        }
    }
}

pub mod sentinel;
