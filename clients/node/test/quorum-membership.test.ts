// Quorum mode's membership id (protocol Q9, issue 32 item 1): electors with different node
// lists during a rolling node replacement must never lead together.
//
// The reproduction (as client/tests/quorum_membership.rs): some electors use {A, B, C}, others
// already {A, B, D}. X (old list) reigns on the bare majority {A, C} because B was frozen
// during its campaign (a bare majority stays bare for the whole reign); B is free. Y (new list)
// then finds B and D free: without the membership id Y reigns on {B, D} while X still leads on
// {A, C}. With it, B is bound to the old list since the reign before and refuses Y, so Y has
// only D.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { classifyServerError } from "../src/decide.js";
import { Elector, membershipIdOf, type LeaderContext, type Logger } from "../src/index.js";
import * as q from "../src/quorumDecide.js";
import { RedisServer, serverSkipReason, sleep, waitFor } from "./support.js";

const skip = serverSkipReason();
const mismatch: q.NodeFail = {
  fail: classifyServerError("MEMBERSHIP this key is bound to membership 1111222233334444, not 5555666677778888: x"),
  message: "MEMBERSHIP ...",
};

test("a MEMBERSHIP refusal is a refusal of that node, not an error of the round", () => {
  assert.equal(mismatch.fail.kind, "membership");
  const down: q.NodeFail = { fail: { kind: "connection", graceUs: null }, message: "down" };
  // Like "held by someone else": not granted (poll again), typed so that it is reported.
  assert.deepEqual(q.afterAcquire("correct", [mismatch, "refused", 4], 0), { action: "abort", release: [[2, 4]], outcome: "membership_mismatch" });
  assert.deepEqual(q.afterAcquire("correct", [mismatch, mismatch, down], 0), { action: "abort", release: [], outcome: "membership_mismatch" });
  assert.deepEqual(q.afterAcquire("correct", ["refused", "refused", 4], 0), { action: "abort", release: [[2, 4]], outcome: "not_granted" });
  assert.deepEqual(q.afterAcquire("correct", [mismatch, 8, 4], 0), { action: "raise", target: 8, nodes: [1, 2] });
  // In a renewal round like a 0; in a raise round no confirmation.
  assert.equal(q.afterRenew("correct", [true, mismatch, mismatch]), "lost");
  assert.equal(q.afterRenew("correct", [true, true, mismatch]), "renewed");
  assert.equal(q.afterRenew("correct", [true, mismatch, null]), "unknown");
  assert.equal(q.raiseConfirmed("correct", [true, mismatch, null], 3), false);
});

test("membershipIdOf: URLs and ioredis options name the same identities", () => {
  assert.equal(
    membershipIdOf([{ host: "Node-A.Example.", port: 7000, db: 2 }, "redis://node-b.example:7000", { host: "node-c.example" }]),
    "93db45cf361ecc72",
  );
  assert.throws(() => membershipIdOf([{ sentinels: [{ host: "s", port: 26379 }], name: "m" }, "redis://a:1"]), /Sentinel node has no membership identity/);
});

/** A logger that counts the records naming a reason. */
function counting(): { logger: Logger; count: (reason: string) => number } {
  const seen: string[] = [];
  const rec = (_m: string, f: Record<string, unknown>): void => {
    if (typeof f["reason"] === "string") seen.push(f["reason"]);
  };
  return { logger: { debug: rec, info: rec, warn: rec, error: rec }, count: (r) => seen.filter((x) => x === r).length };
}

const task = (l: LeaderContext): Promise<void> => new Promise<void>((r) => l.signal.addEventListener("abort", () => r(), { once: true }));

describe("quorum mode: electors with different node lists", { skip: skip ?? false }, () => {
  let servers: RedisServer[] = [];
  before(async () => {
    servers = await Promise.all([RedisServer.start(), RedisServer.start(), RedisServer.start(), RedisServer.start()]);
  });
  after(async () => {
    for (const s of servers) s.signal("SIGCONT");
    await Promise.all(servers.map((s) => s.stop()));
  });
  let keyN = 0;

  /** The scenario; the longest time (ms) X and Y both led (0: never together). */
  async function mixedLists(withId: boolean, logger: Logger): Promise<number> {
    const [a, b, c, d] = servers as [RedisServer, RedisServer, RedisServer, RedisServer];
    const key = `node-members:${process.pid}:${++keyN}`;
    const make = (urls: string[], owner: string): Elector => {
      const e = new Elector({ redis: urls, key, ttlMs: 1000, owner, logger });
      // The negative control: the protocol before Q9 (no MEMBERSHIP argument).
      if (!withId) (e as unknown as { quorum: { membership: string | null } }).quorum.membership = null;
      return e;
    };
    const old = [a.url, b.url, c.url];
    const neu = [a.url, b.url, d.url];
    // Before the replacement: a reign of the old list on all three nodes, then a hand-over.
    const w = make(old, "w");
    const wr = w.run(task);
    await waitFor(() => w.isLeader(), 10_000, "w leads");
    await w.resign();
    await wr;
    // X campaigns with B frozen: it reigns on the bare majority {A, C}.
    b.signal("SIGSTOP");
    const x = make(old, "x");
    const xr = x.run(task);
    try {
      await waitFor(() => x.isLeader(), 10_000, "x leads");
    } finally {
      b.signal("SIGCONT");
    }
    // Y, already moved to the new list, campaigns while X leads.
    const y = make(neu, "y");
    const yr = y.run(task);
    let since: number | null = null;
    let longest = 0;
    const end = performance.now() + 3000;
    while (performance.now() < end) {
      if (x.isLeader() && y.isLeader()) {
        since ??= performance.now();
        longest = Math.max(longest, performance.now() - since);
      } else since = null;
      await sleep(2);
    }
    await Promise.all([x.resign(), y.resign()]);
    await Promise.all([xr, yr]);
    return longest;
  }

  test("they never lead together; the refusal is reported once", async () => {
    const log = counting();
    const overlap = await mixedLists(true, log.logger);
    assert.equal(overlap, 0, `X (old list) and Y (new list) led together for ${overlap.toFixed(0)} ms`);
    // Y's rounds were refused for membership every 50..100 ms for 3 s: reported once.
    assert.equal(log.count("membership_mismatch"), 1);
  });

  test("negative control: without the membership id they do lead together", async () => {
    const overlap = await mixedLists(false, counting().logger);
    assert.ok(overlap > 500, `the scenario no longer reproduces issue 32 (${overlap.toFixed(0)} ms together)`);
  });
});
