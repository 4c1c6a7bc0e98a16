//! BLOCK hand-over latency against a running server: release -> blocked acquirer granted,
//! and expiry -> blocked acquirer granted. Used by `scripts/bench`.
//! Usage: handover PORT [ITERATIONS]

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn blocked(url: &str, key: &str) -> mpsc::Receiver<Instant> {
    let (tx, rx) = mpsc::channel();
    let mut c = redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .expect("connect");
    let key = key.to_string();
    thread::spawn(move || {
        let r: Option<u64> = redis::cmd("LEASE.ACQUIRE")
            .arg(&key)
            .arg("follower")
            .arg(5000)
            .arg("BLOCK")
            .arg(10000)
            .query(&mut c)
            .expect("acquire");
        assert!(r.is_some(), "follower not granted");
        let _ = tx.send(Instant::now());
    });
    rx
}

fn wait_blocked(c: &mut redis::Connection) {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let info: String = redis::cmd("INFO").arg("lease").query(c).expect("info");
        if info.contains("lease_blocked_clients:1") {
            return;
        }
        assert!(Instant::now() < end, "follower never blocked");
        thread::sleep(Duration::from_micros(200));
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let port: u16 = args
        .next()
        .and_then(|p| p.parse().ok())
        .expect("usage: handover PORT [N]");
    let n: usize = args.next().and_then(|p| p.parse().ok()).unwrap_or(200);
    let url = format!("redis://127.0.0.1:{port}/");
    let mut c = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection())
        .expect("connect");
    let (mut on_release, mut on_expiry) = (vec![], vec![]);
    for i in 0..n {
        let key = format!("handover:{i}");
        let t: u64 = redis::cmd("LEASE.ACQUIRE")
            .arg(&key)
            .arg("leader")
            .arg(5000)
            .query(&mut c)
            .expect("grant");
        let rx = blocked(&url, &key);
        wait_blocked(&mut c);
        let t0 = Instant::now();
        let _: i64 = redis::cmd("LEASE.RELEASE")
            .arg(&key)
            .arg("leader")
            .arg(t)
            .query(&mut c)
            .expect("release");
        on_release.push(rx.recv().expect("woken").duration_since(t0));
        wait_until_no_waiters(&mut c);
    }
    for i in 0..n / 4 {
        let key = format!("expiry:{i}");
        let ttl = 20;
        let _: u64 = redis::cmd("LEASE.ACQUIRE")
            .arg(&key)
            .arg("leader")
            .arg(ttl)
            .query(&mut c)
            .expect("grant");
        let granted = Instant::now(); // after the server's grant: deadline <= granted + ttl
        let rx = blocked(&url, &key);
        let woke = rx.recv().expect("woken");
        on_expiry.push(
            woke.duration_since(granted)
                .saturating_sub(Duration::from_millis(ttl)),
        );
        wait_until_no_waiters(&mut c);
    }
    let r = |v: &mut Vec<Duration>| {
        format!(
            "p50 {:?}  p99 {:?}  max {:?}  (n={})",
            percentile(v, 0.5),
            percentile(v, 0.99),
            percentile(v, 1.0),
            v.len()
        )
    };
    println!(
        "BLOCK hand-over, release sent -> follower granted: {}",
        r(&mut on_release)
    );
    println!(
        "BLOCK hand-over, lease deadline -> follower granted (upper bound): {}",
        r(&mut on_expiry)
    );
}

fn wait_until_no_waiters(c: &mut redis::Connection) {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let info: String = redis::cmd("INFO").arg("lease").query(c).expect("info");
        if info.contains("lease_blocked_clients:0") || Instant::now() > end {
            return;
        }
        thread::sleep(Duration::from_micros(200));
    }
}
