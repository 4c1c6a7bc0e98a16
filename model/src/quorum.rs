//! The quorum protocol (docs/quorum.md) as a model: 3 independent nodes (no replication
//! between them), 2 electors. As in the single-node model ([`crate::model`]), nothing of the
//! protocol is re-described here:
//!
//! - every `LEASE.ACQUIRE`, `LEASE.RAISE`, `LEASE.RENEW` and `LEASE.RELEASE` a node executes
//!   goes through the module's engine (`engine::handle`);
//! - what an elector does with a round's replies is `redis_lease_client::quorum_decide`
//!   (`after_acquire`, `raise_confirmed`, `after_renew`, `majority`), and what the election
//!   loop does with the round's result is `decide` (`on_acquire`, `on_renew`, `must_stop`,
//!   `backoff_cap`), exactly as `client/src/quorum.rs` sits under `client/src/elector.rs`.
//!
//! The model adds true time, clocks, the per-node network, node faults and the fencing
//! resource; docs/model.md §8 says what is abstracted and why.

use std::time::Duration;

use redis_lease_client::decide::{self, AcquireDecision, RenewDecision, StepDownReason};
use redis_lease_client::quorum_decide::{
    self as qd, AfterAcquire, AfterRenew, NodeReply, NotLeading, QuorumControl,
};
use redis_lease_client::{CommandError, ElectorConfig, ErrorKind, Replicated};
use stateright::{Model, Property};
use tokio::time::Instant;

use crate::lease::config::Config;
use crate::lease::engine::{self, Call, Effect, Reply, Store};
use crate::lease::node::Node;
use crate::lease::request::Request;
use crate::lease::state::{Lease, Now};
use crate::lease::LeaseError;
use crate::model::{DRIFT, TTL_MS};
use crate::run::Explain;

/// Independent primaries in each elector's node list. Three is the smallest N where a
/// majority survives one faulty node.
pub const NODES: usize = 3;
/// Servers in the model: the three of the list, and a fourth that only the membership-change
/// setup uses (`QSetup::lists`: elector 1's list replaces server 2 by server 3, issue 32).
const SERVERS: usize = NODES + 1;
/// More than half of the nodes (property 2a's yardstick).
const MAJORITY: usize = NODES / 2 + 1;
/// Elector clock rates (µs per tick): the two extremes the drift bound allows against the
/// nodes' (1100 / 900 = 1.22 < 1 / (1 − 0.2) = 1.25), as in the single-node model.
const ELECTOR_RATES: [u64; 2] = [900, 1100];
/// Node monotonic clock rates: two fast nodes (a fast node expires a lease early in true
/// time, the dangerous direction) and one nominal.
const NODE_RATES: [u64; SERVERS] = [1100, 1000, 1100, 1000];
/// A follower whose round was not granted asks again this many ticks later.
const POLL_TICKS: u32 = 2;
const WALL0_MS: u64 = 1_800_000_000_000;
/// Node monotonic origin: started long ago, so the start grace is over at tick 0.
const MONO0_US: u64 = 10_000_000;

/// The documented assumptions' default: the last node's wall clock runs this far ahead of the
/// others — less than the grace (4 ms), as docs/quorum.md §4 requires for step T4.
pub const SKEW_MS: u64 = 3;
/// The skew of the harness's no-unify control (`--skew-ms 30000` there): far beyond the grace.
pub const BIG_SKEW_MS: u64 = 10;

/// A negative control of the quorum protocol: one deliberate break, as a model switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QControl {
    /// The protocol as documented.
    None,
    /// `lease.grace-ms 0`: a node restarted without its data grants at once.
    GraceZero,
    /// Skip the raise: act on one granting node's token (`QuorumControl::NoUnify`).
    NoUnify,
    /// Lead on a single grant (`QuorumControl::Minority`).
    Minority,
    /// The elector ignores node identities: a node whose address now points at another
    /// server counts like any other (the client before issue 32's identity rule).
    IdentityIgnored,
    /// The owner is the same in every reign (before R17): issue 23 in quorum mode.
    OwnerReuse,
    /// R17 as docs/client-protocol.md states it at dbb67fc: the reign advances after a
    /// step-down only, so the round after an aborted campaign (whose partial grants the
    /// transport released) names the same owner, refreshes a grant that a late RELEASE of
    /// the aborted round then frees (found by this model, docs/model.md §8.4).
    ReignOnStepDownOnly,
    /// The electors send no membership id (`QuorumControl::NoMembership`, the protocol before
    /// Q9): with two node lists (`QSetup::lists`) they find disjoint majorities (issue 32).
    NoMembership,
    /// The operator rebinds the shared servers (`LEASE.MEMBERSHIP key old new`) while an
    /// elector of the old list still runs, against docs/quorum.md §4.1's procedure.
    RebindEarly,
}

impl QControl {
    fn client(self) -> QuorumControl {
        match self {
            QControl::NoUnify => QuorumControl::NoUnify,
            QControl::Minority => QuorumControl::Minority,
            QControl::NoMembership => QuorumControl::NoMembership,
            QControl::None
            | QControl::GraceZero
            | QControl::IdentityIgnored
            | QControl::OwnerReuse
            | QControl::ReignOnStepDownOnly
            | QControl::RebindEarly => QuorumControl::Correct,
        }
    }
}

/// Node and network faults the checker may inject, and how many in one run. Elector pauses
/// and message delays are always possible (every step is optional).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QFaults {
    pub budget: u8,
    /// A request or reply between an elector and one node is lost.
    pub drop_messages: bool,
    /// A node is killed and restarted without persistence: empty dataset, fresh process
    /// (token watermark 0), start grace.
    pub wipe: bool,
    /// A node is restarted with its data (RDB/AOF): leases reloaded with their absolute
    /// expiry, start grace.
    pub restart: bool,
    /// A node's address is re-pointed at another, already-running server (a VIP, DNS name,
    /// k8s Service or proxy moved to a spare up for longer than its grace, issue 32): empty
    /// dataset, watermark 0, **no grace**, and a new identity.
    pub swap: bool,
}

impl QFaults {
    pub const NONE: QFaults = QFaults {
        budget: 0,
        drop_messages: false,
        wipe: false,
        restart: false,
        swap: false,
    };
}

#[derive(Clone, Copy, Debug)]
pub struct QSetup {
    /// 2 (the model has rates for two).
    pub electors: usize,
    pub horizon: u32,
    pub faults: QFaults,
    pub control: QControl,
    /// The last node's wall clock is this far ahead (ms).
    pub skew_ms: u64,
    /// Maximal progress (no pauses, no delays): for the liveness check.
    pub eager: bool,
    /// A renewal round that finds the lease lost (`AfterRenew::Lost`) releases the nodes
    /// that still said 1 at once, as `client/src/quorum.rs` does today (true), or leaves
    /// them to expire like any `RenewRejected` step-down (false). The model found that the
    /// first breaks mutual exclusion (docs/model.md §8.2).
    pub release_on_lost: bool,
    /// Which abandoned requests may still execute later: every one (true), or only the
    /// RELEASEs (false; an abandoned ACQUIRE, RAISE or RENEW is then dropped, as before
    /// issue 23). Every abandoned request executing late multiplies the states about ×9 at
    /// horizon 2; docs/model.md §8 gives the argument why the others are not the danger.
    pub late_all: bool,
    /// A membership change in progress (issue 32): elector 0 still uses the old list
    /// {s0, s1, s2}, elector 1 the new one {s0, s1, s3}. At the start the key on every server
    /// of the old list is bound to the old list's id and free (the reigns before the change;
    /// docs/quorum.md §4.1 step 1 makes sure of it), s3 is new and empty.
    pub lists: bool,
    /// With `lists`: the rest of the procedure as actions. The operator may stop elector 0
    /// (`Retire`: its task stops, it releases and runs no more), and once it is stopped
    /// (at any time under the `RebindEarly` control) rebind s0 and s1 to the new list
    /// (`Rebind`, through the engine's `LEASE.MEMBERSHIP`).
    pub procedure: bool,
    /// With `procedure`: the operator rebinds without `TOKEN` (the procedure without its
    /// token step, a negative control of "fencing: reign tokens rise").
    pub no_token_floor: bool,
}

pub struct QuorumModel {
    pub setup: QSetup,
    cfg: ElectorConfig,
    server_cfg: Config,
    base: Instant,
}

/// A node's answer to one command of a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Ans {
    Granted(u64),
    Busy,
    /// `GRACE ms_left` error.
    Grace(u64),
    /// Integer reply of RAISE / RENEW: 1 or 0.
    Yes,
    No,
    /// `MEMBERSHIP` error: the server's key is bound to another node list (Q9).
    WrongList,
}

/// A request as sent to one node, with the reign whose owner it names (R17: fixed at send
/// time, so a request that executes late still names the reign that sent it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Msg {
    Acquire {
        reign: u8,
    },
    Raise {
        reign: u8,
        from: u64,
        to: u64,
    },
    Renew {
        reign: u8,
        token: u64,
    },
    /// Fire and forget (the transport releases best effort; its reply decides nothing).
    Release {
        reign: u8,
        token: u64,
    },
}

impl Msg {
    fn reign(self) -> u8 {
        match self {
            Msg::Acquire { reign }
            | Msg::Raise { reign, .. }
            | Msg::Renew { reign, .. }
            | Msg::Release { reign, .. } => reign,
        }
    }

    /// The token the engine must find on the node for this request to match anything.
    fn names_token(self) -> Option<u64> {
        match self {
            Msg::Acquire { .. } => None,
            Msg::Raise { from, .. } => Some(from),
            Msg::Renew { token, .. } | Msg::Release { token, .. } => Some(token),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Step {
    Acquire,
    /// Raising the nodes that granted (`granted[n]` = the token node n granted).
    Raise {
        target: u64,
        granted: [Option<u64>; NODES],
    },
    Renew,
}

/// A round in progress: its send instant (elector clock, the deadline counts from it), the
/// current step, when that step started and the replies it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Round {
    sent_ns: u64,
    step_ns: u64,
    step: Step,
    replies: [Option<Ans>; NODES],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Role {
    Follower {
        next_try_ns: u64,
    },
    /// Stopped by the operator for good (`QAction::Retire`); its late requests may still run.
    Retired,
    Leader {
        token: u64,
        /// The token each node holds for us (all `token` unless the no-unify control).
        held: [Option<u64>; NODES],
        deadline_ns: u64,
        next_renew_ns: u64,
        /// Writes with this reign's token: 0 or 1 (its first act, presenting the token).
        writes: u8,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct QElector {
    role: Role,
    round: Option<Round>,
    /// One request per node on the wire (its reply arrives with its execution).
    net: [Option<Msg>; NODES],
    /// Requests this elector gave up on (its step ended, a new round or a release replaced
    /// them, it stepped down) that their node has not executed yet, as `(node, request)`,
    /// sorted: each may still execute at any later step, in any order, or never; the reply
    /// goes nowhere (docs/model.md §2, §8).
    late: Vec<(u8, Msg)>,
    /// R17's reign counter: starts at 1, advanced after every step-down (constant under
    /// the owner-reuse control).
    reign: u8,
    /// The identity of the server each node address led to when this elector last heard
    /// from it (all start with the servers of tick 0, met at start).
    seen: [u8; NODES],
    /// Until when (elector clock, ns) node n counts toward nothing because its identity
    /// changed (0: not quarantined).
    quarantine_ns: [u64; NODES],
}

impl QElector {
    /// Gives up on the request on the wire to node n, if any: it joins the late ones.
    fn abandon(&mut self, n: usize) {
        if let Some(m) = self.net[n].take() {
            let x = (n as u8, m);
            let at = self.late.partition_point(|y| *y < x);
            self.late.insert(at, x);
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct QNode {
    node: Node,
    lease: Option<Lease>,
    /// Which server this node address points at. A restart (with or without data) keeps
    /// it: the model's identity is the server, not the process; a swap changes it.
    ident: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QState {
    t: u32,
    electors: Vec<QElector>,
    /// Indexed by server; elector i's node n is server `QuorumModel::server(i, n)`.
    nodes: [QNode; SERVERS],
    faults_used: u8,
    /// Electors writing to the resource at this tick (bit i).
    writing: u8,
    /// The resource: highest token accepted, and which elector sent it.
    res_token: u64,
    res_from: u8,
    /// Ghost for property 2b: a reign's write presented a token not above an earlier
    /// reign's accepted one.
    res_violation: bool,
    /// Ghost for property 2a: a reign started on fewer than a majority of nodes confirming
    /// that they hold its token.
    unbacked: bool,
    /// Reigns that wrote to the resource, up to 2 (for the reachability checks).
    acted: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum QAction {
    Tick,
    SendAcquire(usize),
    SendRenew(usize),
    /// Node n executes elector i's request and the reply arrives; `pick` only matters for
    /// the no-unify control (which grant it acts on) when this reply ends the acquire step.
    Deliver(usize, usize, usize),
    /// Node n executes elector i's request, the reply is lost (a fault).
    LoseReply(usize, usize, usize),
    /// The current step's time limit passed: decide with the replies in hand.
    StepTimeout(usize, usize),
    StopCheck(usize),
    Write(usize),
    Drop(usize, usize),
    Wipe(usize),
    Restart(usize),
    /// Node n's address now points at another, long-running empty server (a fault).
    Swap(usize),
    /// Elector i's abandoned request `late[k]` executes on its node (the reply goes nowhere).
    DeliverLate(usize, usize),
    /// The operator stops elector i for good (membership-change procedure).
    Retire(usize),
    /// The operator runs `LEASE.MEMBERSHIP key <old> <new>` on server s.
    Rebind(usize),
}

/// Elector i's owner in reign `reign` (R17's `base#reign`, base `e{i}`), by the client's
/// own function.
fn owner(i: usize, reign: u8) -> Vec<u8> {
    redis_lease_client::decide::reign_owner(&format!("e{i}"), u64::from(reign))
        .expect("the model's bases are short and its counters small")
        .into_bytes()
}

impl QuorumModel {
    pub fn new(setup: QSetup) -> QuorumModel {
        assert!((1..=2).contains(&setup.electors));
        let ttl = Duration::from_millis(TTL_MS);
        let cfg = ElectorConfig::new("redis://model", "k", ttl)
            .with_drift(DRIFT)
            .with_renew_interval(Duration::from_millis(2))
            .with_op_timeout(Duration::from_millis(2))
            .with_backoff(Duration::from_millis(1), Duration::from_millis(1));
        assert_eq!(decide::config_problem(&cfg), None);
        let server_cfg = Config {
            max_ttl: TTL_MS as i64,
            grace_ms: if setup.control == QControl::GraceZero {
                0
            } else {
                -1 // follow max-ttl: the module's default
            },
            max_owner_len: 256,
        };
        QuorumModel {
            setup,
            cfg,
            server_cfg,
            base: Instant::now(),
        }
    }

    /// Issue 32's identity rule: how long a node whose identity changed counts toward no
    /// grant, on the elector's clock. At least one max TTL of the *server's* clock (every
    /// lease the previous server held for someone else ends within that), and a server
    /// duration `d` lasts at most `d / (1 - drift)` on an elector clock within the drift
    /// bound. (The model's max TTL is the TTL every elector asks for.)
    // The same bound as the client's `quorum_decide::quarantine`, with the model's max TTL.
    fn quarantine(&self) -> u64 {
        Duration::from_millis(TTL_MS)
            .div_f64(1.0 - self.cfg.drift)
            .as_nanos() as u64
    }

    /// Elector i hears from node n (a reply arrived): checks the server's identity against
    /// the one it remembers and starts a quarantine on a change. Returns the quarantine's
    /// remaining ms if node n counts toward nothing now. Under the identity-ignored control
    /// it never does.
    fn hear_from(&self, st: &mut QState, i: usize, n: usize) -> Option<u64> {
        if self.setup.control == QControl::IdentityIgnored {
            return None;
        }
        let now = self.elector_ns(i, st.t);
        let ident = st.nodes[self.server(i, n)].ident;
        let e = &mut st.electors[i];
        if e.seen[n] != ident {
            e.seen[n] = ident;
            e.quarantine_ns[n] = now + self.quarantine();
        }
        let until = e.quarantine_ns[n];
        (now < until).then(|| (until - now).div_ceil(1_000_000))
    }

    /// The server behind elector i's node n: the lists differ in their last node only.
    fn server(&self, i: usize, n: usize) -> usize {
        if self.setup.lists && i == 1 && n == NODES - 1 {
            NODES
        } else {
            n
        }
    }

    /// The servers the setup uses (the fourth only with two lists).
    fn servers(&self) -> usize {
        if self.setup.lists {
            SERVERS
        } else {
            NODES
        }
    }

    /// The membership id elector i's list has, by the client's own function (Q9): its
    /// servers as identities. The same for both electors unless `lists`.
    fn membership_of(&self, i: usize) -> u64 {
        let ids: Vec<String> = (0..NODES)
            .map(|n| qd::tcp_identity(&format!("s{}", self.server(i, n)), 6379))
            .collect();
        qd::membership_id(&ids)
    }

    /// What elector i's commands carry as `MEMBERSHIP` (none under the `NoMembership`
    /// control, as `QuorumTransport` then sends none).
    fn sent_membership(&self, i: usize) -> Option<u64> {
        (self.setup.control.client() != QuorumControl::NoMembership).then(|| self.membership_of(i))
    }

    /// `QuorumTransport::step_timeout`: each step waits at most half the op timeout, so the
    /// two steps of a campaign fit the loop's op limit.
    fn step_ns(&self) -> u64 {
        (self.cfg.op_timeout / 2)
            .max(Duration::from_millis(1))
            .as_nanos() as u64
    }

    fn elector_ns(&self, i: usize, t: u32) -> u64 {
        u64::from(t) * ELECTOR_RATES[i] * 1000
    }

    fn instant(&self, ns: u64) -> Instant {
        self.base + Duration::from_nanos(ns)
    }

    fn ns(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.base).as_nanos() as u64
    }

    fn node_now(&self, n: usize, t: u32) -> Now {
        let skew = if n == NODES - 1 {
            self.setup.skew_ms
        } else {
            0
        };
        Now {
            mono_us: MONO0_US + u64::from(t) * NODE_RATES[n],
            wall_ms: WALL0_MS + u64::from(t) + skew,
        }
    }

    fn must_stop(&self, st: &QState, i: usize) -> bool {
        match st.electors[i].role {
            Role::Leader { deadline_ns, .. } => decide::must_stop(
                &self.cfg,
                self.instant(deadline_ns),
                self.instant(self.elector_ns(i, st.t)),
            ),
            Role::Follower { .. } | Role::Retired => false,
        }
    }

    fn acting(&self, st: &QState, i: usize) -> bool {
        let inside = match st.electors[i].role {
            Role::Leader { deadline_ns, .. } => self.elector_ns(i, st.t) < deadline_ns,
            Role::Follower { .. } | Role::Retired => false,
        };
        inside || st.writing & (1 << i) != 0
    }

    /// Elector i's node `n` executes one request through the engine; returns its answer.
    fn serve(&self, st: &mut QState, n: usize, i: usize, msg: Msg) -> Option<Ans> {
        let n = self.server(i, n);
        let now = self.node_now(n, st.t);
        let who = owner(i, msg.reign());
        let ttl_ms = TTL_MS;
        let membership = self.sent_membership(i);
        let req = match msg {
            Msg::Acquire { .. } => Request::Acquire {
                owner: &who,
                ttl_ms,
                block: None,
                membership,
            },
            Msg::Raise { from, to, .. } => Request::Raise {
                owner: &who,
                token: from,
                new_token: to,
                membership,
            },
            Msg::Renew { token, .. } => Request::Renew {
                owner: &who,
                token,
                ttl_ms,
                membership,
            },
            Msg::Release { token, .. } => Request::Release { owner: &who, token },
        };
        let call = Call {
            can_block: false,
            from_primary_or_loading: false,
            replicated: false,
            replicas_ok: true,
        };
        let node = &mut st.nodes[n];
        let out = engine::handle(&node.node, node.lease.as_mut(), now, call, &req);
        if let Store::Create(l) = out.store {
            node.lease = Some(l);
        }
        for fx in &out.effects {
            // No replicas, no BLOCK, expiry judged lazily: only the watermark matters.
            if let Effect::ObserveToken(t) = fx {
                node.node.token_watermark = node.node.token_watermark.max(*t);
            }
        }
        let ans = match (out.reply, msg) {
            (Reply::Int(t), Msg::Acquire { .. }) => Ans::Granted(t as u64),
            (Reply::Null, Msg::Acquire { .. }) => Ans::Busy,
            (Reply::Error(LeaseError::Grace { ms_left }), _) => Ans::Grace(ms_left),
            (Reply::Error(LeaseError::MembershipMismatch { .. }), _) => Ans::WrongList,
            (Reply::Int(1), _) => Ans::Yes,
            (Reply::Int(0), _) => Ans::No,
            (r, m) => panic!("unexpected reply {r:?} to {m:?}"),
        };
        match msg {
            Msg::Release { .. } => None,
            _ => Some(ans),
        }
    }

    /// Nodes the current step sent to.
    fn targets(step: &Step) -> [bool; NODES] {
        match step {
            Step::Raise { granted, .. } => granted.map(|g| g.is_some()),
            _ => [true; NODES],
        }
    }

    /// The step's early end, as `QuorumTransport::round`'s `done` closures (or every target
    /// answered).
    fn step_done(&self, r: &Round) -> bool {
        let need = self.setup.control.client().need(NODES);
        let targets = Self::targets(&r.step);
        if (0..NODES).all(|n| !targets[n] || r.replies[n].is_some()) {
            return true;
        }
        let count = |f: fn(&Ans) -> bool| r.replies.iter().flatten().filter(|a| f(a)).count();
        match r.step {
            Step::Acquire => count(|a| !matches!(a, Ans::Granted(_))) > NODES - need,
            Step::Raise { .. } => false,
            Step::Renew => {
                count(|a| *a == Ans::Yes) >= need
                    || count(|a| matches!(a, Ans::No | Ans::WrongList)) > NODES - need
            }
        }
    }

    fn acquire_replies(r: &Round) -> Vec<NodeReply<Option<u64>>> {
        r.replies
            .iter()
            .map(|a| match a {
                None => None,
                Some(Ans::Granted(t)) => Some(Ok(Some(*t))),
                Some(Ans::Grace(ms)) => Some(Err(ErrorKind::Grace(Duration::from_millis(*ms)))),
                Some(Ans::WrongList) => Some(Err(ErrorKind::Membership)),
                Some(_) => Some(Ok(None)),
            })
            .collect()
    }

    fn bool_replies(r: &Round) -> Vec<NodeReply<bool>> {
        r.replies
            .iter()
            .map(|a| match a {
                None => None,
                Some(Ans::Yes) => Some(Ok(true)),
                Some(Ans::Grace(ms)) => Some(Err(ErrorKind::Grace(Duration::from_millis(*ms)))),
                Some(Ans::WrongList) => Some(Err(ErrorKind::Membership)),
                Some(_) => Some(Ok(false)),
            })
            .collect()
    }

    /// Sends `LEASE.RELEASE` for `(node, token)` pairs, fire and forget, as the current
    /// reign's owner. A request still on the wire to that node is abandoned, not lost.
    fn release(st: &mut QState, i: usize, pairs: &[(usize, u64)]) {
        let e = &mut st.electors[i];
        for &(n, token) in pairs {
            e.abandon(n);
            e.net[n] = Some(Msg::Release {
                reign: e.reign,
                token,
            });
        }
    }

    /// The reign counter after a step-down (R17), or unchanged under the owner-reuse control.
    fn after_step_down(&self, reign: u8) -> u8 {
        if self.setup.control == QControl::OwnerReuse {
            reign
        } else {
            let next = redis_lease_client::decide::next_reign(
                u64::from(reign),
                redis_lease_client::decide::ReignEvent::SteppedDown,
            );
            u8::try_from(next).expect("the model's horizons keep the counter small")
        }
    }

    /// The counter after a campaign round that released partial grants. Why advance it: a
    /// RELEASE may execute late, after the next round refreshed the grant it names (same
    /// owner, same token), and would free a node of the new reign. With a new owner the next
    /// round cannot refresh what this one released, so a RELEASE is the last request ever
    /// sent under its owner. Nothing needs the old owner: the released grants are not to be
    /// confirmed (R7/R16 re-ask only grants the round kept). Not in R17 as written (control
    /// `ReignOnStepDownOnly`); client/src/quorum.rs and the other quorum ports must do it.
    fn after_released_round(&self, reign: u8) -> u8 {
        match self.setup.control {
            QControl::OwnerReuse | QControl::ReignOnStepDownOnly => reign,
            _ => reign + 1,
        }
    }

    /// Forgets late requests that can no longer match anything (as `model.rs`'s
    /// `prune_late`): a RAISE, RENEW or RELEASE names a token, a node's tokens only rise
    /// (grant above the last, renew keeps, raise to the maximum, a free key keeps its last
    /// token), and a wipe, restart or swap drops the late requests to that node. So one
    /// naming a token below the node's last token will only ever answer 0.
    /// Without `late_all`, only abandoned RELEASEs are kept.
    fn prune_late(&self, st: &mut QState) {
        let last: [Option<u64>; SERVERS] =
            std::array::from_fn(|n| st.nodes[n].lease.as_ref().map(|l| l.last_token()));
        let all = self.setup.late_all;
        for (i, e) in st.electors.iter_mut().enumerate() {
            e.late.retain(|(n, m)| {
                (all || matches!(m, Msg::Release { .. }))
                    && match (m.names_token(), last[self.server(i, usize::from(*n))]) {
                        (Some(t), Some(l)) => t >= l,
                        _ => true,
                    }
            });
        }
    }

    /// The current step of elector i's round ends (early, all answered, or its time limit):
    /// the client's quorum decisions, then the loop's.
    fn end_step(&self, st: &mut QState, i: usize, pick: usize) {
        let Some(r) = st.electors[i].round else {
            return;
        };
        // What is still on the wire for this step is abandoned: it may still execute.
        for n in 0..NODES {
            if !matches!(st.electors[i].net[n], Some(Msg::Release { .. })) {
                st.electors[i].abandon(n);
            }
        }
        let now = self.elector_ns(i, st.t);
        let control = self.setup.control.client();
        match r.step {
            Step::Acquire => match qd::after_acquire(control, &Self::acquire_replies(&r), pick) {
                AfterAcquire::Raise { target, nodes } => {
                    let mut granted = [None; NODES];
                    for n in nodes {
                        if let Some(Ans::Granted(t)) = r.replies[n] {
                            granted[n] = Some(t);
                            let e = &mut st.electors[i];
                            e.abandon(n);
                            e.net[n] = Some(Msg::Raise {
                                reign: e.reign,
                                from: t,
                                to: target,
                            });
                        }
                    }
                    st.electors[i].round = Some(Round {
                        sent_ns: r.sent_ns,
                        step_ns: now,
                        step: Step::Raise { target, granted },
                        replies: [None; NODES],
                    });
                }
                AfterAcquire::ActUnified { token, per_node } => {
                    let held: [Option<u64>; NODES] = [per_node[0], per_node[1], per_node[2]];
                    let backing = held.iter().filter(|h| **h == Some(token)).count();
                    self.finish_acquire(st, i, Ok(Some(token)), held, backing);
                }
                AfterAcquire::Abort { release, outcome } => {
                    Self::release(st, i, &release);
                    if !release.is_empty() {
                        st.electors[i].reign = self.after_released_round(st.electors[i].reign);
                    }
                    let res = match outcome {
                        NotLeading::NotGranted | NotLeading::WrongMembership => Ok(None),
                        NotLeading::Error(kind) => Err(kind),
                    };
                    self.finish_acquire(st, i, res, [None; NODES], 0);
                }
            },
            Step::Raise { target, granted } => {
                let confirmed = Self::bool_replies(&r);
                if qd::raise_confirmed(control, &confirmed, NODES) {
                    let mut held = [None; NODES];
                    for n in 0..NODES {
                        if matches!(confirmed[n], Some(Ok(true))) {
                            held[n] = Some(target);
                        }
                    }
                    let backing = held.iter().flatten().count();
                    self.finish_acquire(st, i, Ok(Some(target)), held, backing);
                } else {
                    // Not confirmed: the grants (raised or not) are released at once.
                    let pairs: Vec<(usize, u64)> = (0..NODES)
                        .filter_map(|n| {
                            let g = granted[n]?;
                            Some(match confirmed[n] {
                                Some(Ok(true)) => (n, target),
                                _ => (n, g),
                            })
                        })
                        .collect();
                    Self::release(st, i, &pairs);
                    if !pairs.is_empty() {
                        st.electors[i].reign = self.after_released_round(st.electors[i].reign);
                    }
                    self.finish_acquire(st, i, Ok(None), [None; NODES], 0);
                }
            }
            Step::Renew => {
                let Role::Leader { token, held, .. } = st.electors[i].role else {
                    st.electors[i].round = None;
                    return;
                };
                let replies = Self::bool_replies(&r);
                let res = match qd::after_renew(control, &replies) {
                    AfterRenew::Renewed => Ok(true),
                    AfterRenew::Lost if !self.setup.release_on_lost => Ok(false),
                    AfterRenew::Lost => {
                        // As the transport (client/src/quorum.rs): free the nodes that still
                        // said 1, before the loop has stopped the task. See docs/model.md §8:
                        // this lets a successor reign while the task still runs.
                        let pairs: Vec<(usize, u64)> = (0..NODES)
                            .filter(|&n| matches!(replies[n], Some(Ok(true))))
                            .map(|n| (n, held[n].unwrap_or(token)))
                            .collect();
                        Self::release(st, i, &pairs);
                        Ok(false)
                    }
                    AfterRenew::Unknown => Err(replies
                        .iter()
                        .find_map(|x| match x {
                            Some(Err(e)) => Some(e.clone()),
                            _ => None,
                        })
                        .unwrap_or(ErrorKind::Timeout)),
                };
                self.finish_renew(st, i, r.sent_ns, res);
            }
        }
    }

    /// The round's result goes to the election loop's `on_acquire`, with the round's send
    /// instant as `sent_at`. `backing`: how many nodes confirmed holding the token it returns
    /// (ghost for property 2a).
    fn finish_acquire(
        &self,
        st: &mut QState,
        i: usize,
        res: Result<Option<u64>, ErrorKind>,
        held: [Option<u64>; NODES],
        backing: usize,
    ) {
        let now_ns = self.elector_ns(i, st.t);
        let now = self.instant(now_ns);
        let sent_ns = st.electors[i].round.map_or(now_ns, |r| r.sent_ns);
        st.electors[i].round = None;
        let r = res
            .map(|value| Replicated { value, acked: None })
            .map_err(|k| CommandError::new(k, "model"));
        let e = &mut st.electors[i];
        e.role = match decide::on_acquire(&self.cfg, self.instant(sent_ns), now, &r) {
            AcquireDecision::Lead {
                token,
                deadline,
                next_renew,
            } => {
                // The model's own count, not `qd::majority`: the property must not depend on
                // the code it checks.
                if backing < MAJORITY {
                    st.unbacked = true;
                }
                Role::Leader {
                    token,
                    held,
                    deadline_ns: self.ns(deadline),
                    next_renew_ns: self.ns(next_renew),
                    writes: 0,
                }
            }
            AcquireDecision::Unconfirmed { retry_in, .. } => Role::Follower {
                next_try_ns: self.ns(now + retry_in),
            },
            // Followers poll in quorum mode (no cross-node BLOCK).
            AcquireDecision::NotGranted => Role::Follower {
                next_try_ns: self.elector_ns(i, st.t + POLL_TICKS),
            },
            AcquireDecision::Grace(d) => Role::Follower {
                next_try_ns: self.ns(now + d),
            },
            AcquireDecision::Backoff(_) => Role::Follower {
                next_try_ns: self.ns(now + decide::backoff_cap(&self.cfg, 0)),
            },
        };
    }

    fn finish_renew(&self, st: &mut QState, i: usize, sent_ns: u64, res: Result<bool, ErrorKind>) {
        let now_ns = self.elector_ns(i, st.t);
        let now = self.instant(now_ns);
        st.electors[i].round = None;
        let Role::Leader {
            token,
            held,
            deadline_ns,
            ..
        } = st.electors[i].role
        else {
            return;
        };
        let r = res
            .map(|value| Replicated { value, acked: None })
            .map_err(|k| CommandError::new(k, "model"));
        match decide::on_renew(
            &self.cfg,
            self.instant(deadline_ns),
            self.instant(sent_ns),
            now,
            &r,
        ) {
            RenewDecision::Renewed {
                deadline,
                next_renew,
            } => {
                if let Role::Leader {
                    deadline_ns,
                    next_renew_ns,
                    ..
                } = &mut st.electors[i].role
                {
                    *deadline_ns = self.ns(deadline);
                    *next_renew_ns = self.ns(next_renew);
                }
            }
            RenewDecision::StepDown(reason) => {
                // The loop campaigns again only once the task has stopped, which takes time:
                // not within the tick (the model's resolution) in which it may still write.
                st.electors[i].role = Role::Follower {
                    next_try_ns: self.elector_ns(i, st.t + 1),
                };
                if reason.release_after() {
                    let pairs: Vec<(usize, u64)> =
                        (0..NODES).map(|n| (n, held[n].unwrap_or(token))).collect();
                    Self::release(st, i, &pairs);
                }
                // R17: the next campaign names another owner than anything this reign sent.
                st.electors[i].reign = self.after_step_down(st.electors[i].reign);
            }
            RenewDecision::Retry { at, .. } => {
                if let Role::Leader { next_renew_ns, .. } = &mut st.electors[i].role {
                    *next_renew_ns = self.ns(at);
                }
            }
        }
    }

    fn fault_ok(&self, st: &QState) -> bool {
        st.faults_used < self.setup.faults.budget
    }

    /// Steps due now (eager scheduling takes them before time advances).
    fn due(&self, st: &QState) -> bool {
        (0..st.electors.len()).any(|i| {
            let e = &st.electors[i];
            let now = self.elector_ns(i, st.t);
            e.net.iter().any(|m| m.is_some())
                || self.must_stop(st, i)
                || match (&e.round, &e.role) {
                    (Some(r), _) => now >= r.step_ns + self.step_ns(),
                    (None, Role::Follower { next_try_ns }) => now >= *next_try_ns,
                    (None, Role::Leader { next_renew_ns, .. }) => now >= *next_renew_ns,
                    (None, Role::Retired) => false,
                }
        })
    }

    /// Which picks to explore when elector i's step may end now: all under no-unify in the
    /// acquire step (the control picks a random granting node), else one.
    fn picks(&self, e: &QElector) -> usize {
        match (self.setup.control, e.round) {
            (
                QControl::NoUnify,
                Some(Round {
                    step: Step::Acquire,
                    ..
                }),
            ) => NODES,
            _ => 1,
        }
    }
}

impl Model for QuorumModel {
    type State = QState;
    type Action = QAction;

    fn init_states(&self) -> Vec<QState> {
        let n = QNode {
            node: Node {
                config: self.server_cfg,
                token_watermark: 0,
                grace_started_mono_us: 0,
                ..Node::default()
            },
            lease: None,
            ident: 0,
        };
        // Two lists: the old list's servers hold the key free and bound to the old id.
        let bound = |mut q: QNode| {
            let mut l = Lease::new();
            l.change_membership(None, self.membership_of(0));
            q.lease = Some(l);
            q
        };
        let old = |q: QNode| if self.setup.lists { bound(q) } else { q };
        vec![QState {
            t: 0,
            electors: (0..self.setup.electors)
                .map(|_| QElector {
                    role: Role::Follower { next_try_ns: 0 },
                    round: None,
                    net: [None; NODES],
                    late: vec![],
                    reign: 1,
                    seen: [0; NODES],
                    quarantine_ns: [0; NODES],
                })
                .collect(),
            nodes: [old(n.clone()), old(n.clone()), old(n.clone()), n],
            faults_used: 0,
            writing: 0,
            res_token: 0,
            res_from: 0,
            res_violation: false,
            unbacked: false,
            acted: 0,
        }]
    }

    fn actions(&self, st: &QState, out: &mut Vec<QAction>) {
        if st.t < self.setup.horizon && !(self.setup.eager && self.due(st)) {
            out.push(QAction::Tick);
        }
        let f = self.setup.faults;
        let fault = self.fault_ok(st);
        for (i, e) in st.electors.iter().enumerate() {
            let now = self.elector_ns(i, st.t);
            let stop = self.must_stop(st, i);
            match (&e.role, &e.round) {
                (Role::Follower { next_try_ns }, None) if now >= *next_try_ns => {
                    out.push(QAction::SendAcquire(i));
                }
                (Role::Leader { next_renew_ns, .. }, None) if now >= *next_renew_ns && !stop => {
                    out.push(QAction::SendRenew(i));
                }
                (_, Some(r)) if now >= r.step_ns + self.step_ns() => {
                    for p in 0..self.picks(e) {
                        out.push(QAction::StepTimeout(i, p));
                    }
                }
                _ => {}
            }
            if stop {
                out.push(QAction::StopCheck(i));
            }
            if let Role::Leader { writes: 0, .. } = e.role {
                if !stop {
                    out.push(QAction::Write(i));
                }
            }
            // The procedure stops the electors of the old list (elector 0).
            if self.setup.procedure && i == 0 && e.role != Role::Retired {
                out.push(QAction::Retire(i));
            }
            for k in 0..e.late.len() {
                // Equal requests lead to equal states: one action for each.
                if k == 0 || e.late[k] != e.late[k - 1] {
                    out.push(QAction::DeliverLate(i, k));
                }
            }
            for n in 0..NODES {
                let Some(m) = e.net[n] else { continue };
                let picks = if matches!(m, Msg::Release { .. }) {
                    1
                } else {
                    self.picks(e)
                };
                for p in 0..picks {
                    out.push(QAction::Deliver(i, n, p));
                }
                if fault && f.drop_messages {
                    out.push(QAction::Drop(i, n));
                    if !matches!(m, Msg::Release { .. }) {
                        out.push(QAction::LoseReply(i, n, 0));
                    }
                }
            }
        }
        // The procedure rebinds only once every elector of the old list has stopped: retired,
        // and its task no longer running (a write in this tick is still under way).
        let stopped = st.electors[0].role == Role::Retired && st.writing & 1 == 0;
        if self.setup.procedure && (stopped || self.setup.control == QControl::RebindEarly) {
            let new = self.membership_of(1);
            for s in 0..NODES - 1 {
                if st.nodes[s].lease.as_ref().and_then(Lease::membership) != Some(new) {
                    out.push(QAction::Rebind(s));
                }
            }
        }
        for n in 0..self.servers() {
            if fault && f.wipe {
                out.push(QAction::Wipe(n));
            }
            if fault && f.restart {
                out.push(QAction::Restart(n));
            }
            if fault && f.swap {
                out.push(QAction::Swap(n));
            }
        }
    }

    fn next_state(&self, last: &QState, action: QAction) -> Option<QState> {
        let mut st = last.clone();
        match action {
            QAction::Tick => {
                st.t += 1;
                st.writing = 0;
                // A quarantine that ended is no quarantine: one state, not one per end time.
                for i in 0..st.electors.len() {
                    let now = self.elector_ns(i, st.t);
                    for q in st.electors[i].quarantine_ns.iter_mut() {
                        if *q <= now {
                            *q = 0;
                        }
                    }
                }
            }
            QAction::SendAcquire(i) | QAction::SendRenew(i) => {
                let now = self.elector_ns(i, st.t);
                let e = &mut st.electors[i];
                // Why one instant for the round: the deadline counts from before the first
                // send of the round (the loop takes it before calling the transport).
                let reign = e.reign;
                let (step, msgs) = match (&action, e.role) {
                    (QAction::SendRenew(_), Role::Leader { token, held, .. }) => (
                        Step::Renew,
                        held.map(|h| {
                            Some(Msg::Renew {
                                reign,
                                token: h.unwrap_or(token),
                            })
                        }),
                    ),
                    _ => (Step::Acquire, [Some(Msg::Acquire { reign }); NODES]),
                };
                // A release still on the wire is not lost: it may execute later.
                for n in 0..NODES {
                    e.abandon(n);
                }
                e.net = msgs;
                e.round = Some(Round {
                    sent_ns: now,
                    step_ns: now,
                    step,
                    replies: [None; NODES],
                });
            }
            QAction::Deliver(i, n, pick) | QAction::LoseReply(i, n, pick) => {
                // The node executes the request; its reply reaches the elector at once, or
                // never (LoseReply). A reply that travels longer is the elector learning
                // later, which only shortens what it can do with the round (docs/model.md §8).
                let msg = st.electors[i].net[n].take()?;
                let mut ans = self.serve(&mut st, n, i, msg);
                if let QAction::LoseReply(..) = action {
                    st.faults_used += 1;
                    ans = None;
                } else if let Some(ms) = self.hear_from(&mut st, i, n) {
                    // Issue 32: a node whose identity changed counts toward no grant (nor
                    // renewal, nor raise) until its quarantine ends, as a node in grace.
                    if ans.is_some() {
                        ans = Some(Ans::Grace(ms));
                    }
                }
                if let Some(a) = ans {
                    if let Some(r) = st.electors[i].round.as_mut() {
                        r.replies[n] = Some(a);
                        if self.step_done(r) {
                            self.end_step(&mut st, i, pick);
                        }
                    }
                }
            }
            QAction::StepTimeout(i, pick) => self.end_step(&mut st, i, pick),
            QAction::Retire(i) => {
                // Stopped: its task stops now; a leader releases on every node (fire and
                // forget, like every release; the requests may run late or never).
                let e = &mut st.electors[i];
                let held = match e.role {
                    Role::Leader { token, held, .. } => Some((token, held)),
                    _ => None,
                };
                e.role = Role::Retired;
                e.round = None;
                for n in 0..NODES {
                    e.abandon(n);
                }
                if let Some((token, held)) = held {
                    let pairs: Vec<(usize, u64)> =
                        (0..NODES).map(|n| (n, held[n].unwrap_or(token))).collect();
                    Self::release(&mut st, i, &pairs);
                }
            }
            QAction::Rebind(s) => {
                // The operator reads the highest last token on the shared servers (a majority
                // of the old list, so it meets every old reign's raise-majority) and carries
                // it over (`TOKEN`): a new reign may stand on servers that never saw the old
                // list's last reign. Without it the model found a new reign's token below the
                // old one's (property "fencing: reign tokens rise").
                let floor = (0..NODES - 1)
                    .filter_map(|n| st.nodes[n].lease.as_ref().map(Lease::last_token))
                    .max()
                    .filter(|&t| t > 0 && !self.setup.no_token_floor);
                let now = self.node_now(s, st.t);
                let req = Request::Membership {
                    old: Some(self.membership_of(0)),
                    new: self.membership_of(1),
                    token: floor,
                };
                let node = &mut st.nodes[s];
                let out =
                    engine::handle(&node.node, node.lease.as_mut(), now, Call::default(), &req);
                if let Reply::Error(_) = out.reply {
                    // TOKEN on a live lease: the operator waits until it has ended.
                    return None;
                }
                if let Store::Create(l) = out.store {
                    node.lease = Some(l);
                }
                for fx in &out.effects {
                    if let Effect::ObserveToken(t) = fx {
                        node.node.token_watermark = node.node.token_watermark.max(*t);
                    }
                }
            }
            QAction::DeliverLate(i, k) => {
                let (n, m) = st.electors[i].late.remove(k);
                self.serve(&mut st, usize::from(n), i, m);
            }
            QAction::StopCheck(i) => {
                // The task is stopped at the stop point; then the loop releases on every
                // node (reason DeadlinePassed releases).
                let now = self.elector_ns(i, st.t);
                let Role::Leader { token, held, .. } = st.electors[i].role else {
                    return None;
                };
                let e = &mut st.electors[i];
                e.role = Role::Follower { next_try_ns: now };
                e.round = None;
                for n in 0..NODES {
                    e.abandon(n);
                }
                if StepDownReason::DeadlinePassed.release_after() {
                    let pairs: Vec<(usize, u64)> =
                        (0..NODES).map(|n| (n, held[n].unwrap_or(token))).collect();
                    Self::release(&mut st, i, &pairs);
                }
                // R17: the next campaign names another owner than anything this reign sent.
                st.electors[i].reign = self.after_step_down(st.electors[i].reign);
            }
            QAction::Write(i) => {
                st.writing |= 1 << i;
                let e = &mut st.electors[i];
                let Role::Leader { token, writes, .. } = &mut e.role else {
                    return None;
                };
                *writes += 1;
                let token = *token;
                // Only "at least two" matters (reachability of a second reign).
                st.acted = (st.acted + 1).min(2);
                // Property 2b: a reign's token is above every token an earlier reign acted
                // with. Equal is allowed only from the same elector: an elector that stopped
                // at its stop point and campaigns again while its old grants are still live
                // is refreshed with the same token (the module's rule for the same owner),
                // and it is the same process, which stopped first.
                let from = i as u8;
                if token < st.res_token || (token == st.res_token && from != st.res_from) {
                    st.res_violation = true;
                }
                if token >= st.res_token {
                    st.res_token = token;
                    st.res_from = from;
                }
            }
            QAction::Drop(i, n) => {
                st.faults_used += 1;
                st.electors[i].net[n] = None;
            }
            QAction::Wipe(n) => {
                // The connections to the old process (or server) are gone, and with them
                // the abandoned requests still on them.
                for (i, e) in st.electors.iter_mut().enumerate() {
                    e.late.retain(|(m, _)| self.server(i, usize::from(*m)) != n);
                }
                st.faults_used += 1;
                let now = self.node_now(n, st.t);
                st.nodes[n] = QNode {
                    node: Node {
                        config: self.server_cfg,
                        token_watermark: 0,
                        grace_started_mono_us: 0,
                        ..Node::default()
                    }
                    .start_grace(now),
                    lease: None,
                    ident: st.nodes[n].ident,
                };
            }
            QAction::Swap(n) => {
                // The connections to the old process (or server) are gone, and with them
                // the abandoned requests still on them.
                for (i, e) in st.electors.iter_mut().enumerate() {
                    e.late.retain(|(m, _)| self.server(i, usize::from(*m)) != n);
                }
                // The address now leads to a spare that has been up for longer than its
                // grace: no lease, watermark 0, grace over, another identity.
                st.faults_used += 1;
                st.nodes[n] = QNode {
                    node: Node {
                        config: self.server_cfg,
                        token_watermark: 0,
                        grace_started_mono_us: 0,
                        ..Node::default()
                    },
                    lease: None,
                    ident: st.nodes[n].ident + 1,
                };
            }
            QAction::Restart(n) => {
                // The connections to the old process (or server) are gone, and with them
                // the abandoned requests still on them.
                for (i, e) in st.electors.iter_mut().enumerate() {
                    e.late.retain(|(m, _)| self.server(i, usize::from(*m)) != n);
                }
                // Saved at shutdown, loaded by the new process: the absolute expiry survives,
                // the watermark is the loaded token, and the start grace begins.
                st.faults_used += 1;
                let now = self.node_now(n, st.t);
                let lease = st.nodes[n]
                    .lease
                    .as_ref()
                    .and_then(|l| Lease::from_persisted(l.to_persisted(now), now));
                st.nodes[n] = QNode {
                    node: Node {
                        config: self.server_cfg,
                        token_watermark: lease.as_ref().map_or(0, |l| l.last_token()),
                        grace_started_mono_us: 0,
                        ..Node::default()
                    }
                    .start_grace(now),
                    lease,
                    ident: st.nodes[n].ident,
                };
            }
        }
        self.prune_late(&mut st);
        Some(st)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut props = vec![
            Property::always("one acting elector", |m: &QuorumModel, st: &QState| {
                (0..st.electors.len()).filter(|&i| m.acting(st, i)).count() <= 1
            }),
            Property::always("reign token on a majority", |_, st: &QState| !st.unbacked),
            Property::always("fencing: reign tokens rise", |_, st: &QState| {
                !st.res_violation
            }),
            Property::sometimes("a reign acts", |_, st: &QState| st.acted >= 1),
            Property::sometimes("a second reign acts", |_, st: &QState| st.acted >= 2),
        ];
        if self.setup.eager {
            props.push(Property::eventually(
                "a leader is elected",
                |_, st: &QState| {
                    st.electors
                        .iter()
                        .any(|e| matches!(e.role, Role::Leader { .. }))
                },
            ));
        }
        props
    }

    fn within_boundary(&self, st: &QState) -> bool {
        st.t <= self.setup.horizon
    }
}

fn msg_s(m: Msg) -> String {
    match m {
        Msg::Acquire { reign } => format!("ACQUIRE #{reign}"),
        Msg::Raise { reign, from, to } => format!("RAISE #{reign} {} {}", tok(from), tok(to)),
        Msg::Renew { reign, token } => format!("RENEW #{reign} {}", tok(token)),
        Msg::Release { reign, token } => format!("RELEASE #{reign} {}", tok(token)),
    }
}

fn ans_s(a: Ans) -> String {
    match a {
        Ans::Granted(t) => format!("granted {}", tok(t)),
        Ans::Busy => "nil".into(),
        Ans::Grace(ms) => format!("GRACE {ms}"),
        Ans::Yes => "1".into(),
        Ans::No => "0".into(),
        Ans::WrongList => "MEMBERSHIP (bound to the other list)".into(),
    }
}

fn tok(t: u64) -> String {
    if t == 0 {
        return "-".to_string();
    }
    (t as i64 - (WALL0_MS * 1000) as i64).to_string()
}

impl Explain for QuorumModel {
    fn summary(&self) -> String {
        let s = &self.setup;
        format!(
            "quorum nodes={NODES} electors={} horizon={} faults={:?} control={:?} skew_ms={} eager={} release_on_lost={} late_all={} lists={} procedure={}",
            s.electors, s.horizon, s.faults, s.control, s.skew_ms, s.eager, s.release_on_lost, s.late_all, s.lists, s.procedure
        )
    }

    fn tick(st: &QState) -> u32 {
        st.t
    }

    fn describe(&self, st: &QState, a: &QAction) -> String {
        let Some(next) = self.next_state(st, a.clone()) else {
            return format!("{a:?}");
        };
        let label = match a {
            QAction::Deliver(i, n, _) | QAction::LoseReply(i, n, _) => {
                match st.electors[*i].net[*n] {
                    Some(m) => {
                        let mut scratch = st.clone();
                        let ans = self.serve(&mut scratch, *n, *i, m);
                        let lost = if matches!(a, QAction::LoseReply(..)) {
                            " (reply lost)".to_string()
                        } else if let Some(ms) = self.hear_from(&mut scratch, *i, *n) {
                            format!(" (identity changed: counts as GRACE {ms})")
                        } else {
                            String::new()
                        };
                        let s = self.server(*i, *n);
                        match ans {
                            Some(x) => format!("n{s} runs e{i}'s {}: {}{lost}", msg_s(m), ans_s(x)),
                            None => format!("n{s} runs e{i}'s {}", msg_s(m)),
                        }
                    }
                    None => format!("{a:?}"),
                }
            }
            QAction::DeliverLate(i, k) => {
                let (n, m) = st.electors[*i].late[*k];
                let ans = self.serve(&mut st.clone(), usize::from(n), *i, m);
                let n = self.server(*i, usize::from(n));
                match ans {
                    Some(x) => format!("LATE n{n} runs e{i}'s {}: {}", msg_s(m), ans_s(x)),
                    None => format!("LATE n{n} runs e{i}'s {}", msg_s(m)),
                }
            }
            _ => format!("{a:?}"),
        };
        let mut parts = vec![];
        for (i, e) in next.electors.iter().enumerate() {
            let now = self.elector_ns(i, next.t) as f64 / 1e6;
            let role = match e.role {
                Role::Follower { .. } => "follower".to_string(),
                Role::Retired => "stopped".to_string(),
                Role::Leader {
                    token, deadline_ns, ..
                } => format!(
                    "leader tok={} deadline={:.2}{}",
                    tok(token),
                    deadline_ns as f64 / 1e6,
                    if self.acting(&next, i) { " ACTING" } else { "" }
                ),
            };
            let late = if e.late.is_empty() {
                String::new()
            } else {
                format!(" ({} late)", e.late.len())
            };
            parts.push(format!("e{i}#{}@{now:.2} {role}{late}", e.reign));
        }
        let nodes: Vec<String> = (0..self.servers())
            .map(|n| {
                let now = self.node_now(n, next.t);
                let q = &next.nodes[n];
                let l = match q.lease.as_ref().and_then(|l| l.holder(now)) {
                    Some(h) => format!("{}:{}", String::from_utf8_lossy(h.owner), tok(h.token)),
                    None => "free".to_string(),
                };
                let g = q.node.grace_ms_left(now);
                let bound = q.lease.as_ref().and_then(Lease::membership);
                let l = if !self.setup.lists {
                    l
                } else if bound == Some(self.membership_of(0)) {
                    format!("{l} [old list]")
                } else if bound == Some(self.membership_of(1)) {
                    format!("{l} [new list]")
                } else {
                    format!("{l} [unbound]")
                };
                // A swapped node's name gets a prime per swap: n2' is another server.
                let name = format!("n{n}{}", "'".repeat(usize::from(q.ident)));
                if g > 0 {
                    format!("{name} {l} (grace {g})")
                } else {
                    format!("{name} {l}")
                }
            })
            .collect();
        format!(
            "{label:<30} | {} | {} | resource tok={}",
            parts.join(", "),
            nodes.join(", "),
            tok(next.res_token)
        )
    }
}
