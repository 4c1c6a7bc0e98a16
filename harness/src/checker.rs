//! The checker: judges a run only from what the processes recorded.
//!
//! Safety (any hit is a violation, the run fails):
//! - `token_regression`: the resource accepted a token lower than one it had accepted
//!   before (read from the resource's own log, in decision order);
//! - `overlap`: two electors' acting intervals overlap. An acting interval of a reign (one
//!   elector, one token) runs from its first to its last *check*: the instant the elector
//!   decided "I am leader, I act now" right before a write. A write that was decided in time
//!   and then delayed (a GC pause between check and send) is not acting late; it is a stale
//!   write, and fencing has to catch it, which the next rule checks;
//! - `stale_accepted`: the resource accepted a write that reached it after its writer's own
//!   lease deadline *and* after a higher token had been granted to someone else, unless its
//!   writer decided on it (its check) in time: before its deadline and before any higher
//!   grant. Such a write was already in flight (a pause between check and send, a network
//!   that delivered it late) and reached a resource that had not yet seen the newer token:
//!   the window no lease and no client can close, which fencing closes as soon as the new
//!   leader's first act presents its token (docs/failover.md §3). In the resource's order it
//!   precedes everything of the newer reign, so it is counted (`in_flight_accepted`), not a
//!   violation; a write decided late (an elector acting past its deadline) still is;
//! - `early_grant`: another elector was granted (recorded its grant) a higher token while an
//!   earlier reign (lower token: tokens order reigns, recorded times need not, since a paused
//!   elector records its grant late) had neither stopped its task nor reached its local
//!   deadline, whichever comes first. The
//!   lease must stay held until the task stopped (R13) and can only expire after the local
//!   deadline (R1/R2), so such a grant means the server freed or handed over a lease whose
//!   holder still had the right to act — a violation even if no write overlapped (issue 23's
//!   stale RELEASE did exactly this). A crashed holder records no stop: its deadline ends it;
//! - `acted_after_newer_grant`: a reign acted (a check) after a reign with a higher token
//!   recorded its grant. A grant is recorded after the server made it, so this is sound
//!   without any slack: once a higher token exists the lower one must be over. (`overlap`
//!   misses it when the newer reign has not acted yet; `token_order` allows one TTL.) A
//!   write decided in time whose bytes reached the resource late is not acting late: the
//!   report counts the ones fencing refused as `fenced_in_time`;
//! - `duplicate_token`: one token granted to two electors;
//! - `token_order`: a grant that started after an earlier reign ended carries a token that
//!   is not higher (tokens must increase across restarts and promotions);
//! - `orphan_write`: the resource saw a write from a reign no elector recorded;
//! - `reigns_per_call`: one call of a one-shot API (its grants carry the same `call` id,
//!   docs/conformance.md) ran its body in more than one reign. A one-shot API promises one
//!   reign per call; a second one means the body ran again after a lost term, under a token
//!   the caller never saw (issue 25: Node's `withLeadership` did this). Histories of
//!   `run()`-style electors carry no `call` and are not judged by this rule.
//!
//! Liveness (figures, not verdicts; targets are in docs/evidence.md):
//! - crash failover: kill -9 of the leader -> next grant;
//! - loss failover: leader paused / partitioned / blackholed -> next grant;
//! - handover: the resigning leader's task stopped -> next grant (RELEASE + wake-up);
//! - redis back: Redis answered again after restart/promotion -> next grant (includes grace);
//! - flapping: grants per minute in fault-free periods (away from any fault by 2 TTL + grace).

use crate::history::{read_jsonl, ElectorEvent, ResourceWrite, RunEvent};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub struct RunData {
    pub dir: PathBuf,
    pub run: Vec<RunEvent>,
    pub resource: Vec<ResourceWrite>,
    /// (elector id, its events)
    pub electors: Vec<(String, Vec<ElectorEvent>)>,
}

impl RunData {
    pub fn load(dir: &Path) -> Result<RunData, String> {
        let run = read_jsonl(&dir.join("run.jsonl"))?;
        let resource = read_jsonl(&dir.join("resource.jsonl"))?;
        let mut electors = vec![];
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                name.starts_with("elector-") && name.ends_with(".jsonl")
            })
            .collect();
        entries.sort();
        for p in entries {
            let evs: Vec<ElectorEvent> = read_jsonl(&p)?;
            let id = evs
                .iter()
                .find_map(|e| match e {
                    ElectorEvent::Start { elector, .. } => Some(elector.clone()),
                    _ => None,
                })
                .unwrap_or_else(|| {
                    let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("?");
                    stem.trim_start_matches("elector-").to_string()
                });
            electors.push((id, evs));
        }
        Ok(RunData {
            dir: dir.to_path_buf(),
            run,
            resource,
            electors,
        })
    }
}

/// One elector holding one token.
#[derive(Clone, Debug, Serialize)]
pub struct Reign {
    pub elector: String,
    pub token: u64,
    pub grant: u64,
    /// The latest local deadline the elector reported for this token.
    pub deadline: u64,
    pub first_check: Option<u64>,
    pub last_check: Option<u64>,
    pub checks: u64,
    pub stop: Option<u64>,
    /// The one-shot call this reign ran in (`Grant::call`), if the elector records calls.
    pub call: Option<u64>,
}

pub fn reigns(data: &RunData) -> Vec<Reign> {
    let mut out: Vec<Reign> = vec![];
    for (id, evs) in &data.electors {
        let mut cur: BTreeMap<u64, usize> = BTreeMap::new();
        for e in evs {
            match e {
                ElectorEvent::Grant {
                    t,
                    token,
                    deadline,
                    call,
                } => {
                    cur.insert(*token, out.len());
                    out.push(Reign {
                        elector: id.clone(),
                        token: *token,
                        grant: *t,
                        deadline: *deadline,
                        first_check: None,
                        last_check: None,
                        checks: 0,
                        stop: None,
                        call: *call,
                    });
                }
                ElectorEvent::Check {
                    t, token, deadline, ..
                } => {
                    if let Some(&i) = cur.get(token) {
                        let r = &mut out[i];
                        // Renewals move the deadline forward; the reign's deadline is the
                        // last one the elector acted under.
                        r.deadline = r.deadline.max(*deadline);
                        r.first_check.get_or_insert(*t);
                        r.last_check = Some(*t);
                        r.checks += 1;
                    }
                }
                ElectorEvent::Stop { t, token, .. } => {
                    if let Some(&i) = cur.get(token) {
                        out[i].stop = Some(*t);
                    }
                }
                _ => {}
            }
        }
    }
    out.sort_by_key(|r| r.grant);
    out
}

#[derive(Clone, Debug, Serialize)]
pub struct Violation {
    pub kind: String,
    pub detail: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct RunReport {
    pub dir: String,
    pub violations: Vec<Violation>,
    /// category -> latencies in ms
    pub latencies: BTreeMap<String, Vec<f64>>,
    pub faults: BTreeMap<String, u64>,
    pub faults_skipped: u64,
    pub grants: u64,
    pub writes_accepted: u64,
    pub writes_rejected: u64,
    /// Writes that reached the resource after their writer's deadline, by outcome.
    pub late_writes_accepted: u64,
    pub late_writes_rejected: u64,
    /// Writes the resource refused by token although their writer decided on them (its
    /// check) before its own deadline and before any higher token was granted: a pause
    /// between deciding and writing, caught by fencing as designed.
    pub fenced_in_time: u64,
    /// Writes decided in time (before their writer's deadline and any higher grant) that
    /// reached the resource after a higher grant, before it had seen the higher token, and
    /// were accepted: in flight when the lease moved (see `stale_accepted`).
    pub in_flight_accepted: u64,
    pub fault_free_minutes: f64,
    pub fault_free_changes: u64,
    /// Redis restarts/promotions after which the leader kept leading (no new grant needed).
    pub redis_faults_leader_kept: u64,
    /// Longest time nobody acted, between the first grant and the end of the run (ms).
    pub leaderless_max_ms: f64,
    /// One-shot API calls that got a reign (distinct `call` ids per elector; 0 for
    /// `run()`-style electors), and the most reigns one call had (`reigns_per_call` fails
    /// above 1).
    pub oneshot_calls: u64,
    pub reigns_per_call_max: u64,
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

pub fn check(data: &RunData) -> RunReport {
    let mut rep = RunReport {
        dir: data.dir.display().to_string(),
        ..Default::default()
    };
    let reigns = reigns(data);
    rep.grants = reigns.len() as u64;
    let mut v = |kind: &str, detail: String| {
        rep.violations.push(Violation {
            kind: kind.into(),
            detail,
        })
    };

    // duplicate_token
    let mut by_token: BTreeMap<u64, &Reign> = BTreeMap::new();
    for r in &reigns {
        if let Some(o) = by_token.get(&r.token) {
            if o.elector != r.elector {
                v(
                    "duplicate_token",
                    format!(
                        "token {} granted to {} and {}",
                        r.token, o.elector, r.elector
                    ),
                );
            }
        } else {
            by_token.insert(r.token, r);
        }
    }

    // reigns_per_call: a one-shot call promises one reign. Keyed by elector id too: call
    // ids are numbered per process.
    let mut per_call: BTreeMap<(&str, u64), Vec<&Reign>> = BTreeMap::new();
    for r in &reigns {
        if let Some(c) = r.call {
            per_call.entry((r.elector.as_str(), c)).or_default().push(r);
        }
    }
    rep.oneshot_calls = per_call.len() as u64;
    for ((elector, call), rs) in &per_call {
        rep.reigns_per_call_max = rep.reigns_per_call_max.max(rs.len() as u64);
        if rs.len() > 1 {
            let grants: Vec<String> = rs
                .iter()
                .map(|r| format!("token {} at {:.3}ms", r.token, ms(r.grant)))
                .collect();
            v(
                "reigns_per_call",
                format!(
                    "{elector}'s one-shot call {call} ran {} reigns: {}",
                    rs.len(),
                    grants.join(", ")
                ),
            );
        }
    }

    // token_order: a grant that began after another reign had ended (by more than one TTL,
    // so that even a grant reply delayed in the network was sent after it) must carry a
    // higher token. Catches a module that reissues old tokens after a restart without
    // persistence or a promotion that missed grants.
    let ttl_ns = data
        .run
        .iter()
        .find_map(|e| match e {
            RunEvent::RunStart { ttl_ms, .. } => Some(ttl_ms * 1_000_000),
            _ => None,
        })
        .unwrap_or(0);
    for a in &reigns {
        let a_end = a
            .stop
            .unwrap_or(0)
            .max(a.last_check.unwrap_or(0))
            .max(a.grant);
        for b in &reigns {
            if b.grant > a_end + ttl_ns && b.token <= a.token {
                v(
                    "token_order",
                    format!(
                        "{} got token {} at {:.3}ms, not above {}'s token {} of a reign that ended at {:.3}ms",
                        b.elector,
                        b.token,
                        ms(b.grant),
                        a.elector,
                        a.token,
                        ms(a_end)
                    ),
                );
            }
        }
    }

    // token_regression, in the resource's decision order
    let mut max_acc = 0u64;
    for w in &data.resource {
        if w.accepted {
            if w.token < max_acc {
                v(
                    "token_regression",
                    format!(
                        "resource accepted token {} from {} (seq {}) after token {} at t={:.3}ms",
                        w.token,
                        w.writer,
                        w.seq,
                        max_acc,
                        ms(w.t)
                    ),
                );
            }
            max_acc = max_acc.max(w.token);
        }
    }

    // overlap of acting intervals
    let acting: Vec<&Reign> = reigns.iter().filter(|r| r.first_check.is_some()).collect();
    for (i, a) in acting.iter().enumerate() {
        for b in &acting[i + 1..] {
            if a.elector == b.elector {
                continue;
            }
            let (a0, a1) = (a.first_check.unwrap_or(0), a.last_check.unwrap_or(0));
            let (b0, b1) = (b.first_check.unwrap_or(0), b.last_check.unwrap_or(0));
            if a0 <= b1 && b0 <= a1 {
                v(
                    "overlap",
                    format!(
                        "{} (token {}) acted {:.3}..{:.3}ms and {} (token {}) acted {:.3}..{:.3}ms",
                        a.elector,
                        a.token,
                        ms(a0),
                        ms(a1),
                        b.elector,
                        b.token,
                        ms(b0),
                        ms(b1)
                    ),
                );
            }
        }
    }

    // early_grant: granted to someone else while an earlier reign still had the right to act.
    for a in &reigns {
        let end = match (a.stop, (a.deadline > 0).then_some(a.deadline)) {
            (Some(s), Some(d)) => s.min(d),
            (Some(e), None) | (None, Some(e)) => e,
            (None, None) => continue,
        };
        if let Some(b) = reigns
            .iter()
            // Token order, not record order: a paused elector records an older reign's
            // grant (lower token) after a newer one; the server issued it first, so it is
            // the earlier reign, and the newer one is early only if granted before *its* end.
            .filter(|b| b.elector != a.elector && b.token > a.token && b.grant < end)
            .min_by_key(|b| b.grant)
        {
            v(
                "early_grant",
                format!(
                    "{} (token {}) granted at {:.3}ms while {} (token {}, granted {:.3}ms) had {} ({:.3}ms later)",
                    b.elector,
                    b.token,
                    ms(b.grant),
                    a.elector,
                    a.token,
                    ms(a.grant),
                    if a.stop.is_some_and(|s| s == end) {
                        "not stopped its task yet"
                    } else {
                        "not reached its local deadline"
                    },
                    ms(end - b.grant)
                ),
            );
        }
    }

    // acted_after_newer_grant: no slack; see the module docs.
    let checks_of = |elector: &str, token: u64| -> Vec<(u64, u64)> {
        data.electors
            .iter()
            .filter(|(id, _)| id == elector)
            .flat_map(|(_, evs)| evs.iter())
            .filter_map(|e| match e {
                ElectorEvent::Check {
                    t, token: k, seq, ..
                } if *k == token => Some((*t, *seq)),
                _ => None,
            })
            .collect()
    };
    for a in &reigns {
        let Some(last) = a.last_check else { continue };
        let Some(b) = reigns
            .iter()
            .filter(|b| b.token > a.token && b.grant < last)
            .min_by_key(|b| b.grant)
        else {
            continue;
        };
        let Some((t, seq)) = checks_of(&a.elector, a.token)
            .into_iter()
            .filter(|(t, _)| *t > b.grant && *t >= a.grant)
            .min()
        else {
            continue;
        };
        let fate = match data
            .resource
            .iter()
            .find(|w| w.writer == a.elector && w.token == a.token && w.seq == seq)
        {
            Some(w) if w.accepted => "accepted",
            Some(_) => "fenced",
            None => "not seen by the resource",
        };
        v(
            "acted_after_newer_grant",
            format!(
                "{} (token {}) decided to act at {:.3}ms (seq {seq}, write {fate}), {:.3}ms after {} recorded its grant of the higher token {}",
                a.elector,
                a.token,
                ms(t),
                ms(t - b.grant),
                b.elector,
                b.token
            ),
        );
    }

    // stale writes: late for their own lease and superseded by a grant
    let key = |e: &str, t: u64| (e.to_string(), t);
    let reign_of: BTreeMap<(String, u64), &Reign> = reigns
        .iter()
        .map(|r| (key(&r.elector, r.token), r))
        .collect();
    for w in &data.resource {
        if w.accepted {
            rep.writes_accepted += 1;
        } else {
            rep.writes_rejected += 1;
        }
        let Some(r) = reign_of.get(&key(&w.writer, w.token)) else {
            v(
                "orphan_write",
                format!(
                    "resource saw token {} from {} but no elector recorded that grant",
                    w.token, w.writer
                ),
            );
            continue;
        };
        // Decided in time: the writer's check of this write came before its own deadline and
        // before any higher token was granted (a pause or the network may still have
        // delivered it late).
        let decided_in_time = decision_of(data, w).is_some_and(|(t, deadline)| {
            t < deadline && !reigns.iter().any(|o| o.token > w.token && o.grant < t)
        });
        if !w.accepted && decided_in_time {
            rep.fenced_in_time += 1;
        }
        if w.t <= r.deadline {
            continue;
        }
        if w.accepted {
            rep.late_writes_accepted += 1;
        } else {
            rep.late_writes_rejected += 1;
        }
        let superseded = reigns.iter().find(|o| o.token > w.token && o.grant < w.t);
        if let (true, Some(o)) = (w.accepted, superseded) {
            // Had the resource already seen a higher token (accepted or refused) when this
            // write came? Then it accepted a lower one after a higher: fencing itself failed.
            let higher_seen = || data.resource.iter().any(|h| h.token > w.token && h.t < w.t);
            if decided_in_time && !higher_seen() {
                rep.in_flight_accepted += 1;
                continue;
            }
            v(
                "stale_accepted",
                format!(
                    "resource accepted {} token {} at {:.3}ms: {:.3}ms past its deadline, {} held token {} since {:.3}ms",
                    w.writer,
                    w.token,
                    ms(w.t),
                    ms(w.t - r.deadline),
                    o.elector,
                    o.token,
                    ms(o.grant)
                ),
            );
        }
    }

    liveness(data, &reigns, &mut rep);
    rep
}

/// The check by which `w`'s writer decided on it: (its time, the deadline it saw then).
fn decision_of(data: &RunData, w: &ResourceWrite) -> Option<(u64, u64)> {
    data.electors
        .iter()
        .filter(|(id, _)| *id == w.writer)
        .flat_map(|(_, evs)| evs.iter())
        .find_map(|e| match e {
            ElectorEvent::Check {
                t,
                token,
                seq,
                deadline,
            } if *token == w.token && *seq == w.seq => Some((*t, *deadline)),
            _ => None,
        })
}

fn liveness(data: &RunData, reigns: &[Reign], rep: &mut RunReport) {
    let mut ttl_ms = 0u64;
    let mut grace_ms = 0u64;
    let mut end = u64::MAX;
    let mut faults = vec![];
    let mut ups = vec![];
    for e in &data.run {
        match e {
            RunEvent::RunStart {
                ttl_ms: t,
                grace_ms: g,
                ..
            } => {
                ttl_ms = *t;
                grace_ms = *g;
            }
            RunEvent::RunEnd { t } => end = *t,
            RunEvent::Fault {
                kind,
                t,
                t_end,
                target,
                skipped,
                ..
            } => {
                if skipped.is_some() {
                    rep.faults_skipped += 1;
                } else {
                    *rep.faults.entry(kind.clone()).or_default() += 1;
                    faults.push((kind.clone(), *t, *t_end, target.clone()));
                }
            }
            RunEvent::RedisUp { t, .. } => ups.push(*t),
        }
    }
    faults.sort_by_key(|f| f.1);
    let grants: Vec<(u64, &str)> = reigns
        .iter()
        .map(|r| (r.grant, r.elector.as_str()))
        .collect();
    let next_grant = |after: u64, before: u64| {
        grants
            .iter()
            .find(|g| g.0 > after && g.0 < before)
            .map(|g| g.0)
    };
    let mut push = |cat: &str, from: u64, to: u64| {
        rep.latencies
            .entry(cat.to_string())
            .or_default()
            .push(ms(to.saturating_sub(from)));
    };
    let mut kept = 0;
    for (i, (kind, t, _t_end, target)) in faults.iter().enumerate() {
        // A measurement belongs to its fault only until the next fault starts.
        let horizon = faults.get(i + 1).map(|f| f.1).unwrap_or(end).min(end);
        // Was the target leading when the fault hit? (acting-relevant faults only)
        let target_led = reigns
            .iter()
            .any(|r| &r.elector == target && r.grant <= *t && r.stop.is_none_or(|s| s >= *t));
        match kind.as_str() {
            "kill" if target_led => {
                if let Some(g) = next_grant(*t, horizon) {
                    push("crash_failover", *t, g);
                }
            }
            "pause" | "partition" | "blackhole" if target_led => {
                if let Some(g) = next_grant(*t, horizon) {
                    push("loss_failover", *t, g);
                }
            }
            "resign" => {
                // from the moment the leader's task stopped (RELEASE goes out right after)
                let stop = reigns
                    .iter()
                    .filter(|r| &r.elector == target && r.grant <= *t)
                    .filter_map(|r| r.stop)
                    .filter(|s| *s >= *t)
                    .min();
                if let Some(s) = stop {
                    if let Some(g) = next_grant(s, horizon) {
                        push("handover", s, g);
                    }
                }
            }
            "sentinel-failover" => {
                // Leaderless time after a primary crash under Sentinel: from the kill -9 (the
                // fault's time) to the next grant, on whichever node Sentinel promoted.
                if let Some(g) = next_grant(*t, horizon) {
                    push("sentinel_failover", *t, g);
                }
            }
            "restart" | "restart-aof" | "failover" => {
                if let Some(&up) = ups.iter().find(|u| **u >= *t && **u < horizon) {
                    if let Some(g) = next_grant(up, horizon) {
                        push("redis_back", up, g);
                    } else if reigns
                        .iter()
                        .any(|r| r.grant < *t && r.last_check.is_some_and(|c| c > up))
                    {
                        kept += 1;
                    }
                }
            }
            _ => {}
        }
    }

    rep.redis_faults_leader_kept = kept;

    // Longest stretch with nobody acting (a liveness smell: a fault nobody recovered from).
    let mut acting: Vec<(u64, u64)> = reigns
        .iter()
        .filter_map(|r| Some((r.first_check?, r.last_check?)))
        .collect();
    acting.sort();
    if let Some(&(first, _)) = acting.first() {
        let stop = if end == u64::MAX {
            acting.iter().map(|a| a.1).max().unwrap_or(first)
        } else {
            end
        };
        let mut covered = first;
        let mut gap = 0u64;
        for (a, b) in acting {
            if a > covered {
                gap = gap.max(a.min(stop).saturating_sub(covered));
            }
            covered = covered.max(b);
        }
        gap = gap.max(stop.saturating_sub(covered));
        rep.leaderless_max_ms = ms(gap);
    }

    // Flapping: grants in fault-free windows.
    let Some(first) = grants.first().map(|g| g.0) else {
        return;
    };
    if end == u64::MAX {
        end = grants.last().map(|g| g.0).unwrap_or(first);
    }
    let recovery = (2 * ttl_ms + grace_ms) * 1_000_000;
    let busy: Vec<(u64, u64)> = faults.iter().map(|f| (f.1, f.2 + recovery)).collect();
    let free = |t: u64| !busy.iter().any(|(a, b)| t >= *a && t <= *b);
    // Integrate fault-free time in 10 ms steps (bounded: a run is minutes long).
    let step = 10_000_000u64;
    let mut t = first;
    let mut free_ns = 0u64;
    while t < end {
        if free(t) {
            free_ns += step.min(end - t);
        }
        t += step;
    }
    rep.fault_free_minutes = free_ns as f64 / 60e9;
    rep.fault_free_changes = grants
        .iter()
        .filter(|g| g.0 > first && g.0 < end && free(g.0))
        .count() as u64;
}

/// Nearest-rank percentile of unsorted samples.
pub fn percentile(samples: &[f64], p: f64) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
    Some(s[rank.clamp(1, s.len()) - 1])
}

/// Totals over many runs and the one-line summary.
#[derive(Debug, Default, Serialize)]
pub struct Summary {
    pub runs: u64,
    pub violations: u64,
    pub latencies: BTreeMap<String, Vec<f64>>,
    pub faults: BTreeMap<String, u64>,
    pub faults_skipped: u64,
    pub writes_accepted: u64,
    pub writes_rejected: u64,
    pub late_writes_rejected: u64,
    pub fenced_in_time: u64,
    pub in_flight_accepted: u64,
    pub fault_free_minutes: f64,
    pub fault_free_changes: u64,
    pub redis_faults_leader_kept: u64,
    pub leaderless_max_ms: f64,
    pub oneshot_calls: u64,
    pub reigns_per_call_max: u64,
}

impl Summary {
    pub fn add(&mut self, r: &RunReport) {
        self.runs += 1;
        self.violations += r.violations.len() as u64;
        for (k, v) in &r.latencies {
            self.latencies.entry(k.clone()).or_default().extend(v);
        }
        for (k, n) in &r.faults {
            *self.faults.entry(k.clone()).or_default() += n;
        }
        self.faults_skipped += r.faults_skipped;
        self.writes_accepted += r.writes_accepted;
        self.writes_rejected += r.writes_rejected;
        self.late_writes_rejected += r.late_writes_rejected;
        self.fenced_in_time += r.fenced_in_time;
        self.in_flight_accepted += r.in_flight_accepted;
        self.fault_free_minutes += r.fault_free_minutes;
        self.fault_free_changes += r.fault_free_changes;
        self.redis_faults_leader_kept += r.redis_faults_leader_kept;
        self.leaderless_max_ms = self.leaderless_max_ms.max(r.leaderless_max_ms);
        self.oneshot_calls += r.oneshot_calls;
        self.reigns_per_call_max = self.reigns_per_call_max.max(r.reigns_per_call_max);
    }

    /// `runs=… violations=… crash_failover_p50_ms=… …`
    pub fn line(&self) -> String {
        let mut s = format!("runs={} violations={}", self.runs, self.violations);
        for cat in [
            "crash_failover",
            "loss_failover",
            "handover",
            "redis_back",
            "sentinel_failover",
        ] {
            let l = self.latencies.get(cat).map(|v| v.as_slice()).unwrap_or(&[]);
            match (
                percentile(l, 50.0),
                percentile(l, 99.0),
                percentile(l, 100.0),
            ) {
                (Some(a), Some(b), Some(c)) => {
                    s += &format!(
                        " {cat}_n={} {cat}_p50_ms={a:.1} {cat}_p99_ms={b:.1} {cat}_max_ms={c:.1}",
                        l.len()
                    )
                }
                _ => s += &format!(" {cat}_n=0"),
            }
        }
        let per_min = if self.fault_free_minutes > 0.0 {
            self.fault_free_changes as f64 / self.fault_free_minutes
        } else {
            0.0
        };
        let faults: u64 = self.faults.values().sum();
        s += &format!(
            " fault_free_changes_per_min={per_min:.2} fault_free_min={:.1} leaderless_max_ms={:.0} faults={faults} skipped={} redis_kept={} writes_ok={} writes_fenced={} late_fenced={} fenced_in_time={} in_flight_accepted={} oneshot_calls={} reigns_per_call_max={}",
            self.fault_free_minutes,
            self.leaderless_max_ms,
            self.faults_skipped,
            self.redis_faults_leader_kept,
            self.writes_accepted,
            self.writes_rejected,
            self.late_writes_rejected,
            self.fenced_in_time,
            self.in_flight_accepted,
            self.oneshot_calls,
            self.reigns_per_call_max
        );
        s
    }
}

/// The "check -> pause -> stale write" stories of a run: every write that the elector
/// decided on before its deadline, that reached the resource after it, and that the
/// resource rejected by its token. Each story is a few lines of text, with times in ms
/// since the run started.
pub fn stale_write_stories(data: &RunData) -> Vec<String> {
    let reigns = reigns(data);
    let t0 = data
        .run
        .iter()
        .find_map(|e| match e {
            RunEvent::RunStart { t, .. } => Some(*t),
            _ => None,
        })
        .unwrap_or(0);
    let rel = |t: u64| (t as f64 - t0 as f64) / 1e6;
    let mut out = vec![];
    for w in data.resource.iter().filter(|w| !w.accepted) {
        let Some(r) = reigns
            .iter()
            .find(|r| r.elector == w.writer && r.token == w.token)
        else {
            continue;
        };
        let Some((t_check, deadline)) = decision_of(data, w) else {
            continue;
        };
        if !(t_check < deadline && w.t > deadline) {
            continue;
        }
        let fault = data.run.iter().find_map(|e| match e {
            RunEvent::Fault {
                kind,
                t,
                t_end,
                target,
                detail,
                skipped: None,
            } if *target == w.writer && *t <= w.t && *t_end >= t_check => Some(format!(
                "{:>10.3} ms  fault {kind} on {target} ({detail}) until {:.3} ms",
                rel(*t),
                rel(*t_end)
            )),
            _ => None,
        });
        let newer = reigns
            .iter()
            .filter(|o| o.token > w.token && o.grant < w.t)
            .min_by_key(|o| o.grant);
        let mut lines = vec![format!(
            "stale write {} seq {} token {} (rejected by the resource):",
            w.writer, w.seq, w.token
        )];
        lines.push(format!(
            "{:>10.3} ms  {} granted token {} (local deadline {:.3} ms)",
            rel(r.grant),
            r.elector,
            r.token,
            rel(r.deadline)
        ));
        lines.push(format!(
            "{:>10.3} ms  {} checks: still leader, {:.3} ms left -> prepares write seq {}",
            rel(t_check),
            w.writer,
            (deadline - t_check) as f64 / 1e6,
            w.seq
        ));
        let mut timed: Vec<(u64, String)> = vec![];
        if let Some(f) = fault {
            timed.push((0, f));
        }
        timed.push((
            deadline,
            format!(
                "{:>10.3} ms  {}'s local deadline passes (it is not running)",
                rel(deadline),
                w.writer
            ),
        ));
        if let Some(n) = newer {
            timed.push((
                n.grant,
                format!(
                    "{:>10.3} ms  {} granted token {}",
                    rel(n.grant),
                    n.elector,
                    n.token
                ),
            ));
            if let Some(a) = data
                .resource
                .iter()
                .find(|x| x.writer == n.elector && x.token == n.token && x.accepted)
            {
                timed.push((
                    a.t,
                    format!(
                        "{:>10.3} ms  resource accepts {} token {} (highest now {})",
                        rel(a.t),
                        a.writer,
                        a.token,
                        a.token
                    ),
                ));
            }
        }
        timed.push((w.t, format!("{:>10.3} ms  {} wakes, sends seq {} with token {} -> resource rejects: {} < highest {}", rel(w.t), w.writer, w.seq, w.token, w.token, w.highest)));
        timed.sort_by_key(|(t, _)| *t);
        lines.extend(timed.into_iter().map(|(_, l)| l));
        out.push(lines.join("\n"));
    }
    out
}
