// Redis Cluster: two primaries with the module, the lease key's slot on the node that is NOT
// the startup node: every lease command (and the hand-over) must reach the slot's primary.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Elector, type Logger } from "../src/index.js";
import { RedisServer, serverSkipReason, sleep, waitFor } from "./support.js";

const skip = serverSkipReason();
const quiet: Logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };

test("Cluster: lease commands routed to the key's slot owner; hand-over works", { skip: skip ?? false }, async () => {
  const clusterArgs = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"];
  const a = await RedisServer.start(clusterArgs);
  const b = await RedisServer.start(clusterArgs);
  const electors: Elector[] = [];
  try {
    assert.match(await a.command("CLUSTER", "ADDSLOTSRANGE", "0", "8191"), /^\+OK/);
    assert.match(await b.command("CLUSTER", "ADDSLOTSRANGE", "8192", "16383"), /^\+OK/);
    assert.match(await a.command("CLUSTER", "MEET", "127.0.0.1", String(b.port)), /^\+OK/);
    await waitFor(
      async () => (await a.command("CLUSTER", "INFO")).includes("cluster_state:ok") && (await b.command("CLUSTER", "INFO")).includes("cluster_state:ok"),
      15_000,
      "cluster_state:ok",
    );
    // A key whose slot lives on b, while the client starts from a only.
    let key = "";
    for (let i = 0; ; i++) {
      const k = `node-test:cluster:${i}`;
      const slot = Number((await a.command("CLUSTER", "KEYSLOT", k)).slice(1));
      if (slot >= 8192) {
        key = k;
        break;
      }
    }
    const spec = { cluster: [{ host: "127.0.0.1", port: a.port }] };
    const e1 = new Elector({ redis: spec, key, ttlMs: 1000, logger: quiet });
    const e2 = new Elector({ redis: spec, key, ttlMs: 1000, logger: quiet });
    electors.push(e1, e2);
    let t1 = 0;
    const r1 = e1.run(async (lease) => {
      t1 = lease.token;
      await new Promise((r) => lease.signal.addEventListener("abort", r, { once: true }));
    });
    await waitFor(() => e1.isLeader(), 10_000, "e1 to lead");
    await sleep(500); // a renewal through the cluster
    assert.ok(e1.isLeader());
    // The lease lives on b (the slot's owner).
    assert.match(await b.command("LEASE.GET", key), new RegExp(e1.owner));
    let t2 = 0;
    e2.on("elected", (ev) => {
      t2 = ev.token;
    });
    const r2 = e2.run(async (lease) => {
      await new Promise((r) => lease.signal.addEventListener("abort", r, { once: true }));
    });
    await sleep(200);
    await e1.resign();
    await waitFor(() => t2 > 0, 5000, "e2 to take over");
    assert.ok(t2 > t1);
    assert.deepEqual(await r1, { kind: "resigned" });
    // Routed by the lease key, not to a random node: every lease command executed on b; the
    // startup node a saw at most a stray first command of a fresh Cluster connection (answered
    // MOVED, i.e. not executed, and followed by ioredis). Random routing would send half there.
    const count = (stats: string, field: "calls" | "rejected_calls"): number =>
      [...stats.matchAll(new RegExp(`cmdstat_lease[^:]*:.*?\\b${field}=(\\d+)`, "gi"))].reduce((n, m) => n + Number(m[1]), 0);
    const statsA = await a.command("INFO", "commandstats");
    const statsB = await b.command("INFO", "commandstats");
    assert.ok(statsA.includes("cmdstat_cluster"), "INFO commandstats read");
    assert.equal(count(statsA, "calls"), 0);
    assert.ok(count(statsA, "rejected_calls") <= 3, statsA);
    assert.ok(count(statsB, "calls") >= 5, statsB);
    await e2.resign();
    assert.deepEqual(await r2, { kind: "resigned" });
  } finally {
    // Even after a failed assertion: no elector (and no connection) outlives the test.
    await Promise.all(electors.map((e) => e.resign()));
    await a.stop();
    await b.stop();
  }
});
