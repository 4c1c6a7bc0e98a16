// The conformance elector's redis+sentinel:// parser (no server): the URLs the harness hands
// out under --topology sentinel, and the malformed ones it must refuse in one line.
import { test } from "node:test";
import assert from "node:assert/strict";
import { sentinelOptions } from "../src/conformance-sentinel.js";

test("a URL of another scheme is not a sentinel URL (used as before)", () => {
  assert.equal(sentinelOptions("redis://127.0.0.1:6379/"), null);
  assert.equal(sentinelOptions("rediss://u:p@h:1/2"), null);
  assert.equal(sentinelOptions("redis-sentinel://h:1#m"), null);
});

test("the harness's URL: every sentinel in order, the master name", () => {
  assert.deepEqual(sentinelOptions("redis+sentinel://127.0.0.1:26001,127.0.0.1:26002,[::1]:26003/leases"), {
    sentinels: [
      { host: "127.0.0.1", port: 26001 },
      { host: "127.0.0.1", port: 26002 },
      { host: "::1", port: 26003 },
    ],
    name: "leases",
  });
});

test("credentials and db go to the primary, percent-decoded", () => {
  assert.deepEqual(sentinelOptions("redis+sentinel://:p%40ss@s1:26379/m/3"), {
    sentinels: [{ host: "s1", port: 26379 }],
    name: "m",
    db: 3,
    password: "p@ss",
  });
  assert.deepEqual(sentinelOptions("redis+sentinel://lease:hunter2@s1:26379,s2:26380/m/"), {
    sentinels: [
      { host: "s1", port: 26379 },
      { host: "s2", port: 26380 },
    ],
    name: "m",
    username: "lease",
    password: "hunter2",
  });
});

test("malformed sentinel URLs throw a one-line error", () => {
  const bad: [string, RegExp][] = [
    ["redis+sentinel://s1:26379", /needs \/master-name/],
    ["redis+sentinel://s1:26379/", /needs a master name/],
    ["redis+sentinel:///m", /names no sentinel/],
    ["redis+sentinel://,/m", /names no sentinel/],
    ["redis+sentinel://u:p@/m", /names no sentinel/],
    ["redis+sentinel://s1/m", /needs host:port/],
    ["redis+sentinel://s1:x/m", /bad port/],
    ["redis+sentinel://s1:70000/m", /bad port/],
    ["redis+sentinel://:26379/m", /empty host/],
    ["redis+sentinel://s1:1/m/x", /bad db/],
    ["redis+sentinel://s1:1/m/1/2", /unexpected path/],
    ["redis+sentinel://hunter2@s1:1/m", /\[user\]:password@/],
    ["redis+sentinel://:%zz@s1:1/m", /percent-encoding/],
  ];
  for (const [url, why] of bad) {
    assert.throws(() => sentinelOptions(url), (e: unknown) => e instanceof Error && why.test(e.message) && !e.message.includes("\n"), url);
  }
});
