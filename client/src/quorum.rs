//! Quorum mode (docs/quorum.md): one lease across N independent Redis primaries with the
//! module, one fencing token per reign that rises across reigns.
//!
//! [`QuorumTransport`] implements the same [`Transport`] the election loop drives, so every
//! timing rule of the single-node loop holds unchanged: the local deadline counts from the
//! instant taken before the first send of a round (the loop takes it before calling
//! `acquire`/`renew`, which send to every node in parallel), the task stops at the stop point,
//! a reply after the stop point does not start a reign. What changes is what one "reply"
//! means: a round.
//!
//! - acquire: `LEASE.ACQUIRE key owner ttl` on all nodes (never BLOCK: a node cannot know
//!   when a *majority* frees up); with a majority of grants, `LEASE.RAISE` every granting
//!   node to the highest token granted; a reign only if a majority confirmed the raise.
//!   Otherwise the partial grants are released at once.
//! - renew: `LEASE.RENEW` on all nodes; renewed only if a majority said 1; lost as soon as a
//!   majority can no longer say 1.
//! - release: on all nodes.
//! - every ACQUIRE, RENEW and RAISE names the membership id of this node list
//!   (`MEMBERSHIP id`, docs/client-protocol.md Q9): a node whose key is bound to another list
//!   refuses, and that counts as "not granted" / "not renewed" from that node.
//!
//! Use it through [`Elector::with_nodes`] (one URL = the ordinary single-node transport).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};
use tokio::sync::Mutex;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::config::ElectorConfig;
use crate::decide::{self, wire_ms};
use crate::elector::Elector;
use crate::error::{CommandError, ErrorKind, LeaseError};
pub use crate::quorum_decide::QuorumControl;
use crate::quorum_decide::{self as qd, AfterAcquire, AfterRenew, NodeReply, NotLeading};
use crate::tls::ConnectOptions;
use crate::transport::{LeaseInfo, RedisTransport, Replicated, Transport, WaitFor};

/// One node's connection: shared by the round's per-node tasks (a task still waiting on a
/// slow node when the round already decided keeps running on its own, bounded).
struct Node {
    index: usize,
    client: redis::Client,
    conn: Mutex<Option<MultiplexedConnection>>,
    connect_timeout: Duration,
    /// The server identity last seen at every node (index-aligned), shared by all nodes of
    /// this transport: a new connection is checked against all of them.
    identities: Arc<std::sync::Mutex<Vec<Option<String>>>>,
    /// Until when this node counts toward nothing (its identity changed).
    quarantined_until: std::sync::Mutex<Option<Instant>>,
    quarantine: Duration,
}

/// `run_id` from an `INFO server` reply.
fn run_id_of(info: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

impl Node {
    fn unusable(&self, why: String) -> CommandError {
        CommandError::new(ErrorKind::Connection, why)
    }

    /// Checks a new connection's server identity (quorum_decide::check_identity) and says
    /// whether the connection may be used.
    async fn check_new(&self, c: &mut MultiplexedConnection) -> Result<(), CommandError> {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(c)
            .await
            .map_err(|e| {
                self.unusable(format!(
                    "quorum: node {}: INFO server failed ({e}); quorum mode needs each node's run_id (grant +info to the elector's ACL user, docs/security.md §3)",
                    self.index + 1
                ))
            })?;
        let Some(id) = run_id_of(&info) else {
            return Err(self.unusable(format!(
                "quorum: node {}: INFO server has no run_id",
                self.index + 1
            )));
        };
        let mut ids = self.identities.lock().unwrap_or_else(|p| p.into_inner());
        match qd::check_identity(self.index, &id, &ids) {
            qd::IdentityCheck::First | qd::IdentityCheck::Same => {
                ids[self.index] = Some(id);
                Ok(())
            }
            qd::IdentityCheck::Changed => {
                ids[self.index] = Some(id);
                let until = Instant::now() + self.quarantine;
                *self
                    .quarantined_until
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(until);
                tracing::warn!(node = self.index + 1, quarantine_ms = self.quarantine.as_millis() as u64,
                    "quorum: another server answers at this node now (run_id changed); it counts toward no grant or renewal until the quarantine ends");
                Err(self.unusable(format!(
                    "quorum: node {}: server identity changed; quarantined",
                    self.index + 1
                )))
            }
            qd::IdentityCheck::Duplicate { of } => {
                tracing::error!(node = self.index + 1, same_as = of + 1,
                    "quorum: two nodes are one server (same run_id); this node counts toward nothing");
                Err(self.unusable(format!(
                    "quorum: node {} is the same server as node {} (same run_id)",
                    self.index + 1,
                    of + 1
                )))
            }
        }
    }

    /// Why before anything is sent: a quarantined node's reply must not count, and a grant it
    /// made would only block others for a TTL.
    fn not_quarantined(&self) -> Result<(), CommandError> {
        let q = *self
            .quarantined_until
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if q.is_some_and(|until| Instant::now() < until) {
            return Err(self.unusable(format!(
                "quorum: node {}: quarantined (its server identity changed)",
                self.index + 1
            )));
        }
        Ok(())
    }

    /// A new connection (no response timeout: the callers bound each command), identity
    /// checked before it is used.
    async fn connect(&self) -> Result<MultiplexedConnection, CommandError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        let mut c = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        self.check_new(&mut c).await?;
        Ok(c)
    }

    async fn query(&self, cmd: redis::Cmd) -> Result<Value, CommandError> {
        self.not_quarantined()?;
        let mut c = {
            let mut slot = self.conn.lock().await;
            match slot.as_ref() {
                Some(c) => c.clone(),
                None => {
                    let c = self.connect().await?;
                    *slot = Some(c.clone());
                    c
                }
            }
        };
        let r = crate::transport::reply(cmd.query_async::<Value>(&mut c).await);
        if r.as_ref().is_err_and(|e| e.kind.is_unreachable()) {
            *self.conn.lock().await = None;
        }
        r
    }
}

impl Node {
    /// A blocking command (Q10's `LEASE.ACQUIRE ... BLOCK`) on a connection of its own, opened
    /// for it and dropped with it. Why not the shared connection: a blocked client holds back
    /// every later command on its connection, so the next round would find this node silent;
    /// and if the wait is abandoned (resign, the loop's limit), dropping the connection is
    /// what tells the server to stop waiting for us (a grant it made just before is found
    /// and released by the loop's stray release, as for any abandoned acquire).
    async fn blocking_query(
        &self,
        cmd: redis::Cmd,
        limit: Duration,
    ) -> Result<Value, CommandError> {
        self.not_quarantined()?;
        let mut c = self.connect().await?;
        match tokio::time::timeout(limit, cmd.query_async::<Value>(&mut c)).await {
            Ok(r) => crate::transport::reply(r),
            Err(_) => Err(CommandError::timeout(limit)),
        }
    }
}

/// The addresses a node URL names, for the start-time duplicate check: every socket address
/// its host resolves to (so `localhost` and `127.0.0.1` meet), or the canonical unix socket
/// path. The db number is left out on purpose: db 0 and db 1 are one server.
fn server_addresses(url: &str) -> Result<Vec<String>, LeaseError> {
    use redis::{ConnectionAddr, IntoConnectionInfo};
    use std::net::ToSocketAddrs;
    let info = url
        .into_connection_info()
        .map_err(|e| LeaseError::Config(format!("invalid redis url: {e}")))?;
    Ok(match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            // A name that does not resolve yet cannot be compared here; the run_id check on
            // connect still catches a duplicate.
            match (host.as_str(), *port).to_socket_addrs() {
                Ok(addrs) => addrs.map(|a| a.to_string()).collect(),
                Err(_) => vec![format!("{host}:{port}")],
            }
        }
        ConnectionAddr::Unix(path) => vec![std::fs::canonicalize(path)
            .unwrap_or_else(|_| path.clone())
            .display()
            .to_string()],
        _ => vec![],
    })
}

/// A node URL's identity in the membership id (`quorum_decide::tcp_identity`, Q9).
pub fn node_identity(url: &str) -> Result<String, LeaseError> {
    use redis::{ConnectionAddr, IntoConnectionInfo};
    let info = url
        .into_connection_info()
        .map_err(|e| LeaseError::Config(format!("invalid redis url: {e}")))?;
    match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            Ok(qd::tcp_identity(host, *port))
        }
        ConnectionAddr::Unix(path) => Ok(qd::unix_identity(&path.display().to_string())),
        other => Err(LeaseError::Config(format!(
            "quorum: no membership identity for the address {other:?}"
        ))),
    }
}

/// The membership id of a node list as the wire spells it (16 hex digits, Q9): what an
/// operator passes to `LEASE.MEMBERSHIP key old new` when the node set changes
/// (docs/quorum.md §4.1; `lease-run --print-membership-id`).
pub fn membership_id_of(urls: &[String]) -> Result<String, LeaseError> {
    let ids = urls
        .iter()
        .map(|u| node_identity(u))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(qd::membership_hex(qd::membership_id(&ids)))
}

/// Refuses a node list that names one server twice under any spelling.
fn check_distinct(urls: &[String]) -> Result<(), LeaseError> {
    let addrs = urls
        .iter()
        .map(|u| server_addresses(u))
        .collect::<Result<Vec<_>, _>>()?;
    for i in 0..urls.len() {
        for j in i + 1..urls.len() {
            if let Some(a) = addrs[i].iter().find(|a| addrs[j].contains(a)) {
                return Err(LeaseError::Config(format!(
                    "quorum: nodes {} and {} are the same server ({a}): one server would count twice toward a majority",
                    i + 1,
                    j + 1
                )));
            }
        }
    }
    Ok(())
}

/// [`Transport`] over N independent primaries (see the module docs).
pub struct QuorumTransport {
    nodes: Vec<Arc<Node>>,
    control: QuorumControl,
    /// Bound of one step of a round (each node's reply is awaited at most this long).
    step_timeout: Duration,
    /// The token each node holds for us in the current reign (all equal to the reign's
    /// token, except under the `NoUnify` control).
    held: Vec<Option<u64>>,
    owner: String,
    /// An acquire round released partial grants under `owner` (see `take_retired_owner`).
    retired: bool,
    /// `MEMBERSHIP <id>` of this node list, sent with every ACQUIRE, RENEW and RAISE (Q9);
    /// `None` only under the `NoMembership` control.
    membership: Option<String>,
    /// The last round's refusal for membership was reported (logged once per change).
    membership_reported: bool,
    /// The node followers wait on with `BLOCK` (Q10, `quorum_decide::wait_node`).
    wait_node: usize,
    /// The loop's per-command budget: the wait on the wait node leaves room for two steps.
    op_timeout: Duration,
    /// The longest wait on the wait node (Q10).
    renew_interval: Duration,
    /// The instant before the sends of the round that produced the last acquire's reply,
    /// when that round started after a wait (see `take_round_start`).
    round_start: Option<Instant>,
}

/// Appends `MEMBERSHIP id` (Q9) when there is one.
fn with_membership(c: &mut redis::Cmd, m: &Option<String>) {
    if let Some(m) = m {
        c.arg("MEMBERSHIP").arg(m);
    }
}

/// How one acquire round ended.
enum RoundEnd {
    /// What `acquire` returns.
    Done(Result<Replicated<Option<u64>>, CommandError>),
    /// Refused by enough nodes, nothing released: the replies, to decide whether to wait (Q10).
    Refused(Vec<NodeReply<Option<u64>>>),
}

fn int_of(v: &Value) -> Result<i64, CommandError> {
    match v {
        Value::Int(n) => Ok(*n),
        other => Err(CommandError::protocol(format!(
            "unexpected reply {other:?}"
        ))),
    }
}

impl QuorumTransport {
    pub fn new(
        urls: &[String],
        cfg: &ElectorConfig,
        control: QuorumControl,
    ) -> Result<Self, LeaseError> {
        Self::with_options(urls, cfg, control, &ConnectOptions::default())
    }

    /// [`QuorumTransport::new`] with TLS files and credentials applied to every node (the
    /// same CA, client certificate and ACL user on each: one deployment's servers).
    pub fn with_options(
        urls: &[String],
        cfg: &ElectorConfig,
        control: QuorumControl,
        opts: &ConnectOptions,
    ) -> Result<Self, LeaseError> {
        if urls.len() < 2 {
            return Err(LeaseError::Config(
                "quorum: needs at least 2 node URLs (3 or 5 to tolerate 1 or 2 faulty)".into(),
            ));
        }
        if cfg.min_replicas > 0 {
            // Each node is its own primary; replicas of a node add nothing to the majority
            // argument, and WAIT per node would multiply round trips.
            return Err(LeaseError::Config(
                "quorum: min_replicas is not supported (the majority is the replication)".into(),
            ));
        }
        check_distinct(urls)?;
        // Why (Q9, issue 32): electors with different node lists (during a node replacement)
        // can find disjoint majorities; binding each key to one list's id keeps them apart.
        let membership = match (control, &cfg.membership_id) {
            (QuorumControl::NoMembership, _) => None,
            // An override (electors behind different addresses of the same servers): checked
            // here, so a typo is a configuration error at start, not a refusal on every node.
            (_, Some(id)) => {
                if id.len() != 16
                    || !id
                        .bytes()
                        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
                    || u64::from_str_radix(id, 16).ok() == Some(0)
                {
                    return Err(LeaseError::Config(format!(
                        "quorum: membership id {id:?}: expected 16 lower-case hex digits, not all zero"
                    )));
                }
                Some(id.clone())
            }
            _ => Some(membership_id_of(urls)?),
        };
        let identities = Arc::new(std::sync::Mutex::new(vec![None; urls.len()]));
        let mut nodes = vec![];
        for (index, u) in urls.iter().enumerate() {
            let client = crate::tls::redis_client(u, opts)?;
            nodes.push(Arc::new(Node {
                index,
                client,
                conn: Mutex::new(None),
                connect_timeout: decide::connect_timeout(cfg),
                identities: identities.clone(),
                quarantined_until: std::sync::Mutex::new(None),
                quarantine: qd::quarantine(cfg.ttl, cfg.node_quarantine, cfg.drift),
            }));
        }
        Ok(QuorumTransport {
            held: vec![None; nodes.len()],
            nodes,
            control,
            // Two steps (acquire, raise) must fit in the loop's op limit of a non-blocking
            // acquire (`op_timeout`).
            step_timeout: (cfg.op_timeout / 2).max(Duration::from_millis(1)),
            // The loop passes the reign's owner with every command (R17, the same on every
            // node); this is only what `get` compares before the first ACQUIRE.
            owner: crate::decide::reign_owner(&cfg.owner, 1).unwrap_or_default(),
            retired: false,
            membership,
            membership_reported: false,
            wait_node: qd::wait_node(urls),
            op_timeout: cfg.op_timeout,
            renew_interval: cfg.renew_interval,
            round_start: None,
        })
    }

    /// The membership id this transport sends (Q9), `None` under the `NoMembership` control.
    pub fn membership_id(&self) -> Option<&str> {
        self.membership.as_deref()
    }

    /// Logs a round lost to membership refusals once, until a round ends otherwise: only an
    /// operator can fix it, and the loop polls every 50..100 ms.
    fn report_membership(&mut self, refused: bool) {
        if refused && !self.membership_reported {
            tracing::error!(
                membership = self.membership.as_deref().unwrap_or(""),
                reason = "membership_mismatch",
                "quorum: nodes refuse this elector's node list (their lease key is bound to another membership); \
                 electors use different node lists? see docs/quorum.md 4.1"
            );
        }
        self.membership_reported = refused;
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Sends `cmd(i)` to every node in `targets` in parallel; collects replies until `done`
    /// says the round is decided, every target answered, or the step timeout. Nodes that did
    /// not answer in time are `None`.
    async fn round<T: Send + 'static>(
        &self,
        targets: &[usize],
        cmd: impl Fn(usize) -> redis::Cmd,
        parse: fn(Value) -> Result<T, CommandError>,
        done: impl Fn(&[NodeReply<T>]) -> bool,
    ) -> Vec<NodeReply<T>> {
        let mut replies: Vec<NodeReply<T>> = (0..self.nodes.len()).map(|_| None).collect();
        let mut set = JoinSet::new();
        for &i in targets {
            let node = self.nodes[i].clone();
            let c = cmd(i);
            let limit = self.step_timeout;
            set.spawn(async move {
                let r = match tokio::time::timeout(limit, node.query(c)).await {
                    Ok(r) => r.and_then(parse),
                    Err(_) => Err(CommandError::timeout(limit)),
                };
                (i, r)
            });
        }
        let deadline = Instant::now() + self.step_timeout;
        while !set.is_empty() {
            match tokio::time::timeout_at(deadline, set.join_next()).await {
                Ok(Some(Ok((i, r)))) => {
                    // A timeout is "no reply": the node may or may not have run it.
                    replies[i] = match r {
                        Err(e) if matches!(e.kind, ErrorKind::Timeout) => None,
                        r => Some(r.map_err(|e| e.kind)),
                    };
                    if done(&replies) {
                        break;
                    }
                }
                Ok(Some(Err(_))) | Ok(None) | Err(_) => break,
            }
        }
        // The rest finish (bounded by their own timeout) in the background: their replies no
        // longer matter, and cancelling a command half-sent would gain nothing.
        set.detach_all();
        replies
    }

    /// Releases `(node, token)` pairs in parallel, best effort.
    async fn release_on(&self, key: &str, owner: &str, pairs: &[(usize, u64)]) -> usize {
        if pairs.is_empty() {
            return 0;
        }
        let targets: Vec<usize> = pairs.iter().map(|p| p.0).collect();
        let tok = |i: usize| pairs.iter().find(|p| p.0 == i).map_or(0, |p| p.1);
        let r = self
            .round(
                &targets,
                |i| {
                    let mut c = redis::cmd("LEASE.RELEASE");
                    c.arg(key).arg(owner).arg(tok(i));
                    c
                },
                |v| int_of(&v).map(|n| n == 1),
                |_| false,
            )
            .await;
        r.iter().filter(|x| matches!(x, Some(Ok(true)))).count()
    }

    /// One acquire round (ACQUIRE on all, RAISE on the granting majority). A plain refusal
    /// (no reign, nothing released, not an error) comes back with its replies, for Q10.
    async fn acquire_round(&mut self, key: &str, owner: &str, ttl: Duration) -> RoundEnd {
        let n = self.nodes.len();
        let need = self.control.need(n);
        self.owner = owner.to_string();
        let wait = self.wait_node;
        let ttl_ms = wire_ms(ttl);
        let m = self.membership.clone();
        let replies = self
            .round(
                &self.all(),
                |_| {
                    let mut c = redis::cmd("LEASE.ACQUIRE");
                    c.arg(key).arg(owner).arg(ttl_ms);
                    with_membership(&mut c, &m);
                    c
                },
                |v| match v {
                    Value::Nil => Ok(None),
                    Value::Int(t) if t > 0 => Ok(Some(t as u64)),
                    other => Err(CommandError::protocol(format!(
                        "LEASE.ACQUIRE replied {other:?}"
                    ))),
                },
                // Decided early only when a majority can no longer grant. Otherwise every node
                // gets the step's time to answer, even after a majority granted: a reign that
                // starts on all N nodes survives more later faults than one on a bare
                // majority, and its token is the maximum over more nodes. Cost: a silent node
                // delays an election by at most the step timeout (a refused connection fails
                // at once). And not before the wait node answered: whether a refused follower
                // waits (Q10) depends on that node's reply, and deciding on two other nodes'
                // refusals first would make it poll instead (it costs nothing when the wait node
                // answers as fast as the rest, and at most the step timeout when it is silent).
                move |r: &[NodeReply<Option<u64>>]| {
                    let other = r
                        .iter()
                        .filter(|x| matches!(x, Some(Ok(None)) | Some(Err(_))))
                        .count();
                    other > n - need && r.get(wait).is_some_and(Option::is_some)
                },
            )
            .await;
        match qd::after_acquire(self.control, &replies, fastrand::usize(..)) {
            AfterAcquire::Raise { target, nodes } => {
                let confirmed = self
                    .round(
                        &nodes,
                        |i| {
                            let granted = match &replies[i] {
                                Some(Ok(Some(t))) => *t,
                                _ => target,
                            };
                            let mut c = redis::cmd("LEASE.RAISE");
                            c.arg(key).arg(owner).arg(granted).arg(target);
                            with_membership(&mut c, &m);
                            c
                        },
                        |v| int_of(&v).map(|n| n == 1),
                        |_| false,
                    )
                    .await;
                if qd::raise_confirmed(self.control, &confirmed, n) {
                    self.held = (0..n)
                        .map(|i| matches!(confirmed[i], Some(Ok(true))).then_some(target))
                        .collect();
                    return RoundEnd::Done(Ok(Replicated {
                        value: Some(target),
                        acked: None,
                    }));
                }
                // Not confirmed: the grants (raised or not) must not block anyone for a TTL.
                let pairs: Vec<(usize, u64)> = nodes
                    .iter()
                    .map(|&i| match (&confirmed[i], &replies[i]) {
                        (Some(Ok(true)), _) => (i, target),
                        (_, Some(Ok(Some(t)))) => (i, *t),
                        _ => (i, target),
                    })
                    .collect();
                self.retired |= !pairs.is_empty();
                self.release_on(key, owner, &pairs).await;
                // Not leading either way; but a node that refused the raise with a server
                // error (NOPERM: an ACL without +lease.raise) is a fault the operator must see,
                // not a contender: report it (the loop logs, counts and backs off) instead of
                // polling in silence forever. Unreachable nodes are faults of the moment.
                // (The round keeps only the kind; a server error's kind carries its code.) A
                // MEMBERSHIP refusal is no fault: it counts as no confirmation (Q9).
                if let Some((i, kind)) = nodes.iter().find_map(|&i| match &confirmed[i] {
                    Some(Err(k)) if !k.is_unreachable() && !matches!(k, ErrorKind::Membership) => {
                        Some((i, k))
                    }
                    _ => None,
                }) {
                    return RoundEnd::Done(Err(CommandError::new(
                        kind.clone(),
                        format!("quorum: node {} refused LEASE.RAISE: {kind:?}", i + 1),
                    )));
                }
                RoundEnd::Done(Ok(Replicated {
                    value: None,
                    acked: None,
                }))
            }
            AfterAcquire::ActUnified { token, per_node } => {
                self.held = per_node;
                RoundEnd::Done(Ok(Replicated {
                    value: Some(token),
                    acked: None,
                }))
            }
            AfterAcquire::Abort { release, outcome } => {
                let released = !release.is_empty();
                self.retired |= released;
                self.release_on(key, owner, &release).await;
                self.report_membership(outcome == NotLeading::WrongMembership);
                match outcome {
                    // A membership mismatch (Q9) is no refusal Q10 could wait out.
                    NotLeading::NotGranted if !released => RoundEnd::Refused(replies),
                    NotLeading::NotGranted | NotLeading::WrongMembership => {
                        RoundEnd::Done(Ok(Replicated {
                            value: None,
                            acked: None,
                        }))
                    }
                    NotLeading::Error(kind) => RoundEnd::Done(Err(CommandError::new(
                        kind,
                        format!("quorum: fewer than {need} of {n} nodes could grant"),
                    ))),
                }
            }
        }
    }

    fn all(&self) -> Vec<usize> {
        (0..self.nodes.len()).collect()
    }
}

impl Transport for QuorumTransport {
    async fn acquire(
        &mut self,
        key: &str,
        owner: &str,
        ttl: Duration,
        block: Option<Duration>,
        _wait: Option<WaitFor>,
    ) -> Result<Replicated<Option<u64>>, CommandError> {
        self.round_start = None;
        let refused = match self.acquire_round(key, owner, ttl).await {
            RoundEnd::Done(r) => return r,
            RoundEnd::Refused(replies) => replies,
        };
        let not_granted = Ok(Replicated {
            value: None,
            acked: None,
        });
        let Some(wait) = qd::wait_after_refusal(
            &refused,
            self.wait_node,
            false,
            block,
            self.op_timeout,
            self.renew_interval,
        ) else {
            return not_granted;
        };
        // Q10: wait on the wait node until it is released or expires (it then grants us that
        // one node, which is no reign), and go straight into a fresh round. Why this is safe:
        // the wait node's grant counts for nothing by itself; what counts is the fresh round,
        // whose every counted node set its expiry after `start`, the instant taken before
        // that round's sends, which the loop then measures the deadline from. No MEMBERSHIP
        // on it (the module refuses it with BLOCK, and it does not need one): a grant that
        // counts for nothing needs no binding check, and the fresh round names the id (Q9).
        let node = self.nodes[self.wait_node].clone();
        let mut c = redis::cmd("LEASE.ACQUIRE");
        c.arg(key)
            .arg(owner)
            .arg(wire_ms(ttl))
            .arg("BLOCK")
            .arg(wire_ms(wait));
        match node.blocking_query(c, wait + self.step_timeout).await {
            Ok(Value::Int(t)) if t > 0 => {}
            // Timed out (nil), failed, or the node went away: the loop asks again.
            _ => return not_granted,
        }
        let start = Instant::now();
        match self.acquire_round(key, owner, ttl).await {
            RoundEnd::Done(r) => {
                self.round_start = Some(start);
                r
            }
            // Every node refused, the wait node included (it lost our grant meanwhile, e.g.
            // it restarted): the loop asks again.
            RoundEnd::Refused(_) => not_granted,
        }
    }

    async fn renew(
        &mut self,
        key: &str,
        owner: &str,
        token: u64,
        ttl: Duration,
        _wait: Option<WaitFor>,
    ) -> Result<Replicated<bool>, CommandError> {
        let n = self.nodes.len();
        let need = self.control.need(n);
        let ttl_ms = wire_ms(ttl);
        let held = self.held.clone();
        let m = self.membership.clone();
        let replies = self
            .round(
                &self.all(),
                |i| {
                    let mut c = redis::cmd("LEASE.RENEW");
                    c.arg(key)
                        .arg(owner)
                        .arg(held[i].unwrap_or(token))
                        .arg(ttl_ms);
                    with_membership(&mut c, &m);
                    c
                },
                |v| int_of(&v).map(|n| n == 1),
                move |r: &[NodeReply<bool>]| {
                    let ones = r.iter().filter(|x| matches!(x, Some(Ok(true)))).count();
                    let zeros = r.iter().filter(|x| qd::renew_refused(x)).count();
                    ones >= need || zeros > n - need
                },
            )
            .await;
        match qd::after_renew(self.control, &replies) {
            AfterRenew::Renewed => Ok(Replicated {
                value: true,
                acked: None,
            }),
            AfterRenew::Lost => {
                if replies
                    .iter()
                    .any(|r| matches!(r, Some(Err(ErrorKind::Membership))))
                {
                    // The operator rebound nodes to another list (docs/quorum.md §4.1): this
                    // reign ends here, by design.
                    tracing::warn!(
                        reason = "membership_mismatch",
                        "quorum: renewal refused: nodes are bound to another membership now"
                    );
                }
                // Stepping down. The nodes that still said 1 are NOT released here: our task
                // has not stopped yet, and such a node can complete another elector's
                // majority with nodes that said 0 (one wiped, one holding that elector's
                // partial grant) — a successor would reign while we still act. The model
                // check found this (docs/model.md). The loop releases them once the task has
                // stopped (`holds_after_rejection`), as for every other step-down (R13).
                // Every node that did not say 0 may still hold us (the round stopped waiting
                // once a majority said 0; a slow node's 1 may be on its way): all of them are
                // released after the task stopped, not only those whose 1 arrived (otherwise
                // those expire on their own: liveness, not safety). A RELEASE of a lease a
                // node no longer holds answers 0 and changes nothing.
                for (i, h) in self.held.iter_mut().enumerate() {
                    *h = match replies[i] {
                        Some(Ok(false)) => None,
                        _ => Some(h.unwrap_or(token)),
                    };
                }
                Ok(Replicated {
                    value: false,
                    acked: None,
                })
            }
            AfterRenew::Unknown => {
                let first = replies.iter().find_map(|r| match r {
                    Some(Err(e)) => Some(e.clone()),
                    _ => None,
                });
                Err(CommandError::new(
                    first.unwrap_or(ErrorKind::Timeout),
                    format!("quorum: renewal not confirmed by {need} of {n} nodes"),
                ))
            }
        }
    }

    fn holds_after_rejection(&self) -> bool {
        self.held.iter().any(Option::is_some)
    }

    fn take_retired_owner(&mut self) -> bool {
        std::mem::take(&mut self.retired)
    }

    fn take_round_start(&mut self) -> Option<Instant> {
        self.round_start.take()
    }

    async fn release(&mut self, key: &str, owner: &str, token: u64) -> Result<bool, CommandError> {
        let n = self.nodes.len();
        let pairs: Vec<(usize, u64)> = (0..n).map(|i| (i, self.held[i].unwrap_or(token))).collect();
        // Q10: the wait node's RELEASE is sent last (all are sent at once, without waiting
        // for replies). Its release wakes the one follower waiting there, whose next round
        // should find the other nodes already free: their RELEASEs left before it, and the
        // wake plus that round take at least a round trip more. A round that still overtakes
        // one on another node is refused there and falls back to polling. Order only
        // affects liveness: a release frees, it never grants.
        let mut pairs = pairs;
        pairs.sort_by_key(|p| p.0 == self.wait_node);
        let released = self.release_on(key, owner, &pairs).await;
        self.held = vec![None; n];
        Ok(released > 0)
    }

    /// Our own holding on any node (used after a resign with a round in flight: the loop
    /// then releases it, which this transport does on every node).
    async fn get(&mut self, key: &str) -> Result<Option<LeaseInfo>, CommandError> {
        let replies = self
            .round(
                &self.all(),
                |_| {
                    let mut c = redis::cmd("LEASE.GET");
                    c.arg(key);
                    c
                },
                Ok,
                |_| false,
            )
            .await;
        let mut found = None;
        for (i, r) in replies.iter().enumerate() {
            // Same parser as the single-node transport (RESP2 array or RESP3 map); a node that
            // errs or answers oddly simply shows no holding of ours.
            if let Some(Ok(v)) = r {
                if let Ok(Some(info)) = crate::transport::lease_info_of(v.clone()) {
                    if info.owner == self.owner {
                        // Stray grants may carry different tokens: remember each.
                        self.held[i] = Some(info.token);
                        found = Some(info);
                    }
                }
            }
        }
        Ok(found)
    }
}

/// One node ([`RedisTransport`]) or several ([`QuorumTransport`]), chosen by how many URLs
/// were given; lets `lease-run` and the harness keep one code path.
// Why not boxed: an elector holds exactly one of these for its whole life; the size is irrelevant.
#[allow(clippy::large_enum_variant)]
pub enum Nodes {
    One(RedisTransport),
    Quorum(QuorumTransport),
}

impl Transport for Nodes {
    fn holds_after_rejection(&self) -> bool {
        match self {
            Nodes::One(t) => t.holds_after_rejection(),
            Nodes::Quorum(t) => t.holds_after_rejection(),
        }
    }

    fn take_retired_owner(&mut self) -> bool {
        match self {
            Nodes::One(t) => t.take_retired_owner(),
            Nodes::Quorum(t) => t.take_retired_owner(),
        }
    }

    fn take_round_start(&mut self) -> Option<Instant> {
        match self {
            Nodes::One(t) => t.take_round_start(),
            Nodes::Quorum(t) => t.take_round_start(),
        }
    }

    async fn acquire(
        &mut self,
        key: &str,
        owner: &str,
        ttl: Duration,
        block: Option<Duration>,
        wait: Option<WaitFor>,
    ) -> Result<Replicated<Option<u64>>, CommandError> {
        match self {
            Nodes::One(t) => t.acquire(key, owner, ttl, block, wait).await,
            Nodes::Quorum(t) => t.acquire(key, owner, ttl, block, wait).await,
        }
    }
    async fn renew(
        &mut self,
        key: &str,
        owner: &str,
        token: u64,
        ttl: Duration,
        wait: Option<WaitFor>,
    ) -> Result<Replicated<bool>, CommandError> {
        match self {
            Nodes::One(t) => t.renew(key, owner, token, ttl, wait).await,
            Nodes::Quorum(t) => t.renew(key, owner, token, ttl, wait).await,
        }
    }
    async fn release(&mut self, key: &str, owner: &str, token: u64) -> Result<bool, CommandError> {
        match self {
            Nodes::One(t) => t.release(key, owner, token).await,
            Nodes::Quorum(t) => t.release(key, owner, token).await,
        }
    }
    async fn get(&mut self, key: &str) -> Result<Option<LeaseInfo>, CommandError> {
        match self {
            Nodes::One(t) => t.get(key).await,
            Nodes::Quorum(t) => t.get(key).await,
        }
    }
}

impl Elector<Nodes> {
    /// An elector on one node (`urls.len() == 1`, the ordinary protocol) or in quorum mode
    /// over several independent primaries (docs/quorum.md). `config.redis_url` is ignored.
    pub fn with_nodes(config: ElectorConfig, urls: &[String]) -> Result<Self, LeaseError> {
        Self::with_nodes_control(config, urls, QuorumControl::Correct)
    }

    /// [`Elector::with_nodes`] with a deliberately broken quorum variant (the harness's
    /// negative controls; never in production).
    pub fn with_nodes_control(
        config: ElectorConfig,
        urls: &[String],
        control: QuorumControl,
    ) -> Result<Self, LeaseError> {
        Self::with_nodes_options(config, urls, control, &ConnectOptions::default())
    }

    /// [`Elector::with_nodes`] with TLS files and credentials ([`ConnectOptions`]) applied to
    /// every node URL, in quorum mode as with one node.
    pub fn with_nodes_options(
        config: ElectorConfig,
        urls: &[String],
        control: QuorumControl,
        opts: &ConnectOptions,
    ) -> Result<Self, LeaseError> {
        config.validate()?;
        let t = match urls {
            [] => return Err(LeaseError::Config("no redis url".into())),
            [one] => Nodes::One(RedisTransport::with_options(
                one,
                opts,
                decide::connect_timeout(&config),
            )?),
            many => Nodes::Quorum(QuorumTransport::with_options(many, &config, control, opts)?),
        };
        Elector::with_transport(config, t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn one_server_twice_under_any_spelling_is_refused() {
        for (list, why) in [
            (
                &["redis://127.0.0.1:7001/", "redis://127.0.0.1:7001/"][..],
                "same URL",
            ),
            (
                &["redis://localhost:7001/", "redis://127.0.0.1:7001/"][..],
                "name and address",
            ),
            (
                &["redis://127.0.0.1:7001/0", "redis://127.0.0.1:7001/1"][..],
                "db 0 and db 1",
            ),
            (
                &["redis://127.0.0.1:7001", "redis://u:p@127.0.0.1:7001/"][..],
                "credentials",
            ),
        ] {
            let e = check_distinct(&urls(list)).expect_err(why).to_string();
            assert!(e.contains("are the same server"), "{why}: {e}");
        }
        check_distinct(&urls(&[
            "redis://127.0.0.1:7001/",
            "redis://127.0.0.1:7002/",
            "redis://127.0.0.2:7001/",
        ]))
        .expect("three distinct servers");
    }

    #[test]
    fn run_id_is_read_from_info_server() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:4f1c0d\r\ntcp_port:6379\r\n";
        assert_eq!(run_id_of(info).as_deref(), Some("4f1c0d"));
        assert_eq!(run_id_of("# Server\r\nredis_version:7\r\n"), None);
    }
}
