// An event-loop stall (a CPU spin of other code on the loop) from before a renewal until past
// the local deadline, against a real redis-server (issue 33). Shows what each exposed object
// reports right after the stall, and that a task which honours its signal, and stops as soon
// as it gets a turn, is neither logged as an overrun nor left unreleased.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Elector, type Logger } from "../src/index.js";
import { noMetrics, type MetricsSink } from "../src/metrics.js";
import { RedisServer, serverSkipReason, waitFor } from "./support.js";

const skip = serverSkipReason();

describe("event-loop stall past the stop point", { skip: skip ?? false }, () => {
  let server: RedisServer;
  before(async () => {
    server = await RedisServer.start();
  });
  after(async () => {
    await server.stop();
  });

  test("a captured AbortSignal is stale after the stall, isLeader() is not; no false overrun, the lease is released", async () => {
    const key = `node-stall:${process.pid}`;
    const logged: Array<{ level: string; msg: string }> = [];
    const rec =
      (level: string) =>
      (msg: string): void => {
        logged.push({ level, msg });
      };
    const logger: Logger = { debug: rec("debug"), info: rec("info"), warn: rec("warn"), error: rec("error") };
    let overruns = 0;
    const metrics: MetricsSink = { ...noMetrics, taskOverrun: () => (overruns += 1) };
    const e = new Elector({ redis: server.url, key, ttlMs: 1000, logger, metrics });
    const downs: string[] = [];
    e.on("stepped-down", (ev) => downs.push(ev.reason));
    let seen: Record<string, unknown> | null = null;
    let taskStoppedAt = 0;
    let stallEndedAt = 0;
    const run = e.run(async (lease) => {
      // What task code typically hands down to its I/O: the signal object, captured once.
      const captured = lease.signal;
      const deadline = lease.deadline ?? 0;
      // Other code on the same loop stalls it from before the first renewal (ttl/3) until
      // 100 ms past the local deadline: no timer, no renewal, no abort event can run.
      setTimeout(() => {
        while (performance.now() < deadline + 100) {
          // CPU spin
        }
        stallEndedAt = performance.now();
        // Read in this order: isLeader() itself aborts the signal once it sees the clock.
        const capturedBefore = captured.aborted;
        const isLeader = lease.isLeader();
        seen = { capturedBefore, isLeader, capturedAfterIsLeader: captured.aborted, pastDeadlineMs: stallEndedAt - deadline };
      }, 50);
      // The task honours its signal: it waits on it and stops at once when it fires.
      await new Promise<void>((r) => captured.addEventListener("abort", () => r(), { once: true }));
      taskStoppedAt = performance.now();
    });
    try {
      await waitFor(() => downs.length > 0 && seen !== null, 10_000, "the step-down after the stall");
      assert.deepEqual(downs, ["deadline"]);
      const s = seen as unknown as Record<string, unknown>;
      console.log(`# stall: ${JSON.stringify(s)}; task stopped ${(taskStoppedAt - stallEndedAt).toFixed(1)} ms after the stall`);
      // A native AbortSignal cannot fire while the loop is stalled: the captured object still
      // says "go on" 100 ms past the deadline. Only isLeader() reads the clock.
      assert.equal(s["capturedBefore"], false);
      assert.equal(s["isLeader"], false);
      assert.equal(s["capturedAfterIsLeader"], true);
      // The task stopped in its first turn after the stall: it survived in time.
      await waitFor(() => taskStoppedAt > 0, 2000, "the task to stop");
      assert.ok(taskStoppedAt - stallEndedAt < 50, `task stopped ${taskStoppedAt - stallEndedAt} ms after the stall`);
      // ... so no overrun is counted or logged, and the lease is RELEASEd (not left to expire).
      await waitFor(() => logged.some((l) => l.msg === "released lease"), 2000, "the release");
      assert.equal(overruns, 0, "no overrun counted");
      assert.deepEqual(
        logged.filter((l) => l.level === "error"),
        [],
        "no error logged",
      );
    } finally {
      await e.resign();
      await run;
    }
  });
});
