// Protocol R17 against a real redis-server: every reign asks as a new owner (base#reign), so a
// late command of an earlier reign (here: its RELEASE, sent by the test as the network would
// deliver it) cannot end the current reign.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Elector, withLeadership, type ElectedEvent, type Logger } from "../src/index.js";
import { unsafeReuseOwnerAcrossReigns } from "../src/elector.js";
import { RedisServer, serverSkipReason, waitFor } from "./support.js";

const skip = serverSkipReason();
const quiet: Logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };

describe("R17: a new reign never refreshes an earlier reign's lease", { skip: skip ?? false }, () => {
  let server: RedisServer;
  before(async () => {
    server = await RedisServer.start();
  });
  after(async () => {
    await server.stop();
  });

  test("an owner base over 239 bytes is refused before anything is sent", () => {
    const mk = (owner: string): Elector =>
      new Elector({ redis: "redis://127.0.0.1:1/", key: "k", ttlMs: 1000, owner, logger: quiet });
    assert.throws(() => mk("x".repeat(240)), /invalid configuration: owner: .*239/);
    assert.throws(() => mk("é".repeat(120)), /invalid configuration: owner: .*239/); // 240 bytes
    assert.throws(() => mk("x".repeat(300)), /invalid configuration: owner/);
    assert.equal(mk("x".repeat(239)).owner, "x".repeat(239));
  });

  test("reigns are base#1, base#2, ...: a task that returns ends reign 1, the next run() is reign 2", async () => {
    const key = `node-reign:${process.pid}:seq`;
    const e = new Elector({ redis: server.url, key, ttlMs: 1000, owner: "node-base", logger: quiet });
    const owners: string[] = [];
    e.on("elected", (ev) => owners.push(ev.owner));
    try {
      for (let i = 0; i < 2; i++) {
        const out = await e.run(async (lease) => lease.owner);
        assert.deepEqual(out, { kind: "task_finished", value: `node-base#${i + 1}` });
      }
      assert.deepEqual(owners, ["node-base#1", "node-base#2"]);
    } finally {
      await e.resign();
    }
  });

  test("a base the application gives continues its reigns across Electors and withLeadership() calls", async () => {
    const key = `node-reign:${process.pid}:given`;
    const base = `node-given-${process.pid}`;
    const owners: string[] = [];
    for (let i = 0; i < 2; i++) {
      const e = new Elector({ redis: server.url, key, ttlMs: 1000, owner: base, logger: quiet });
      const out = await e.run(async (lease) => lease.owner);
      assert.equal(out.kind, "task_finished");
      if (out.kind === "task_finished") owners.push(out.value);
      await e.close();
    }
    for (let i = 0; i < 2; i++) {
      owners.push(await withLeadership(server.url, key, 1000, (lease) => lease.owner, { owner: base, logger: quiet }));
    }
    assert.deepEqual(owners, [`${base}#1`, `${base}#2`, `${base}#3`, `${base}#4`]);
  });

  test("the conformance negative control's hook (not exported by the package) keeps reign 1's owner", async () => {
    const key = `node-reign:${process.pid}:reuse`;
    const e = new Elector({ redis: server.url, key, ttlMs: 1000, owner: "node-reuse", logger: quiet });
    unsafeReuseOwnerAcrossReigns(e);
    try {
      for (let i = 0; i < 2; i++) {
        assert.deepEqual(await e.run(async (lease) => lease.owner), { kind: "task_finished", value: "node-reuse#1" });
      }
    } finally {
      await e.resign();
    }
    const index = (await import("../src/index.js")) as Record<string, unknown>;
    assert.equal(index["unsafeReuseOwnerAcrossReigns"], undefined, "the hook must not be public API");
  });

  test("the issue-23 scenario: reign 1 stops at its deadline without a RELEASE, the lease still alive on the server; its late RELEASE lands in reign 2 and answers 0", async () => {
    const key = `node-reign:${process.pid}:late-release`;
    // drift 0.3: the local deadline (ttl*0.7 - margin = 690 ms) is well before the server's
    // expiry (1000 ms after ACQUIRE ran), so the lease is still alive when reign 1 ends: the
    // window in which a same-owner ACQUIRE is a refresh (same token) at the old behaviour.
    const e = new Elector({
      redis: server.url,
      key,
      ttlMs: 1000,
      drift: 0.3,
      renewIntervalMs: 480,
      stopBudgetMs: 200,
      owner: "node-late",
      logger: quiet,
    });
    const grants: ElectedEvent[] = [];
    e.on("elected", (ev) => grants.push(ev));
    // Reign 1's task stalls the event loop until past its local deadline (no renewal can be
    // sent), then hangs, ignoring its signal: R13, so the loop does not RELEASE and campaigns
    // again while reign 1's lease still lives on the server.
    let unhang: () => void = () => undefined;
    const hung = new Promise<void>((r) => (unhang = r));
    let reigns = 0;
    const run = e.run(async (lease) => {
      reigns += 1;
      if (reigns === 1) {
        const until = (lease.deadline ?? 0) + 10;
        while (performance.now() < until) {
          // CPU spin: nothing else runs, not even the renewal timer.
        }
        await hung;
      } else {
        await new Promise<void>((r) => lease.signal.addEventListener("abort", () => r(), { once: true }));
      }
    });
    try {
      await waitFor(() => grants.length >= 2, 5000, "a second reign");
      const [r1, r2] = grants as [ElectedEvent, ElectedEvent];
      assert.notEqual(r2.owner, r1.owner, "reign 2 must ask as a new owner");
      // Reign 2 waited for reign 1's lease to expire: a new grant, a higher token.
      assert.ok(r2.token > r1.token, `reign 2 token ${r2.token} must exceed reign 1's ${r1.token}`);
      // The late RELEASE of reign 1 (the bytes the kernel still delivers) executes now.
      const late = await server.command("LEASE.RELEASE", key, r1.owner, String(r1.token));
      assert.equal(late, ":0\r\n", "a late RELEASE of reign 1 must not end reign 2");
      const held = await server.command("LEASE.GET", key);
      assert.ok(held.includes(r2.owner), `the lease must still be reign 2's: ${JSON.stringify(held)}`);
      assert.ok(e.isLeader());
    } finally {
      unhang();
      await e.resign();
      await run;
    }
  });
});
