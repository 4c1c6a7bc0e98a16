//! The election loop against a real `redis-server` with the module (testsupport guard).
//! Several electors run in this one test process. Short TTLs; every wait is a bounded poll.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis_lease_client::{
    Elector, ElectorConfig, ElectorHandle, ErrorKind, LeaderContext, Metrics, RedisTransport, Role,
    RunOutcome, Transport,
};
use testsupport::{RedisServer, ServerOptions};
use tokio::task::JoinHandle;
use tokio::time::{sleep, Instant};

#[derive(Clone, Debug, PartialEq)]
enum Ev {
    Start(u64),
    Stop(u64),
}
type Log = Arc<Mutex<Vec<(Instant, usize, Ev)>>>;

struct Node {
    handle: ElectorHandle,
    metrics: Metrics,
    join: JoinHandle<RunOutcome<()>>,
}

fn cfg(url: &str, i: usize, ttl: Duration) -> ElectorConfig {
    ElectorConfig::new(url, "it-lease", ttl)
        .with_owner(format!("node-{i}-{}", std::process::id()))
        .with_block_timeout(Duration::from_millis(1000))
        .with_backoff(Duration::from_millis(20), Duration::from_millis(300))
}

fn start(c: ElectorConfig, i: usize, log: &Log) -> Node {
    let mut e = Elector::new(c).unwrap();
    let handle = e.handle();
    let metrics = e.metrics();
    let log = log.clone();
    let join = tokio::spawn(async move {
        e.run(move |ctx: LeaderContext| {
            let log = log.clone();
            async move {
                log.lock()
                    .unwrap()
                    .push((Instant::now(), i, Ev::Start(ctx.token())));
                ctx.cancelled().await;
                log.lock()
                    .unwrap()
                    .push((Instant::now(), i, Ev::Stop(ctx.token())));
            }
        })
        .await
        .unwrap()
    });
    Node {
        handle,
        metrics,
        join,
    }
}

fn leaders(nodes: &[Node]) -> Vec<(usize, Role)> {
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (i, n.handle.role()))
        .filter(|(_, l)| l.is_leader())
        .collect()
}

/// Poll (1 ms) until exactly one node leads; panics on two leaders or after `within`.
async fn one_leader(nodes: &[Node], within: Duration) -> (usize, u64, Instant) {
    leader_other_than(nodes, usize::MAX, within).await
}

/// Like `one_leader`, but waits for a leader other than node `not` (which is resigning).
async fn leader_other_than(nodes: &[Node], not: usize, within: Duration) -> (usize, u64, Instant) {
    let end = Instant::now() + within;
    loop {
        let l = leaders(nodes);
        assert!(l.len() <= 1, "two leaders at once: {l:?}");
        if let Some((i, lead)) = l.first().filter(|(i, _)| *i != not) {
            return (*i, lead.token().unwrap(), Instant::now());
        }
        assert!(Instant::now() < end, "no leader within {within:?}");
        sleep(Duration::from_millis(1)).await;
    }
}

/// When the task of term `token` logged its stop (polls until `until`).
async fn stop_time(log: &Log, token: u64, until: Instant) -> Instant {
    loop {
        if let Some(e) = log.lock().unwrap().iter().find(|e| e.2 == Ev::Stop(token)) {
            return e.0;
        }
        assert!(
            Instant::now() < until,
            "task of token {token} never stopped"
        );
        sleep(Duration::from_millis(1)).await;
    }
}

/// start/stop never overlap and tokens strictly increase.
fn check_log(log: &Log) {
    let l = log.lock().unwrap();
    let mut open: Option<u64> = None;
    let mut last = 0;
    for (_, who, ev) in l.iter() {
        match ev {
            Ev::Start(t) => {
                assert!(
                    open.is_none(),
                    "node {who} started {t} while {open:?} ran: {l:?}"
                );
                assert!(*t > last, "token {t} not above {last}");
                last = *t;
                open = Some(*t);
            }
            Ev::Stop(t) => {
                assert_eq!(open, Some(*t), "{l:?}");
                open = None;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_increasing_tokens_and_resign_hands_over_fast() {
    let server = RedisServer::start(ServerOptions::default());
    let log: Log = Default::default();
    let ttl = Duration::from_millis(600);
    let mut nodes: Vec<Node> = (0..4)
        .map(|i| start(cfg(&server.url(), i, ttl), i, &log))
        .collect();
    let (mut leader, mut token, _) = one_leader(&nodes, ttl * 3).await;
    let mut handovers = vec![];
    for _ in 0..3 {
        // The server agrees on who leads.
        let mut con = server.connection();
        let got: redis::Value = redis::cmd("LEASE.GET")
            .arg("it-lease")
            .query(&mut con)
            .unwrap();
        let s = format!("{got:?}");
        assert!(
            s.contains(&format!("node-{leader}-")),
            "server says {s}, we think node {leader}"
        );
        // Let a few renewals happen, then resign.
        sleep(ttl).await;
        assert_eq!(leaders(&nodes).len(), 1);
        let t0 = Instant::now();
        nodes[leader].handle.resign();
        let (next, next_token, t1) = leader_other_than(&nodes, leader, ttl * 2).await;
        handovers.push(t1 - t0);
        assert_ne!(next, leader);
        assert!(next_token > token, "token {next_token} after {token}");
        (leader, token) = (next, next_token);
    }
    eprintln!("resign handover latencies (resign() -> next Leader observed): {handovers:?}");
    for h in &handovers {
        // Target is milliseconds; the bound leaves room for a loaded 2-core CI machine,
        // and is far below the TTL a crash would cost.
        assert!(*h < Duration::from_millis(150), "handover took {h:?}");
    }
    for n in nodes.drain(..) {
        n.handle.resign();
        n.join.await.unwrap();
    }
    check_log(&log);
}

/// Redis killed while a leader runs: its task is stopped before its local deadline, nobody
/// leads while Redis is down, and after a restart exactly one leads within about one TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_stops_the_leader_before_its_deadline_then_one_leader() {
    let mut server = RedisServer::start(ServerOptions::default());
    let log: Log = Default::default();
    let ttl = Duration::from_millis(800);
    let nodes: Vec<Node> = (0..3)
        .map(|i| start(cfg(&server.url(), i, ttl), i, &log))
        .collect();
    let (leader, token, _) = one_leader(&nodes, ttl * 3).await;
    sleep(ttl / 2).await;
    let mut rx = nodes[leader].handle.subscribe();
    let Role::Leader { deadline, .. } = *rx.borrow_and_update() else {
        panic!("leader changed")
    };
    tokio::task::block_in_place(|| server.kill());
    let killed = Instant::now();
    // The last deadline published before the step-down (a renewal may have landed just
    // before the kill).
    let mut last_deadline = deadline;
    let end = killed + ttl * 2;
    while rx.borrow().is_leader() {
        if let Role::Leader { deadline, .. } = *rx.borrow() {
            last_deadline = deadline;
        }
        assert!(Instant::now() < end, "leader kept leading with Redis down");
        let _ = tokio::time::timeout(Duration::from_millis(5), rx.changed()).await;
    }
    let stopped = stop_time(&log, token, last_deadline + ttl).await;
    assert!(
        stopped < last_deadline,
        "task stopped {:?} after the deadline",
        stopped - last_deadline
    );
    eprintln!(
        "redis killed: task stopped {:?} after the kill, {:?} before its local deadline",
        stopped - killed,
        last_deadline - stopped
    );
    // Nobody leads while Redis is down (1.5 TTL of polling).
    let quiet_until = Instant::now() + ttl * 3 / 2;
    while Instant::now() < quiet_until {
        assert!(leaders(&nodes).is_empty(), "someone leads with Redis down");
        sleep(Duration::from_millis(5)).await;
    }
    let m = &nodes[leader].metrics;
    assert_eq!(
        m.value(
            "lease_transitions_total",
            &[("to", "follower"), ("reason", "deadline")]
        ),
        1.0
    );
    assert!(
        m.value(
            "lease_redis_errors_total",
            &[("op", "acquire"), ("kind", "connection")]
        ) >= 1.0
    );
    assert_eq!(m.value("lease_redis_up", &[]), 0.0);
    let t0 = Instant::now();
    tokio::task::block_in_place(|| server.restart());
    let (_, _, t1) = one_leader(&nodes, ttl * 2).await;
    eprintln!(
        "redis restarted: leader after {:?} (ttl {ttl:?}, backoff cap 300 ms)",
        t1 - t0
    );
    assert!(t1 - t0 < ttl + Duration::from_millis(300 + 200));
    for n in nodes {
        n.handle.resign();
        n.join.await.unwrap();
    }
    check_log(&log);
}

/// A frozen (SIGSTOP) Redis: requests hang rather than fail; the leader stops on time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_redis_stops_the_leader_before_its_deadline() {
    let server = RedisServer::start(ServerOptions::default());
    let log: Log = Default::default();
    let ttl = Duration::from_millis(600);
    let nodes: Vec<Node> = (0..2)
        .map(|i| start(cfg(&server.url(), i, ttl), i, &log))
        .collect();
    let (leader, token, _) = one_leader(&nodes, ttl * 3).await;
    let mut rx = nodes[leader].handle.subscribe();
    server.signal(libc_sigstop());
    let mut last_deadline = None;
    let end = Instant::now() + ttl * 2;
    loop {
        let now_leading = *rx.borrow();
        let Role::Leader { deadline, .. } = now_leading else {
            break;
        };
        last_deadline = Some(deadline);
        assert!(
            Instant::now() < end,
            "leader kept leading with Redis frozen"
        );
        let _ = tokio::time::timeout(Duration::from_millis(5), rx.changed()).await;
    }
    let stopped = stop_time(&log, token, last_deadline.unwrap() + ttl).await;
    assert!(stopped < last_deadline.unwrap());
    assert!(
        nodes[leader].metrics.value(
            "lease_redis_errors_total",
            &[("op", "renew"), ("kind", "timeout")]
        ) >= 1.0
    );
    server.signal(libc_sigcont());
    one_leader(&nodes, ttl * 3).await;
    for n in nodes {
        n.handle.resign();
        n.join.await.unwrap();
    }
    check_log(&log);
}

fn libc_sigstop() -> i32 {
    nix::sys::signal::Signal::SIGSTOP as i32
}
fn libc_sigcont() -> i32 {
    nix::sys::signal::Signal::SIGCONT as i32
}

/// 50 electors lose Redis; when it comes back they reconnect spread out by full jitter, not
/// in one burst. Prints the measured spread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_followers_reconnect_spread_by_jitter() {
    let mut server = RedisServer::start(ServerOptions::default());
    let log: Log = Default::default();
    let ttl = Duration::from_millis(1000);
    let cap = Duration::from_millis(2000);
    let nodes: Vec<Node> = (0..50)
        .map(|i| {
            start(
                cfg(&server.url(), i, ttl).with_backoff(Duration::from_millis(50), cap),
                i,
                &log,
            )
        })
        .collect();
    one_leader(&nodes, ttl * 3).await;
    // Everyone connected (followers block in ACQUIRE, the leader renews).
    let end = Instant::now() + Duration::from_secs(5);
    while nodes
        .iter()
        .any(|n| n.metrics.value("lease_redis_up", &[]) != 1.0)
    {
        assert!(Instant::now() < end, "not all connected");
        sleep(Duration::from_millis(10)).await;
    }
    tokio::task::block_in_place(|| server.kill());
    // Down long enough for the backoff to reach its cap (50 ms * 2^6 > 2 s): wait until every
    // node has failed at least 7 times.
    let end = Instant::now() + Duration::from_secs(15);
    loop {
        let min_fail = nodes
            .iter()
            .map(|n| {
                n.metrics
                    .value("lease_acquire_attempts_total", &[("result", "error")])
            })
            .fold(f64::MAX, f64::min);
        if min_fail >= 7.0 {
            break;
        }
        assert!(Instant::now() < end, "backoff did not progress");
        sleep(Duration::from_millis(20)).await;
    }
    let t0 = Instant::now();
    tokio::task::block_in_place(|| server.restart());
    // Count the electors' connections as the server sees them (sampled every 2 ms from a
    // separate thread, minus the sampler's own): the arrival times are the reconnect times.
    let up = Instant::now();
    let url = server.url();
    let sampler = std::thread::spawn(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let mut arrivals: Vec<Duration> = vec![];
        let end = std::time::Instant::now() + cap + Duration::from_secs(3);
        while arrivals.len() < 50 && std::time::Instant::now() < end {
            let info: String = redis::cmd("INFO").arg("clients").query(&mut con).unwrap();
            let n: usize = info
                .lines()
                .find_map(|l| l.strip_prefix("connected_clients:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(1);
            let now = Instant::now() - up;
            while arrivals.len() < n.saturating_sub(1) {
                arrivals.push(now);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        arrivals
    });
    let arrivals = tokio::task::spawn_blocking(move || sampler.join().unwrap())
        .await
        .unwrap();
    assert_eq!(
        arrivals.len(),
        50,
        "not all reconnected within the backoff cap: {arrivals:?}"
    );
    let first_ok: Vec<Option<Duration>> = arrivals.into_iter().map(Some).collect();
    let mut ts: Vec<Duration> = first_ok.into_iter().flatten().collect();
    ts.sort();
    let pct = |p: usize| ts[(ts.len() - 1) * p / 100];
    let max_in_50ms = (0..ts.len())
        .map(|i| {
            ts[i..]
                .iter()
                .take_while(|t| **t < ts[i] + Duration::from_millis(50))
                .count()
        })
        .max()
        .unwrap();
    eprintln!(
        "50 electors reconnect after a restart (server-side arrivals; restart took {:?}): first {:?}, p50 {:?}, p90 {:?}, last {:?}; at most {max_in_50ms} in any 50 ms window",
        up - t0,
        ts[0],
        pct(50),
        pct(90),
        ts[ts.len() - 1]
    );
    assert!(
        ts[ts.len() - 1] - ts[0] > Duration::from_millis(500),
        "reconnects not spread: {ts:?}"
    );
    assert!(
        max_in_50ms <= 20,
        "stampede: {max_in_50ms} reconnects within 50 ms"
    );
    one_leader(&nodes, ttl * 3).await;
    for n in nodes {
        n.handle.resign();
        n.join.await.unwrap();
    }
    check_log(&log);
}

/// min_replicas against real WAIT: no replica → the grant never counts; with a replica
/// attached, the same elector leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_needs_a_real_replica_ack() {
    // No 5 s wait before the replica's initial sync.
    let primary = RedisServer::start(
        ServerOptions::default().extra_args(&["--repl-diskless-sync-delay", "0"]),
    );
    let log: Log = Default::default();
    // TTL 2 s and 200 ms for WAIT: with 800 ms / 50 ms a CPU-starved replica (CI running
    // the other suites) missed one ack, the retry could no longer finish before the stop
    // point, and the leader rightly stepped down: correct behaviour, flaky test.
    let ttl = Duration::from_millis(2000);
    let c = cfg(&primary.url(), 0, ttl).with_min_replicas(1, Duration::from_millis(200));
    let nodes = vec![start(c, 0, &log)];
    let quiet = Instant::now() + ttl * 2;
    while Instant::now() < quiet {
        assert!(leaders(&nodes).is_empty(), "led without a replica ack");
        sleep(Duration::from_millis(5)).await;
    }
    assert!(
        nodes[0]
            .metrics
            .value("lease_acquire_attempts_total", &[("result", "unconfirmed")])
            >= 1.0
    );
    let port = primary.port.to_string();
    let _replica = RedisServer::start(ServerOptions::default().extra_args(&[
        "--replicaof",
        "127.0.0.1",
        &port,
    ]));
    one_leader(&nodes, Duration::from_secs(10)).await;
    sleep(ttl).await;
    assert_eq!(
        leaders(&nodes).len(),
        1,
        "renewals acked by the replica keep it leading"
    );
    assert_eq!(
        log.lock().unwrap().len(),
        1,
        "one term only: {:?}\n{}",
        log.lock().unwrap(),
        nodes[0].metrics.render()
    );
    for n in nodes {
        n.handle.resign();
        n.join.await.unwrap();
    }
    assert_eq!(log.lock().unwrap().len(), 2);
}

/// The transport's reply parsing against the real module: grant, refresh, renew, GET,
/// release, FENCE, and the GRACE error with its milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transport_speaks_the_module_protocol() {
    let server = RedisServer::start(ServerOptions::default());
    let mut t = RedisTransport::new(&server.url(), Duration::from_secs(1)).unwrap();
    let ttl = Duration::from_millis(5000);
    let tok = t
        .acquire("tk", "a", ttl, None, None)
        .await
        .unwrap()
        .value
        .expect("granted");
    assert!(tok > 0 && tok < (1 << 53));
    assert_eq!(
        t.acquire("tk", "a", ttl, None, None).await.unwrap().value,
        Some(tok),
        "same owner refreshes"
    );
    assert_eq!(
        t.acquire("tk", "b", ttl, None, None).await.unwrap().value,
        None
    );
    let blocked = Instant::now();
    assert_eq!(
        t.acquire("tk", "b", ttl, Some(Duration::from_millis(100)), None)
            .await
            .unwrap()
            .value,
        None
    );
    assert!(
        blocked.elapsed() >= Duration::from_millis(90),
        "BLOCK did not block"
    );
    assert!(t.renew("tk", "a", tok, ttl, None).await.unwrap().value);
    assert!(!t.renew("tk", "a", tok + 1, ttl, None).await.unwrap().value);
    assert!(!t.renew("tk", "b", tok, ttl, None).await.unwrap().value);
    let info = t.get("tk").await.unwrap().expect("live");
    assert_eq!((info.owner.as_str(), info.token), ("a", tok));
    assert!(info.pttl <= ttl && info.pttl > ttl / 2);
    assert!(t.fence("tk", tok).await.unwrap() > Duration::ZERO);
    assert_eq!(
        t.fence("tk", tok - 1).await.unwrap_err().kind,
        ErrorKind::Fenced
    );
    // WAIT with no replicas: granted, 0 acks.
    let r = t
        .renew(
            "tk",
            "a",
            tok,
            ttl,
            Some(redis_lease_client::WaitFor {
                replicas: 1,
                timeout: Duration::from_millis(10),
            }),
        )
        .await
        .unwrap();
    assert_eq!(r.acked, Some(0));
    assert!(!t.release("tk", "b", tok).await.unwrap());
    assert!(t.release("tk", "a", tok).await.unwrap());
    assert_eq!(t.get("tk").await.unwrap(), None);
    let tok2 = t
        .acquire("tk", "b", ttl, None, None)
        .await
        .unwrap()
        .value
        .unwrap();
    assert!(tok2 > tok);
    // Errors are classified, not panics.
    let e = t.acquire("tk", "", ttl, None, None).await.unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Rejected(_)), "{e:?}");

    let grace =
        RedisServer::start(ServerOptions::default().module_args(&["lease.grace-ms", "3000"]));
    let mut g = RedisTransport::new(&grace.url(), Duration::from_secs(1)).unwrap();
    let e = g.acquire("gk", "a", ttl, None, None).await.unwrap_err();
    match e.kind {
        ErrorKind::Grace(left) => assert!(
            left > Duration::from_millis(1000) && left <= Duration::from_millis(3000),
            "{e:?}"
        ),
        _ => panic!("expected GRACE, got {e:?}"),
    }
}

/// During the server's start-up grace period an elector (BLOCKing) simply waits it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elector_waits_through_grace() {
    let t0 = Instant::now();
    let server =
        RedisServer::start(ServerOptions::default().module_args(&["lease.grace-ms", "1000"]));
    let log: Log = Default::default();
    let nodes = vec![start(
        cfg(&server.url(), 0, Duration::from_millis(500)),
        0,
        &log,
    )];
    let (_, _, at) = one_leader(&nodes, Duration::from_secs(4)).await;
    assert!(
        at - t0 >= Duration::from_millis(900),
        "granted during grace after {:?}",
        at - t0
    );
    eprintln!("grace 1000 ms: leader {:?} after server start", at - t0);
    for n in nodes {
        n.handle.resign();
        n.join.await.unwrap();
    }
}

/// The fencing helper (issue 27 item 3): a reign's `ctx.fence` writes through `LEASE.FENCE`
/// with its token; once another reign holds the lease the same call is refused with
/// `ErrorKind::Fenced` and the write is not applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_writes_with_the_live_token_and_refuses_a_stale_one() {
    let s = RedisServer::start(ServerOptions::default().module_args(&["lease.grace-ms", "0"]));
    let client = redis::Client::open(s.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut e = Elector::new(
        ElectorConfig::new(s.url(), "fence-k", Duration::from_millis(800)).with_owner("f"),
    )
    .unwrap();
    let stale = e
        .run(|ctx| {
            let mut conn = conn.clone();
            async move {
                let v = ctx
                    .fence(&mut conn, &["SET", "fence:report", "v1"])
                    .await
                    .expect("live token writes");
                assert_eq!(v, redis::Value::Okay);
                ctx.token()
            }
        })
        .await
        .unwrap();
    let RunOutcome::TaskFinished(stale) = stale else {
        panic!("{stale:?}")
    };
    // The reign ended (released); a newer one holds the lease now.
    let mut c = s.connection();
    let _: u64 = redis::cmd("LEASE.ACQUIRE")
        .arg("fence-k")
        .arg("other")
        .arg(5000)
        .query(&mut c)
        .unwrap();
    let e2 = redis_lease_client::fence(&mut conn, "fence-k", stale, &["SET", "fence:report", "v2"])
        .await
        .expect_err("stale token refused");
    assert_eq!(e2.kind, ErrorKind::Fenced, "{e2}");
    let v: String = redis::cmd("GET").arg("fence:report").query(&mut c).unwrap();
    assert_eq!(v, "v1", "the stale write was not applied");
}
