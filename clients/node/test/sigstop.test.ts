// A leader PROCESS SIGSTOPped past its TTL: another instance takes over meanwhile; after
// SIGCONT the old leader's first look finds its signal aborted and isLeader() false, and it
// never writes again.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { Elector, type Logger } from "../src/index.js";
import { clientDir, RedisServer, serverSkipReason, sleep, waitFor } from "./support.js";

const skip = serverSkipReason();
const quiet: Logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };
type Ev = { ev: string; t: string; token?: number; deadline?: string; reason?: string; signalAborted?: boolean };

test("SIGSTOPped leader: signal aborted before it acts again, no write after SIGCONT", { skip: skip ?? false }, async () => {
  const server = await RedisServer.start();
  const key = `node-test:sigstop:${process.pid}`;
  const ttl = 1000;
  const child = spawn(process.execPath, [join(clientDir(), "build/test/fixtures/leader-proc.js"), server.url, key, String(ttl)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const events: Ev[] = [];
  createInterface({ input: child.stdout }).on("line", (l) => events.push(JSON.parse(l) as Ev));
  const b = new Elector({ redis: server.url, key, ttlMs: ttl, logger: quiet });
  try {
    await waitFor(() => events.filter((e) => e.ev === "write").length >= 3, 10_000, "the child to lead and write");
    child.kill("SIGSTOP");
    const stoppedAt = process.hrtime.bigint();
    let bToken = 0;
    const bRun = b.run(async (lease) => {
      bToken = lease.token;
      await new Promise((r) => lease.signal.addEventListener("abort", r, { once: true }));
    });
    // The server expires the stopped leader's lease (its TTL) and the follower takes over.
    await waitFor(() => bToken > 0, 10_000, "the follower to take over while the leader is stopped");
    await sleep(200);
    const contAt = process.hrtime.bigint();
    child.kill("SIGCONT");
    await waitFor(() => events.some((e) => e.ev === "check-failed"), 5000, "the resumed leader's check");
    await sleep(300); // room for any (wrong) write after resuming

    const elected = events.find((e) => e.ev === "elected");
    assert.ok(elected && elected.token !== undefined);
    assert.ok(bToken > (elected.token ?? 0), "the new leader has a higher token");
    const writes = events.filter((e) => e.ev === "write");
    for (const w of writes) {
      assert.ok(BigInt(w.t) < BigInt(w.deadline ?? "0"), `write at ${w.t} after its deadline ${w.deadline}`);
      assert.ok(BigInt(w.t) < stoppedAt, "write after SIGSTOP");
    }
    const check = events.find((e) => e.ev === "check-failed");
    assert.equal(check?.signalAborted, true, "signal already aborted at the first look after SIGCONT");
    const aborted = events.find((e) => e.ev === "aborted");
    assert.equal(aborted?.reason, "deadline");
    assert.ok(BigInt(aborted?.t ?? "0") >= contAt);
    const lastDeadline = BigInt(writes[writes.length - 1]?.deadline ?? "0");
    console.log(
      `# SIGSTOP: stopped ${(Number(contAt - stoppedAt) / 1e6).toFixed(0)} ms (deadline was ` +
        `${(Number(lastDeadline - stoppedAt) / 1e6).toFixed(0)} ms after the stop); ${writes.length} writes, all before the stop; ` +
        `after SIGCONT: signal aborted (${aborted?.reason}), isLeader() false, 0 writes`,
    );
    await b.resign();
    await bRun;
  } finally {
    child.kill("SIGCONT");
    child.kill("SIGTERM");
    const exited = new Promise((r) => (child.exitCode !== null ? r(null) : child.once("exit", r)));
    const killer = setTimeout(() => child.kill("SIGKILL"), 5000);
    await exited;
    clearTimeout(killer);
    await b.resign();
    await server.stop();
  }
});
