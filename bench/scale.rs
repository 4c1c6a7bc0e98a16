//! Scale figures (docs/scale.md §2), each against redis-server processes this program starts itself
//! with the module at SO loaded. Used by `scripts/scale`; prints one line per figure.
//!
//! Usage: scale [--json FILE] SO [N] [STORM] [PART...]   N leases (default 1,000,000), STORM
//! leases that expire together (default 100,000); PART = memory | persist | renew | promote |
//! storm (default: all). `--json FILE` (anywhere on the line) also writes every figure as a
//! flat JSON object `{"name": {"value": number, "unit": "B|s|ms|rps|ratio"}, ...}` (a figure
//! that could not be measured, e.g. no blocked acquirer woke, has `"value": null`).
//!
//! - memory: `used_memory` per key after N `LEASE.ACQUIRE k owner ttl` vs N `SET k owner PX
//!   ttl` (27-byte owners, 13-byte keys, on two fresh servers);
//! - persist: `SAVE`, `DEBUG RELOAD NOSAVE` (flush + load) and `BGREWRITEAOF` wall times
//!   on both;
//! - renew: redis-benchmark `LEASE.RENEW` throughput with N leases vs 1 lease, interleaved;
//! - promote: `REPLICAOF NO ONE` with N leases (the promotion re-arms every expiry);
//! - storm: STORM leases given the same deadline: the longest gap a PING probe sees, the
//!   `LATENCY LATEST` events, and how late blocked acquirers on some of those keys are woken.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Every figure printed, for `--json`: (name, value, unit).
static FIGURES: Mutex<Vec<(String, f64, &'static str)>> = Mutex::new(Vec::new());

fn figure(name: &str, value: f64, unit: &'static str) {
    FIGURES
        .lock()
        .expect("figures")
        .push((name.to_string(), value, unit));
}

/// The figures as one flat JSON object (names are plain identifiers, so no escaping).
fn figures_json() -> String {
    let figs = FIGURES.lock().expect("figures");
    let body: Vec<String> = figs
        .iter()
        .map(|(name, v, unit)| {
            let v = if v.is_finite() {
                format!("{v}")
            } else {
                "null".to_string()
            };
            format!("  \"{name}\": {{\"value\": {v}, \"unit\": \"{unit}\"}}")
        })
        .collect();
    format!("{{\n{}\n}}\n", body.join(",\n"))
}

const OWNER_PREFIX: &str = "owner-"; // + 21 digits = 27 bytes
const TTL_MS: u64 = 3_600_000;

struct Server {
    port: u16,
    child: Child,
    dir: std::path::PathBuf,
}

impl Server {
    fn start(so: &str, port: u16, extra: &[&str]) -> Server {
        let dir = std::env::temp_dir().join(format!("lease-scale-{port}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let mut args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            dir.to_str().expect("utf8 dir"),
            "--logfile",
            "server.log",
            "--enable-debug-command",
            "local",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend(
            [
                "--loadmodule",
                so,
                "lease.grace-ms",
                "0",
                "lease.max-ttl",
                "86400000",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        let child = Command::new(std::env::var("SCALE_SERVER").unwrap_or("redis-server".into()))
            .args(&args)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server");
        let s = Server { port, child, dir };
        let end = Instant::now() + Duration::from_secs(30);
        while s.try_conn().is_none() {
            assert!(Instant::now() < end, "server on {port} did not start");
            thread::sleep(Duration::from_millis(50));
        }
        s
    }
    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
    fn try_conn(&self) -> Option<redis::Connection> {
        let mut c = redis::Client::open(self.url())
            .ok()?
            .get_connection()
            .ok()?;
        redis::cmd("PING").query::<String>(&mut c).ok()?;
        Some(c)
    }
    fn conn(&self) -> redis::Connection {
        self.try_conn().expect("connect")
    }
    fn info(&self, c: &mut redis::Connection, section: &str, field: &str) -> String {
        let s: String = redis::cmd("INFO").arg(section).query(c).expect("info");
        s.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .unwrap_or("")
            .trim()
            .to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.try_conn() {
            let _ = redis::cmd("SHUTDOWN").arg("NOSAVE").query::<()>(&mut c);
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn key(i: usize) -> String {
    format!("lease:{i:07}")
}
fn owner(i: usize) -> String {
    format!("{OWNER_PREFIX}{i:021}")
}

/// Fills `n` keys, pipelined in batches; returns the token of key 0 for leases.
fn fill(c: &mut redis::Connection, n: usize, lease: bool) -> u64 {
    let mut first = 0;
    let batch = 10_000;
    for start in (0..n).step_by(batch) {
        let mut p = redis::pipe();
        for i in start..(start + batch).min(n) {
            if lease {
                p.cmd("LEASE.ACQUIRE").arg(key(i)).arg(owner(i)).arg(TTL_MS);
            } else {
                p.cmd("SET")
                    .arg(key(i))
                    .arg(owner(i))
                    .arg("PX")
                    .arg(TTL_MS)
                    .ignore();
            }
        }
        if lease {
            let r: Vec<u64> = p.query(c).expect("acquire pipeline");
            if start == 0 {
                first = r[0];
            }
        } else {
            let _: () = p.query(c).expect("set pipeline");
        }
    }
    first
}

fn used_memory(s: &Server, c: &mut redis::Connection) -> f64 {
    s.info(c, "memory", "used_memory")
        .parse()
        .expect("used_memory")
}

fn timed<T>(f: impl FnOnce() -> T) -> (f64, T) {
    let t = Instant::now();
    let r = f();
    (t.elapsed().as_secs_f64(), r)
}

fn wait_until(s: &Server, c: &mut redis::Connection, section: &str, field: &str, value: &str) {
    let end = Instant::now() + Duration::from_secs(600);
    while s.info(c, section, field) != value {
        assert!(Instant::now() < end, "{field} never became {value}");
        thread::sleep(Duration::from_millis(5));
    }
}

/// (SAVE, DEBUG RELOAD NOSAVE, BGREWRITEAOF) seconds.
fn persist(s: &Server, c: &mut redis::Connection, what: &str) -> [f64; 3] {
    let (save, _) = timed(|| redis::cmd("SAVE").query::<()>(c).expect("SAVE"));
    let (reload, _) = timed(|| {
        redis::cmd("DEBUG")
            .arg("RELOAD")
            .arg("NOSAVE")
            .query::<()>(c)
            .expect("DEBUG RELOAD NOSAVE")
    });
    let keys = s.info(c, "keyspace", "db0");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(c)
        .expect("appendonly");
    wait_until(s, c, "persistence", "aof_rewrite_in_progress", "0");
    wait_until(s, c, "persistence", "aof_rewrite_scheduled", "0");
    let (rewrite, _) = timed(|| {
        let _: String = redis::cmd("BGREWRITEAOF").query(c).expect("BGREWRITEAOF");
        wait_until(s, c, "persistence", "aof_rewrite_in_progress", "0");
    });
    println!(
        "persist {what}: SAVE {save:.2} s, DEBUG RELOAD NOSAVE {reload:.2} s, BGREWRITEAOF {rewrite:.2} s ({keys})"
    );
    [save, reload, rewrite]
}

fn benchmark_rps(port: u16, args: &[String]) -> f64 {
    let out = Command::new("redis-benchmark")
        .args([
            "-p",
            &port.to_string(),
            "-c",
            "50",
            "-P",
            "16",
            "-n",
            "300000",
            "--csv",
        ])
        .args(args)
        .output()
        .expect("redis-benchmark");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .last()
        .and_then(|l| l.split(',').nth(1))
        .and_then(|v| v.trim_matches('"').parse().ok())
        .unwrap_or(0.0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Leases `storm:1..=n` whose deadlines all fall on the wall instant `target_ms` (to the
/// millisecond: each TTL is computed from TIME just before its grant).
const STORM_LUA: &str = "
local target = tonumber(ARGV[1])
for i = 1, tonumber(ARGV[2]) do
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('LEASE.ACQUIRE', 'storm:' .. i, ARGV[3], target - now)
end
return 1";

fn storm(so: &str, port: u16, n: usize) {
    let s = Server::start(so, port, &["--latency-monitor-threshold", "5"]);
    let mut c = s.conn();
    let lead_ms = 4_000 + (n as u64) / 20; // time to create them all, with margin
    let target = wall_ms() + lead_ms;
    let (took, _) = timed(|| {
        let _: i64 = redis::cmd("EVAL")
            .arg(STORM_LUA)
            .arg(0)
            .arg(target)
            .arg(n)
            .arg(owner(0))
            .query(&mut c)
            .expect("storm setup script");
    });
    assert!(
        wall_ms() + 500 < target,
        "setup took {took:.1} s: too slow for the chosen deadline"
    );
    // The setup script itself is a latency event ("command"): only the storm's count.
    let _: i64 = redis::cmd("LATENCY")
        .arg("RESET")
        .query(&mut c)
        .expect("latency reset");
    let armed = s.info(&mut c, "lease", "lease_expiry_timers");
    // Blocked acquirers on keys spread over the storm (first, last and between).
    let waiters = 16usize;
    let woken: Arc<Mutex<Vec<f64>>> = Arc::default();
    let mut handles = vec![];
    for w in 0..waiters {
        let i = 1 + w * (n - 1) / (waiters - 1);
        let mut wc = s.conn();
        let woken = woken.clone();
        handles.push(thread::spawn(move || {
            let r: Option<u64> = redis::cmd("LEASE.ACQUIRE")
                .arg(format!("storm:{i}"))
                .arg("waiter")
                .arg(1000)
                .arg("BLOCK")
                .arg(60_000)
                .query(&mut wc)
                .expect("blocked acquire");
            let late = wall_ms() as f64 - target as f64;
            if r.is_some() {
                woken.lock().expect("lock").push(late);
            }
        }));
    }
    // PING probe from 1 s before to 3 s after the deadline (plus the storm's own length).
    let stop = Arc::new(AtomicBool::new(false));
    let probe = {
        let mut pc = s.conn();
        let stop = stop.clone();
        thread::spawn(move || {
            let mut last = Instant::now();
            let mut worst = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                let _: String = redis::cmd("PING").query(&mut pc).expect("ping");
                let now = Instant::now();
                worst = worst.max(now - last);
                last = now;
            }
            worst
        })
    };
    while wall_ms() < target + 3_000 {
        thread::sleep(Duration::from_millis(50));
    }
    // Until every lease is gone.
    let end = Instant::now() + Duration::from_secs(120);
    // (The waiters' own 1 s leases expire later and count too: at least n.)
    while s
        .info(&mut c, "lease", "lease_expired")
        .parse::<usize>()
        .unwrap_or(0)
        < n
        && Instant::now() < end
    {
        thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    let worst = probe.join().expect("probe");
    for h in handles {
        let _ = h.join();
    }
    let expired = s.info(&mut c, "lease", "lease_expired");
    let latency: redis::Value = redis::cmd("LATENCY")
        .arg("LATEST")
        .query(&mut c)
        .expect("latency");
    let mut woken = woken.lock().expect("lock").clone();
    woken.sort_by(|a, b| a.total_cmp(b));
    figure("storm_ping_gap_max_ms", worst.as_secs_f64() * 1000.0, "ms");
    let nan = f64::NAN;
    figure(
        "storm_wake_min_ms",
        woken.first().copied().unwrap_or(nan),
        "ms",
    );
    figure(
        "storm_wake_median_ms",
        woken.get(woken.len() / 2).copied().unwrap_or(nan),
        "ms",
    );
    figure(
        "storm_wake_max_ms",
        woken.last().copied().unwrap_or(nan),
        "ms",
    );
    println!(
        "storm {n}: setup {took:.1} s, entries armed {armed}, expired {expired}; longest PING gap {:.1} ms",
        worst.as_secs_f64() * 1000.0
    );
    println!(
        "storm {n}: {} of {waiters} blocked acquirers woken; ms after the deadline: min {:.0}, median {:.0}, max {:.0}",
        woken.len(),
        woken.first().copied().unwrap_or(f64::NAN),
        woken.get(woken.len() / 2).copied().unwrap_or(f64::NAN),
        woken.last().copied().unwrap_or(f64::NAN),
    );
    println!("storm {n}: LATENCY LATEST {latency:?}");
    // One lease alone (no storm) with a blocked acquirer: the ordinary wake-up delay.
    let mut lone = vec![];
    for _ in 0..5 {
        let target = wall_ms() + 300;
        let _: u64 = redis::cmd("LEASE.ACQUIRE")
            .arg("lone")
            .arg("holder")
            .arg(target - wall_ms())
            .query(&mut c)
            .expect("lone");
        let r: Option<u64> = redis::cmd("LEASE.ACQUIRE")
            .arg("lone")
            .arg("waiter")
            .arg(1)
            .arg("BLOCK")
            .arg(5_000)
            .query(&mut c)
            .expect("lone waiter");
        assert!(r.is_some());
        lone.push(wall_ms() as f64 - target as f64);
        thread::sleep(Duration::from_millis(5));
    }
    println!("lone lease: blocked acquirer woken ms after the deadline (5 runs): {lone:?}");
    figure("lone_wake_median_ms", median(lone.clone()), "ms");
    figure(
        "lone_wake_max_ms",
        lone.iter().copied().fold(f64::NAN, f64::max),
        "ms",
    );
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().position(|a| a == "--json").map(|i| {
        let file = args.get(i + 1).expect("--json needs a FILE").clone();
        args.drain(i..i + 2);
        file
    });
    let so = args
        .first()
        .expect("usage: scale [--json FILE] SO [N] [STORM] [PART...]")
        .clone();
    // redis-server runs in its own --dir: a relative module path would not be found there.
    let so = std::fs::canonicalize(&so)
        .unwrap_or_else(|e| panic!("module {so}: {e}"))
        .to_string_lossy()
        .into_owned();
    let n: usize = args
        .get(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let storm_n: usize = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let parts: Vec<&str> = args.iter().skip(3).map(|s| s.as_str()).collect();
    let want = |p: &str| parts.is_empty() || parts.contains(&p);
    let base: u16 = std::env::var("SCALE_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(6420);

    if want("memory") || want("persist") || want("renew") || want("promote") {
        let plain = Server::start(&so, base, &[]);
        let leases = Server::start(&so, base + 1, &[]);
        let (mut pc, mut lc) = (plain.conn(), leases.conn());
        let (p0, l0) = (used_memory(&plain, &mut pc), used_memory(&leases, &mut lc));
        let (tp, _) = timed(|| fill(&mut pc, n, false));
        let (tl, token0) = timed(|| fill(&mut lc, n, true));
        let (p1, l1) = (used_memory(&plain, &mut pc), used_memory(&leases, &mut lc));
        let (per_set, per_lease) = ((p1 - p0) / n as f64, (l1 - l0) / n as f64);
        println!(
            "memory {n}: used_memory per key: SET PX {per_set:.0} B, lease {per_lease:.0} B ({:.2}x); fill {tp:.1} s vs {tl:.1} s",
            per_lease / per_set
        );
        figure("memory_per_key_set_px", per_set, "B");
        figure("memory_per_key_lease", per_lease, "B");
        figure("memory_ratio", per_lease / per_set, "ratio");
        figure("fill_set_px_s", tp, "s");
        figure("fill_lease_s", tl, "s");
        let mu: i64 = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key(0))
            .query(&mut lc)
            .expect("memory usage");
        println!("memory: MEMORY USAGE of one lease {mu} B");
        figure("memory_usage_one_lease", mu as f64, "B");
        if want("renew") {
            let one = Server::start(&so, base + 2, &[]);
            let mut oc = one.conn();
            let token1 = fill(&mut oc, 1, true);
            let renew = |token: u64| -> Vec<String> {
                vec![
                    "LEASE.RENEW".into(),
                    key(0),
                    owner(0),
                    token.to_string(),
                    TTL_MS.to_string(),
                ]
            };
            let (mut at_n, mut at_1) = (vec![], vec![]);
            for _ in 0..3 {
                at_n.push(benchmark_rps(leases.port, &renew(token0)));
                at_1.push(benchmark_rps(one.port, &renew(token1)));
            }
            let (a, b) = (median(at_n.clone()), median(at_1.clone()));
            println!(
                "renew: {a:.0} rps with {n} leases vs {b:.0} with 1 ({:.2}x; rounds {at_n:?} / {at_1:?})",
                a / b
            );
            figure("renew_rps_n_leases", a, "rps");
            figure("renew_rps_1_lease", b, "rps");
            figure("renew_ratio", a / b, "ratio");
        }
        if want("promote") {
            let _: () = redis::cmd("REPLICAOF")
                .arg("127.0.0.1")
                .arg(1)
                .query(&mut lc)
                .expect("replicaof");
            let (t, _) = timed(|| {
                let _: () = redis::cmd("REPLICAOF")
                    .arg("NO")
                    .arg("ONE")
                    .query(&mut lc)
                    .expect("replicaof no one");
            });
            let armed = leases.info(&mut lc, "lease", "lease_expiry_timers");
            println!(
                "promote {n}: REPLICAOF NO ONE (re-arms every expiry) {:.0} ms; entries armed {armed}",
                t * 1000.0
            );
            figure("promote_ms", t * 1000.0, "ms");
        }
        if want("persist") {
            let p = persist(&plain, &mut pc, "SET PX");
            let l = persist(&leases, &mut lc, "leases");
            println!(
                "persist ratio leases / SET PX: SAVE {:.2}x, DEBUG RELOAD NOSAVE {:.2}x, BGREWRITEAOF {:.2}x",
                l[0] / p[0],
                l[1] / p[1],
                l[2] / p[2]
            );
            for (i, what) in ["save", "reload", "bgrewriteaof"].iter().enumerate() {
                figure(&format!("{what}_set_px_s"), p[i], "s");
                figure(&format!("{what}_lease_s"), l[i], "s");
                figure(&format!("{what}_ratio"), l[i] / p[i], "ratio");
            }
        }
    }
    if want("storm") {
        storm(&so, base + 3, storm_n);
    }
    if let Some(file) = json {
        std::fs::write(&file, figures_json()).unwrap_or_else(|e| panic!("writing {file}: {e}"));
        println!("figures written to {file}");
    }
}
