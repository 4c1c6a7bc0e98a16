// Redis Cluster with three primaries: the lease key's slot migrates to another primary while
// the elector leads (the steps of redis-cli --cluster reshard). The term goes on: renewals land
// on the new owner and move the deadline, a fenced write through the application's Cluster
// client lands there, a stale token is refused, and the release at resign reaches the new
// owner. Would catch: renewals stuck on the old owner (MOVED until the deadline ends the
// term), a migration ending the term, a release sent to the old owner.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Cluster } from "ioredis";
import { Elector, FencedError, fence, type LeaderContext, type LogFields, type Logger } from "../src/index.js";
import { RedisServer, serverSkipReason, waitFor } from "./support.js";

const skip = serverSkipReason();
const warnings: string[] = [];
const keep = (msg: string, f: LogFields): void => void warnings.push(`${msg} ${JSON.stringify(f)}`);
// Warnings and errors are kept: a healthy cluster, its first connect included, logs none.
const recording: Logger = { debug: () => undefined, info: () => undefined, warn: keep, error: keep };
const TTL_MS = 2000;
const RANGES: Array<[number, number]> = [
  [0, 5460],
  [5461, 10922],
  [10923, 16383],
];

/** A cluster node; a port whose bus port (+10000) is taken or out of range fails to start, so try again. */
async function clusterNode(): Promise<RedisServer> {
  const args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"];
  for (let i = 0; ; i++) {
    try {
      return await RedisServer.start(args);
    } catch (e) {
      if (i >= 10) throw e;
    }
  }
}

/** LEASE.GET answered by the node itself (RESP2): [owner, token, pttl] or null; throws on an error reply. */
async function heldOn(s: RedisServer, key: string): Promise<{ owner: string; token: number; pttl: number } | null> {
  const r = await s.command("LEASE.GET", key);
  if (r.startsWith("-")) throw new Error(r);
  if (r.startsWith("*-1") || r.startsWith("$-1")) return null;
  const lines = r.split("\r\n");
  // *3, $n, owner, :token, :pttl
  return { owner: lines[2] ?? "", token: Number(lines[3]?.slice(1)), pttl: Number(lines[4]?.slice(1)) };
}

test("Cluster: the lease key's slot migrates mid-term; the term, its renewals, fenced writes and the release follow", { skip: skip ?? false }, async () => {
  const nodes: RedisServer[] = [];
  let elector: Elector | null = null;
  let app: Cluster | null = null;
  try {
    for (let i = 0; i < 3; i++) nodes.push(await clusterNode());
    for (let i = 0; i < 3; i++) {
      const [lo, hi] = RANGES[i]!;
      // Distinct config epochs before MEET (as redis-cli --cluster create): left at 0, the
      // gossip resolving the collision can undo a migration made meanwhile (the old owner's
      // bumped epoch takes the slot back from the importing node).
      assert.match(await nodes[i]!.command("CLUSTER", "SET-CONFIG-EPOCH", String(i + 1)), /^\+OK/);
      assert.match(await nodes[i]!.command("CLUSTER", "ADDSLOTSRANGE", String(lo), String(hi)), /^\+OK/);
    }
    for (const n of nodes.slice(1)) assert.match(await nodes[0]!.command("CLUSTER", "MEET", "127.0.0.1", String(n.port)), /^\+OK/);
    await waitFor(
      async () => {
        for (const n of nodes) {
          if (!(await n.command("CLUSTER", "INFO")).includes("cluster_state:ok")) return false;
          if (!(await n.command("CLUSTER", "SLOTS")).startsWith("*3\r\n")) return false;
        }
        return true;
      },
      20_000,
      "a 3-primary cluster with every slot known on every node",
    );
    const key = "{node-cluster}:leader";
    const data = "{node-cluster}:data";
    const slot = Number((await nodes[0]!.command("CLUSTER", "KEYSLOT", key)).slice(1));
    const si = RANGES.findIndex(([lo, hi]) => slot >= lo && slot <= hi);
    const src = nodes[si]!;
    const dst = nodes[(si + 1) % 3]!;
    const other = nodes[(si + 2) % 3]!;
    // Seeded with a node that owns the slot neither before nor after.
    const spec = { cluster: [{ host: "127.0.0.1", port: other.port }] };
    elector = new Elector({ redis: spec, key, ttlMs: TTL_MS, logger: recording });
    app = new Cluster([{ host: "127.0.0.1", port: other.port }]);
    let lease: LeaderContext | null = null;
    let starts = 0;
    let steppedDown = 0;
    elector.on("stepped-down", () => {
      steppedDown++;
    });
    const run = elector.run(async (l) => {
      starts++;
      lease = l;
      await new Promise((r) => l.signal.addEventListener("abort", r, { once: true }));
    });
    await waitFor(() => lease !== null, 10_000, "the elector to lead");
    assert.deepEqual(warnings, [], "warnings on the first connect to a healthy cluster");
    const l = lease as unknown as LeaderContext;
    assert.equal((await heldOn(src, key))?.token, l.token, "the lease lives on the slot's primary");
    assert.equal(await l.fence(app, "SET", data, "before"), "OK");

    const srcId = (await src.command("CLUSTER", "MYID")).split("\r\n")[1]!;
    const dstId = (await dst.command("CLUSTER", "MYID")).split("\r\n")[1]!;
    const s = String(slot);
    assert.match(await dst.command("CLUSTER", "SETSLOT", s, "IMPORTING", srcId), /^\+OK/);
    assert.match(await src.command("CLUSTER", "SETSLOT", s, "MIGRATING", dstId), /^\+OK/);
    assert.match(await src.command("MIGRATE", "127.0.0.1", String(dst.port), "", "0", "5000", "KEYS", key, data), /^\+OK/);
    for (const n of [dst, src, other]) assert.match(await n.command("CLUSTER", "SETSLOT", s, "NODE", dstId), /^\+OK/);
    const migrated = performance.now();
    const d0 = l.deadline;
    assert.ok(d0 !== null);
    const moved = await heldOn(dst, key);
    // A restored lease is held for the module's maximum TTL (never shorter than the holder's),
    // so a pttl back within our TTL below proves a RENEW ran on dst.
    assert.ok(moved !== null && moved.token === l.token && moved.pttl > TTL_MS, JSON.stringify(moved));
    await waitFor(
      async () => {
        const h = await heldOn(dst, key);
        const d = l.deadline;
        return h !== null && h.token === l.token && h.pttl <= TTL_MS && l.isLeader() && d !== null && d > d0 && d > migrated + 0.9 * TTL_MS;
      },
      10_000,
      "a renewal on the slot's new owner that moved the deadline",
    );
    assert.equal(starts, 1, "one term");
    assert.equal(steppedDown, 0, "the migration must not end the term");
    assert.equal(await l.fence(app, "SET", data, "after"), "OK");
    assert.equal((await dst.command("GET", data)).split("\r\n")[1], "after");
    await assert.rejects(
      () => fence(app as Cluster, key, l.token - 1, "SET", data, "stale"),
      (e: unknown) => e instanceof FencedError,
    );
    assert.equal((await dst.command("GET", data)).split("\r\n")[1], "after", "the stale write was not applied");
    await elector.resign();
    assert.deepEqual(await run, { kind: "resigned" });
    assert.equal(await heldOn(dst, key), null, "resign must RELEASE on the slot's new owner");
  } finally {
    await elector?.resign();
    app?.disconnect();
    for (const n of nodes) await n.stop();
  }
});
