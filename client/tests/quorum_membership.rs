//! Issue 32 item 1: electors with different node lists during a rolling node replacement.
//! Some electors use {A, B, C}, others already {A, B, D}. X (old list) reigns on the bare
//! majority {A, C} because B was frozen during its campaign (a bare majority stays bare for
//! the whole reign); B is free. Y (new list) then finds B and D free: at the code before the
//! membership id, Y reigned on {B, D} while X still led on {A, C}. With the membership id
//! (docs/client-protocol.md Q9) B is bound to the old list since the reign before, so it
//! refuses Y, and Y has only D.

use std::time::Duration;

use redis_lease_client::membership_id_of;
use redis_lease_client::{Elector, ElectorConfig, Nodes, QuorumControl};
use testsupport::{RedisServer, ServerOptions};
use tokio::time::{sleep, Instant};

const KEY: &str = "q-members";

fn node() -> RedisServer {
    RedisServer::start(ServerOptions::default().module_args(&["lease.grace-ms", "0"]))
}

fn cfg(urls: &[String], owner: &str, ttl: Duration) -> ElectorConfig {
    ElectorConfig::new(&urls[0], KEY, ttl)
        .with_owner(owner)
        .with_backoff(Duration::from_millis(10), Duration::from_millis(100))
}

fn sig(s: nix::sys::signal::Signal) -> i32 {
    s as i32
}

type Run = tokio::task::JoinHandle<
    Result<redis_lease_client::RunOutcome<()>, redis_lease_client::LeaseError>,
>;

fn spawn(
    mut e: Elector<Nodes>,
) -> (
    tokio::sync::watch::Receiver<redis_lease_client::Role>,
    redis_lease_client::ElectorHandle,
    Run,
) {
    let rx = e.subscribe();
    let h = e.handle();
    let j = tokio::spawn(async move { e.run(|ctx| async move { ctx.cancelled().await }).await });
    (rx, h, j)
}

async fn wait_leader(
    rx: &tokio::sync::watch::Receiver<redis_lease_client::Role>,
    within: Duration,
) -> u64 {
    let end = Instant::now() + within;
    loop {
        if let Some(t) = rx.borrow().token() {
            return t;
        }
        assert!(Instant::now() < end, "no leader within {within:?}");
        sleep(Duration::from_millis(5)).await;
    }
}

/// The scenario; returns the longest time X and Y both led (zero: never together).
async fn mixed_lists(make: impl Fn(&[String], &str) -> Elector<Nodes>) -> Duration {
    let (a, b, c, d) = (node(), node(), node(), node());
    let old: Vec<String> = vec![a.url(), b.url(), c.url()];
    let new: Vec<String> = vec![a.url(), b.url(), d.url()];

    // Before the replacement: a reign of the old list on all three nodes, then a hand-over.
    let (rw, hw, jw) = spawn(make(&old, "w"));
    wait_leader(&rw, Duration::from_secs(3)).await;
    hw.resign();
    let _ = jw.await;

    // X campaigns with B frozen: it reigns on the bare majority {A, C}.
    b.signal(sig(nix::sys::signal::Signal::SIGSTOP));
    let (rx, hx, jx) = spawn(make(&old, "x"));
    wait_leader(&rx, Duration::from_secs(3)).await;
    b.signal(sig(nix::sys::signal::Signal::SIGCONT));

    // Y, already moved to the new list, campaigns while X leads.
    let (ry, hy, jy) = spawn(make(&new, "y"));
    let end = Instant::now() + Duration::from_secs(3);
    let (mut both_since, mut longest) = (None::<Instant>, Duration::ZERO);
    while Instant::now() < end {
        let both = rx.borrow().token().is_some() && ry.borrow().token().is_some();
        match (both, both_since) {
            (true, None) => both_since = Some(Instant::now()),
            (true, Some(t)) => longest = longest.max(t.elapsed()),
            (false, _) => both_since = None,
        }
        sleep(Duration::from_millis(2)).await;
    }
    hx.resign();
    hy.resign();
    let _ = jx.await;
    let _ = jy.await;
    longest
}

/// Would catch: two electors with different node lists leading at once (issue 32 item 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn electors_with_different_node_lists_never_lead_together() {
    let ttl = Duration::from_millis(1000);
    let overlap =
        mixed_lists(|urls, owner| Elector::with_nodes(cfg(urls, owner, ttl), urls).unwrap()).await;
    assert_eq!(
        overlap,
        Duration::ZERO,
        "X (old list) and Y (new list) led together for {overlap:?}"
    );
}

/// The negative control: the same scenario with the membership id left out (the protocol
/// before Q9) must overlap, or the scenario above proves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_membership_id_they_do_lead_together() {
    let ttl = Duration::from_millis(1000);
    let overlap = mixed_lists(|urls, owner| {
        Elector::with_nodes_control(cfg(urls, owner, ttl), urls, QuorumControl::NoMembership)
            .unwrap()
    })
    .await;
    assert!(
        overlap > Duration::from_millis(500),
        "the scenario no longer reproduces issue 32 ({overlap:?} together)"
    );
}

/// Asserts `rx` shows no leader for `d`.
async fn never_leads(
    rx: &tokio::sync::watch::Receiver<redis_lease_client::Role>,
    d: Duration,
    why: &str,
) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        assert!(rx.borrow().token().is_none(), "{why}");
        sleep(Duration::from_millis(5)).await;
    }
}

/// The procedure of docs/quorum.md §4.1: electors moved to the new list cannot lead while
/// the shared nodes are bound to the old one; once no elector of the old list runs, the
/// operator rebinds the shared nodes (`LEASE.MEMBERSHIP key old new`) and the new list leads;
/// an elector left behind on the old list is shut out from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_membership_change_procedure_moves_the_key_to_the_new_list() {
    let ttl = Duration::from_millis(1000);
    let (a, b, c, d) = (node(), node(), node(), node());
    let old: Vec<String> = vec![a.url(), b.url(), c.url()];
    let new: Vec<String> = vec![a.url(), b.url(), d.url()];
    let (old_id, new_id) = (
        membership_id_of(&old).unwrap(),
        membership_id_of(&new).unwrap(),
    );
    assert_ne!(old_id, new_id);
    let make =
        |urls: &[String], owner: &str| Elector::with_nodes(cfg(urls, owner, ttl), urls).unwrap();
    let (rw, hw, jw) = spawn(make(&old, "w"));
    wait_leader(&rw, Duration::from_secs(3)).await;
    hw.resign();
    let _ = jw.await;

    let (ry, hy, jy) = spawn(make(&new, "y"));
    never_leads(
        &ry,
        Duration::from_millis(1500),
        "the new list led on nodes bound to the old one",
    )
    .await;
    for n in [&a, &b] {
        let mut con = n.connection();
        let r: i64 = redis::cmd("LEASE.MEMBERSHIP")
            .arg(&[KEY, &old_id, &new_id])
            .query(&mut con)
            .unwrap();
        assert_eq!(r, 1);
    }
    wait_leader(&ry, Duration::from_secs(3)).await;
    hy.resign();
    let _ = jy.await;

    let (rx, hx, jx) = spawn(make(&old, "left-behind"));
    never_leads(
        &rx,
        Duration::from_millis(1500),
        "an elector on the old list led after the change",
    )
    .await;
    hx.resign();
    let _ = jx.await;
}
