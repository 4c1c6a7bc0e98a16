//! The model: state, actions, properties. Time is discrete: one tick is one millisecond of
//! true time; every process reads its own clock as a function of true time (its rate and,
//! for server wall clocks, its skew), so the state holds true time only, never an `Instant`.

use std::fmt;
use std::time::Duration;

use redis_lease_client::decide::{self, AcquireDecision, RenewDecision, StepDownReason};
use redis_lease_client::{CommandError, ElectorConfig, ErrorKind, Replicated};
use stateright::{Model, Property};
use tokio::time::Instant;

use crate::lease::config::Config;
use crate::lease::engine::{self, Call, Counter, Effect, Reply, Store};
use crate::lease::node::Node;
use crate::lease::request::Request;
use crate::lease::state::{Apply, Lease, Now};
use crate::lease::LeaseError;

/// The reachability property of the late-RELEASE window (see `properties`).
pub const LATE_RELEASE_WINDOW: &str = "a campaign's ACQUIRE is served before an abandoned RELEASE";

/// Lease TTL the electors ask for, ms (= ticks at nominal rate). Small on purpose: every
/// tick of TTL multiplies the interleavings.
pub const TTL_MS: u64 = 4;
/// The electors' configured drift bound: relative clock-rate difference between an elector
/// and the server that they tolerate. Large (20 %) so that a rate difference is visible in a
/// 6-tick lease; `config_problem` accepts anything below 50 %.
pub const DRIFT: f64 = 0.2;
/// Clock rates in µs of local time per tick (1000 = nominal). Within the bound the worst case
/// is fixed rather than chosen: an elector slow by 10 % against a primary fast by 10 %
/// (1100 / 900 = 1.22 < 1 / (1 - 0.2) = 1.25).
const ELECTOR_RATES: [u64; 3] = [900, 1000, 1100];
const SERVER_RATES: [u64; 2] = [1100, 1000];
/// The "drift beyond bound" control: elector 0 at 700 (1100 / 700 = 1.57 > 1.25).
const BROKEN_DRIFT_RATE: u64 = 700;
/// A follower that was refused asks again this many ticks later.
const POLL_TICKS: u32 = 2;
/// How many of the primary's latest effects the replica may lack at a failover: the last
/// one (a grant, a renewal or a release), which is what a failover loses in docs/failover.md.
const REPL_LAG: usize = 1;
const WALL0_MS: u64 = 1_800_000_000_000;
/// Server monotonic origin: started long ago, so the start grace is over at tick 0.
const MONO0_US: u64 = 10_000_000;

/// A negative control: one deliberate break of a safety rule, as a model switch (the
/// production code is unchanged; the model feeds it what the broken variant would).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Control {
    /// The real protocol.
    None,
    /// `lease.grace-ms 0`: a promoted replica (or restarted primary) grants at once.
    GraceZero,
    /// The elector passes the reply instant as `sent_at` to `on_acquire` / `on_renew`.
    DeadlineFromReply,
    /// Elector 0's clock runs slower than the configured drift allows.
    DriftBeyondBound,
    /// The elector writes to the resource whenever it believes it leads, without
    /// `must_stop` (the check the loop makes whenever it wakes, e.g. after a pause).
    NoDeadlineCheck,
    /// The replica's wall clock is behind by more than the grace period.
    ReplicaClockBehind,
    /// The behaviour before R17 (docs/client-protocol.md): the elector sends the same owner
    /// in every reign of its process, so a new campaign refreshes a lease an earlier reign
    /// still holds (same token), and an abandoned `LEASE.RELEASE` of that earlier reign,
    /// executing late, frees the new one (issue 23).
    OwnerReuse,
}

/// Which faults the checker may inject, and how many in one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Faults {
    pub budget: u8,
    pub drop_messages: bool,
    pub crash_electors: bool,
    pub failover: bool,
    pub restart_primary: bool,
}

impl Faults {
    pub const NONE: Faults = Faults {
        budget: 0,
        drop_messages: false,
        crash_electors: false,
        failover: false,
        restart_primary: false,
    };
    pub const ALL: Faults = Faults {
        budget: 1,
        drop_messages: true,
        crash_electors: true,
        failover: true,
        restart_primary: true,
    };
}

/// One configuration of the model.
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    pub electors: usize,
    /// Last tick of true time explored.
    pub horizon: u32,
    pub faults: Faults,
    pub control: Control,
    /// Maximal progress: time advances only once every due step was taken and every message
    /// delivered (no pauses, no delay beyond the tick). For the liveness check.
    pub eager: bool,
}

/// The checker's model: the setup plus what every state shares (configurations, the fixed
/// instant that elector clock offsets count from).
pub struct LeaseModel {
    pub setup: Setup,
    cfg: ElectorConfig,
    server_cfg: Config,
    base: Instant,
}

impl LeaseModel {
    pub fn new(setup: Setup) -> LeaseModel {
        assert!((1..=3).contains(&setup.electors));
        let ttl = Duration::from_millis(TTL_MS);
        let cfg = ElectorConfig::new("redis://model", "k", ttl)
            .with_drift(DRIFT)
            .with_renew_interval(Duration::from_millis(2))
            .with_op_timeout(Duration::from_millis(2))
            .with_backoff(Duration::from_millis(1), Duration::from_millis(1));
        assert_eq!(
            decide::config_problem(&cfg),
            None,
            "the model's elector config"
        );
        let grace_ms = if setup.control == Control::GraceZero {
            0
        } else {
            -1 // follow max-ttl: the module's default
        };
        let server_cfg = Config {
            max_ttl: TTL_MS as i64,
            grace_ms,
            max_owner_len: 256,
        };
        LeaseModel {
            setup,
            cfg,
            server_cfg,
            base: Instant::now(),
        }
    }

    fn elector_rate(&self, i: usize) -> u64 {
        if i == 0 && self.setup.control == Control::DriftBeyondBound {
            BROKEN_DRIFT_RATE
        } else {
            ELECTOR_RATES[i]
        }
    }

    /// Elector `i`'s monotonic clock at true time `t`, as ns since `base`.
    fn elector_ns(&self, i: usize, t: u32) -> u64 {
        u64::from(t) * self.elector_rate(i) * 1000
    }

    fn instant(&self, ns: u64) -> Instant {
        self.base + Duration::from_nanos(ns)
    }

    fn ns(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.base).as_nanos() as u64
    }

    /// Server `s`'s clocks at true time `t`. Wall clocks follow true time (NTP), except the
    /// replica's in the clock-behind control: behind by grace + 3 ms.
    fn server_now(&self, s: usize, t: u32) -> Now {
        let skew = if s == 1 && self.setup.control == Control::ReplicaClockBehind {
            self.server_cfg.grace_ms() + 3
        } else {
            0
        };
        Now {
            mono_us: MONO0_US + u64::from(t) * SERVER_RATES[s],
            wall_ms: WALL0_MS + u64::from(t) - skew,
        }
    }

    /// The owner a request carries on the wire: the process's base (`e{i}.{incarnation}`,
    /// unique per incarnation as `default_owner` is) and the reign it was sent in (R17).
    fn owner(i: usize, who: Who) -> Vec<u8> {
        reign_owner(&format!("e{i}.{}", who.incarnation), u64::from(who.reign))
    }

    /// The reign counter after a step-down (R17): advanced, except in the owner-reuse control,
    /// which keeps the pre-R17 behaviour of one owner for the whole process.
    fn after_step_down(&self, reign: u8) -> u8 {
        if self.setup.control == Control::OwnerReuse {
            reign
        } else {
            next_reign(reign)
        }
    }

    /// The loop's step-down (docs/client-protocol.md §6): the task is stopped (the model
    /// counts an elector that left the leader state as stopped: the loop waits for its task,
    /// bounded by the deadline, before anything else), then `LEASE.RELEASE` if the reason
    /// asks for one (R13), on the reign's own owner; the elector waits for its reply (or its
    /// op timeout) and then campaigns again. The reign counter advances whatever the reason
    /// (R17), so the next campaign's owner differs from the one the RELEASE names.
    fn step_down(&self, st: &mut State, i: usize, reason: StepDownReason) {
        let now = self.elector_ns(i, st.t);
        let e = &mut st.electors[i];
        let Role::Leader { token, .. } = e.role else {
            return;
        };
        // The RENEW in flight, if any, is abandoned: it may still execute.
        e.abandon();
        let who = e.who();
        e.reign = self.after_step_down(e.reign);
        e.role = Role::Follower { next_try_ns: now };
        if reason.release_after() {
            e.pending = Some(Pending {
                kind: Kind::Release,
                sent_ns: now,
            });
            e.net = Some(Msg::Req(Req::Release { who, token }));
        }
    }

    /// Server `p` (the primary) executes request `r` of elector `i`; `None` if it is down
    /// (the request is lost, its sender times out).
    fn execute(&self, st: &mut State, i: usize, r: Req) -> Option<Outcome> {
        let p = st.primary;
        if !st.servers[p].up {
            return None;
        }
        let owner = Self::owner(i, r.who());
        let ttl_ms = TTL_MS;
        let req = match r {
            Req::Renew { token, .. } => Request::Renew {
                owner: &owner,
                token,
                ttl_ms,
                membership: None,
            },
            Req::Release { token, .. } => Request::Release {
                owner: &owner,
                token,
            },
            Req::Acquire { .. } => Request::Acquire {
                owner: &owner,
                ttl_ms,
                block: None,
                membership: None,
            },
        };
        let call = Call {
            can_block: false,
            from_primary_or_loading: false,
            replicated: false,
            replicas_ok: true,
        };
        let reply = self.serve(st, p, &req, call);
        // Bounded lag: the replica may miss the last REPL_LAG effect(s), not more (older ones
        // have reached it).
        while st.repl.len() > REPL_LAG {
            let a = st.repl.remove(0);
            self.replicate(st, 1 - p, &a);
        }
        Some(match (reply, r) {
            (Reply::Int(t), Req::Acquire { .. }) => Outcome::Acquire(Some(t as u64)),
            (Reply::Null, _) => Outcome::Acquire(None),
            (Reply::Int(_), Req::Release { .. }) => Outcome::Released,
            (Reply::Int(v), _) => Outcome::Renew(v == 1),
            (Reply::Error(LeaseError::Grace { ms_left }), _) => Outcome::Grace(ms_left),
            (r, _) => panic!("unexpected reply {r:?}"),
        })
    }

    /// Is elector `i` acting at the state's instant: inside its local deadline, or writing to
    /// the resource right now.
    fn acting(&self, st: &State, i: usize) -> bool {
        let e = &st.electors[i];
        let inside = match e.role {
            Role::Leader { deadline_ns, .. } => self.elector_ns(i, st.t) < deadline_ns,
            Role::Follower { .. } => false,
        };
        inside || st.writing & (1 << i) != 0
    }

    fn must_stop(&self, st: &State, i: usize) -> bool {
        match st.electors[i].role {
            Role::Leader { deadline_ns, .. } => decide::must_stop(
                &self.cfg,
                self.instant(deadline_ns),
                self.instant(self.elector_ns(i, st.t)),
            ),
            Role::Follower { .. } => false,
        }
    }

    /// Runs one request through server `s`'s engine and carries out the effects the model
    /// cares about (replication stream, token watermark, the token ghost).
    fn serve(&self, st: &mut State, s: usize, req: &Request<'_>, call: Call) -> Reply {
        let now = self.server_now(s, st.t);
        let queue = s == st.primary && st.replica_up && self.failover_possible(st);
        let srv = &mut st.servers[s];
        let out = engine::handle(&srv.node, srv.lease.as_mut(), now, call, req);
        if let Store::Create(l) = out.store {
            srv.lease = Some(l);
        }
        let mut granted = false;
        for fx in &out.effects {
            match fx {
                Effect::ObserveToken(t) => {
                    srv.node.token_watermark = srv.node.token_watermark.max(*t);
                }
                // Queued only while a failover can still happen: otherwise the replica is
                // never read, and its lag would only multiply states.
                Effect::Replicate(a) if queue => {
                    st.repl.push(ApplyV::from(a));
                }
                Effect::Replicate(_) => {}
                Effect::Count(Counter::Acquired) => granted = true,
                // Expiry is judged lazily by every write command (the engine frees a lapsed
                // lease first); the timer only makes it happen without a command, which no
                // property observes. Notifications and waiter wake-ups: no BLOCK here.
                _ => {}
            }
        }
        if granted {
            if let Reply::Int(t) = out.reply {
                let t = t as u64;
                // Property (3): every grant's token is above every earlier grant's.
                if t <= st.max_granted {
                    st.token_regressed = true;
                }
                st.max_granted = st.max_granted.max(t);
            }
        }
        out.reply
    }

    /// Applies one replicated effect on `replica` through its engine (`LEASE.APPLY` from
    /// the replication stream).
    fn replicate(&self, st: &mut State, replica: usize, a: &ApplyV) {
        let call = Call {
            can_block: false,
            from_primary_or_loading: true,
            replicated: true,
            replicas_ok: true,
        };
        self.serve(st, replica, &Request::Apply(a.to_apply()), call);
    }

    fn elector_step(&self, st: &mut State, i: usize, result: Outcome) {
        let now_ns = self.elector_ns(i, st.t);
        let now = self.instant(now_ns);
        let Some(pending) = st.electors[i].pending.take() else {
            return;
        };
        // The control "deadline from the reply": the real decide functions, fed the reply
        // instant where the send instant belongs.
        let sent_ns = if self.setup.control == Control::DeadlineFromReply {
            now_ns
        } else {
            pending.sent_ns
        };
        let sent_at = self.instant(sent_ns);
        let next_tick_ns = self.elector_ns(i, st.t + POLL_TICKS);
        let e = &mut st.electors[i];
        let mut step_down = None;
        match (pending.kind, &e.role) {
            (Kind::Acquire, Role::Follower { .. }) => {
                let r = match result {
                    Outcome::Acquire(r) => Ok(Replicated {
                        value: r,
                        acked: None,
                    }),
                    Outcome::Renew(_) | Outcome::Released => return,
                    ref other => Err(other.error().expect("an error outcome")),
                };
                e.role = match decide::on_acquire(&self.cfg, sent_at, now, &r) {
                    AcquireDecision::Lead {
                        token,
                        deadline,
                        next_renew,
                    } => Role::Leader {
                        token,
                        deadline_ns: self.ns(deadline),
                        next_renew_ns: self.ns(next_renew),
                        writes: 0,
                    },
                    AcquireDecision::Unconfirmed { retry_in, .. } => Role::Follower {
                        next_try_ns: self.ns(now + retry_in),
                    },
                    // Without BLOCK the follower polls, every POLL_TICKS. Any delivery tick is
                    // still reachable: a request may wait in the network up to the op
                    // timeout, which is at least as long.
                    AcquireDecision::NotGranted => Role::Follower {
                        next_try_ns: next_tick_ns,
                    },
                    AcquireDecision::Grace(d) => Role::Follower {
                        next_try_ns: self.ns(now + d),
                    },
                    AcquireDecision::Backoff(_) => Role::Follower {
                        next_try_ns: self.ns(now + decide::backoff_cap(&self.cfg, 0)),
                    },
                };
            }
            (Kind::Renew, Role::Leader { deadline_ns, .. }) => {
                let r = match result {
                    Outcome::Renew(v) => Ok(Replicated {
                        value: v,
                        acked: None,
                    }),
                    Outcome::Acquire(_) | Outcome::Released => return,
                    ref other => Err(other.error().expect("an error outcome")),
                };
                let deadline = self.instant(*deadline_ns);
                match decide::on_renew(&self.cfg, deadline, sent_at, now, &r) {
                    RenewDecision::Renewed {
                        deadline,
                        next_renew,
                    } => {
                        if let Role::Leader {
                            deadline_ns,
                            next_renew_ns,
                            ..
                        } = &mut e.role
                        {
                            *deadline_ns = self.ns(deadline);
                            *next_renew_ns = self.ns(next_renew);
                        }
                    }
                    RenewDecision::StepDown(reason) => step_down = Some(reason),
                    RenewDecision::Retry { at, .. } => {
                        if let Role::Leader { next_renew_ns, .. } = &mut e.role {
                            *next_renew_ns = self.ns(at);
                        }
                    }
                }
            }
            // The release's reply (or its timeout) says nothing the loop uses: campaign again.
            (Kind::Release, Role::Follower { .. }) => {
                e.role = Role::Follower {
                    next_try_ns: now_ns,
                };
            }
            // A reply to something the elector no longer waits for (it stepped down
            // meanwhile): dropped, as the loop drops it.
            _ => {}
        }
        if let Some(reason) = step_down {
            self.step_down(st, i, reason);
        }
    }

    /// Forgets abandoned requests that can no longer do anything, so that states that differ
    /// only in them are one state. A RENEW or RELEASE names a token, and the engine only
    /// matches a lease holding exactly that token; the primary's key keeps its last token
    /// while free, and its tokens only rise (a grant issues one above the last, a renewal
    /// keeps it). So once the primary's last token is above T, no lease on it will ever hold
    /// T again, and executing a late RENEW/RELEASE of T answers 0 and changes nothing (except
    /// expiring a lapsed lease early, which the expiry timer does anyway and no property
    /// observes: §2 "Timers"). Failover and restart clear the late requests, so "the primary"
    /// is the one they were sent to.
    fn prune_late(&self, st: &mut State) {
        let Some(last) = st.servers[st.primary]
            .lease
            .as_ref()
            .map(|l| l.last_token())
        else {
            return;
        };
        for e in &mut st.electors {
            e.late.retain(|r| match r {
                Req::Renew { token, .. } | Req::Release { token, .. } => *token >= last,
                Req::Acquire { .. } => true,
            });
        }
    }

    fn failover_possible(&self, st: &State) -> bool {
        self.setup.faults.failover && self.fault_ok(st)
    }

    fn fault_ok(&self, st: &State) -> bool {
        st.faults_used < self.setup.faults.budget
    }

    /// Steps that are due now (a process that takes none of them is paused).
    fn due(&self, st: &State) -> bool {
        (0..st.electors.len()).any(|i| {
            let e = &st.electors[i];
            let now = self.elector_ns(i, st.t);
            e.net.is_some()
                || self.must_stop(st, i)
                || match (&e.pending, &e.role) {
                    (Some(_), _) => false,
                    (None, Role::Follower { next_try_ns }) => now >= *next_try_ns,
                    (None, Role::Leader { next_renew_ns, .. }) => now >= *next_renew_ns,
                }
        })
    }
}

/// What an elector gets back for its request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Outcome {
    Acquire(Option<u64>),
    Renew(bool),
    /// `ErrorKind` is not `Hash`; the two kinds the model produces.
    Grace(u64),
    /// `LEASE.RELEASE`'s reply (1 or 0: the loop does nothing with it).
    Released,
    Timeout,
}

impl Outcome {
    fn error(&self) -> Option<CommandError> {
        let kind = match self {
            Outcome::Grace(ms) => ErrorKind::Grace(Duration::from_millis(*ms)),
            Outcome::Timeout => ErrorKind::Timeout,
            _ => return None,
        };
        Some(CommandError::new(kind, "model"))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Acquire,
    Renew,
    Release,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Pending {
    kind: Kind,
    sent_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Role {
    Follower {
        next_try_ns: u64,
    },
    Leader {
        token: u64,
        deadline_ns: u64,
        next_renew_ns: u64,
        /// Writes made with this grant: 0, 1 (its first act, presenting the token), 2 (one
        /// late write past the stop point, only by the no-deadline-check control). Further
        /// writes with the same token tell the resource nothing new.
        writes: u8,
    },
}

/// Which owner a request was sent as: the process incarnation and the reign (R17).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Who {
    incarnation: u8,
    reign: u8,
}

/// A request as sent, with the owner it names (fixed at send time: a request that executes
/// late still names the reign that sent it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Req {
    Acquire { who: Who },
    Renew { who: Who, token: u64 },
    Release { who: Who, token: u64 },
}

impl Req {
    fn who(self) -> Who {
        match self {
            Req::Acquire { who } | Req::Renew { who, .. } | Req::Release { who, .. } => who,
        }
    }
}

/// What the elector's live connection carries: the request it waits for, or its reply.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Msg {
    Req(Req),
    Reply(Outcome),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ElectorState {
    role: Role,
    pending: Option<Pending>,
    /// The request the elector waits for, or its reply.
    net: Option<Msg>,
    /// Requests the elector gave up on (timed out, or in flight when it stepped down or
    /// crashed) that the server has not executed yet. Each may still execute at any later
    /// instant (its bytes are in the kernel: TCP delivers them even after the connection was
    /// closed) or never; its reply goes nowhere. Sorted: the order they were abandoned in
    /// does not constrain the order they execute in (each port closes the connection on a
    /// timeout, so each was the last request of its own connection — any order between
    /// them, and with later requests, is possible; one connection's FIFO order is one of
    /// the interleavings explored).
    late: Vec<Req>,
    incarnation: u8,
    /// R17's reign counter: starts at 1, advanced after every step-down.
    reign: u8,
}

impl ElectorState {
    fn who(&self) -> Who {
        Who {
            incarnation: self.incarnation,
            reign: self.reign,
        }
    }

    /// Gives up on the live request: not yet executed, it joins the late ones; a reply in
    /// flight is dropped.
    fn abandon(&mut self) {
        if let Some(Msg::Req(r)) = self.net.take() {
            let at = self.late.partition_point(|x| *x < r);
            self.late.insert(at, r);
        }
    }
}

/// R17: the owner sent on the wire in reign `reign` is `base#reign`
/// (conformance/vectors/reign_owner.json), by the client's own function, as the model runs
/// `on_acquire`.
fn reign_owner(base: &str, reign: u64) -> Vec<u8> {
    redis_lease_client::decide::reign_owner(base, reign)
        .expect("the model's bases are short and its counters small")
        .into_bytes()
}

/// R17: the reign counter after a step-down (conformance/vectors/next_reign.json; the model
/// only calls it at a step-down: every other event keeps the counter), by the client's own
/// function.
fn next_reign(reign: u8) -> u8 {
    let next = redis_lease_client::decide::next_reign(
        u64::from(reign),
        redis_lease_client::decide::ReignEvent::SteppedDown,
    );
    u8::try_from(next).expect("the model's horizons keep the counter small")
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Server {
    up: bool,
    node: Node,
    lease: Option<Lease>,
}

/// A `LEASE.APPLY` in the replication stream (`Apply` itself is not `Hash`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum ApplyV {
    Hold(Vec<u8>, u64, u64),
    Free(u64),
}

impl From<&Apply> for ApplyV {
    fn from(a: &Apply) -> Self {
        match a {
            Apply::Hold {
                owner,
                token,
                expires_wall_ms,
                // Single-primary mode never binds a membership (quorum mode, quorum.rs).
                ..
            } => ApplyV::Hold(owner.clone(), *token, *expires_wall_ms),
            Apply::Free { token, .. } => ApplyV::Free(*token),
        }
    }
}

impl ApplyV {
    fn to_apply(&self) -> Apply {
        match self {
            ApplyV::Hold(owner, token, exp) => Apply::Hold {
                owner: owner.clone(),
                token: *token,
                expires_wall_ms: *exp,
                membership: None,
            },
            ApplyV::Free(token) => Apply::Free {
                token: *token,
                membership: None,
            },
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// True time, ticks (ms).
    t: u32,
    electors: Vec<ElectorState>,
    servers: [Server; 2],
    primary: usize,
    replica_up: bool,
    /// Effects on their way to the replica, oldest first.
    repl: Vec<ApplyV>,
    faults_used: u8,
    /// Electors writing to the resource at this tick (bit i = elector i).
    writing: u8,
    /// The resource: highest token accepted, and by whom (elector, incarnation).
    res_token: u64,
    res_owner: (u8, u8),
    res_violation: bool,
    /// Ghosts for property (3).
    max_granted: u64,
    token_regressed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Tick,
    SendAcquire(usize),
    SendRenew(usize),
    Deliver(usize),
    /// Elector i's abandoned request `late[k]` executes (its reply goes nowhere).
    DeliverLate(usize, usize),
    Timeout(usize),
    StopCheck(usize),
    Write(usize),
    Drop(usize),
    CrashElector(usize),
    /// The primary dies after the replica applied the first `k` effects still queued.
    Failover(usize),
    RestartPrimary,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&format!("{self:?}"))
    }
}

impl Model for LeaseModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let node = Node {
            config: self.server_cfg,
            token_watermark: 0,
            grace_started_mono_us: 0,
            ..Node::default()
        };
        let server = Server {
            up: true,
            node,
            lease: None,
        };
        vec![State {
            t: 0,
            electors: (0..self.setup.electors)
                .map(|_| ElectorState {
                    role: Role::Follower { next_try_ns: 0 },
                    pending: None,
                    net: None,
                    late: vec![],
                    incarnation: 0,
                    reign: 1,
                })
                .collect(),
            servers: [server.clone(), server],
            primary: 0,
            replica_up: true,
            repl: vec![],
            faults_used: 0,
            writing: 0,
            res_token: 0,
            res_owner: (0, 0),
            res_violation: false,
            max_granted: 0,
            token_regressed: false,
        }]
    }

    fn actions(&self, st: &State, out: &mut Vec<Action>) {
        if st.t < self.setup.horizon && !(self.setup.eager && self.due(st)) {
            out.push(Action::Tick);
        }
        let f = self.setup.faults;
        let fault = self.fault_ok(st);
        for (i, e) in st.electors.iter().enumerate() {
            let now = self.elector_ns(i, st.t);
            let stop = self.must_stop(st, i);
            match (&e.role, &e.pending) {
                (Role::Follower { next_try_ns }, None) if now >= *next_try_ns => {
                    out.push(Action::SendAcquire(i));
                }
                (Role::Leader { next_renew_ns, .. }, None) if now >= *next_renew_ns && !stop => {
                    out.push(Action::SendRenew(i));
                }
                (_, Some(p)) => {
                    let limit = decide::op_limit(&self.cfg, None).as_nanos() as u64;
                    if now >= p.sent_ns + limit {
                        out.push(Action::Timeout(i));
                    }
                }
                _ => {}
            }
            if stop {
                out.push(Action::StopCheck(i));
            }
            if let Role::Leader { writes, .. } = e.role {
                let may_write = if self.setup.control == Control::NoDeadlineCheck {
                    writes == 0 || (writes == 1 && stop)
                } else {
                    writes == 0 && !stop
                };
                if may_write {
                    out.push(Action::Write(i));
                }
            }
            if e.net.is_some() {
                out.push(Action::Deliver(i));
                if fault && f.drop_messages {
                    out.push(Action::Drop(i));
                }
            }
            for k in 0..e.late.len() {
                // Equal requests lead to equal states: one action for each.
                if k == 0 || e.late[k] != e.late[k - 1] {
                    out.push(Action::DeliverLate(i, k));
                }
            }
            if fault && f.crash_electors {
                out.push(Action::CrashElector(i));
            }
        }
        if fault && f.failover && st.replica_up {
            for k in 0..=st.repl.len() {
                out.push(Action::Failover(k));
            }
        }
        if fault && f.restart_primary {
            out.push(Action::RestartPrimary);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut st = last.clone();
        match action {
            Action::Tick => {
                st.t += 1;
                st.writing = 0;
            }
            Action::SendAcquire(i) | Action::SendRenew(i) => {
                let now = self.elector_ns(i, st.t);
                let e = &mut st.electors[i];
                let who = e.who();
                let (kind, req) = match (&action, &e.role) {
                    (Action::SendRenew(_), Role::Leader { token, .. }) => {
                        (Kind::Renew, Req::Renew { who, token: *token })
                    }
                    _ => (Kind::Acquire, Req::Acquire { who }),
                };
                // Nothing is on the live connection: a request it gave up on was abandoned.
                debug_assert!(e.net.is_none());
                e.pending = Some(Pending { kind, sent_ns: now });
                e.net = Some(Msg::Req(req));
            }
            Action::Deliver(i) => {
                let msg = st.electors[i].net.take()?;
                match msg {
                    Msg::Reply(r) => self.elector_step(&mut st, i, r),
                    Msg::Req(r) => {
                        // Lost if the primary is down: the elector times out.
                        if let Some(outcome) = self.execute(&mut st, i, r) {
                            st.electors[i].net = Some(Msg::Reply(outcome));
                        }
                    }
                }
            }
            Action::DeliverLate(i, k) => {
                let r = st.electors[i].late.remove(k);
                self.execute(&mut st, i, r);
            }
            Action::Timeout(i) => {
                st.electors[i].abandon();
                self.elector_step(&mut st, i, Outcome::Timeout);
            }
            // The loop's stop point (R3): reason `deadline`, which releases (R13).
            Action::StopCheck(i) => self.step_down(&mut st, i, StepDownReason::DeadlinePassed),
            Action::Write(i) => {
                st.writing |= 1 << i;
                let e = &mut st.electors[i];
                let Role::Leader { token, writes, .. } = &mut e.role else {
                    return None;
                };
                *writes += 1;
                let token = *token;
                let who = (i as u8, e.incarnation);
                // The resource's own check: refuse tokens below the highest accepted.
                if token >= st.res_token {
                    // Property (2): equal tokens must come from the same holder, or the
                    // resource cannot tell two leaders apart.
                    if token == st.res_token && who != st.res_owner {
                        st.res_violation = true;
                    }
                    st.res_token = token;
                    st.res_owner = who;
                }
            }
            Action::Drop(i) => {
                st.faults_used += 1;
                st.electors[i].net = None;
            }
            Action::CrashElector(i) => {
                st.faults_used += 1;
                let now = self.elector_ns(i, st.t);
                let e = &mut st.electors[i];
                // A new incarnation: a new owner id (default_owner is per process), reign 1.
                // What the dead process had written is still delivered (the kernel sends a
                // closed socket's buffered bytes).
                e.abandon();
                *e = ElectorState {
                    role: Role::Follower { next_try_ns: now },
                    pending: None,
                    net: None,
                    late: std::mem::take(&mut e.late),
                    incarnation: e.incarnation + 1,
                    reign: 1,
                };
            }
            Action::Failover(k) => {
                // The primary dies; the replica got the first `k` queued effects, the rest
                // is lost; it is promoted and starts its grace. The old primary stays down.
                st.faults_used += 1;
                let old = st.primary;
                let new = 1 - old;
                for a in std::mem::take(&mut st.repl).into_iter().take(k) {
                    self.replicate(&mut st, new, &a);
                }
                st.servers[old].up = false;
                st.repl.clear();
                st.replica_up = false;
                st.primary = new;
                let now = self.server_now(new, st.t);
                st.servers[new].node = st.servers[new].node.start_grace(now);
                // Abandoned requests were sent to the dead primary: gone with it.
                for e in &mut st.electors {
                    e.late.clear();
                }
            }
            Action::RestartPrimary => {
                // Restart without persistence: empty dataset, a fresh process (token
                // watermark 0) and the start grace. A replica resyncs to the empty dataset.
                st.faults_used += 1;
                let p = st.primary;
                let now = self.server_now(p, st.t);
                st.servers[p].lease = None;
                st.servers[p].node = Node {
                    config: self.server_cfg,
                    token_watermark: 0,
                    grace_started_mono_us: 0,
                    ..Node::default()
                }
                .start_grace(now);
                st.repl.clear();
                if st.replica_up {
                    st.servers[1 - p].lease = None;
                }
                // The old process's connections are reset: abandoned requests on them are
                // never executed.
                for e in &mut st.electors {
                    e.late.clear();
                }
            }
        }
        self.prune_late(&mut st);
        Some(st)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut props = vec![
            Property::always("one acting elector", |m: &LeaseModel, st: &State| {
                (0..st.electors.len()).filter(|&i| m.acting(st, i)).count() <= 1
            }),
            Property::always("fencing: no accepted token regression", |_, st: &State| {
                !st.res_violation
            }),
            Property::always("tokens strictly increase", |_, st: &State| {
                !st.token_regressed
            }),
            // Reachability (the check is not vacuous): issue 23's interleaving — an
            // elector's new campaign has its ACQUIRE served while the RELEASE it abandoned
            // at its last step-down has not executed yet (and may still) — is in the
            // explored space, so "one acting elector" holding means the late RELEASE did no
            // harm there.
            Property::sometimes(LATE_RELEASE_WINDOW, |_, st: &State| {
                st.electors.iter().any(|e| {
                    matches!(e.net, Some(Msg::Reply(Outcome::Acquire(_))))
                        && e.late.iter().any(|r| matches!(r, Req::Release { .. }))
                })
            }),
        ];
        // Liveness only where it is promised: no faults, no pauses (eager scheduling).
        if self.setup.eager {
            props.push(Property::eventually(
                "a leader is elected",
                |_, st: &State| {
                    st.electors
                        .iter()
                        .any(|e| matches!(e.role, Role::Leader { .. }))
                },
            ));
        }
        props
    }

    fn within_boundary(&self, st: &State) -> bool {
        st.t <= self.setup.horizon
    }
}

impl State {
    /// True time of this state, ticks.
    pub fn tick(&self) -> u32 {
        self.t
    }
}

impl LeaseModel {
    /// One step of a counterexample: the action, then the state it led to in short
    /// (electors' roles with their local clocks, the primary's lease, the resource).
    pub fn describe(&self, st: &State, a: &Action) -> String {
        let Some(next) = self.next_state(st, a.clone()) else {
            return format!("{a:?}");
        };
        let label = match a {
            Action::Deliver(i) => match &st.electors[*i].net {
                Some(Msg::Reply(o)) => format!("e{i} gets {o:?}"),
                Some(Msg::Req(r)) => format!("{} served", req_s(*i, *r)),
                None => format!("{a:?}"),
            },
            Action::DeliverLate(i, k) => {
                format!("LATE {} served", req_s(*i, st.electors[*i].late[*k]))
            }
            Action::Timeout(i) => match &st.electors[*i].net {
                Some(Msg::Req(r)) => format!("e{i} gives up on {}", req_s(*i, *r)),
                _ => format!("{a:?}"),
            },
            _ => format!("{a:?}"),
        };
        let mut parts = vec![];
        for (i, e) in next.electors.iter().enumerate() {
            let now = self.elector_ns(i, next.t) as f64 / 1e6;
            let role = match e.role {
                Role::Follower { .. } => "follower".to_string(),
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
            parts.push(format!(
                "e{i}.{}#{}@{now:.2}ms {role}{late}",
                e.incarnation, e.reign
            ));
        }
        let p = next.primary;
        let now = self.server_now(p, next.t);
        let lease = match next.servers[p].lease.as_ref().and_then(|l| l.holder(now)) {
            Some(h) => format!(
                "{} tok={} pttl={}",
                String::from_utf8_lossy(h.owner),
                tok(h.token),
                h.pttl_ms
            ),
            None => "free".to_string(),
        };
        let grace = next.servers[p].node.grace_ms_left(now);
        format!(
            "{label:<28} | {} | primary=s{p} lease: {lease}{} | repl queue {} | resource tok={}",
            parts.join(", "),
            if grace > 0 {
                format!(" (grace {grace} ms left)")
            } else {
                String::new()
            },
            next.repl.len(),
            tok(next.res_token)
        )
    }
}

/// A request as printed in counterexamples: command and the owner it names.
fn req_s(i: usize, r: Req) -> String {
    let who = r.who();
    let owner = format!("e{i}.{}#{}", who.incarnation, who.reign);
    match r {
        Req::Acquire { .. } => format!("ACQUIRE {owner}"),
        Req::Renew { token, .. } => format!("RENEW {owner} {}", tok(token)),
        Req::Release { token, .. } => format!("RELEASE {owner} {}", tok(token)),
    }
}

/// A token as printed in counterexamples: relative to the wall clock at tick 0 × 1000, so
/// a token issued at tick t on a correct wall clock reads t000 ("-": none yet).
fn tok(t: u64) -> String {
    if t == 0 {
        return "-".to_string();
    }
    (t as i64 - (WALL0_MS * 1000) as i64).to_string()
}
