// Through Redis Sentinel (`redis-server --sentinel`, the same binary), with ioredis' `sentinels`
// option: the elector finds the primary through the sentinel and follows a promotion (the old
// primary answers READONLY, the connection is dropped and the primary asked for again).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { Elector, type LeaderContext, type Logger } from "../src/index.js";
import { freePort, RedisServer, serverSkipReason, sleep, waitFor } from "./support.js";

const skip = serverSkipReason();
const quiet: Logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };

describe("Sentinel: leads through the sentinel and follows a promotion", { skip: skip ?? false }, () => {
  let primary: RedisServer;
  let replica: RedisServer;
  let sentinel: ChildProcess;
  let sentinelPort: number;
  let dir: string;
  let admin: Redis;
  before(async () => {
    primary = await RedisServer.start();
    replica = await RedisServer.start(["--replicaof", "127.0.0.1", String(primary.port)]);
    await waitFor(async () => (await replica.command("INFO", "replication")).includes("master_link_status:up"), 10_000,
      "the replica to sync");
    dir = mkdtempSync(join(tmpdir(), "redis-lease-node-sentinel-"));
    sentinelPort = await freePort();
    const conf = join(dir, "sentinel.conf");
    writeFileSync(conf, `port ${sentinelPort}\nbind 127.0.0.1\ndir ${dir}\n` +
      `sentinel monitor leases 127.0.0.1 ${primary.port} 1\n` +
      "sentinel down-after-milliseconds leases 1000\nsentinel failover-timeout leases 10000\n");
    sentinel = spawn(process.env["REDIS_SERVER"] ?? "redis-server", [conf, "--sentinel"], { stdio: "ignore" });
    admin = new Redis({ host: "127.0.0.1", port: sentinelPort, lazyConnect: true, retryStrategy: () => 50, maxRetriesPerRequest: 1 });
    admin.on("error", () => undefined);
    await waitFor(async () => {
      try {
        return (await admin.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "leases")) !== null;
      } catch {
        return false;
      }
    }, 10_000, "the sentinel to start");
  });
  after(async () => {
    admin?.disconnect();
    if (sentinel && sentinel.exitCode === null) {
      const exited = new Promise<void>((r) => sentinel.once("exit", () => r()));
      sentinel.kill("SIGKILL");
      await exited;
    }
    await replica?.stop();
    await primary?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test("the elector leads on the promoted replica after SENTINEL FAILOVER", async () => {
    const key = "sentinel-job";
    const ttlMs = 2000;
    const e = new Elector({ redis: { sentinels: [{ host: "127.0.0.1", port: sentinelPort }], name: "leases" }, key, ttlMs, logger: quiet });
    let current: LeaderContext | null = null; // the latest term's lease (a promotion may start a new reign)
    const run = e.run((lease) => {
      current = lease;
      return new Promise<void>((res) => lease.signal.addEventListener("abort", () => res(), { once: true }));
    });
    try {
      await waitFor(() => e.isLeader(), 10_000, "leading through the sentinel");
      assert.ok((await primary.command("LEASE.GET", key)).includes(e.owner), "the lease is on the first primary");
      // Sentinel needs a moment to discover the replica and see it healthy (NOGOODSLAVE).
      await waitFor(async () => {
        try {
          await admin.call("SENTINEL", "FAILOVER", "leases");
          return true;
        } catch (err) {
          assert.match(String(err), /NOGOODSLAVE/);
          await sleep(200);
          return false;
        }
      }, 25_000, "SENTINEL FAILOVER to be accepted");
      await waitFor(async () => {
        const addr = (await admin.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "leases")) as string[] | null;
        return addr?.[1] === String(replica.port);
      }, 20_000, "the sentinel to name the replica as primary");
      // Until the sentinel has turned the old primary into a replica, it still takes writes
      // (Sentinel failover is asynchronous): only renewals sent after that prove the elector
      // moved to the new primary.
      await waitFor(async () => (await primary.command("INFO", "replication")).includes("role:slave"), 20_000,
        "the old primary to be demoted");
      const promoted = performance.now();
      // Leading on the NEW primary: the lease is there under our owner, and a renewal sent after
      // the demotion moved our deadline past promoted + most of a TTL.
      await waitFor(async () => {
        const held = await replica.command("LEASE.GET", key);
        const d = (current as LeaderContext | null)?.deadline ?? null;
        return held.includes(e.owner) && e.isLeader() && d !== null && d > promoted + 0.9 * ttlMs;
      }, 20_000, "leading on the promoted replica");
    } finally {
      await e.resign();
      await run;
    }
    const held = await replica.command("LEASE.GET", key);
    assert.match(held, /^\*-1|^\$-1|^_/, `resign must RELEASE on the new primary: ${JSON.stringify(held)}`);
  });
});
