//! `Elector::run_once`, the one-shot API (issue 25: one reign per call, released only after
//! the task stopped), against the in-memory fake server with tokio's clock paused.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis_lease_client::{
    Elector, ElectorConfig, LeaderContext, OnceOutcome, RunOutcome, StepDownReason,
};
use support::fake::FakeServer;
use tokio::time::{timeout, Instant};

const TTL: Duration = Duration::from_millis(1000);

fn cfg(owner: &str) -> ElectorConfig {
    ElectorConfig::new("redis://fake/", "k", TTL)
        .with_owner(owner)
        .with_block_timeout(Duration::from_millis(2000))
        .with_backoff(Duration::from_millis(20), Duration::from_millis(200))
}

/// A lost reign ends the call with the reason, after the task stopped; the task ran once and
/// the elector did not campaign again although the lease came free (`run` would have: it
/// leads again here, see the second half).
#[tokio::test(start_paused = true)]
async fn a_lost_reign_ends_the_call_after_the_task_stopped() {
    let server = FakeServer::new();
    let mut e = Elector::with_transport(cfg("a"), server.transport()).unwrap();
    let starts = Arc::new(AtomicU32::new(0));
    let stopped_at: Arc<Mutex<Option<Instant>>> = Default::default();
    let (s, st) = (starts.clone(), stopped_at.clone());
    let srv = server.clone();
    let call = e.run_once(move |ctx: LeaderContext| async move {
        s.fetch_add(1, Ordering::SeqCst);
        // Someone else takes the lease (for a short while only: it is free again long before
        // the call could end a second reign).
        srv.steal(TTL / 4);
        ctx.cancelled().await;
        // A task that takes a moment to stop: the call must not end before it did.
        tokio::time::sleep(Duration::from_millis(30)).await;
        *st.lock().unwrap() = Some(Instant::now());
        "done after the loss"
    });
    let out = timeout(TTL * 10, call).await.unwrap().unwrap();
    let returned = Instant::now();
    assert_eq!(out, OnceOutcome::Lost(StepDownReason::RenewRejected));
    assert_eq!(starts.load(Ordering::SeqCst), 1, "one reign per call");
    let stopped = stopped_at.lock().unwrap().expect("the task ran to its end");
    assert!(
        stopped <= returned,
        "the call ended before its task stopped"
    );
    // The thief's lease is gone: nobody holds the key, nobody campaigns for it.
    assert!(server.live().is_none());
    let acquires = server.seen().iter().filter(|s| s.op == "acquire").count();
    assert_eq!(acquires, 1, "{:?}", server.seen());

    // The same elector, next call: a new reign with a new owner (R17), led at once.
    let token = timeout(
        TTL * 3,
        e.run_once(|ctx: LeaderContext| async move { ctx.token() }),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(token, OnceOutcome::Finished(3));
    assert_eq!(e.reign(), 3, "two reigns ended");
}

/// The task returning by itself: the lease is released, the call returns its value.
#[tokio::test(start_paused = true)]
async fn a_finished_task_is_released_and_returns_its_value() {
    let server = FakeServer::new();
    let mut e = Elector::with_transport(cfg("a"), server.transport()).unwrap();
    let out = timeout(
        TTL * 3,
        e.run_once(|ctx: LeaderContext| async move { ctx.token() * 10 }),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(out, OnceOutcome::Finished(10));
    assert!(server.live().is_none(), "not released");
}

/// Resign while waiting for the lease: the call ends without a reign; the task never ran.
#[tokio::test(start_paused = true)]
async fn resign_before_the_election_ends_the_call() {
    let server = FakeServer::new();
    server.steal(TTL * 60);
    let mut e = Elector::with_transport(cfg("a"), server.transport()).unwrap();
    let h = e.handle();
    let ran = Arc::new(AtomicU32::new(0));
    let r = ran.clone();
    let call = tokio::spawn(async move {
        e.run_once(move |_ctx: LeaderContext| async move {
            r.fetch_add(1, Ordering::SeqCst);
        })
        .await
    });
    tokio::time::sleep(TTL).await;
    h.resign();
    let out = timeout(TTL, call).await.unwrap().unwrap().unwrap();
    assert_eq!(out, OnceOutcome::Resigned);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

/// `run` after the same loss campaigns again (its documented behaviour, unchanged by the
/// shared loop): the contrast that makes the first test mean something.
#[tokio::test(start_paused = true)]
async fn run_campaigns_again_after_the_same_loss() {
    let server = FakeServer::new();
    let mut e = Elector::with_transport(cfg("a"), server.transport()).unwrap();
    let starts = Arc::new(AtomicU32::new(0));
    let s = starts.clone();
    let srv = server.clone();
    let out = timeout(
        TTL * 10,
        e.run(move |ctx: LeaderContext| {
            let n = s.fetch_add(1, Ordering::SeqCst);
            let srv = srv.clone();
            async move {
                if n == 0 {
                    srv.steal(TTL / 4);
                    ctx.cancelled().await;
                }
                ctx.token()
            }
        }),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(out, RunOutcome::TaskFinished(3));
    assert_eq!(starts.load(Ordering::SeqCst), 2);
}
