// TLS with a private CA and the least-privilege ACL user of docs/security.md §3 (rules read
// from the doc itself), against a real redis-server (Debian's build has TLS). Certificates are
// made here with the openssl CLI as in client/tests/security.rs; the server requires client
// certificates (tls-auth-clients yes). Its plain loopback port stays open only for the test's
// readiness check and admin inspection: the electors connect to the TLS port.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { RedisOptions } from "ioredis";
import { Elector, type LeaderContext, type LogFields, type Logger } from "../src/index.js";
import { freePort, RedisServer, repoRoot, serverSkipReason, waitFor } from "./support.js";

function opensslSkip(): string | null {
  try {
    execFileSync("openssl", ["version"], { stdio: "ignore" });
    return null;
  } catch {
    if (process.env["CI"] === "true") throw new Error("CI=true but the openssl CLI is missing (scripts/setup installs it)");
    return "openssl CLI not found (run scripts/setup)";
  }
}
const skip = serverSkipReason() ?? opensslSkip();

const openssl = (dir: string, ...args: string[]): void => void execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });

function makeCA(dir: string, name: string): void {
  openssl(dir, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
    "-keyout", `${name}.key`, "-out", `${name}.crt`, "-days", "2", "-subj", `/CN=${name}`,
    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign");
}

function makeLeaf(dir: string, ca: string, name: string, usage: string): void {
  writeFileSync(join(dir, `${name}.ext`), "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n" +
    `extendedKeyUsage=${usage}\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n`);
  openssl(dir, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
    "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", `/CN=${name}`);
  openssl(dir, "x509", "-req", "-in", `${name}.csr`, "-CA", `${ca}.crt`, "-CAkey", `${ca}.key`,
    "-CAcreateserial", "-out", `${name}.crt`, "-days", "2", "-extfile", `${name}.ext`);
}

/** The `elector` recipe of docs/security.md §3, verbatim (the first one: single primary). */
function electorRules(): string[] {
  const doc = readFileSync(join(repoRoot(), "docs/security.md"), "utf8");
  const m = /^\s*ACL SETUSER elector on >\.\.\. (.*)$/m.exec(doc);
  if (!m?.[1]) throw new Error("docs/security.md has no `ACL SETUSER elector on >... ` line");
  return m[1].trim().split(/\s+/);
}

/** A logger that keeps warnings and errors, and the console.warn calls (ioredis warns there). */
function recorder(): { logger: Logger; warnings: string[]; restore: () => void } {
  const warnings: string[] = [];
  const keep = (msg: string, f: LogFields): void => void warnings.push(`${msg} ${JSON.stringify(f)}`);
  const orig = console.warn;
  console.warn = (...a: unknown[]): void => void warnings.push(`console.warn: ${a.map(String).join(" ")}`);
  return {
    logger: { debug: () => undefined, info: () => undefined, warn: keep, error: keep },
    warnings,
    restore: () => void (console.warn = orig),
  };
}

const PASSWORD = "elector-pw";
const TTL_MS = 2000; // the first RENEW opens a connection: a TLS handshake within op_timeout on a busy host

describe("TLS with a private CA, as the elector ACL user", { skip: skip ?? false }, () => {
  let server: RedisServer;
  let dir: string;
  let tlsPort: number;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "redis-lease-node-tls-"));
    makeCA(dir, "ca");
    makeCA(dir, "other-ca");
    makeLeaf(dir, "ca", "server", "serverAuth");
    makeLeaf(dir, "ca", "client", "clientAuth");
    tlsPort = await freePort();
    server = await RedisServer.start(["--tls-port", String(tlsPort), "--tls-cert-file", join(dir, "server.crt"),
      "--tls-key-file", join(dir, "server.key"), "--tls-ca-cert-file", join(dir, "ca.crt"), "--tls-auth-clients", "yes"]);
    const r = await server.command("ACL", "SETUSER", "elector", "on", `>${PASSWORD}`, ...electorRules());
    assert.equal(r, "+OK\r\n");
  });
  after(async () => {
    await server.stop();
    if (existsSync(dir)) rmSync(dir, { recursive: true, force: true });
  });

  const options = (ca: string): RedisOptions => ({
    host: "127.0.0.1", port: tlsPort, username: "elector", password: PASSWORD,
    tls: { ca: readFileSync(join(dir, ca)), cert: readFileSync(join(dir, "client.crt")), key: readFileSync(join(dir, "client.key")) },
  });

  test("leads, renews past its TTL and releases on resign, with no warning (ioredis' INFO ready check included)", async () => {
    const key = "leases:node-tls";
    const rec = recorder();
    try {
      const e = new Elector({ redis: options("ca.crt"), key, ttlMs: TTL_MS, logger: rec.logger });
      let lease: LeaderContext | null = null;
      const run = e.run((l) => {
        lease = l;
        return new Promise<void>((res) => l.signal.addEventListener("abort", () => res(), { once: true }));
      });
      try {
        await waitFor(() => lease !== null, 5000, "leading over TLS");
        const l = lease as unknown as LeaderContext;
        const first = l.deadline ?? 0;
        const led = performance.now();
        // Renewals: after more than a TTL the deadline has moved and the server still names us.
        await waitFor(() => (l.deadline ?? 0) > first && performance.now() - led > 1.25 * TTL_MS, 10_000, "a renewal");
        assert.ok(e.isLeader());
        const held = await server.command("LEASE.GET", key);
        assert.ok(held.includes(String(l.token)), `server: ${held}`);
      } finally {
        await e.resign();
        assert.equal((await run).kind, "resigned");
      }
      assert.match(await server.command("LEASE.GET", key), /^\*-1|^\$-1|^_/, "resign must RELEASE the lease");
      assert.deepEqual(rec.warnings, []);
    } finally {
      rec.restore();
    }
  });

  test("negative control: trusting another CA, the elector never leads and says why", async () => {
    const key = "leases:node-tls-wrong-ca";
    const rec = recorder();
    try {
      const e = new Elector({ redis: options("other-ca.crt"), key, ttlMs: TTL_MS, logger: rec.logger });
      let led = false;
      const run = e.run(() => void (led = true));
      try {
        await waitFor(() => rec.warnings.some((w) => /self[- ]signed certificate/i.test(w)), 5000,
          "a warning naming the certificate failure").catch((err: unknown) => {
          throw new Error(`${String(err)}; warnings: ${JSON.stringify(rec.warnings)}`);
        });
        assert.equal(led, false);
      } finally {
        await e.resign();
        await run;
      }
      assert.match(await server.command("LEASE.GET", key), /^\*-1|^\$-1|^_/);
    } finally {
      rec.restore();
    }
  });
});
