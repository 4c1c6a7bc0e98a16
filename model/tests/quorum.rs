//! Bounded model checks of quorum mode (docs/model.md §8): 3 independent nodes, 2 electors,
//! the real engine for every node command and the real `quorum_decide` + `decide` functions
//! for every elector decision. The protocol holds on small configurations; each negative
//! control yields a counterexample; the reachability checks show the properties are not
//! vacuous. Every check prints its state counts and time (`-- --nocapture`).

use lease_model::quorum::{BIG_SKEW_MS, SKEW_MS};
use lease_model::{explore, QControl, QFaults, QSetup, QuorumModel, Report};

const ONE_ACTING: &str = "one acting elector";
const ON_MAJORITY: &str = "reign token on a majority";
const RISING: &str = "fencing: reign tokens rise";
const SECOND_REIGN: &str = "a second reign acts";

fn setup(horizon: u32, faults: QFaults, control: QControl) -> QSetup {
    QSetup {
        electors: 2,
        horizon,
        faults,
        control,
        skew_ms: SKEW_MS,
        eager: false,
        release_on_lost: false,
        late_all: false,
        lists: false,
        procedure: false,
        no_token_floor: false,
    }
}

fn only(kind: &str) -> QFaults {
    QFaults {
        budget: 1,
        drop_messages: kind == "drop",
        wipe: kind == "wipe",
        restart: kind == "restart",
        swap: kind == "swap",
    }
}

fn holds(s: QSetup) -> Report {
    let r = explore(QuorumModel::new(s), None);
    println!("{r}");
    assert!(r.violations.is_empty(), "{r}");
    r
}

/// `s` must break `property` (a counterexample is found); prints it.
fn breaks(s: QSetup, property: &'static str) -> Report {
    let r = explore(QuorumModel::new(s), Some(property));
    println!("{r}");
    assert!(
        r.violations.iter().any(|v| v.0 == property),
        "{:?} found no counterexample for {property:?}: {r}",
        s.control
    );
    r
}

#[test]
fn quorum_holds_with_delays_and_pauses() {
    // Every abandoned request (not only RELEASEs) may execute late here: the one check
    // that affords it (about ×9 the states; the fault checks keep late RELEASEs only).
    let r = holds(QSetup {
        late_all: true,
        ..setup(2, QFaults::NONE, QControl::None)
    });
    assert!(r.unique_states > 100_000, "explored too little: {r}");
    assert!(r.unreached.iter().all(|p| *p != "a reign acts"), "{r}");
}

#[test]
fn quorum_holds_across_a_node_restart_without_persistence() {
    holds(setup(2, only("wipe"), QControl::None));
}

#[test]
fn quorum_holds_across_a_node_restart_with_persistence() {
    holds(setup(2, only("restart"), QControl::None));
}

#[test]
fn quorum_holds_when_a_message_or_reply_is_lost() {
    holds(setup(2, only("drop"), QControl::None));
}

#[test]
fn quorum_a_second_reign_is_reachable() {
    // Horizon 3: the first reign stops at its stop point and releases; the second campaigns.
    let r = explore(
        QuorumModel::new(setup(3, QFaults::NONE, QControl::None)),
        Some(SECOND_REIGN),
    );
    println!("{r}");
    assert!(r.examples.iter().any(|e| e.0 == SECOND_REIGN), "{r}");
    assert!(r.violations.is_empty(), "{r}");
}

#[test]
fn quorum_a_leader_is_elected_without_faults() {
    let r = holds(QSetup {
        eager: true,
        ..setup(3, QFaults::NONE, QControl::None)
    });
    assert!(r.unique_states > 10, "{r}");
}

#[test]
fn quorum_control_minority_breaks_exclusivity() {
    breaks(setup(1, QFaults::NONE, QControl::Minority), ONE_ACTING);
}

#[test]
fn quorum_control_minority_is_not_a_majority() {
    breaks(setup(1, QFaults::NONE, QControl::Minority), ON_MAJORITY);
}

#[test]
fn quorum_control_grace_zero_breaks_exclusivity() {
    breaks(setup(2, only("wipe"), QControl::GraceZero), ONE_ACTING);
}

#[test]
fn quorum_control_no_unify_breaks_rising_tokens() {
    // As the harness's control (`--quorum-control no-unify --skew-ms 30000`): one node's
    // wall clock far ahead, so its tokens are far above the others'.
    breaks(
        QSetup {
            skew_ms: BIG_SKEW_MS,
            ..setup(3, QFaults::NONE, QControl::NoUnify)
        },
        RISING,
    );
}

#[test]
fn quorum_control_no_unify_is_not_one_token_on_a_majority() {
    breaks(
        QSetup {
            skew_ms: BIG_SKEW_MS,
            ..setup(1, QFaults::NONE, QControl::NoUnify)
        },
        ON_MAJORITY,
    );
}

/// Negative control, from a finding (docs/model.md §8.2): a quorum transport that frees the
/// nodes still holding us as soon as a renewal round is `Lost`, before the election loop has
/// stopped the task. With one node wiped and the other elector's partial grant on the third,
/// a successor reigns while the old leader may still act. `client/src/quorum.rs` did this
/// until 7bd79e4; it now leaves those nodes to the loop, which releases them after the task
/// stopped (`client/tests/quorum_redis.rs::a_lost_round_frees_the_remaining_nodes_only_after_the_task_stopped`).
/// The release is I/O in the transport, not a `quorum_decide` function, so the model mirrors
/// it with the `release_on_lost` switch.
#[test]
fn quorum_control_early_release_on_lost_breaks_exclusivity() {
    breaks(
        QSetup {
            release_on_lost: true,
            ..setup(2, only("wipe"), QControl::None)
        },
        ONE_ACTING,
    );
}

#[test]
fn quorum_holds_across_a_node_identity_change() {
    // Issue 32: a node address re-pointed at a long-running empty server (no grace). The
    // elector sees the server's identity change and counts that node toward no grant for
    // one max TTL (docs/model.md §8, "identity").
    holds(setup(2, only("swap"), QControl::None));
}

/// Negative control (issue 32, item 3): a client that ignores node identities counts the
/// swapped node like any other; it grants at once (it never was in grace), and a second
/// elector reigns on it and a node the first one does not hold while the first still acts.
#[test]
fn quorum_control_identity_ignored_breaks_exclusivity() {
    breaks(
        setup(2, only("swap"), QControl::IdentityIgnored),
        ONE_ACTING,
    );
}

/// Negative control (issue 23 in quorum mode): one owner per elector for all its reigns
/// (before R17). A campaign round that times out with a partial grant releases it; the
/// RELEASE executes late, after the next round refreshed that grant (same owner, same
/// token) and reigned on it: the node is freed and the other elector gets a majority.
#[test]
fn quorum_control_owner_reuse_late_release_breaks_exclusivity() {
    breaks(setup(2, QFaults::NONE, QControl::OwnerReuse), ONE_ACTING);
}

/// Finding (docs/model.md §8.4): R17 as written at dbb67fc — the reign advances after a
/// step-down only — gives the same counterexample as owner reuse in quorum mode, because
/// there the transport releases the partial grants of an aborted campaign round, and the
/// next round (same campaign, same owner) refreshes them. The model's correct elector also
/// advances the reign after every round that released something.
#[test]
fn quorum_control_reign_on_step_down_only_breaks_exclusivity() {
    breaks(
        setup(2, QFaults::NONE, QControl::ReignOnStepDownOnly),
        ONE_ACTING,
    );
}

/// Issue 32 item 1, two node lists at once: elector 0 still on {s0, s1, s2}, elector 1
/// already on {s0, s1, s3}; the key on the old list's servers is bound to the old list's
/// membership id (Q9). Elector 1 is refused on s0 and s1 and never gets a majority; no
/// overlap.
#[test]
fn quorum_holds_with_two_node_lists() {
    let r = holds(QSetup {
        lists: true,
        ..setup(2, QFaults::NONE, QControl::None)
    });
    assert!(r.unreached.iter().all(|p| *p != "a reign acts"), "{r}");
}

/// Negative control (issue 32 item 1): without the membership id, elector 0 reigns on
/// {s0, s2} and elector 1 on {s1, s3} at once (the counterexample is in docs/model.md §8).
#[test]
fn quorum_control_no_membership_breaks_exclusivity() {
    breaks(
        QSetup {
            lists: true,
            ..setup(2, QFaults::NONE, QControl::NoMembership)
        },
        ONE_ACTING,
    );
}

/// The procedure of docs/quorum.md §4.1 as actions (stop elector 0, then rebind s0 and s1
/// with `LEASE.MEMBERSHIP key old new TOKEN t`): holds. Horizon 2 here (about 4 s); horizon
/// 3, where a new-list reign acts after the rebind, runs in `scripts/model`.
#[test]
fn quorum_holds_across_the_membership_change_procedure() {
    holds(QSetup {
        lists: true,
        procedure: true,
        ..setup(2, QFaults::NONE, QControl::None)
    });
}

/// Negative control: rebinding the shared servers while an elector of the old list still
/// runs (against step 2 of the procedure) lets the new list reign on a rebound server and
/// the new one while the old list's reign still acts.
#[test]
fn quorum_control_rebind_early_breaks_exclusivity() {
    breaks(
        QSetup {
            lists: true,
            procedure: true,
            ..setup(2, QFaults::NONE, QControl::RebindEarly)
        },
        ONE_ACTING,
    );
}
