// Protocol Q2: a quorum round never BLOCKs, so a follower polls "with the loop's jittered pause"
// between rounds (at least backoffMin, 50 ms by default), not back to back (the Python and Java
// ports re-asked at once: about a thousand rounds a second on loopback). Counted on the server:
// LEASE.ACQUIRE calls on one node while another elector leads.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Elector, type Logger } from "../src/index.js";
import { RedisServer, serverSkipReason, sleep, waitFor } from "./support.js";

const skip = serverSkipReason();
const quiet: Logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };

async function acquireCalls(s: RedisServer): Promise<number> {
  const stats = await s.command("INFO", "commandstats");
  const m = /cmdstat_lease\.acquire:calls=(\d+)/i.exec(stats);
  return m ? Number(m[1]) : 0;
}

test("quorum mode: a follower pauses between rounds", { skip: skip ?? false }, async () => {
  const nodes = await Promise.all([RedisServer.start(), RedisServer.start(), RedisServer.start()]);
  const urls = nodes.map((s) => s.url);
  const key = "node-quorum-pace";
  const a = new Elector({ redis: urls, key, ttlMs: 2000, logger: quiet });
  const b = new Elector({ redis: urls, key, ttlMs: 2000, logger: quiet });
  try {
    let aLeads = false;
    let bLed = false;
    const ra = a.run(async (l) => {
      aLeads = true;
      await new Promise((r) => l.signal.addEventListener("abort", r, { once: true }));
    });
    await waitFor(() => aLeads, 10_000, "a to lead");
    const base = await acquireCalls(nodes[0]!);
    const rb = b.run(async (l) => {
      bLed = true;
      await new Promise((r) => l.signal.addEventListener("abort", r, { once: true }));
    });
    await waitFor(async () => (await acquireCalls(nodes[0]!)) > base, 10_000, "b's first round");
    const n0 = await acquireCalls(nodes[0]!);
    const t0 = performance.now();
    await sleep(1000); // the window in which rounds are counted (not a wait for a state)
    const n = (await acquireCalls(nodes[0]!)) - n0;
    const secs = (performance.now() - t0) / 1000;
    // One ACQUIRE per round on this node; a pause of at least 50 ms: at most 20 a second.
    assert.ok(n >= 1 && n <= 40 * secs, `the follower made ${n} rounds in ${secs.toFixed(2)} s`);
    assert.equal(bLed, false, "two leaders");
    await b.resign();
    await a.resign();
    assert.deepEqual(await rb, { kind: "resigned" });
    assert.deepEqual(await ra, { kind: "resigned" });
  } finally {
    await Promise.all([a.resign(), b.resign()]);
    for (const s of nodes) await s.stop();
  }
});
