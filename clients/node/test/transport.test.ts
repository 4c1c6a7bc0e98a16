// Reply parsing and error classification (no server needed).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type AddressInfo } from "node:net";
import { Redis, ReplyError } from "ioredis";
import { classifyThrown, Link, parseInteger, parseLeaseInfo, parseToken, ProtocolError, SAFE_REDIS_OPTIONS } from "../src/transport.js";

test("tokens below 2^53 parse exactly; 2^53 and above are protocol errors, never rounded", () => {
  assert.equal(parseToken("9007199254740991", "t"), 9007199254740991);
  assert.equal(parseToken("1796103984115000", "t"), 1796103984115000);
  for (const bad of ["9007199254740992", "9007199254740993", "18446744073709551615"]) {
    assert.throws(() => parseToken(bad, "t"), ProtocolError, bad);
  }
  // Already-rounded numbers (a connection without stringNumbers) are refused as well.
  assert.throws(() => parseToken(2 ** 53, "t"), ProtocolError);
  assert.throws(() => parseToken(2 ** 53 + 2, "t"), ProtocolError);
  assert.equal(parseToken(7, "t"), 7);
});

test("token shape: positive integer only", () => {
  for (const bad of ["0", "-3", "1.5", "abc", "", "OK", null, [], {}]) {
    assert.throws(() => parseToken(bad, "t"), ProtocolError, JSON.stringify(bad));
  }
});

test("integers: negative allowed by parseInteger, bounded by 2^53", () => {
  assert.equal(parseInteger("-1", "x"), -1);
  assert.throws(() => parseInteger("-9007199254740992", "x"), ProtocolError);
});

test("LEASE.GET: nil, RESP2 array, RESP3 map shapes", () => {
  assert.equal(parseLeaseInfo(null), null);
  const want = { owner: "w-1", token: 42, pttlMs: 900 };
  assert.deepEqual(parseLeaseInfo(["w-1", "42", "900"]), want);
  assert.deepEqual(parseLeaseInfo(["owner", "w-1", "token", "42", "pttl", "900"]), want);
  assert.deepEqual(parseLeaseInfo(new Map<string, unknown>([["owner", "w-1"], ["token", 42], ["pttl", 900]])), want);
  assert.deepEqual(parseLeaseInfo({ token: "42", owner: "w-1", pttl: "900" }), want);
  assert.throws(() => parseLeaseInfo(["w-1", "9007199254740992", "900"]), ProtocolError);
  assert.throws(() => parseLeaseInfo(["w-1", "42"]), ProtocolError);
  assert.throws(() => parseLeaseInfo("OK"), ProtocolError);
});

test("thrown errors: server replies by code, everything else is a broken connection", () => {
  const grace = classifyThrown(new ReplyError("GRACE 2345 ms left: this server started recently"));
  assert.deepEqual(grace.failure, { kind: "grace", graceUs: 2_345_000 });
  assert.equal(grace.dropConnection, false);
  const ro = classifyThrown(new ReplyError("READONLY You can't write against a read only replica."));
  assert.equal(ro.failure.kind, "readonly");
  assert.equal(ro.dropConnection, true, "a replica's connection is replaced (rediscovery)");
  assert.equal(classifyThrown(new ReplyError("LOADING Redis is loading")).dropConnection, false);
  assert.equal(classifyThrown(new ReplyError("ERR ttl exceeds lease.max-ttl (30000 ms)")).failure.kind, "rejected");
  const closed = classifyThrown(new Error("Connection is closed."));
  assert.deepEqual(closed.failure, { kind: "connection", graceUs: null });
  assert.equal(closed.dropConnection, true);
  const proto = classifyThrown(new ProtocolError("LEASE.RENEW replied 2"));
  assert.equal(proto.failure.kind, "protocol");
  assert.equal(proto.dropConnection, true);
});

test("the connection settings that keep ioredis from sending lease commands behind the loop's back", () => {
  assert.equal(SAFE_REDIS_OPTIONS.enableOfflineQueue, false);
  assert.equal(SAFE_REDIS_OPTIONS.autoResendUnfulfilledCommands, false);
  assert.equal(SAFE_REDIS_OPTIONS.retryStrategy(), null);
  assert.equal(SAFE_REDIS_OPTIONS.maxRetriesPerRequest, 0);
  assert.equal(SAFE_REDIS_OPTIONS.stringNumbers, true);
  assert.equal(SAFE_REDIS_OPTIONS.commandTimeout, undefined);
});

test("ioredis versions: 5.x and 6.x accepted, any other major refused with one clear line", async () => {
  const { ioredisProblem, IOREDIS_VERSION } = await import("../src/transport.js");
  assert.equal(ioredisProblem("5.3.0"), null);
  assert.equal(ioredisProblem("5.11.1"), null);
  assert.equal(ioredisProblem("6.0.0"), null);
  assert.equal(ioredisProblem(IOREDIS_VERSION), null);
  for (const v of ["4.28.5", "5.2.0", "7.0.0", "garbage"]) {
    assert.match(ioredisProblem(v) ?? "", new RegExp(`^ioredis ${v} is not supported by redis-lease \\(supported: >=5\\.3\\.0 <7`));
  }
});

test("a second error on a connection's socket is not an uncaught exception (ioredis listens once)", async () => {
  // A server that accepts and never answers: the link connects, its PING waits.
  const server = createServer(() => undefined);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const port = (server.address() as AddressInfo).port;
  const made: Redis[] = [];
  const quietLog = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };
  const link = new Link(() => {
    const r = new Redis({ host: "127.0.0.1", port, ...SAFE_REDIS_OPTIONS });
    made.push(r);
    return r;
  }, quietLog, "t");
  const pending = link.run(5000, undefined, (c) => (c as Redis).ping());
  try {
    const until = performance.now() + 5000;
    while (made[0]?.status !== "connect" && made[0]?.status !== "ready") {
      assert.ok(performance.now() < until, `the link did not connect: ${String(made[0]?.status)}`);
      await new Promise((r) => setTimeout(r, 10));
    }
    const stream = made[0].stream;
    // What a TLS socket does after a failed handshake: an error, then the peer's alert.
    stream.emit("error", new Error("certificate verify failed"));
    assert.doesNotThrow(() => stream.emit("error", new Error("tlsv1 alert decode error")));
  } finally {
    link.close();
    await pending;
    server.close();
  }
});
