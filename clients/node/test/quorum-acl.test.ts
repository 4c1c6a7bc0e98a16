// Quorum mode as docs/security.md §3's quorum-mode elector user (the rules read from the file):
// the elector leads with one token on every node, renews and releases everywhere, and logs no
// warning (INFO for the run_id check, RAISE and RELEASE all granted). Negative control: without
// +lease.raise it never leads, and says why in a warning.
//
// Would catch: the recipe missing a command the Node quorum transport sends, the client leading
// where it may not RAISE, and a refused RAISE that leaves the elector polling in silence.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Elector, type LeaderContext, type LogFields, type Logger } from "../src/index.js";
import { RedisServer, repoRoot, serverSkipReason, waitFor } from "./support.js";

const skip = serverSkipReason();
const TTL_MS = 2000;

function quorumRecipe(): string[] {
  const doc = readFileSync(join(repoRoot(), "docs/security.md"), "utf8");
  for (const line of doc.split("\n")) {
    const m = /^\s*ACL SETUSER elector on >\.\.\. (.*)$/.exec(line);
    if (m?.[1]?.includes("+lease.raise")) return m[1].trim().split(/\s+/);
  }
  throw new Error("docs/security.md has no quorum-mode `ACL SETUSER elector on >... ... +lease.raise` line");
}

function recorder(): { logger: Logger; warnings: string[] } {
  const warnings: string[] = [];
  const keep = (msg: string, f: LogFields): void => void warnings.push(`${msg} ${JSON.stringify(f)}`);
  return { logger: { debug: () => undefined, info: () => undefined, warn: keep, error: keep }, warnings };
}

async function aclNodes(rules: string[]): Promise<{ nodes: RedisServer[]; urls: string[] }> {
  const nodes = await Promise.all([RedisServer.start(), RedisServer.start(), RedisServer.start()]);
  for (const s of nodes) assert.match(await s.command("ACL", "SETUSER", "elector", "on", ">elector-pw", ...rules), /^\+OK/);
  return { nodes, urls: nodes.map((s) => `redis://elector:elector-pw@127.0.0.1:${s.port}/`) };
}

/** LEASE.GET on one node (RESP2): token and pttl, or null. */
async function heldOn(s: RedisServer, key: string): Promise<{ token: number; pttl: number } | null> {
  const r = await s.command("LEASE.GET", key);
  if (r.startsWith("-")) throw new Error(r);
  if (r.startsWith("*-1") || r.startsWith("$-1")) return null;
  const lines = r.split("\r\n");
  return { token: Number(lines[3]?.slice(1)), pttl: Number(lines[4]?.slice(1)) };
}

test("quorum mode as the security.md quorum recipe's user: leads, renews and releases on every node, no warning", { skip: skip ?? false }, async () => {
  const { nodes, urls } = await aclNodes(quorumRecipe());
  const key = "leases:node-quorum-acl";
  const rec = recorder();
  const e = new Elector({ redis: urls, key, ttlMs: TTL_MS, logger: rec.logger });
  try {
    let lease: LeaderContext | null = null;
    const run = e.run(async (l) => {
      lease = l;
      await new Promise((r) => l.signal.addEventListener("abort", r, { once: true }));
    });
    await waitFor(() => lease !== null, 10_000, `a quorum reign as the recipe's user (warnings: ${rec.warnings.join("; ")})`);
    const token = (lease as unknown as LeaderContext).token;
    for (const s of nodes) assert.equal((await heldOn(s, key))?.token, token);
    // A node's pttl only falls between renewals: a rise is a RENEW that ran there.
    const prev: Array<number | null> = [null, null, null];
    const renewed = [false, false, false];
    await waitFor(
      async () => {
        for (const [i, s] of nodes.entries()) {
          const h = await heldOn(s, key);
          assert.equal(h?.token, token, `node ${i + 1} lost the reign`);
          const p = prev[i];
          if (p !== null && p !== undefined && h !== null && h.pttl > p + 50) renewed[i] = true;
          prev[i] = h?.pttl ?? null;
        }
        return renewed.every((x) => x);
      },
      5000,
      "a renewal on every node",
    );
    await e.resign();
    assert.deepEqual(await run, { kind: "resigned" });
    for (const s of nodes) assert.equal(await heldOn(s, key), null, "the recipe's user must release everywhere");
    assert.deepEqual(rec.warnings, []);
  } finally {
    await e.resign();
    for (const s of nodes) await s.stop();
  }
});

test("quorum mode without +lease.raise: never leads, and a warning names the refused RAISE", { skip: skip ?? false }, async () => {
  const { nodes, urls } = await aclNodes(quorumRecipe().filter((r) => r !== "+lease.raise"));
  const rec = recorder();
  const e = new Elector({ redis: urls, key: "leases:node-quorum-acl-2", ttlMs: TTL_MS, logger: rec.logger });
  try {
    let led = false;
    const run = e.run(async (l) => {
      led = true;
      await new Promise((r) => l.signal.addEventListener("abort", r, { once: true }));
    });
    await waitFor(
      () => rec.warnings.some((w) => w.includes("LEASE.RAISE") && w.includes("NOPERM")),
      5000,
      `a warning naming the refused RAISE (got: ${rec.warnings.join("; ")})`,
    );
    assert.equal(led, false, "led without +lease.raise");
    await e.resign();
    assert.deepEqual(await run, { kind: "resigned" });
  } finally {
    await e.resign();
    for (const s of nodes) await s.stop();
  }
});
