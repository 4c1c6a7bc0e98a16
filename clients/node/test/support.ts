// Test support: the client folder, the module .so, and real redis-server processes (free
// loopback port, own temp dir, log attached on failure, killed at the end).
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, Socket } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** clients/node, found by walking up from this (compiled) file to our package.json. */
export function clientDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = join(dir, "package.json");
    if (existsSync(pkg)) {
      const name = (JSON.parse(readFileSync(pkg, "utf8")) as { name?: string }).name;
      if (name === "redis-lease") return dir;
    }
    const up = dirname(dir);
    if (up === dir) throw new Error("clients/node/package.json not found above " + import.meta.url);
    dir = up;
  }
}

export const repoRoot = (): string => resolve(clientDir(), "..", "..");

/** The module: $LEASE_MODULE, else target/debug, else target/release. */
export function modulePath(): string | null {
  const env = process.env["LEASE_MODULE"];
  if (env) return existsSync(env) ? env : null;
  for (const p of ["target/debug/libredis_lease.so", "target/release/libredis_lease.so"]) {
    const abs = join(repoRoot(), p);
    if (existsSync(abs)) return abs;
  }
  return null;
}

function which(bin: string): string | null {
  for (const d of (process.env["PATH"] ?? "").split(":")) {
    if (d && existsSync(join(d, bin))) return join(d, bin);
  }
  return null;
}

/**
 * Why a server test cannot run here, or null if it can. Locally a missing server/module skips;
 * with CI=true it is a failure (a CI that silently skips proves nothing).
 */
export function serverSkipReason(): string | null {
  const server = process.env["REDIS_SERVER"] ?? which("redis-server");
  const mod = modulePath();
  let why: string | null = null;
  if (!server) why = "redis-server not found on PATH";
  else if (!mod) why = "module .so not found (LEASE_MODULE, target/debug, target/release)";
  if (why && process.env["CI"] === "true") {
    throw new Error(`CI=true but ${why}`);
  }
  return why;
}

export async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.unref();
    s.on("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const addr = s.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      s.close(() => res(port));
    });
  });
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** One redis-server with the module loaded (grace 0), on its own port and temp dir. */
export class RedisServer {
  readonly port: number;
  readonly dir: string;
  private proc: ChildProcess | null = null;

  private extraArgs: string[] = [];

  private constructor(port: number, dir: string) {
    this.port = port;
    this.dir = dir;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}/`;
  }

  static async start(extraArgs: string[] = []): Promise<RedisServer> {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), "redis-lease-node-"));
    const s = new RedisServer(port, dir);
    await s.spawn(extraArgs);
    return s;
  }

  /** SIGKILL and start a new server process on the same port (a new run_id, no data). */
  async restart(): Promise<void> {
    const p = this.proc;
    if (p && p.exitCode === null && p.signalCode === null) {
      const exited = new Promise<void>((r) => p.once("exit", () => r()));
      p.kill("SIGKILL");
      await exited;
    }
    await this.spawn(this.extraArgs);
  }

  private async spawn(extraArgs: string[]): Promise<void> {
    this.extraArgs = extraArgs;
    const server = process.env["REDIS_SERVER"] ?? which("redis-server") ?? "redis-server";
    const mod = modulePath();
    if (!mod) throw new Error("module not found");
    const args = [
      "--port", String(this.port),
      "--bind", "127.0.0.1",
      "--save", "",
      "--appendonly", "no",
      "--dir", this.dir,
      "--logfile", join(this.dir, "redis.log"),
      // grace 0: the default refuses new grants for max-ttl after start.
      "--loadmodule", mod, "lease.grace-ms", "0",
      ...extraArgs,
    ];
    this.proc = spawn(server, args, { stdio: "ignore" });
    const until = Date.now() + 10_000;
    while (Date.now() < until) {
      if (await this.ping()) return;
      if (this.proc.exitCode !== null) break;
      await sleep(20);
    }
    throw new Error(`redis-server on ${this.port} did not start; log:\n${this.log()}`);
  }

  log(): string {
    try {
      return readFileSync(join(this.dir, "redis.log"), "utf8");
    } catch {
      return "(no log)";
    }
  }

  /** One raw RESP command (test-side inspection, independent of the client under test). */
  async command(...args: string[]): Promise<string> {
    return new Promise((res, rej) => {
      const sock = new Socket();
      let buf = "";
      sock.setTimeout(2000, () => {
        sock.destroy();
        rej(new Error("timeout"));
      });
      sock.on("error", rej);
      sock.on("data", (d) => {
        buf += d.toString("utf8");
        if (buf.endsWith("\r\n")) {
          sock.end();
          res(buf);
        }
      });
      sock.connect(this.port, "127.0.0.1", () => {
        let out = `*${args.length}\r\n`;
        for (const a of args) out += `$${Buffer.byteLength(a)}\r\n${a}\r\n`;
        sock.write(out);
      });
    });
  }

  async ping(): Promise<boolean> {
    try {
      return (await this.command("PING")).startsWith("+PONG");
    } catch {
      return false;
    }
  }

  /** SIGKILL, as a crash. */
  kill(): void {
    this.proc?.kill("SIGKILL");
  }

  /** Send a signal (SIGSTOP freezes the server, SIGCONT resumes it). */
  signal(sig: NodeJS.Signals): void {
    this.proc?.kill(sig);
  }

  async stop(): Promise<void> {
    const p = this.proc;
    if (p && p.exitCode === null && p.signalCode === null) {
      const exited = new Promise<void>((r) => p.once("exit", () => r()));
      p.kill("SIGKILL");
      await exited;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Poll `cond` until true or `ms` passed (bounded wait, never a fixed "long enough" sleep). */
export async function waitFor(cond: () => boolean | Promise<boolean>, ms: number, what: string): Promise<void> {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    if (await cond()) return;
    await sleep(10);
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}`);
}
