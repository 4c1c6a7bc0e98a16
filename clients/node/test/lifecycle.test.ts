// One-shot leadership, signals and process lifetime (issue 25 items 2, 5, 6), against a real
// redis-server.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { LeadershipLost, LeaseClient, withLeadership, type Logger } from "../src/index.js";
import { clientDir, RedisServer, serverSkipReason, waitFor } from "./support.js";

const skip = serverSkipReason();
const quiet: Logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };
let keyN = 0;
const newKey = (): string => `node-life:${process.pid}:${++keyN}`;

type Line = { ev: string; [k: string]: unknown };
function startProc(args: string[]): { child: ChildProcess; lines: Line[]; exited: Promise<{ code: number | null; signal: string | null }> } {
  const child = spawn(process.execPath, [join(clientDir(), "build/test/fixtures/lifecycle-proc.js"), ...args], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines: Line[] = [];
  createInterface({ input: child.stdout! }).on("line", (l) => lines.push(JSON.parse(l) as Line));
  const exited = new Promise<{ code: number | null; signal: string | null }>((r) =>
    child.once("exit", (code, signal) => r({ code, signal })),
  );
  return { child, lines, exited };
}

/** Resolves with the exit, or null if the process is still alive after `ms` (then killed). */
async function exitWithin(p: ReturnType<typeof startProc>, ms: number): Promise<{ code: number | null; signal: string | null } | null> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<null>((r) => (timer = setTimeout(() => r(null), ms)));
  const out = await Promise.race([p.exited, late]);
  clearTimeout(timer);
  if (out === null) {
    p.child.kill("SIGKILL");
    await p.exited;
  }
  return out;
}

describe("lifecycle", { skip: skip ?? false }, () => {
  let server: RedisServer;
  before(async () => {
    server = await RedisServer.start();
  });
  after(async () => {
    await server.stop();
  });

  test("withLeadership / LeaseClient.using run the routine once: a lost term rejects with LeadershipLost, never a second run", async () => {
    for (const via of ["withLeadership", "using"] as const) {
      const key = newKey();
      let calls = 0;
      const routine = async (lease: { owner: string; token: number; signal: AbortSignal }): Promise<string> => {
        calls += 1;
        if (calls === 1) {
          // The term ends behind the leader's back: the lease is freed, the next RENEW answers 0.
          assert.equal(await server.command("LEASE.RELEASE", key, lease.owner, String(lease.token)), ":1\r\n");
          await new Promise<void>((r) => lease.signal.addEventListener("abort", () => r(), { once: true }));
        }
        return `value of call ${calls}`;
      };
      const p =
        via === "withLeadership"
          ? withLeadership(server.url, key, 1000, routine, { logger: quiet })
          : new LeaseClient(server.url, { logger: quiet }).using(key, 1000, routine);
      await assert.rejects(p, (e: unknown) => {
        assert.ok(e instanceof LeadershipLost, `${via}: expected LeadershipLost, got ${String(e)}`);
        assert.equal(e.reason, "renew_rejected");
        return true;
      });
      assert.equal(calls, 1, `${via}: the routine must run exactly once`);
    }
  });

  test("withLeadership: a routine that throws after its term ended rejects with LeadershipLost, its error as cause", async () => {
    const key = newKey();
    const boom = new Error("step failed after abort");
    const p = withLeadership(
      server.url,
      key,
      1000,
      async (lease) => {
        await server.command("LEASE.RELEASE", key, lease.owner, String(lease.token));
        await new Promise<void>((r) => lease.signal.addEventListener("abort", () => r(), { once: true }));
        throw boom;
      },
      { logger: quiet },
    );
    await assert.rejects(p, (e: unknown) => e instanceof LeadershipLost && e.cause === boom);
  });

  for (const sig of ["SIGINT", "SIGTERM"] as const) {
    test(`resignOnSignals (the README's wiring): ${sig} stops the task and RELEASEs before the process ends`, async () => {
      const key = newKey();
      const p = startProc(["signals", server.url, key]);
      try {
        await waitFor(() => p.lines.some((l) => l.ev === "elected"), 10_000, "the child to lead");
        p.child.kill(sig);
        const out = await exitWithin(p, 5000);
        assert.ok(out !== null, `the child must exit after ${sig}`);
        // Ends the way the signal would have ended it (re-raised after the release).
        assert.equal(out.signal, sig);
        assert.ok(p.lines.some((l) => l.ev === "task-stopped"), "the task was told to stop");
        // Released, not left to its 10 s TTL: a follower can take over at once.
        assert.equal(await server.command("LEASE.GET", key), "$-1\r\n");
      } finally {
        p.child.kill("SIGKILL");
      }
    });
  }

  for (const mode of ["observe", "close"] as const) {
    test(`currentLeader() on an elector that never ran does not keep the process alive (${mode})`, async () => {
      const key = newKey();
      const p = startProc([mode, server.url, key]);
      const out = await exitWithin(p, 5000);
      assert.ok(out !== null, "the process must exit by itself once its work is done");
      assert.equal(out.code, 0);
      assert.deepEqual(p.lines, [{ ev: "leader", info: null }]);
    });
  }
});
