//! Several `lease-run` processes against a real server. Their children append `start`,
//! `beat` (every 20 ms: the child's "work") and `stop` lines with their token and a timestamp
//! to one file; the checks are on that file: work of different terms never overlaps, tokens
//! increase, the child of a dead or paused leader is dead before another starts.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use testsupport::{RedisServer, ServerOptions};

const BIN: &str = env!("CARGO_BIN_EXE_lease-run");

/// The child: logs start (with its pid), beats every 20 ms, logs stop on SIGTERM/SIGINT.
/// Shell snippets that print *host* pids: the command may run in its own PID namespace
/// (`--containment pidns`), where `$$` and `$!` are that namespace's numbers, while `/proc`
/// (mounted by the host) resolves `/proc/self` to the host pid of the shell that opens it.
const HP: &str = "read -r hp _ < /proc/self/stat; echo $hp";
/// A TERM-ignoring background `sleep 1000` that appends its host pid to `file`.
fn bg(file: &Path) -> String {
    format!(
        "sh -c 'trap \"\" TERM; read -r p _ < /proc/self/stat; echo $p >> {}; exec sleep 1000' &",
        file.display()
    )
}

fn child_script(file: &Path) -> String {
    let f = file.display();
    format!(
        "read -r hp _ < /proc/self/stat; echo \"start $LEASE_TOKEN $(date +%s%N) $hp\" >> {f}; \
         trap 'echo \"stop $LEASE_TOKEN $(date +%s%N) $1\" >> {f}; exit 0' TERM; \
         trap 'echo \"int $LEASE_TOKEN $(date +%s%N)\" >> {f}; exit 0' INT; \
         while :; do echo \"beat $LEASE_TOKEN $(date +%s%N)\" >> {f}; sleep 0.02; done"
    )
}

struct LeaseRun {
    child: Child,
    log: PathBuf,
    name: String,
}

impl LeaseRun {
    fn start(
        dir: &Path,
        name: &str,
        url: &str,
        key: &str,
        ttl: &str,
        extra: &[&str],
        cmd: &[&str],
    ) -> LeaseRun {
        let log = dir.join(format!("{name}.log"));
        let err = std::fs::File::create(&log).unwrap();
        let child = Command::new(BIN)
            .args([
                "--redis",
                url,
                "--key",
                key,
                "--ttl",
                ttl,
                "--backoff-max",
                "200ms",
                "--block-timeout",
                "1s",
            ])
            .args(extra)
            .arg("--")
            .args(cmd)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap();
        LeaseRun {
            child,
            log,
            name: name.to_string(),
        }
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    fn signal(&self, s: Signal) {
        kill(self.pid(), s).unwrap();
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Exit code, waiting at most `within`.
    fn wait(&mut self, within: Duration) -> Option<i32> {
        let end = Instant::now() + within;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code();
            }
            if Instant::now() > end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for LeaseRun {
    fn drop(&mut self) {
        let _ = kill(self.pid(), Signal::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- {} log:\n{}", self.name, self.log());
        }
    }
}

#[derive(Debug, Clone)]
struct Line {
    what: String,
    token: u64,
    ns: u128,
    pid: Option<i32>,
}

fn lines(file: &Path) -> Vec<Line> {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(file) {
        f.read_to_string(&mut s).unwrap();
    }
    s.lines()
        .filter_map(|l| {
            let p: Vec<&str> = l.split_whitespace().collect();
            Some(Line {
                what: p.first()?.to_string(),
                token: p.get(1)?.parse().ok()?,
                ns: p.get(2)?.parse().ok()?,
                pid: p.get(3).and_then(|x| x.parse().ok()),
            })
        })
        .collect()
}

/// The terms' activity intervals [first line, last line] are disjoint and in token order.
/// Returns the terms in order: (token, first ns, last ns).
fn check_no_overlap(file: &Path) -> Vec<(u64, u128, u128)> {
    let ls = lines(file);
    let mut terms: Vec<(u64, u128, u128)> = vec![];
    for l in &ls {
        match terms.iter_mut().find(|t| t.0 == l.token) {
            Some(t) => {
                t.1 = t.1.min(l.ns);
                t.2 = t.2.max(l.ns);
            }
            None => terms.push((l.token, l.ns, l.ns)),
        }
    }
    terms.sort_by_key(|t| t.1);
    for w in terms.windows(2) {
        assert!(
            w[1].0 > w[0].0,
            "token {} started after token {}: {terms:?}",
            w[1].0,
            w[0].0
        );
        assert!(
            w[0].2 < w[1].1,
            "term {} still active {} ns after term {} started",
            w[0].0,
            w[0].2 - w[1].1,
            w[1].0
        );
    }
    terms
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Poll until a `start` line with a token other than `not` shows up; returns it.
fn wait_start(file: &Path, not: &[u64], within: Duration) -> Line {
    let end = Instant::now() + within;
    loop {
        if let Some(l) = lines(file)
            .into_iter()
            .find(|l| l.what == "start" && !not.contains(&l.token))
        {
            return l;
        }
        assert!(
            Instant::now() < end,
            "no new start within {within:?}: {:?}",
            lines(file)
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn alive(pid: i32) -> bool {
    // Zombies count as dead: read the state from /proc.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

fn wait_dead(pid: i32, within: Duration) -> Duration {
    let t0 = Instant::now();
    while alive(pid) {
        assert!(
            t0.elapsed() < within,
            "pid {pid} still alive after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    t0.elapsed()
}

fn setup(
    n: usize,
    ttl: &str,
    extra: &[&str],
) -> (RedisServer, tempfile::TempDir, PathBuf, Vec<LeaseRun>) {
    let server = RedisServer::start(ServerOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events");
    let script = child_script(&file);
    let runs = (0..n)
        .map(|i| {
            LeaseRun::start(
                dir.path(),
                &format!("lr{i}"),
                &server.url(),
                "lr-key",
                ttl,
                extra,
                &["sh", "-c", &script],
            )
        })
        .collect();
    (server, dir, file, runs)
}

fn leader_index(runs: &[LeaseRun], token: u64) -> usize {
    // The leader's log mentions its token in "became leader".
    let end = Instant::now() + Duration::from_secs(2);
    loop {
        if let Some(i) = runs.iter().position(|r| {
            r.log()
                .contains(&format!("token={token} reason=\"acquired\""))
        }) {
            return i;
        }
        assert!(
            Instant::now() < end,
            "no lease-run log claims token {token}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Graceful stop (SIGTERM) of the leader's lease-run: child gets SIGTERM, lease released,
/// the next one starts within milliseconds; exit code 143.
#[test]
fn sigterm_hands_over_fast_without_overlap() {
    let (_server, _dir, file, mut runs) = setup(3, "600ms", &[]);
    let mut seen = vec![];
    let mut handovers = vec![];
    for _round in 0..2 {
        let s = wait_start(&file, &seen, Duration::from_secs(3));
        let i = leader_index(&runs, s.token);
        seen.push(s.token);
        std::thread::sleep(Duration::from_millis(300));
        let t0 = now_ns();
        runs[i].signal(Signal::SIGTERM);
        let next = wait_start(&file, &seen, Duration::from_secs(2));
        handovers.push(Duration::from_nanos((next.ns - t0) as u64));
        assert_eq!(
            runs[i].wait(Duration::from_secs(2)),
            Some(143),
            "exit code after SIGTERM"
        );
        assert!(
            lines(&file)
                .iter()
                .any(|l| l.what == "stop" && l.token == s.token),
            "child got no SIGTERM"
        );
    }
    eprintln!("lease-run SIGTERM -> next child started: {handovers:?}");
    for h in &handovers {
        assert!(*h < Duration::from_millis(300), "handover took {h:?}");
    }
    let terms = check_no_overlap(&file);
    assert!(terms.len() >= 3);
}

/// kill -9 of the leader's lease-run: its child dies at once (watchdog sees the pipe close),
/// and another lease-run takes over within TTL plus a small bound.
#[test]
fn kill_9_of_the_leader_kills_its_child_and_another_takes_over() {
    let ttl = Duration::from_millis(600);
    let (_server, _dir, file, runs) = setup(3, "600ms", &[]);
    let s = wait_start(&file, &[], Duration::from_secs(3));
    let i = leader_index(&runs, s.token);
    std::thread::sleep(Duration::from_millis(250));
    let t0 = now_ns();
    let k0 = Instant::now();
    runs[i].signal(Signal::SIGKILL);
    // At once: the watchdog reads EOF on its pipe, it does not wait for the deadline.
    let died = wait_dead(s.pid.unwrap(), Duration::from_millis(150));
    let next = wait_start(&file, &[s.token], ttl + Duration::from_millis(500));
    let takeover = Duration::from_nanos((next.ns - t0) as u64);
    eprintln!("kill -9 of leader lease-run: child dead after {died:?}, next child started after {takeover:?} (ttl {ttl:?})");
    assert!(
        takeover <= ttl + Duration::from_millis(200),
        "takeover {takeover:?}"
    );
    assert!(k0.elapsed() < Duration::from_secs(5));
    check_no_overlap(&file);
}

/// SIGSTOP of the leader's lease-run for longer than the TTL: its child is killed by the
/// watchdog before the local deadline; another takes over; on SIGCONT the paused one does
/// not act as leader (no work with its token) and exits 75 (lost, no --restart).
#[test]
fn sigstopped_leader_child_dies_and_it_does_not_lead_on_wake() {
    let ttl = Duration::from_millis(600);
    let (_server, _dir, file, mut runs) = setup(2, "600ms", &[]);
    let s = wait_start(&file, &[], Duration::from_secs(3));
    let i = leader_index(&runs, s.token);
    std::thread::sleep(Duration::from_millis(250));
    let t0 = Instant::now();
    runs[i].signal(Signal::SIGSTOP);
    let died = wait_dead(s.pid.unwrap(), ttl);
    let next = wait_start(&file, &[s.token], ttl * 3);
    // Stay stopped well past the TTL.
    while t0.elapsed() < ttl * 2 {
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("SIGSTOP of leader lease-run: its child killed {died:?} after the stop");
    let last_old_before_wake = lines(&file)
        .iter()
        .filter(|l| l.token == s.token)
        .map(|l| l.ns)
        .max()
        .unwrap();
    runs[i].signal(Signal::SIGCONT);
    assert_eq!(
        runs[i].wait(Duration::from_secs(3)),
        Some(75),
        "paused leader must exit 'lost'"
    );
    let after: Vec<Line> = lines(&file)
        .into_iter()
        .filter(|l| l.token == s.token && l.ns > last_old_before_wake)
        .collect();
    assert!(
        after.is_empty(),
        "the woken lease-run acted with its old token: {after:?}"
    );
    assert!(last_old_before_wake < next.ns);
    let log = runs[i].log();
    let tail: Vec<&str> = log.lines().rev().take(6).collect();
    eprintln!(
        "woken lease-run's last log lines (newest first):\n{}",
        tail.join("\n")
    );
    assert!(log.contains("lost leadership"), "{log}");
    check_no_overlap(&file);
}

/// Background children behind a shell that ignore SIGTERM are SIGKILLed with the group
/// before the local deadline when Redis goes away (consul lock's #2022/#797).
#[test]
fn shell_background_children_die_when_leadership_is_lost() {
    let ttl = Duration::from_millis(600);
    let mut server = RedisServer::start(ServerOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("bg.pid");
    let script = format!("trap '' TERM; {} wait", bg(&pidfile));
    let mut run = LeaseRun::start(
        dir.path(),
        "lr",
        &server.url(),
        "bg-key",
        "600ms",
        &[],
        &["sh", "-c", &script],
    );
    let end = Instant::now() + Duration::from_secs(3);
    let bg: i32 = loop {
        if let Some(p) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            break p;
        }
        assert!(Instant::now() < end, "child did not start");
        std::thread::sleep(Duration::from_millis(5));
    };
    std::thread::sleep(Duration::from_millis(100));
    server.kill();
    // The last renewal was sent at most renew_interval before the kill; its deadline is
    // < ttl after it. The background sleep must be dead by then.
    let died = wait_dead(bg, ttl);
    eprintln!("redis killed: TERM-ignoring background grandchild SIGKILLed after {died:?}");
    assert_eq!(run.wait(Duration::from_secs(3)), Some(75));
}

/// The child's own exit code is lease-run's, and the lease is released at once. (The child
/// also prints a watchdog report line on its stdout: it must not reach the control channel.)
#[test]
fn child_exit_code_is_propagated_and_the_lease_released() {
    let server = RedisServer::start(ServerOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let mut run = LeaseRun::start(dir.path(), "lr", &server.url(), "ex-key", "5s", &[], &["sh", "-c", "test -n \"$LEASE_TOKEN\" && test \"$LEASE_KEY\" = ex-key && test -n \"$LEASE_OWNER\" && echo 'fired kill' && exit 7"]);
    assert_eq!(run.wait(Duration::from_secs(5)), Some(7), "{}", run.log());
    let mut con = server.connection();
    let v: redis::Value = redis::cmd("LEASE.GET")
        .arg("ex-key")
        .query(&mut con)
        .unwrap();
    assert_eq!(v, redis::Value::Nil, "lease not released");
    let mut nf = LeaseRun::start(
        dir.path(),
        "nf",
        &server.url(),
        "ex-key",
        "5s",
        &[],
        &["/nonexistent/cmd"],
    );
    assert_eq!(nf.wait(Duration::from_secs(5)), Some(127));
    let mut usage = LeaseRun::start(
        dir.path(),
        "usage",
        &server.url(),
        "ex-key",
        "5s",
        &["--drift", "0.9"],
        &["true"],
    );
    assert_eq!(usage.wait(Duration::from_secs(5)), Some(2));
}

/// SIGINT is forwarded to the child's group; exit 130; lease released.
#[test]
fn sigint_is_forwarded_and_exit_is_130() {
    let (server, _dir, file, mut runs) = setup(1, "2s", &[]);
    let s = wait_start(&file, &[], Duration::from_secs(3));
    // A beat means the child's traps are installed (they follow the start line).
    let end = Instant::now() + Duration::from_secs(2);
    while !lines(&file).iter().any(|l| l.what == "beat") {
        assert!(Instant::now() < end, "no beat");
        std::thread::sleep(Duration::from_millis(2));
    }
    runs[0].signal(Signal::SIGINT);
    assert_eq!(runs[0].wait(Duration::from_secs(3)), Some(130));
    assert!(
        lines(&file)
            .iter()
            .any(|l| l.what == "int" && l.token == s.token),
        "child did not get SIGINT"
    );
    let mut con = server.connection();
    let v: redis::Value = redis::cmd("LEASE.GET")
        .arg("lr-key")
        .query(&mut con)
        .unwrap();
    assert_eq!(v, redis::Value::Nil);
}

/// --restart: the child exiting by itself releases and re-campaigns; the metrics endpoint
/// serves the Prometheus text format.
#[test]
fn restart_recampaigns_and_metrics_are_served() {
    let server = RedisServer::start(ServerOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let owners = dir.path().join("owners");
    let script = format!(
        "echo \"$LEASE_OWNER\" >> {}; echo \"start $LEASE_TOKEN $(date +%s%N)\" >> {}; sleep 0.3",
        owners.display(),
        file.display()
    );
    let _run = LeaseRun::start(
        dir.path(),
        "lr",
        &server.url(),
        "rs-key",
        "1s",
        &[
            "--restart",
            "--restart-delay",
            "50ms",
            "--metrics-addr",
            &addr,
        ],
        &["sh", "-c", &script],
    );
    let end = Instant::now() + Duration::from_secs(5);
    while lines(&file).len() < 3 {
        assert!(Instant::now() < end, "not restarted: {:?}", lines(&file));
        std::thread::sleep(Duration::from_millis(10));
    }
    let ts: Vec<u64> = lines(&file).iter().map(|l| l.token).collect();
    assert!(
        ts.windows(2).all(|w| w[1] > w[0]),
        "every term gets a new token: {ts:?}"
    );
    // R17: every term runs under a new owner, `base#1`, `base#2`, ... with one base.
    let owners = std::fs::read_to_string(&owners).unwrap();
    let owners: Vec<&str> = owners.lines().take(3).collect();
    let base = owners[0].strip_suffix("#1").expect("first reign is #1");
    assert!(!base.is_empty(), "{owners:?}");
    assert_eq!(
        owners,
        vec![
            format!("{base}#1"),
            format!("{base}#2"),
            format!("{base}#3")
        ],
        "one owner per reign"
    );
    let mut body = String::new();
    let end = Instant::now() + Duration::from_secs(2);
    while !body.contains("lease_transitions_total") {
        assert!(Instant::now() < end, "metrics: {body}");
        if let Ok(mut c) = std::net::TcpStream::connect(&addr) {
            let _ = c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
            body.clear();
            let _ = c.read_to_string(&mut body);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for m in [
        "lease_is_leader",
        "lease_token",
        "lease_acquire_attempts_total",
        "lease_renew_latency_seconds",
        "lease_deadline_seconds",
        "lease_redis_up",
    ] {
        assert!(body.contains(m), "{m} missing:\n{body}");
    }
    assert!(body.contains("key=\"rs-key\""));
    assert!(
        body.lines()
            .any(|l| l.starts_with("lease_transitions_total{")
                && l.contains("reason=\"task_exited\"")
                && l.contains("to=\"follower\"")
                && !l.ends_with(" 0")),
        "{body}"
    );
}

/// Parent pid, 0 once the process is gone.
fn ppid(pid: i32) -> i32 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// The chain of parents of `pid` up to (not including) init.
fn ancestors(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut p = pid;
    while p > 1 {
        p = ppid(p);
        out.push(p);
    }
    out
}

fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The watchdog of a lease-run: its child named `lease-watchdog` (waits for it to start).
fn watchdog_of(run: &LeaseRun) -> i32 {
    let me = run.child.id() as i32;
    let end = Instant::now() + Duration::from_secs(3);
    loop {
        let found = std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            (std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok()
                && ppid(pid) == me
                && comm(pid) == "lease-watchdog")
                .then_some(pid)
        });
        if let Some(p) = found {
            return p;
        }
        assert!(
            Instant::now() < end,
            "no lease-watchdog under lease-run {me}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Even the watchdog dying (kill -9) leaves nothing behind: CMD dies of its parent-death
/// signal and lease-run clears CMD's group (a TERM-ignoring grandchild behind a shell).
#[test]
fn killing_the_watchdog_kills_the_whole_group() {
    let server = RedisServer::start(ServerOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("bg.pid");
    let script = format!(
        "trap '' TERM; {} sleep 0.05; {HP} >> {}; wait",
        bg(&pidfile),
        pidfile.display()
    );
    let mut run = LeaseRun::start(
        dir.path(),
        "lr",
        &server.url(),
        "wd-key",
        "5s",
        &[],
        &["sh", "-c", &script],
    );
    let end = Instant::now() + Duration::from_secs(3);
    let pids: Vec<i32> = loop {
        let p: Vec<i32> = std::fs::read_to_string(&pidfile)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        if p.len() == 2 {
            break p;
        }
        assert!(Instant::now() < end, "child did not start");
        std::thread::sleep(Duration::from_millis(5));
    };
    let (bg, sh) = (pids[0], pids[1]);
    let watchdog = watchdog_of(&run);
    assert!(
        ancestors(sh).contains(&watchdog),
        "CMD must run under the watchdog"
    );
    kill(Pid::from_raw(watchdog), Signal::SIGKILL).unwrap();
    // Bounds are generous for a loaded CI machine; the measured figure is printed.
    wait_dead(sh, Duration::from_secs(1));
    let died = wait_dead(bg, Duration::from_secs(1));
    eprintln!("watchdog killed: grandchild dead after {died:?}");
    // CMD "exited" (killed); lease-run reports it as the command's end.
    assert_eq!(run.wait(Duration::from_secs(3)), Some(128 + 9));
}

/// --restart after a *loss* (Redis went away): the child is stopped, and when Redis is back
/// lease-run leads again and starts a new child with a new token.
#[test]
fn restart_after_a_lost_lease_runs_the_command_again() {
    let (mut server, _dir, file, mut runs) =
        setup(1, "600ms", &["--restart", "--restart-delay", "50ms"]);
    let s = wait_start(&file, &[], Duration::from_secs(3));
    std::thread::sleep(Duration::from_millis(100));
    server.kill();
    wait_dead(s.pid.unwrap(), Duration::from_millis(600));
    assert_eq!(
        runs[0].wait(Duration::from_millis(300)),
        None,
        "--restart must not exit on a loss"
    );
    server.restart();
    let next = wait_start(&file, &[s.token], Duration::from_secs(3));
    assert!(next.token > s.token);
    check_no_overlap(&file);
}

// ---- Containment (issue 31): nothing the command starts outlives the lease ----------------

/// A command that starts three workers which leave its process group the ways ordinary
/// tools do (`setsid`, Python's `start_new_session=True`, `setpgid`), then waits. Every
/// process of it runs `sleep <N>.<marker>`, so the test finds them by command line.
fn escapers(marker: u32) -> String {
    format!(
        "setsid sleep 7001.{marker} & \
         python3 -c 'import subprocess; subprocess.Popen([\"sleep\", \"7002.{marker}\"], start_new_session=True)'; \
         python3 -c 'import os; os.setpgid(0, 0); os.execvp(\"sleep\", [\"sleep\", \"7003.{marker}\"])' & \
         exec sleep 7000.{marker}"
    )
}

/// Live (not zombie) `sleep` processes whose command line holds `.{marker}` (lease-run's own
/// command line holds the script too: only the workers count).
fn marked(marker: u32) -> Vec<i32> {
    let tag = format!(".{marker}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            alive(pid)
                && comm(pid) == "sleep"
                && std::fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|c| String::from_utf8_lossy(&c).contains(&tag))
                    .unwrap_or(false)
        })
        .collect()
}

fn wait_marked(marker: u32, n: usize) {
    let end = Instant::now() + Duration::from_secs(5);
    while marked(marker).len() < n {
        assert!(
            Instant::now() < end,
            "only {:?} of {n} workers started",
            marked(marker)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// All marked processes gone within `within`; returns how long it took.
fn wait_none_marked(marker: u32, within: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        let left = marked(marker);
        if left.is_empty() {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < within,
            "still running {within:?} later: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn escaping_run(extra: &[&str], ttl: &str) -> (RedisServer, tempfile::TempDir, LeaseRun, u32) {
    let server = RedisServer::start(ServerOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let marker = std::process::id() * 100 + fastrand::u32(..100);
    let script = escapers(marker);
    let run = LeaseRun::start(
        dir.path(),
        "lr",
        &server.url(),
        &format!("esc-{marker}"),
        ttl,
        extra,
        &["sh", "-c", &script],
    );
    wait_marked(marker, 4);
    (server, dir, run, marker)
}

/// kill -9 of lease-run: the workers that left the command's group die too, before the lease
/// could be anyone else's (TTL 1 s: the local deadline is under 1 s after the last renewal;
/// the bound adds the 1 s of the "done means").
#[test]
fn kill_9_of_lease_run_ends_workers_that_left_the_group() {
    for containment in ["auto", "subreaper"] {
        let (_server, _dir, mut run, marker) = escaping_run(&["--containment", containment], "1s");
        run.signal(Signal::SIGKILL);
        let t = wait_none_marked(marker, Duration::from_secs(2));
        eprintln!("{containment}: kill -9 of lease-run: every worker dead after {t:?}");
        let _ = run.wait(Duration::from_secs(1));
    }
}

/// SIGTERM: the graceful stop reaches the workers outside the group too, and lease-run exits
/// 143 only after they are gone.
#[test]
fn sigterm_ends_workers_that_left_the_group() {
    let (_server, _dir, mut run, marker) = escaping_run(&[], "1s");
    run.signal(Signal::SIGTERM);
    assert_eq!(run.wait(Duration::from_secs(3)), Some(143));
    assert!(marked(marker).is_empty(), "{:?}", marked(marker));
}

/// The lease lost (Redis gone): every worker is dead by the local deadline + 1 s.
#[test]
fn a_lost_lease_ends_workers_that_left_the_group() {
    let (mut server, _dir, mut run, marker) = escaping_run(&[], "1s");
    server.kill();
    let t = wait_none_marked(marker, Duration::from_secs(2));
    eprintln!("redis killed: every worker dead after {t:?}");
    assert_eq!(run.wait(Duration::from_secs(3)), Some(75));
}

/// Both lease-run processes SIGKILLed at once (`killall -9` of both names): with a PID
/// namespace nothing of the command survives, because the kernel kills the namespace when its
/// init dies, and the init dies with its parent.
#[test]
fn kill_9_of_both_lease_run_processes_ends_every_worker() {
    let (_server, _dir, mut run, marker) = escaping_run(&["--containment", "pidns"], "1s");
    let wd = watchdog_of(&run);
    kill(Pid::from_raw(wd), Signal::SIGKILL).unwrap();
    run.signal(Signal::SIGKILL);
    let t = wait_none_marked(marker, Duration::from_secs(2));
    eprintln!("both killed: every worker dead after {t:?}");
    let _ = run.wait(Duration::from_secs(1));
}

/// The watchdog has its own process name, so "stop every lease-run by name" stops only the
/// elector: the watchdog still ends the command at the deadline (the old shared name stopped
/// both, and the command ran on past a 1 s TTL).
#[test]
fn stopping_lease_run_by_name_leaves_the_watchdog_to_end_the_command() {
    let (_server, _dir, run, marker) = escaping_run(&[], "1s");
    let wd = watchdog_of(&run);
    assert_eq!(comm(wd), "lease-watchdog");
    // `pkill -STOP -x lease-run`, limited to this lease-run's own tree (other tests run
    // lease-runs in parallel).
    let me = run.child.id() as i32;
    let ours: Vec<i32> = std::iter::once(me)
        .chain(
            std::fs::read_dir("/proc")
                .unwrap()
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter(|&p| ancestors(p).contains(&me)),
        )
        .filter(|&p| comm(p) == "lease-run")
        .collect();
    assert_eq!(ours, vec![me], "only the elector is named lease-run");
    for p in &ours {
        kill(Pid::from_raw(*p), Signal::SIGSTOP).unwrap();
    }
    let t = wait_none_marked(marker, Duration::from_secs(2));
    eprintln!("elector stopped by name: every worker dead after {t:?}");
}

/// The abort path: a watchdog that cannot act (here SIGSTOPped, like one stuck behind a
/// command in uninterruptible sleep) when lease-run stops at its deadline. The leader task is
/// aborted; its drop guard must still end everything, and the lease is released only once
/// that is confirmed.
#[test]
fn a_stuck_watchdog_at_the_deadline_still_ends_every_worker() {
    let (_server, _dir, mut run, marker) = escaping_run(&[], "1s");
    let wd = watchdog_of(&run);
    kill(Pid::from_raw(wd), Signal::SIGSTOP).unwrap();
    run.signal(Signal::SIGTERM);
    let t = wait_none_marked(marker, Duration::from_secs(2));
    eprintln!("stuck watchdog: every worker dead after {t:?}");
    assert!(
        run.wait(Duration::from_secs(3)).is_some(),
        "lease-run exits"
    );
}

/// As PID 1 (a container's entrypoint), lease-run leaves no zombies behind: the command's
/// orphans are reaped (by the namespace init or the subreaper watchdog), not re-parented to
/// a PID 1 that never waits for them.
#[test]
fn as_pid_1_no_orphan_stays_a_zombie() {
    let server = RedisServer::start(ServerOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let err = std::fs::File::create(dir.path().join("pid1.log")).unwrap();
    let marker = std::process::id() * 100 + fastrand::u32(..100);
    let script = format!("for i in $(seq 20); do (sleep 0.01 &); done; exec sleep 7000.{marker}");
    let mut child = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--kill-child",
            BIN,
            "--redis",
            &server.url(),
        ])
        .args(["--key", &format!("pid1-{marker}"), "--ttl", "1s", "--"])
        .args(["sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .unwrap();
    wait_marked(marker, 1);
    std::thread::sleep(Duration::from_millis(1500));
    // lease-run is unshare's child (PID 1 of the test's namespace).
    let unshare = child.id() as i32;
    let lease_run: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&p| ppid(p) == unshare)
        .collect();
    assert_eq!(lease_run.len(), 1, "{lease_run:?}");
    let zombies: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&p| ppid(p) == lease_run[0] && !alive(p))
        .collect();
    let _ = kill(Pid::from_raw(unshare), Signal::SIGKILL);
    let _ = child.wait();
    assert!(
        zombies.is_empty(),
        "zombies under lease-run as PID 1: {zombies:?}"
    );
}
