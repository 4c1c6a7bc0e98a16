// Redis Cluster with minReplicas: WAIT must run on the connection that carried the write
// (issue 33). Two primaries: a (no replica) and b (one replica, c). The lease key's slot is b's
// and is being migrated to a; the key itself has already moved, so b answers ASK and the write
// executes on a. a has no replica, so no renewal may count; routing WAIT by the (still b's)
// slot asks b instead, whose replica acknowledges this connection's earlier writes at once: a
// false confirmation, and the leader keeps leading on renewals no replica has.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Elector, type Logger, type StepDownReason } from "../src/index.js";
import { RedisServer, serverSkipReason, waitFor } from "./support.js";

const skip = serverSkipReason();
const quiet: Logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };
const bulk = (reply: string): string => reply.split("\r\n")[1] ?? "";

test("Cluster + minReplicas: a write redirected by ASK is confirmed by WAIT on the node that executed it", { skip: skip ?? false }, async () => {
  const clusterArgs = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"];
  const a = await RedisServer.start(clusterArgs);
  const b = await RedisServer.start(clusterArgs);
  const c = await RedisServer.start(clusterArgs);
  let e: Elector | null = null;
  try {
    // Distinct config epochs before MEET (as redis-cli --cluster create): left at 0, the
    // gossip resolving the collision can undo the migration below.
    for (const [n, epoch] of [[a, "1"], [b, "2"], [c, "3"]] as const) {
      assert.match(await n.command("CLUSTER", "SET-CONFIG-EPOCH", epoch), /^\+OK/);
    }
    assert.match(await a.command("CLUSTER", "ADDSLOTSRANGE", "0", "8191"), /^\+OK/);
    assert.match(await b.command("CLUSTER", "ADDSLOTSRANGE", "8192", "16383"), /^\+OK/);
    assert.match(await a.command("CLUSTER", "MEET", "127.0.0.1", String(b.port)), /^\+OK/);
    assert.match(await a.command("CLUSTER", "MEET", "127.0.0.1", String(c.port)), /^\+OK/);
    const aId = bulk(await a.command("CLUSTER", "MYID"));
    const bId = bulk(await b.command("CLUSTER", "MYID"));
    await waitFor(async () => (await c.command("CLUSTER", "NODES")).includes(bId), 15_000, "c to know b");
    assert.match(await c.command("CLUSTER", "REPLICATE", bId), /^\+OK/);
    await waitFor(
      async () =>
        (await b.command("INFO", "replication")).includes("connected_slaves:1") &&
        (await a.command("CLUSTER", "INFO")).includes("cluster_state:ok"),
      20_000,
      "c to replicate b and the cluster to be ok",
    );
    let key = "";
    let slot = 0;
    for (let i = 0; ; i++) {
      const k = `node-test:cluster-wait:${i}`;
      slot = Number((await a.command("CLUSTER", "KEYSLOT", k)).slice(1));
      if (slot >= 8192) {
        key = k;
        break;
      }
    }
    const downs: StepDownReason[] = [];
    e = new Elector({ redis: { cluster: [{ host: "127.0.0.1", port: a.port }] }, key, ttlMs: 1000, minReplicas: 1, logger: quiet });
    e.on("stepped-down", (ev) => downs.push(ev.reason));
    const run = e.run(async (lease) => {
      await new Promise((r) => lease.signal.addEventListener("abort", r, { once: true }));
    });
    // Led on b: grant acknowledged by c.
    await waitFor(() => e?.isLeader() === true, 10_000, "the elector to lead (grant acked by b's replica)");

    // Migrate the slot b -> a, key first; the slot stays b's (MIGRATING) until SETSLOT NODE.
    assert.match(await a.command("CLUSTER", "SETSLOT", String(slot), "IMPORTING", bId), /^\+OK/);
    assert.match(await b.command("CLUSTER", "SETSLOT", String(slot), "MIGRATING", aId), /^\+OK/);
    assert.match(await b.command("MIGRATE", "127.0.0.1", String(a.port), key, "0", "5000"), /^\+OK/);
    // The key has left b: b redirects every lease command with ASK (to a).
    assert.match(await b.command("LEASE.GET", key), new RegExp(`^-ASK ${slot} 127\\.0\\.0\\.1:${a.port}`));

    // From now on every renewal executes on a, which has no replica: none may count, so the
    // leader must step down at its stop point (within one TTL), not keep leading.
    await waitFor(() => downs.length > 0, 3000, "the leader to step down (renewals on a are not acknowledged)");
    assert.equal(downs[0], "deadline");
    await e.resign();
    await run;
  } finally {
    await e?.resign();
    await a.stop();
    await b.stop();
    await c.stop();
  }
});
