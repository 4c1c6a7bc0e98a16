// The fencing helper (LEASE.FENCE key token command...) and run({ signal }), against a real
// redis-server.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { Elector, fence, FencedError, type Logger } from "../src/index.js";
import { RedisServer, serverSkipReason, waitFor } from "./support.js";

const skip = serverSkipReason();
const quiet: Logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };

describe("fence and run({ signal })", { skip: skip ?? false }, () => {
  let server: RedisServer;
  let redis: Redis;
  before(async () => {
    server = await RedisServer.start();
    redis = new Redis(server.url, { lazyConnect: true });
    await redis.connect();
  });
  after(async () => {
    redis.disconnect();
    await server.stop();
  });

  test("a stale token is refused with FencedError and its write is not applied; the live token's write is", async () => {
    const key = `node-fence:${process.pid}:1`;
    const res = `node-fence:${process.pid}:res`;
    const a = new Elector({ redis: server.url, key, ttlMs: 1000, logger: quiet });
    const b = new Elector({ redis: server.url, key, ttlMs: 1000, logger: quiet });
    // Reign of a: a fenced write through the lease returns the inner command's reply.
    const aOut = await a.run(async (lease) => {
      assert.equal(await lease.fence(redis, "SET", res, "from-a"), "OK");
      assert.equal(await lease.fence(redis, "INCR", `${res}:n`), 1);
      return lease.token;
    });
    assert.equal(aOut.kind, "task_finished");
    const staleToken = aOut.kind === "task_finished" ? aOut.value : 0;
    let bToken = 0;
    const bRun = b.run(async (lease) => {
      bToken = lease.token;
      await new Promise((r) => lease.signal.addEventListener("abort", r, { once: true }));
    });
    try {
      await waitFor(() => bToken > 0, 5000, "b to lead");
      assert.ok(bToken > staleToken);
      // a's token is stale now: refused, typed, and the SET did not run.
      await assert.rejects(fence(redis, key, staleToken, "SET", res, "stale"), (e: unknown) => {
        assert.ok(e instanceof FencedError, `expected FencedError, got ${String(e)}`);
        assert.equal(e.token, staleToken);
        assert.equal(e.key, key);
        assert.match(e.message, /^FENCED/);
        return true;
      });
      assert.equal(await redis.get(res), "from-a");
      // The live token writes; without a command FENCE answers the remaining ms.
      assert.equal(await fence(redis, key, bToken, "SET", res, "from-b"), "OK");
      assert.equal(await redis.get(res), "from-b");
      const ms = await fence(redis, key, bToken);
      assert.ok(typeof ms === "number" && ms > 0 && ms <= 1000, `remaining ms ${String(ms)}`);
      // Tokens that could be rounded on the wire are refused before sending.
      await assert.rejects(fence(redis, key, 2 ** 53, "SET", res, "x"), RangeError);
      await assert.rejects(fence(redis, key, 0, "SET", res, "x"), RangeError);
      // Other server errors are passed through as they are.
      await assert.rejects(fence(redis, key, bToken, "NOSUCHCMD"), (e: unknown) => !(e instanceof FencedError));
    } finally {
      await b.resign();
      await bRun;
      await a.resign();
    }
  });

  test("run({ signal }): aborting resigns (task stopped, lease released); an aborted signal sends nothing", async () => {
    const key = `node-fence:${process.pid}:signal`;
    const e = new Elector({ redis: server.url, key, ttlMs: 10_000, logger: quiet });
    const ac = new AbortController();
    let stopped = false;
    const run = e.run(
      async (lease) => {
        await new Promise((r) => lease.signal.addEventListener("abort", r, { once: true }));
        stopped = true;
      },
      { signal: ac.signal },
    );
    await waitFor(() => e.isLeader(), 5000, "to lead");
    ac.abort();
    assert.deepEqual(await run, { kind: "resigned" });
    assert.ok(stopped);
    assert.equal(await server.command("LEASE.GET", key), "$-1\r\n", "released, not left to its 10 s TTL");

    const f = new Elector({ redis: server.url, key, ttlMs: 10_000, logger: quiet });
    let ran = false;
    assert.deepEqual(await f.run(() => (ran = true), { signal: AbortSignal.abort() }), { kind: "resigned" });
    assert.equal(ran, false);
    assert.equal(await server.command("LEASE.GET", key), "$-1\r\n");
  });
});
