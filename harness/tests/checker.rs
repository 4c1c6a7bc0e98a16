//! The checker on hand-made histories: each safety rule is shown to fire on a history that
//! breaks it and to stay quiet on one that does not; liveness figures come out as computed
//! by hand.

use lease_harness::checker::{check, percentile, RunData, Summary};
use lease_harness::history::{read_jsonl, ElectorEvent, JsonlWriter, ResourceWrite, RunEvent};
use std::path::PathBuf;

const MS: u64 = 1_000_000;

fn run_events(faults: Vec<RunEvent>) -> Vec<RunEvent> {
    let mut v = vec![RunEvent::RunStart {
        t: 0,
        run: 0,
        seed: 1,
        electors: 2,
        ttl_ms: 200,
        grace_ms: 200,
        seconds: 1,
        elector_mode: "safe".into(),
        fence: true,
    }];
    v.extend(faults);
    v.push(RunEvent::RunEnd { t: 5_000 * MS });
    v
}

/// Elector history: one reign with checks every 10 ms in [from, to], deadline given.
fn reign(
    token: u64,
    grant: u64,
    from: u64,
    to: u64,
    deadline: u64,
    stop: u64,
) -> Vec<ElectorEvent> {
    let mut v = vec![ElectorEvent::Grant {
        t: grant * MS,
        token,
        deadline: deadline * MS,
        call: None,
    }];
    let mut t = from;
    let mut seq = 0;
    while t <= to {
        seq += 1;
        v.push(ElectorEvent::Check {
            t: t * MS,
            token,
            seq,
            deadline: deadline * MS,
        });
        v.push(ElectorEvent::Ack {
            t: t * MS + 1000,
            token,
            seq,
            ok: true,
        });
        t += 10;
    }
    v.push(ElectorEvent::Stop {
        t: stop * MS,
        token,
        why: "cancelled".into(),
    });
    v
}

fn start(id: &str) -> ElectorEvent {
    ElectorEvent::Start {
        t: 0,
        elector: id.into(),
        pid: 1,
        owner: format!("{id}-x"),
        mode: "safe".into(),
    }
}

fn write(t_ms: u64, writer: &str, token: u64, accepted: bool, highest: u64) -> ResourceWrite {
    ResourceWrite {
        t: t_ms * MS,
        writer: writer.into(),
        token,
        seq: t_ms,
        accepted,
        highest,
    }
}

/// Two clean reigns: e1 (token 10) 0..150 ms, deadline 190; e2 (token 11) from 400 ms.
fn clean() -> RunData {
    let mut e1 = vec![start("e1")];
    e1.extend(reign(10, 0, 0, 150, 190, 155));
    let mut e2 = vec![start("e2")];
    e2.extend(reign(11, 400, 400, 600, 800, 605));
    let mut resource = vec![];
    for t in (0..=150).step_by(10) {
        resource.push(write(t, "e1", 10, true, 10));
    }
    for t in (400..=600).step_by(10) {
        resource.push(write(t, "e2", 11, true, 11));
    }
    RunData {
        dir: PathBuf::from("hand-made"),
        run: run_events(vec![]),
        resource,
        electors: vec![("e1".into(), e1), ("e2".into(), e2)],
    }
}

fn kinds(d: &RunData) -> Vec<String> {
    check(d).violations.into_iter().map(|v| v.kind).collect()
}

#[test]
fn clean_history_passes() {
    let d = clean();
    let r = check(&d);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.grants, 2);
    // Nobody acted from 150 ms (e1's last check) to 400 ms (e2's first), nor from 600 ms to
    // the end of the run at 5000 ms.
    assert_eq!(r.leaderless_max_ms, 4400.0);
    assert_eq!(r.writes_accepted, 16 + 21);
    assert_eq!(r.writes_rejected, 0);
}

#[test]
fn overlapping_acting_intervals_are_caught() {
    let mut d = clean();
    // e2 is granted and acts at 120 ms while e1 still acts until 150 ms.
    let mut e2 = vec![start("e2")];
    e2.extend(reign(11, 120, 120, 300, 400, 305));
    d.electors[1].1 = e2;
    let k = kinds(&d);
    assert!(k.contains(&"overlap".to_string()), "{k:?}");
}

#[test]
fn touching_but_not_overlapping_intervals_pass() {
    // e1 acted until 150 ms and its task stopped at 155 ms; e2 granted and acting right after.
    let mut d = clean();
    let mut e2 = vec![start("e2")];
    e2.extend(reign(11, 156, 156, 300, 400, 305));
    d.electors[1].1 = e2;
    assert!(kinds(&d).is_empty());
}

/// Issue 23's blind spot: a grant to e2 while e1's task still ran (stopped at 155 ms) is a
/// violation even though e2 acts only from 300 ms and no write overlaps. Without the rule
/// this history passes with no violation.
#[test]
fn grant_before_the_previous_task_stopped_is_caught_without_overlap() {
    let mut d = clean();
    let mut e2 = vec![start("e2")];
    e2.extend(reign(11, 151, 300, 600, 800, 605));
    d.electors[1].1 = e2;
    assert_eq!(kinds(&d), vec!["early_grant".to_string()]);
    // Granted after e1's task stopped: fine.
    let mut e2 = vec![start("e2")];
    e2.extend(reign(11, 156, 300, 600, 800, 605));
    d.electors[1].1 = e2;
    assert!(kinds(&d).is_empty());
}

/// `early_grant` follows token order, not the order grants were recorded (found by the long
/// campaigns of issue 30, Node and Java): an elector paused between its client's decision and
/// its task's first record records an *older* grant (lower token) after a newer reign's grant.
/// Its right to act ended at its own deadline, long before; it stopped without acting. Not a
/// violation; the old rule (recorded order) flagged it. And the other way round: a newer
/// token recorded before an older reign's late record, but granted while that older reign
/// still had the right to act, is one (the old rule missed it).
#[test]
fn early_grant_compares_reigns_in_token_order() {
    let mut d = clean();
    // e1's reign (token 10) is granted at 100 ms, after e2's older lease expired.
    let mut e1 = vec![start("e1")];
    e1.extend(reign(10, 100, 100, 150, 190, 155));
    d.electors[0].1 = e1;
    d.resource.retain(|w| w.writer == "e1" && w.t >= 100 * MS);
    // e2's older reign (token 9): decided at 0 ms with its deadline at 60 ms, paused, and its
    // grant recorded only at 120 ms, while e1's newer reign acts; it stops at once.
    d.electors[1].1 = vec![
        start("e2"),
        ElectorEvent::Grant {
            t: 120 * MS,
            token: 9,
            deadline: 60 * MS,
            call: None,
        },
        ElectorEvent::Stop {
            t: 121 * MS,
            token: 9,
            why: "not leader at check".into(),
        },
    ];
    assert!(kinds(&d).is_empty(), "{:?}", kinds(&d));
    // e2's older reign (token 9) recorded at 120 ms but with the right to act until 300 ms
    // (deadline) / 320 ms (stop): e1's newer token, granted at 100 ms, was granted inside it.
    d.electors[1].1 = vec![
        start("e2"),
        ElectorEvent::Grant {
            t: 120 * MS,
            token: 9,
            deadline: 300 * MS,
            call: None,
        },
        ElectorEvent::Stop {
            t: 320 * MS,
            token: 9,
            why: "cancelled".into(),
        },
    ];
    assert!(
        kinds(&d).contains(&"early_grant".to_string()),
        "{:?}",
        kinds(&d)
    );
}

/// A crashed holder records no stop: its local deadline (190 ms) is when its right to act
/// ends, and the expiry-based hand-over after it is legitimate; a grant before it is not.
#[test]
fn grant_before_a_crashed_holders_deadline_is_caught_and_after_it_passes() {
    let crashed = |d: &mut RunData| {
        d.electors[0]
            .1
            .retain(|e| !matches!(e, ElectorEvent::Stop { .. }));
    };
    let mut d = clean();
    crashed(&mut d);
    let mut e2 = vec![start("e2")];
    e2.extend(reign(11, 180, 300, 600, 800, 605));
    d.electors[1].1 = e2;
    assert_eq!(kinds(&d), vec!["early_grant".to_string()]);
    let mut d = clean();
    crashed(&mut d);
    let mut e2 = vec![start("e2")];
    e2.extend(reign(11, 195, 300, 600, 800, 605));
    d.electors[1].1 = e2;
    assert!(kinds(&d).is_empty());
}

/// A lower token acting after a higher token's recorded grant, when the higher reign has
/// not acted yet (no `overlap`) and its grant came after the lower reign's stop and
/// deadline (no `early_grant`): e1's task recorded its stop at 155 ms but a worker kept
/// deciding to act until 300 ms, its writes never reaching the resource; e2 was granted at
/// 200 ms and acts from 400 ms. Without the rule this history passes with no violation.
#[test]
fn acting_after_a_higher_tokens_grant_is_caught() {
    let mut d = clean();
    for (seq, t) in (101..).zip((210..=300).step_by(10)) {
        d.electors[0].1.push(ElectorEvent::Check {
            t: t * MS,
            token: 10,
            seq,
            deadline: 190 * MS,
        });
    }
    let mut e2 = vec![start("e2")];
    e2.extend(reign(11, 200, 400, 600, 800, 605));
    d.electors[1].1 = e2;
    let r = check(&d);
    let k: Vec<&str> = r.violations.iter().map(|v| v.kind.as_str()).collect();
    assert_eq!(k, vec!["acted_after_newer_grant"], "{:?}", r.violations);
    assert!(
        r.violations[0].detail.contains("not seen by the resource"),
        "{:?}",
        r.violations
    );
}

/// No one-TTL slack: e2's token 9 acts 300..350 ms, after e1's token 10 was granted (0 ms),
/// within one TTL of e1's end, where `token_order` deliberately says nothing.
#[test]
fn lower_token_acting_within_one_ttl_of_a_higher_reign_is_caught() {
    let mut d = clean();
    let mut e2 = vec![start("e2")];
    e2.extend(reign(9, 300, 300, 350, 500, 355));
    d.electors[1].1 = e2;
    d.resource.retain(|w| w.writer == "e1");
    let k = kinds(&d);
    assert!(!k.contains(&"token_order".to_string()), "{k:?}");
    // Token order also makes it an early grant: token 10 (granted at 0 ms) came while token
    // 9's right to act (deadline 500 ms, measured from before the server granted it, so
    // before token 10) still held.
    assert_eq!(
        k,
        vec![
            "early_grant".to_string(),
            "acted_after_newer_grant".to_string()
        ]
    );
}

/// A write decided before the newer grant and refused by fencing is the design working
/// (`fenced_in_time`); one decided after the newer grant is a violation even though fencing
/// refused it, and its detail says so.
#[test]
fn fenced_writes_are_told_apart_by_when_they_were_decided() {
    // e1's last check (150 ms, seq 16) was paused before its write reached the resource.
    let mut d = clean();
    d.resource.push(ResourceWrite {
        seq: 16,
        ..write(610, "e1", 10, false, 11)
    });
    let r = check(&d);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.fenced_in_time, 1);
    // e1 decides once more at 410 ms, after e2's grant at 400: fenced, still a violation.
    let mut d = clean();
    d.electors[0].1.push(ElectorEvent::Check {
        t: 410 * MS,
        token: 10,
        seq: 410,
        deadline: 190 * MS,
    });
    d.resource.push(write(410, "e1", 10, false, 11));
    let r = check(&d);
    let k: Vec<&str> = r.violations.iter().map(|v| v.kind.as_str()).collect();
    assert!(k.contains(&"acted_after_newer_grant"), "{:?}", r.violations);
    assert!(
        r.violations
            .iter()
            .any(|v| v.detail.contains("write fenced")),
        "{:?}",
        r.violations
    );
    assert_eq!(r.fenced_in_time, 0);
}

#[test]
fn lower_token_accepted_after_higher_is_caught() {
    let mut d = clean();
    // A resource that does not fence: e1's token 10 accepted after e2's 11.
    d.resource.push(write(610, "e1", 10, true, 11));
    let k = kinds(&d);
    assert!(k.contains(&"token_regression".to_string()), "{k:?}");
    assert!(k.contains(&"stale_accepted".to_string()), "{k:?}");
}

#[test]
fn stale_write_rejected_by_token_is_fine() {
    let mut d = clean();
    // The GC-pause case: e1 checked at 150 ms (in time), was paused, its write reached the
    // resource at 610 ms, after its deadline and after e2's writes: rejected.
    d.resource.push(write(610, "e1", 10, false, 11));
    let r = check(&d);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.late_writes_rejected, 1);
    assert_eq!(r.writes_rejected, 1);
}

#[test]
fn stale_write_accepted_before_new_leader_wrote_is_caught() {
    // e1's late write lands at 405 ms: after e2's grant (400) and e1's deadline (190) but
    // before e2's first write reached the resource. No token regression in the resource's
    // log, yet a stale leader's write was accepted: the rule that joins both histories fires.
    let d = late_e1_write_before_e2_wrote(405);
    let k = kinds(&d);
    assert_eq!(k, vec!["stale_accepted".to_string()]);
}

/// e1's write accepted at 405 ms (after e2's grant at 400, before e2's first write at 406),
/// with its check `seq` (`write()` numbers a write by its time, matching no check).
fn late_e1_write_before_e2_wrote(seq: u64) -> RunData {
    let mut d = clean();
    let pos = d
        .resource
        .iter()
        .position(|w| w.writer == "e2")
        .expect("e2 writes");
    d.resource[pos].t = 406 * MS;
    let mut w = write(405, "e1", 10, true, 10);
    w.seq = seq;
    d.resource.insert(pos, w);
    d
}

#[test]
fn stale_write_decided_in_time_and_delivered_before_the_newer_token_is_counted_not_flagged() {
    // e1 decided its last write in time (check seq 16 at 150 ms, deadline 190) and a pause or
    // the network delivered it at 405 ms. It was in flight when the lease moved and reached a
    // resource that had not seen token 11 yet: in the resource's order it precedes all of
    // e2's reign. Counted; the rule fires only for a write decided late (next test) or one
    // accepted after the higher token (the one after). At the old rule this was a violation.
    let d = late_e1_write_before_e2_wrote(16);
    let r = check(&d);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.in_flight_accepted, 1);
    assert_eq!(r.late_writes_accepted, 1);
}

#[test]
fn stale_write_decided_past_its_deadline_is_caught_even_before_the_newer_token() {
    // The same write, decided at 300 ms, past e1's deadline (190): an elector acting late.
    let mut d = late_e1_write_before_e2_wrote(99);
    d.electors[0].1.push(ElectorEvent::Check {
        t: 300 * MS,
        token: 10,
        seq: 99,
        deadline: 190 * MS,
    });
    let r = check(&d);
    assert_eq!(r.in_flight_accepted, 0);
    assert!(
        r.violations.iter().any(|v| v.kind == "stale_accepted"),
        "{:?}",
        r.violations
    );
}

#[test]
fn in_flight_write_accepted_after_the_resource_saw_the_newer_token_is_caught() {
    // Decided in time (check seq 16), but accepted at 610 ms, after e2's writes: the resource
    // failed to fence (it had seen token 11), whatever the writer decided.
    let mut d = clean();
    let mut w = write(610, "e1", 10, true, 11);
    w.seq = 16;
    d.resource.push(w);
    let k = kinds(&d);
    assert!(k.contains(&"stale_accepted".to_string()), "{k:?}");
    assert_eq!(check(&d).in_flight_accepted, 0);
}

#[test]
fn duplicate_token_and_orphan_write_are_caught() {
    let mut d = clean();
    let mut e2 = vec![start("e2")];
    e2.extend(reign(10, 400, 400, 600, 800, 605));
    d.electors[1].1 = e2;
    d.resource.push(write(700, "e9", 99, true, 11));
    let k = kinds(&d);
    assert!(k.contains(&"duplicate_token".to_string()), "{k:?}");
    assert!(k.contains(&"orphan_write".to_string()), "{k:?}");
}

#[test]
fn crash_failover_and_handover_latencies() {
    let mut d = clean();
    // kill -9 of e1 at 152 ms (still leading); e2 granted at 400 ms -> 248 ms.
    d.run = run_events(vec![RunEvent::Fault {
        kind: "kill".into(),
        t: 152 * MS,
        t_end: 152 * MS,
        target: "e1".into(),
        detail: String::new(),
        skipped: None,
    }]);
    let r = check(&d);
    assert_eq!(r.latencies.get("crash_failover"), Some(&vec![248.0]));

    // resign of e1 at 150 ms; its task stopped at 155 ms; next grant at 400 -> 245 ms.
    d.run = run_events(vec![RunEvent::Fault {
        kind: "resign".into(),
        t: 150 * MS,
        t_end: 150 * MS,
        target: "e1".into(),
        detail: String::new(),
        skipped: None,
    }]);
    let r = check(&d);
    assert_eq!(r.latencies.get("handover"), Some(&vec![245.0]));

    // A fault on an elector that did not lead measures nothing.
    d.run = run_events(vec![RunEvent::Fault {
        kind: "kill".into(),
        t: 160 * MS,
        t_end: 160 * MS,
        target: "e2".into(),
        detail: String::new(),
        skipped: None,
    }]);
    assert!(check(&d).latencies.is_empty());
}

#[test]
fn flapping_counts_grants_outside_fault_windows() {
    let d = clean();
    let r = check(&d);
    // No faults: the whole run after the first grant is fault-free; e2's grant is a change.
    assert_eq!(r.fault_free_changes, 1);
    assert!(
        r.fault_free_minutes > 0.08 && r.fault_free_minutes < 0.09,
        "{}",
        r.fault_free_minutes
    );
}

#[test]
fn summary_line_counts_violations() {
    let mut s = Summary::default();
    s.add(&check(&clean()));
    let mut bad = clean();
    bad.resource.push(write(610, "e1", 10, true, 11));
    s.add(&check(&bad));
    let line = s.line();
    assert!(line.starts_with("runs=2 violations=2 "), "{line}");
}

#[test]
fn percentiles_nearest_rank() {
    let v: Vec<f64> = (1..=100).map(|i| i as f64).collect();
    assert_eq!(percentile(&v, 50.0), Some(50.0));
    assert_eq!(percentile(&v, 99.0), Some(99.0));
    assert_eq!(percentile(&v, 100.0), Some(100.0));
    assert_eq!(percentile(&[], 50.0), None);
}

#[test]
fn histories_round_trip_and_a_torn_last_line_is_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("elector-e1.0.jsonl");
    let mut w = JsonlWriter::create(&p).expect("create");
    let evs = reign(10, 0, 0, 20, 100, 25);
    for e in &evs {
        w.write(e).expect("write");
    }
    drop(w);
    let mut raw = std::fs::read(&p).expect("read");
    raw.extend_from_slice(b"{\"ev\":\"check\",\"t\":12");
    std::fs::write(&p, &raw).expect("write");
    let back: Vec<ElectorEvent> = read_jsonl(&p).expect("parse");
    assert_eq!(back, evs);
    // A torn line in the middle is an error, not silently dropped history.
    raw.extend_from_slice(b"\n{\"ev\":\"exit\",\"t\":1,\"why\":\"x\"}\n");
    std::fs::write(&p, &raw).expect("write");
    assert!(read_jsonl::<ElectorEvent>(&p).is_err());
}

#[test]
fn reissued_lower_token_after_a_reign_ended_is_caught() {
    // e2 is granted at 400 ms, long after e1's reign ended (155 ms, TTL 200 ms), with a
    // token below e1's: a restart or promotion lost the token history.
    let mut d = clean();
    let mut e2 = vec![start("e2")];
    e2.extend(reign(9, 400, 400, 600, 800, 605));
    d.electors[1].1 = e2;
    d.resource.retain(|w| w.writer == "e1");
    for t in (400..=600).step_by(10) {
        d.resource.push(write(t, "e2", 9, false, 10));
    }
    let k = kinds(&d);
    assert!(k.contains(&"token_order".to_string()), "{k:?}");
    // Within one TTL of the end the order is not judged (a delayed grant reply).
    let mut d = clean();
    let mut e2 = vec![start("e2")];
    e2.extend(reign(9, 300, 300, 350, 500, 355));
    d.electors[1].1 = e2;
    d.resource.retain(|w| w.writer == "e1");
    assert!(!kinds(&d).contains(&"token_order".to_string()));
}

/// `reign` with its grant stamped with one-shot call `call`.
fn reign_in_call(
    call: u64,
    token: u64,
    grant: u64,
    from: u64,
    to: u64,
    deadline: u64,
    stop: u64,
) -> Vec<ElectorEvent> {
    let mut v = reign(token, grant, from, to, deadline, stop);
    if let Some(ElectorEvent::Grant { call: c, .. }) = v.first_mut() {
        *c = Some(call);
    }
    v
}

/// e1 leads twice (tokens 10 and 12) around e2's reign (token 11), every reign on its own
/// without overlap; only the one-shot call ids tell whether that was allowed.
fn e1_twice(first_call: u64, second_call: u64) -> RunData {
    let mut e1 = vec![start("e1")];
    e1.extend(reign_in_call(first_call, 10, 0, 0, 150, 190, 155));
    e1.extend(reign_in_call(second_call, 12, 1000, 1000, 1100, 1300, 1105));
    let mut e2 = vec![start("e2")];
    e2.extend(reign_in_call(1, 11, 400, 400, 600, 800, 605));
    let mut resource = vec![];
    for t in (0..=150).step_by(10) {
        resource.push(write(t, "e1", 10, true, 10));
    }
    for t in (400..=600).step_by(10) {
        resource.push(write(t, "e2", 11, true, 11));
    }
    for t in (1000..=1100).step_by(10) {
        resource.push(write(t, "e1", 12, true, 12));
    }
    RunData {
        dir: PathBuf::from("hand-made"),
        run: run_events(vec![]),
        resource,
        electors: vec![("e1".into(), e1), ("e2".into(), e2)],
    }
}

#[test]
fn two_reigns_in_one_oneshot_call_are_caught() {
    // The issue-25 bug: the body ran again after a lost term, within the same call.
    let r = check(&e1_twice(1, 1));
    let k: Vec<&str> = r.violations.iter().map(|v| v.kind.as_str()).collect();
    assert_eq!(k, ["reigns_per_call"], "{:?}", r.violations);
    assert!(
        r.violations[0]
            .detail
            .contains("e1's one-shot call 1 ran 2 reigns"),
        "{}",
        r.violations[0].detail
    );
    assert_eq!((r.oneshot_calls, r.reigns_per_call_max), (2, 2));
    // The same reigns in two calls: what a one-shot API must do.
    let r = check(&e1_twice(1, 2));
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!((r.oneshot_calls, r.reigns_per_call_max), (3, 1));
    // Call ids are numbered per process: e2's call 1 is not e1's call 1.
    let mut d = e1_twice(1, 2);
    if let Some(ElectorEvent::Grant { call, .. }) = d.electors[1].1.get_mut(1) {
        *call = Some(2);
    }
    assert!(check(&d).violations.is_empty());
}

#[test]
fn run_style_histories_have_no_calls_and_are_not_judged_by_calls() {
    // run() campaigns again after a lost term by design: no `call`, no rule.
    let r = check(&without_calls(e1_twice(1, 1)));
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!((r.oneshot_calls, r.reigns_per_call_max), (0, 0));
    let mut s = Summary::default();
    s.add(&r);
    s.add(&check(&e1_twice(1, 1)));
    let line = s.line();
    assert!(
        line.starts_with("runs=2 violations=1 ")
            && line.contains(" oneshot_calls=2 reigns_per_call_max=2"),
        "{line}"
    );
}

#[test]
fn grant_call_is_optional_on_the_wire() {
    // Backward compatible: an elector that records no call writes the grant it always wrote.
    let old: ElectorEvent =
        serde_json::from_str(r#"{"ev":"grant","t":1,"token":2,"deadline":3}"#).expect("parse");
    assert_eq!(
        old,
        ElectorEvent::Grant {
            t: 1,
            token: 2,
            deadline: 3,
            call: None
        }
    );
    assert_eq!(
        serde_json::to_string(&old).expect("json"),
        r#"{"ev":"grant","t":1,"token":2,"deadline":3}"#
    );
    let new: ElectorEvent =
        serde_json::from_str(r#"{"ev":"grant","t":1,"token":2,"deadline":3,"call":7}"#)
            .expect("parse");
    assert!(matches!(new, ElectorEvent::Grant { call: Some(7), .. }));
}

/// The same history as a `run()`-style elector records it: no call ids.
fn without_calls(mut d: RunData) -> RunData {
    for (_, evs) in &mut d.electors {
        for e in evs {
            if let ElectorEvent::Grant { call, .. } = e {
                *call = None;
            }
        }
    }
    d
}

#[test]
fn the_java_netns_history_with_a_write_in_flight_passes_and_counts_it() {
    // A real history (`scripts/evidence --steps long --langs java` at df82bbb, netns run 89):
    // e2.0 decided a write 128 ms before its deadline; 80 % packet loss on its link delivered
    // it 662 ms later, 20 ms after e1.0's grant and before e1.0's first write. The old rule
    // reported it as stale_accepted and stopped the campaign.
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/java-netns-in-flight-write");
    let d = RunData::load(&dir).expect("fixture");
    let r = check(&d);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.in_flight_accepted, 1);
}
