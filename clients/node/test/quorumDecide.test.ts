// Quorum mode's pure decisions (no server): the same tables as client/src/quorum_decide.rs.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  afterAcquire,
  afterRenew,
  checkIdentity,
  majority,
  need,
  quarantineUs,
  raiseConfirmed,
  runIdOf,
  waitAfterRefusal,
  waitNode,
  type AcquireReply,
  type NodeFail,
  type NodeReply,
} from "../src/quorumDecide.js";

const busy: AcquireReply = "refused";
const down: NodeFail = { fail: { kind: "connection", graceUs: null }, message: "down" };
const grace: NodeFail = { fail: { kind: "grace", graceUs: 700_000 }, message: "GRACE 700 ms" };
const quiet = null;

test("majority of n; the controls' needs", () => {
  assert.deepEqual([1, 2, 3, 4, 5, 6, 7].map(majority), [1, 2, 2, 3, 3, 4, 4]);
  assert.equal(need("minority", 5), 1);
  assert.equal(need("no-unify", 5), 3);
  assert.equal(need("correct", 5), 3);
});

test("after ACQUIRE: raise to the maximum on a majority, else release the partial grants", () => {
  const cases: Array<[string, "correct" | "minority" | "no-unify", AcquireReply[], unknown]> = [
    ["all grant: raise all to the maximum", "correct", [10, 30, 20], { action: "raise", target: 30, nodes: [0, 1, 2] }],
    ["bare majority, one silent", "correct", [10, quiet, 20], { action: "raise", target: 20, nodes: [0, 2] }],
    ["split vote -> release, poll again", "correct", [10, busy, down], { action: "abort", release: [[0, 10]], outcome: "not_granted" }],
    ["held elsewhere on a majority", "correct", [busy, busy, 5], { action: "abort", release: [[2, 5]], outcome: "not_granted" }],
    ["majority unreachable: error, back off", "correct", [10, down, quiet], { action: "abort", release: [[0, 10]], outcome: down }],
    ["grace in the way: the loop learns how long", "correct", [down, grace, 3], { action: "abort", release: [[2, 3]], outcome: grace }],
    ["5 nodes, 3 grants", "correct", [1, busy, 9, down, 4], { action: "raise", target: 9, nodes: [0, 2, 4] }],
    ["5 nodes, 2 grants is not enough", "correct", [1, busy, 9, busy, busy], { action: "abort", release: [[0, 1], [2, 9]], outcome: "not_granted" }],
    ["control minority: one grant leads", "minority", [busy, 7, busy], { action: "raise", target: 7, nodes: [1] }],
    ["control no-unify: the picked granter's token, no raise", "no-unify", [quiet, 50, 20], { action: "act_unified", token: 20, perNode: [null, 50, 20] }],
  ];
  for (const [name, control, replies, want] of cases) {
    assert.deepEqual(afterAcquire(control, replies, 7), want, name);
  }
  const silent = afterAcquire("correct", [quiet, quiet, quiet], 0);
  assert.equal(silent.action, "abort");
  assert.ok(silent.action === "abort" && typeof silent.outcome === "object" && silent.outcome.fail.kind === "timeout", "all silent: a timeout");
});

test("raise confirmation and renewal need a majority; more than N-M zeros lose", () => {
  const y: NodeReply<boolean> = true;
  const n0: NodeReply<boolean> = false;
  const e: NodeReply<boolean> = { fail: { kind: "timeout", graceUs: null }, message: "t" };
  assert.equal(raiseConfirmed("correct", [y, y, n0], 3), true);
  assert.equal(raiseConfirmed("correct", [y, null, n0], 3), false);
  assert.equal(raiseConfirmed("minority", [y, null, n0], 3), true);
  assert.equal(afterRenew("correct", [y, y, e]), "renewed");
  assert.equal(afterRenew("correct", [y, n0, e]), "unknown");
  assert.equal(afterRenew("correct", [y, n0, n0]), "lost");
  assert.equal(afterRenew("correct", [null, null, null]), "unknown");
  assert.equal(afterRenew("correct", [y, y, n0, n0, null]), "unknown");
  assert.equal(afterRenew("correct", [y, y, n0, n0, n0]), "lost");
});

test("node identity: first, same, changed, duplicate (a duplicate wins over a change)", () => {
  assert.deepEqual(checkIdentity(0, "a", [null, null, null]), { kind: "first" });
  assert.deepEqual(checkIdentity(0, "a", ["a", "b", null]), { kind: "same" });
  assert.deepEqual(checkIdentity(0, "c", ["a", "b", null]), { kind: "changed" });
  assert.deepEqual(checkIdentity(2, "b", ["a", "b", null]), { kind: "duplicate", of: 1 });
  assert.deepEqual(checkIdentity(0, "b", ["a", "b", null]), { kind: "duplicate", of: 1 });
});

test("quarantine: max(ttl, configured), stretched by the drift bound; run_id from INFO", () => {
  assert.equal(quarantineUs(1000, 30_000_000, 0), 30_000_000);
  assert.equal(quarantineUs(60_000, 30_000_000, 0), 60_000_000);
  assert.equal(quarantineUs(1000, 1_000_000, 0.01), Math.ceil(1_000_000 / 0.99));
  assert.ok(quarantineUs(1000, 1_000_000, 0.01) > 1_000_000);
  assert.equal(runIdOf("# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\ntcp_port:1\r\n"), "abc123");
  assert.equal(runIdOf("# Server\r\nrun_id:\r\n"), null);
  assert.equal(runIdOf("# Server\r\n"), null);
});

test("Q10: one wait node for every order of a node set; wait only on a held wait node", () => {
  const a = ["redis://c:1", "redis://a:1", "redis://b:1"];
  const b = [...a].reverse();
  assert.equal(a[waitNode(a)], "redis://a:1");
  assert.equal(b[waitNode(b)], "redis://a:1");
  assert.equal(waitNode([]), 0);
  const held: AcquireReply[] = ["refused", "refused", null];
  const down: NodeFail = { fail: { kind: "connection", graceUs: null }, message: "down" };
  assert.equal(waitAfterRefusal(held, 0, false, 5_000_000, 200_000, 9_000_000), 4_800_000);
  // At most the cap: a wait node that stops answering must not hold us for the BLOCK.
  assert.equal(waitAfterRefusal(held, 0, false, 5_000_000, 200_000, 333_000), 333_000);
  assert.equal(waitAfterRefusal(held, 2, false, 5_000_000, 200_000, 9_000_000), null, "the wait node silent");
  assert.equal(waitAfterRefusal([down, "refused", "refused"], 0, false, 5_000_000, 200_000, 9_000_000), null, "the wait node failed");
  assert.equal(waitAfterRefusal(held, 0, true, 5_000_000, 200_000, 9_000_000), null, "owner retired (Q4)");
  assert.equal(waitAfterRefusal([7, "refused", "refused"], 0, false, 5_000_000, 200_000, 9_000_000), null, "granted");
  assert.equal(waitAfterRefusal(held, 0, false, null, 200_000, 9_000_000), null, "no BLOCK budget");
  assert.equal(waitAfterRefusal(held, 0, false, 200_000, 200_000, 9_000_000), null, "too little BLOCK budget");
});
