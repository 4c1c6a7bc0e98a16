//! The election loop against the in-memory fake server, with tokio's clock paused: every
//! timing rule is checked exactly and deterministically, in milliseconds of virtual time.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis_lease_client::{
    Elector, ElectorConfig, ErrorKind, LeaderContext, Role, RunOutcome, Transport,
};
use support::fake::{Down, FakeServer};
use tokio::sync::watch;
use tokio::time::{timeout, Instant};

const TTL: Duration = Duration::from_millis(1000);

fn cfg(owner: &str) -> ElectorConfig {
    ElectorConfig::new("redis://fake/", "k", TTL)
        .with_owner(owner)
        .with_block_timeout(Duration::from_millis(2000))
        .with_backoff(Duration::from_millis(20), Duration::from_millis(200))
}

#[derive(Clone, Debug, PartialEq)]
enum Ev {
    Start(u64),
    Stop(u64),
}

type Log = Arc<Mutex<Vec<(Instant, String, Ev)>>>;

/// A leader task that logs start/stop and works until cancelled.
fn worker(
    log: Log,
    who: &str,
) -> impl FnMut(LeaderContext) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    let who = who.to_string();
    move |ctx: LeaderContext| {
        let log = log.clone();
        let who = who.clone();
        Box::pin(async move {
            log.lock()
                .unwrap()
                .push((Instant::now(), who.clone(), Ev::Start(ctx.token())));
            ctx.cancelled().await;
            log.lock()
                .unwrap()
                .push((Instant::now(), who, Ev::Stop(ctx.token())));
        })
    }
}

async fn wait_for(
    rx: &mut watch::Receiver<Role>,
    within: Duration,
    f: impl FnMut(&Role) -> bool,
) -> bool {
    timeout(within, rx.wait_for(f))
        .await
        .map(|r| r.is_ok())
        .unwrap_or(false)
}

fn spawn(
    server: &FakeServer,
    owner: &str,
    log: &Log,
) -> (
    redis_lease_client::ElectorHandle,
    tokio::task::JoinHandle<RunOutcome<()>>,
    redis_lease_client::Metrics,
) {
    let mut e = Elector::with_transport(cfg(owner), server.transport()).unwrap();
    let h = e.handle();
    let m = e.metrics();
    let task = worker(log.clone(), owner);
    let j = tokio::spawn(async move { e.run(task).await.unwrap() });
    (h, j, m)
}

#[tokio::test(start_paused = true)]
async fn leader_renews_and_keeps_leading() {
    let server = FakeServer::new();
    let log: Log = Default::default();
    let (h, j, m) = spawn(&server, "a", &log);
    let mut rx = h.subscribe();
    assert!(wait_for(&mut rx, Duration::from_millis(50), |l| l.is_leader()).await);
    let first_deadline = match *rx.borrow() {
        Role::Leader { deadline, .. } => deadline,
        _ => unreachable!(),
    };
    // Five TTLs later: still leader with the same token, the deadline moved forward.
    tokio::time::sleep(TTL * 5).await;
    match *rx.borrow() {
        Role::Leader { token, deadline } => {
            assert_eq!(token, 1);
            assert!(
                deadline > first_deadline + TTL * 4,
                "deadline did not move with renewals"
            );
        }
        l => panic!("lost leadership: {l:?}"),
    }
    let renewals = m.value("lease_renew_total", &[("result", "renewed")]);
    // ttl/3 renew interval: ~15 renewals in 5 TTLs.
    assert!((13.0..=16.0).contains(&renewals), "renewals: {renewals}");
    h.resign();
    assert_eq!(j.await.unwrap(), RunOutcome::Resigned);
    assert!(server.live().is_none(), "resign must release the lease");
    assert_eq!(log.lock().unwrap().len(), 2);
}

/// Local deadline = instant before sending + ttl*(1-drift) - margin, checked exactly.
#[tokio::test(start_paused = true)]
async fn deadline_is_measured_from_before_sending() {
    let server = FakeServer::new();
    server.with(|s| s.latency = Duration::from_millis(40));
    let log: Log = Default::default();
    let t0 = Instant::now();
    let (h, _j, _m) = spawn(&server, "a", &log);
    let mut rx = h.subscribe();
    assert!(wait_for(&mut rx, Duration::from_millis(200), |l| l.is_leader()).await);
    let Role::Leader { deadline, .. } = *rx.borrow() else {
        unreachable!()
    };
    let lead = cfg("a").lead_time();
    assert_eq!(
        deadline,
        t0 + lead,
        "deadline must count from the send instant"
    );
    // The server's expiry started 40 ms later (one-way latency): it is after our deadline.
    let expiry = server.live().unwrap().expiry;
    assert!(expiry > deadline);
}

/// Renew answered 0 (someone else holds it): step down at once, not at the deadline.
#[tokio::test(start_paused = true)]
async fn renew_rejected_steps_down_at_once() {
    let server = FakeServer::new();
    let log: Log = Default::default();
    let (h, _j, m) = spawn(&server, "a", &log);
    let mut rx = h.subscribe();
    assert!(wait_for(&mut rx, Duration::from_millis(50), |l| l.is_leader()).await);
    let Role::Leader { deadline, .. } = *rx.borrow() else {
        unreachable!()
    };
    let stolen_at = Instant::now();
    server.steal(TTL * 10);
    assert!(wait_for(&mut rx, TTL, |l| !l.is_leader()).await);
    let stepped = Instant::now();
    // The next renewal (at most renew_interval away) notices.
    assert!(
        stepped - stolen_at <= TTL / 3 + Duration::from_millis(5),
        "took {:?}",
        stepped - stolen_at
    );
    assert!(stepped < deadline);
    assert_eq!(
        m.value(
            "lease_transitions_total",
            &[("to", "follower"), ("reason", "renew_rejected")]
        ),
        1.0
    );
    // The task was stopped.
    tokio::task::yield_now().await;
    let l = log.lock().unwrap();
    assert!(matches!(l.last(), Some((_, _, Ev::Stop(1)))), "{l:?}");
}

/// Redis stops answering: the leader's task is cancelled stop_budget before the local
/// deadline, has stopped by then, and the server-side lease outlives the local deadline.
/// Nobody leads while Redis is down; when it is back, exactly one leads within ~one TTL.
#[tokio::test(start_paused = true)]
async fn redis_hangs_leader_stops_before_deadline_then_recovers() {
    let server = FakeServer::new();
    let log: Log = Default::default();
    let (ha, _ja, ma) = spawn(&server, "a", &log);
    let (hb, _jb, _mb) = spawn(&server, "b", &log);
    let mut ra = ha.subscribe();
    let mut rb = hb.subscribe();
    assert!(wait_for(&mut ra, Duration::from_millis(50), |l| l.is_leader()).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let Role::Leader { deadline, .. } = *ra.borrow() else {
        panic!("a should lead")
    };
    let expiry_before = server.live().unwrap().expiry;
    server.set_down(Down::Hang);
    assert!(wait_for(&mut ra, TTL * 2, |l| !l.is_leader()).await);
    let (stop_at, _, ev) = log.lock().unwrap().last().cloned().unwrap();
    assert_eq!(ev, Ev::Stop(1));
    let c = cfg("a");
    // No renewal completed after the hang began, so `deadline` is the last one. The task was
    // told exactly stop_budget before it and stopped then; the server-side lease lasts longer.
    assert_eq!(stop_at, deadline - c.stop_budget);
    assert!(expiry_before > deadline);
    assert_eq!(
        ma.value(
            "lease_transitions_total",
            &[("to", "follower"), ("reason", "deadline")]
        ),
        1.0
    );
    // Nobody leads while Redis is down (3 TTLs).
    assert!(!wait_for(&mut rb, TTL * 3, |l| l.is_leader()).await);
    assert!(!ra.borrow().is_leader());
    // Back: exactly one leader within about one TTL (+ max backoff).
    let back = Instant::now();
    server.set_down(Down::Up);
    let both = async {
        tokio::select! {
            _ = ra.wait_for(|l| l.is_leader()) => {},
            _ = rb.wait_for(|l| l.is_leader()) => {},
        }
    };
    timeout(TTL + Duration::from_millis(200 + 50), both)
        .await
        .expect("no leader after recovery");
    let took = Instant::now() - back;
    assert!(
        !(ra.borrow().is_leader() && rb.borrow().is_leader()),
        "two leaders"
    );
    eprintln!("fake recovery: leader {took:?} after redis came back");
}

/// Renew errors retried: a few failures inside the deadline change nothing.
#[tokio::test(start_paused = true)]
async fn transient_renew_errors_are_retried_without_stepping_down() {
    let server = FakeServer::new();
    let log: Log = Default::default();
    let (h, _j, m) = spawn(&server, "a", &log);
    let mut rx = h.subscribe();
    assert!(wait_for(&mut rx, Duration::from_millis(50), |l| l.is_leader()).await);
    server.fault("renew", ErrorKind::Connection);
    server.fault("renew", ErrorKind::ReadOnly);
    server.fault("renew", ErrorKind::Timeout);
    tokio::time::sleep(TTL * 3).await;
    assert!(rx.borrow().is_leader());
    assert_eq!(
        m.value(
            "lease_transitions_total",
            &[("to", "follower"), ("reason", "deadline")]
        ),
        0.0
    );
    assert_eq!(m.value("lease_renew_total", &[("result", "error")]), 3.0);
    assert_eq!(
        log.lock().unwrap().len(),
        1,
        "the task must not have been restarted"
    );
}

/// min_replicas: a grant not acknowledged by WAIT never starts the task; once replicas ack,
/// the same (refreshed) grant is used.
#[tokio::test(start_paused = true)]
async fn unacked_grant_is_not_leadership() {
    let server = FakeServer::new();
    server.with(|s| s.replicas = 0);
    let log: Log = Default::default();
    let mut e = Elector::with_transport(
        cfg("a").with_min_replicas(1, Duration::from_millis(50)),
        server.transport(),
    )
    .unwrap();
    let mut rx = e.subscribe();
    let task = worker(log.clone(), "a");
    let m = e.metrics();
    tokio::spawn(async move { e.run(task).await });
    assert!(
        !wait_for(&mut rx, TTL * 3, |l| l.is_leader()).await,
        "led on an unacked grant"
    );
    assert!(log.lock().unwrap().is_empty());
    assert!(m.value("lease_acquire_attempts_total", &[("result", "unconfirmed")]) >= 1.0);
    // Non-blocking re-asks while holding the unconfirmed grant (same owner refreshes it).
    assert!(server.seen().iter().any(|s| s.op == "acquire" && !s.block));
    server.with(|s| s.replicas = 1);
    assert!(wait_for(&mut rx, Duration::from_millis(200), |l| l.is_leader()).await);
    assert_eq!(rx.borrow().token(), Some(1), "same grant, refreshed");
}

/// min_replicas: renewals not acknowledged do not extend the deadline: step down at the old one.
#[tokio::test(start_paused = true)]
async fn unacked_renewals_do_not_extend_the_deadline() {
    let server = FakeServer::new();
    server.with(|s| s.replicas = 1);
    let log: Log = Default::default();
    let mut e = Elector::with_transport(
        cfg("a").with_min_replicas(1, Duration::from_millis(50)),
        server.transport(),
    )
    .unwrap();
    let mut rx = e.subscribe();
    let task = worker(log.clone(), "a");
    tokio::spawn(async move { e.run(task).await });
    assert!(wait_for(&mut rx, Duration::from_millis(100), |l| l.is_leader()).await);
    server.with(|s| s.replicas = 0);
    let Role::Leader { deadline, .. } = *rx.borrow() else {
        unreachable!()
    };
    assert!(wait_for(&mut rx, TTL * 2, |l| !l.is_leader()).await);
    // The renewal in flight when acks stopped may have been acked; allow one interval.
    let stepped = Instant::now();
    assert!(
        stepped <= deadline + TTL / 3,
        "kept leading on unacked renewals"
    );
    let (stop_at, _, _) = log.lock().unwrap().last().cloned().unwrap();
    assert!(stop_at <= deadline + TTL / 3);
}

/// GRACE error: wait the announced time, do not hammer the server.
#[tokio::test(start_paused = true)]
async fn grace_error_waits_the_announced_time() {
    let server = FakeServer::new();
    server.fault("acquire", ErrorKind::Grace(Duration::from_millis(700)));
    let log: Log = Default::default();
    let t0 = Instant::now();
    let (h, _j, m) = spawn(&server, "a", &log);
    let mut rx = h.subscribe();
    assert!(wait_for(&mut rx, TTL * 2, |l| l.is_leader()).await);
    assert!(Instant::now() - t0 >= Duration::from_millis(700));
    assert_eq!(
        server.seen().iter().filter(|s| s.op == "acquire").count(),
        2
    );
    assert_eq!(
        m.value("lease_acquire_attempts_total", &[("result", "grace")]),
        1.0
    );
}

/// A reply so slow that the stop point has passed is not used to lead.
#[tokio::test(start_paused = true)]
async fn grant_arriving_after_the_stop_point_is_not_used() {
    let server = FakeServer::new();
    server.with(|s| s.latency = Duration::from_millis(450));
    let log: Log = Default::default();
    let c = cfg("a").with_op_timeout(Duration::from_secs(5));
    let mut e = Elector::with_transport(c, server.transport()).unwrap();
    let mut rx = e.subscribe();
    let m = e.metrics();
    let task = worker(log.clone(), "a");
    tokio::spawn(async move { e.run(task).await });
    // RTT 900 ms > ttl*0.99 - margin - stop_budget: never leads.
    assert!(!wait_for(&mut rx, TTL * 4, |l| l.is_leader()).await);
    assert!(m.value("lease_acquire_attempts_total", &[("result", "late")]) >= 2.0);
    assert!(log.lock().unwrap().is_empty());
}

/// Graceful resign hands over to a BLOCKed follower immediately (one round trip).
#[tokio::test(start_paused = true)]
async fn resign_hands_over_immediately() {
    let server = FakeServer::new();
    let log: Log = Default::default();
    let (ha, ja, _) = spawn(&server, "a", &log);
    let mut ra = ha.subscribe();
    assert!(wait_for(&mut ra, Duration::from_millis(50), |l| l.is_leader()).await);
    let (hb, _jb, _) = spawn(&server, "b", &log);
    let mut rb = hb.subscribe();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    ha.resign();
    assert!(wait_for(&mut rb, Duration::from_millis(50), |l| l.is_leader()).await);
    let took = Instant::now() - t;
    assert!(took <= Duration::from_millis(5), "handover took {took:?}");
    assert_eq!(ja.await.unwrap(), RunOutcome::Resigned);
    assert_eq!(rb.borrow().token(), Some(2));
    // a stopped before b started.
    let l = log.lock().unwrap();
    let a_stop = l.iter().find(|e| e.2 == Ev::Stop(1)).unwrap().0;
    let b_start = l.iter().find(|e| e.2 == Ev::Start(2)).unwrap().0;
    assert!(a_stop <= b_start);
}

/// A task that ignores cancellation is aborted at the deadline and counted.
#[tokio::test(start_paused = true)]
async fn task_ignoring_cancellation_is_aborted_at_the_deadline() {
    let server = FakeServer::new();
    let mut e = Elector::with_transport(cfg("a"), server.transport()).unwrap();
    let mut rx = e.subscribe();
    let m = e.metrics();
    let ended = Arc::new(Mutex::new(None::<Instant>));
    tokio::spawn(async move {
        e.run(|_ctx| async {
            std::future::pending::<()>().await;
        })
        .await
    });
    assert!(wait_for(&mut rx, Duration::from_millis(50), |l| l.is_leader()).await);
    let Role::Leader { deadline, .. } = *rx.borrow() else {
        unreachable!()
    };
    server.set_down(Down::Refuse);
    let _ = ended;
    assert!(wait_for(&mut rx, TTL * 2, |l| !l.is_leader()).await);
    // Give the loop until the deadline (it waits for the task until then).
    tokio::time::sleep_until(deadline + TTL).await;
    assert_eq!(m.value("lease_task_overrun_total", &[]), 1.0);
}

/// The task returning by itself: release, run returns its value.
#[tokio::test(start_paused = true)]
async fn task_finishing_releases_and_returns_its_value() {
    let server = FakeServer::new();
    let mut e = Elector::with_transport(cfg("a"), server.transport()).unwrap();
    let out = timeout(TTL * 3, e.run(|ctx| async move { ctx.token() * 10 }))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out, RunOutcome::TaskFinished(10));
    assert!(server.live().is_none());
}

/// Resign while following (blocked in ACQUIRE ... BLOCK): run returns promptly.
#[tokio::test(start_paused = true)]
async fn resign_while_following_returns_promptly() {
    let server = FakeServer::new();
    server.steal(TTL * 100);
    let log: Log = Default::default();
    let (h, j, _) = spawn(&server, "a", &log);
    tokio::time::sleep(Duration::from_millis(100)).await;
    h.resign();
    let r = timeout(Duration::from_millis(400), j)
        .await
        .expect("run did not return")
        .unwrap();
    assert_eq!(r, RunOutcome::Resigned);
    assert!(log.lock().unwrap().is_empty());
}

/// Connection refused: capped exponential backoff, full jitter (never above the cap).
#[tokio::test(start_paused = true)]
async fn refused_connections_back_off_capped() {
    let server = FakeServer::new();
    server.set_down(Down::Refuse);
    let log: Log = Default::default();
    let (_h, _j, m) = spawn(&server, "a", &log);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let attempts = m.value("lease_acquire_attempts_total", &[("result", "error")]);
    // Mean backoff with cap 200 ms is ~100 ms: ~100 attempts in 10 s; without backoff it
    // would be unbounded, with a fixed 200 ms 50.
    assert!((40.0..=250.0).contains(&attempts), "attempts: {attempts}");
    assert_eq!(m.value("lease_redis_up", &[]), 0.0);
}

/// Exactly one leader among several electors; tokens strictly increase across handovers.
#[tokio::test(start_paused = true)]
async fn many_electors_one_leader_increasing_tokens() {
    let server = FakeServer::new();
    let log: Log = Default::default();
    let mut handles = vec![];
    for i in 0..5 {
        handles.push(spawn(&server, &format!("e{i}"), &log));
    }
    let mut last = 0;
    for _round in 0..4 {
        // Find the leader, check it is unique, resign it.
        let mut leader = None;
        for _ in 0..100 {
            let leaders: Vec<_> = handles
                .iter()
                .enumerate()
                .filter(|(_, h)| h.0.role().is_leader())
                .map(|(i, _)| i)
                .collect();
            assert!(leaders.len() <= 1, "two leaders: {leaders:?}");
            if let Some(i) = leaders.first() {
                leader = Some(*i);
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let i = leader.expect("no leader");
        let t = handles[i].0.role().token().unwrap();
        assert!(t > last, "token {t} after {last}");
        last = t;
        handles[i].0.resign();
        let h = handles.remove(i);
        h.1.await.unwrap();
    }
    // start/stop intervals never overlap.
    let l = log.lock().unwrap();
    let mut open: Option<u64> = None;
    for (_, _, ev) in l.iter() {
        match ev {
            Ev::Start(t) => {
                assert!(open.is_none(), "start {t} while {open:?} runs");
                open = Some(*t);
            }
            Ev::Stop(t) => {
                assert_eq!(open, Some(*t));
                open = None;
            }
        }
    }
}

/// R13 after an overrun: a task that ignores cancellation but can be aborted (it waits at an
/// await point) is confirmed stopped by the abort, so the lease is released after it.
#[tokio::test(start_paused = true)]
async fn an_aborted_task_that_stopped_is_released_after_the_abort() {
    let server = FakeServer::new();
    let mut e = Elector::with_transport(cfg("a"), server.transport()).unwrap();
    let mut rx = e.subscribe();
    let h = e.handle();
    let run = tokio::spawn(async move {
        e.run(|_ctx| async {
            std::future::pending::<()>().await;
        })
        .await
    });
    assert!(wait_for(&mut rx, Duration::from_millis(50), |l| l.is_leader()).await);
    h.resign();
    let _ = timeout(TTL * 3, run).await.expect("run returns");
    let releases = releases_seen(&server);
    assert_eq!(releases, 1, "{:?}", server.seen());
}

/// R13 after an overrun: a task whose abort is not confirmed (it blocks its thread, so the
/// future is never dropped in time) must not be released: the lease ends on the server's
/// own expiry. Real time: only a multi-threaded runtime lets the loop run while a task blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_task_that_keeps_running_is_not_released() {
    let ttl = Duration::from_millis(300);
    let server = FakeServer::new();
    let mut e = Elector::with_transport(
        ElectorConfig::new("redis://fake/", "k", ttl).with_owner("a"),
        server.transport(),
    )
    .unwrap();
    let mut rx = e.subscribe();
    let h = e.handle();
    let run = tokio::spawn(async move {
        e.run(|_ctx| async {
            // Blocks far past the deadline (even if a loaded machine delays the resign below
            // by a second of renewals): no await point, so no abort. `block_in_place` hands
            // this worker's other tasks (the elector's loop among them) to another thread, so
            // the loop runs on while the task blocks, as in an application with more threads.
            tokio::task::block_in_place(|| std::thread::sleep(Duration::from_millis(2500)));
        })
        .await
    });
    assert!(wait_for(&mut rx, Duration::from_millis(500), |l| l.is_leader()).await);
    h.resign();
    let _ = timeout(Duration::from_secs(5), run)
        .await
        .expect("run returns");
    let releases = releases_seen(&server);
    assert_eq!(releases, 0, "{:?}", server.seen());
}

/// `LeaderContext::keep_lease`: the task says its work may outlive it; no RELEASE follows.
#[tokio::test(start_paused = true)]
async fn keep_lease_suppresses_the_release() {
    let server = FakeServer::new();
    let mut e = Elector::with_transport(cfg("a"), server.transport()).unwrap();
    let out = timeout(
        TTL * 3,
        e.run(|ctx| async move {
            ctx.keep_lease();
        }),
    )
    .await
    .expect("run returns");
    assert!(matches!(out, Ok(RunOutcome::TaskFinished(()))), "{out:?}");
    let releases = releases_seen(&server);
    assert_eq!(releases, 0, "{:?}", server.seen());
    assert!(server.live().is_some(), "the lease stays until it expires");
}

/// R17 (issue 23): after a step-down the next campaign uses a new owner. So it cannot
/// refresh the lease the ended reign may still hold on the server (it waits for it and gets
/// a new token), and a RELEASE of the ended reign that executes late cannot free the new
/// reign. Before R17 the second campaign sent the same owner, refreshed the old lease (same
/// token) at once, and the stale RELEASE then freed it while the task acted.
#[tokio::test(start_paused = true)]
async fn a_new_reign_has_a_new_owner_and_a_stale_release_misses_it() {
    let server = FakeServer::new();
    let log: Log = Default::default();
    let (h, _j, m) = spawn(&server, "a", &log);
    let mut rx = h.subscribe();
    assert!(wait_for(&mut rx, Duration::from_millis(50), |l| l.is_leader()).await);
    let first = server.live().expect("granted");
    assert_eq!(first.owner, "a#1");
    // Requests hang: the renewals fail, the leader stops at its deadline, its RELEASE hangs
    // too and is abandoned; the server still holds reign 1's lease.
    server.set_down(Down::Hang);
    assert!(wait_for(&mut rx, TTL * 2, |l| !l.is_leader()).await);
    let gave_up = timeout(TTL, async {
        while m.value(
            "lease_redis_errors_total",
            &[("op", "release"), ("kind", "timeout")],
        ) < 1.0
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    assert!(gave_up.is_ok(), "the RELEASE was not abandoned");
    assert_eq!(server.live().map(|l| l.owner), Some("a#1".to_string()));
    server.set_down(Down::Up);
    // The next campaign: a new owner, a new token, granted only once reign 1's lease ended.
    // (Its first ACQUIRE went out while requests hung: it waits out its op limit, block
    // timeout + op timeout, before the next one.)
    assert!(wait_for(&mut rx, TTL * 4, |l| l.is_leader()).await);
    let second = server.live().expect("granted again");
    assert_eq!(second.owner, "a#2");
    assert!(second.token > first.token, "reign 1's lease was refreshed");
    assert!(Instant::now() >= first.expiry);
    // Reign 1's RELEASE executes late: it does not match reign 2.
    let mut late = server.transport();
    assert_eq!(
        late.release("k", "a#1", first.token).await.ok(),
        Some(false)
    );
    assert!(rx.borrow().is_leader());
    assert_eq!(server.live().map(|l| l.token), Some(second.token));
}

/// Issue 33 (protocol R4): what each stop object a task holds reports right after the
/// runtime stalled past the stop point. The task blocks its (only) runtime thread, so the
/// elector's own task cannot run and fire the token: `is_cancelled()` still says "go on",
/// `is_leader()` reads the clock and says "stop". Real time: a paused clock cannot stall.
#[test]
fn a_stalled_runtime_leaves_the_token_stale_but_is_leader_right() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let ttl = Duration::from_millis(300);
        let server = FakeServer::new();
        let mut e = Elector::with_transport(
            ElectorConfig::new("redis://fake/", "k", ttl).with_owner("a"),
            server.transport(),
        )
        .unwrap();
        let seen = Arc::new(Mutex::new(None::<(bool, bool)>));
        let s = seen.clone();
        let _ = timeout(
            Duration::from_secs(3),
            e.run(move |ctx| {
                let s = s.clone();
                async move {
                    // Stall the runtime past the stop point (stop_budget = ttl/5 before the
                    // deadline, itself ~ttl after the grant): nothing else runs meanwhile.
                    std::thread::sleep(ttl * 2);
                    *s.lock().unwrap() = Some((ctx.is_cancelled(), ctx.is_leader()));
                }
            }),
        )
        .await;
        let (cancelled, leader) = seen.lock().unwrap().expect("the task ran");
        assert!(
            !cancelled,
            "the token fired without the elector's task running?"
        );
        assert!(!leader, "is_leader() must read the clock and say stop");
    });
}

/// How many `LEASE.RELEASE`s the fake server received.
fn releases_seen(server: &FakeServer) -> usize {
    server.seen().iter().filter(|s| s.op == "release").count()
}
