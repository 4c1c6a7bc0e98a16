/**
 * The conformance elector: one elector PROCESS driven by the fault harness
 * (docs/conformance.md; the Rust version is harness/src/elector.rs).
 *
 *   node dist/conformance.js --id ID --redis URL [--redis URL ...] --resource HOST:PORT --out PATH
 *                            --ttl-ms N --key KEY --mode safe|ignore-deadline|reuse-owner
 *                            [--api run|oneshot|oneshot-twice]
 *
 * --redis given N > 1 times: quorum mode over those N nodes, with the node quarantine (Q7) set
 * to one TTL (every elector of a campaign uses that TTL: the longest lease a restarted or
 * wiped node can have lost).
 *
 * A `redis+sentinel://h:p,h:p/name` URL (`--topology sentinel`) becomes ioredis' Sentinel
 * options (conformance-sentinel.ts); any other URL goes to the client as it is.
 *
 * oneshot: the same work loop through the public one-shot API, withLeadership(), called again
 * after each reign (one reign per call) instead of run(). Each grant records its call's number
 * (`call`); a call whose routine ran twice (the issue-25 bug) shows as two grants of one call,
 * which the checker's reigns_per_call flags.
 *
 * oneshot-twice: the negative control of reigns_per_call: run(), which campaigns again after a
 * lost term, with every reign recorded as call 1 (a one-shot API that runs its routine again).
 *
 * reuse-owner: the safe work loop, but the elector keeps its first reign's owner for every
 * reign (the behaviour before protocol R17), through a hook the package does not export. The
 * negative control of the late-delivery fault: a late RELEASE of an earlier reign ends the
 * current one while it acts.
 *
 * History: JSON lines appended to --out, `t`/`deadline` in ns of CLOCK_MONOTONIC
 * (process.hrtime.bigint()). Library logs: JSON lines on stderr.
 */
import { closeSync, openSync, writeSync } from "node:fs";
import { Socket } from "node:net";
import { randomBytes } from "node:crypto";
import { Elector, LeadershipLost, unsafeReuseOwnerAcrossReigns, type ElectorOptions, type LeaderContext } from "./elector.js";
import { withLeadership } from "./using.js";
import { jsonLogger } from "./log.js";
import { sentinelOptions } from "./conformance-sentinel.js";
import type { RedisOptions } from "ioredis";

const PREP_MS = 15;
const PERIOD_MS = 25;
const LINGER_TTLS = 3;
const HARD_STOP_MS = 600_000;

type Args = Record<string, string>;

/** Every `--redis URL`, in order: one = single primary, N = quorum mode over N nodes. */
function redisArgs(argv: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i += 2) if (argv[i] === "--redis" && argv[i + 1] !== undefined) out.push(argv[i + 1] as string);
  return out;
}

function parseArgs(argv: string[]): Args {
  const known = new Set(["--id", "--redis", "--resource", "--out", "--ttl-ms", "--key", "--mode", "--api"]);
  const out: Args = {};
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i] ?? "";
    const v = argv[i + 1];
    if (!known.has(k)) throw new Error(`unknown argument ${k}`);
    if (v === undefined) throw new Error(`${k} needs a value`);
    // --redis once per node in quorum topologies (docs/conformance.md "Quorum topologies").
    if (k in out && k !== "--redis") throw new Error(`${k} given twice`);
    out[k] = v;
  }
  for (const k of ["--id", "--redis", "--resource", "--out"]) {
    if (!(k in out)) throw new Error(`${k} is required`);
  }
  return out;
}

/** ns of CLOCK_MONOTONIC (libuv's hrtime is CLOCK_MONOTONIC on Linux). */
const monoNs = (): bigint => process.hrtime.bigint();

/** A deadline on the performance.now() line (ms) as CLOCK_MONOTONIC ns; 0 when none. */
function deadlineNs(deadlineMs: number | null): bigint {
  if (deadlineMs === null) return 0n;
  const ns = monoNs();
  const p = performance.now();
  return ns + BigInt(Math.round((deadlineMs - p) * 1e6));
}

/** The reign's local deadline (ms, performance.now() base) even after the reign ended: the
 * implementation keeps it (`deadlineMicros`) though the public `deadline` turns null. */
function reignDeadlineMs(lease: LeaderContext): number | null {
  const us = (lease as unknown as { deadlineMicros?: unknown }).deadlineMicros;
  return typeof us === "number" ? us / 1000 : lease.deadline;
}

/** One JSON object per line, written synchronously (a kill loses at most the line in progress). */
class History {
  private readonly fd: number;
  constructor(path: string) {
    this.fd = openSync(path, "a");
  }
  write(ev: Record<string, string | number | boolean | bigint>): void {
    // bigint as bare digits: `t` may exceed 2^53 ns on a machine up for > 104 days.
    const line = JSON.stringify(ev, (_k, v: unknown) => (typeof v === "bigint" ? `\u0000${v.toString()}` : v)).replace(
      /"\\u0000(\d+)"/g,
      "$1",
    );
    writeSync(this.fd, line + "\n");
  }
  close(): void {
    closeSync(this.fd);
  }
}

/** The fencing resource: `W <token> <writer> <seq>` -> `OK` | `FENCED n` | `ERR why`. */
class ResourceClient {
  private sock: Socket | null = null;
  private buf = "";
  private waiting: ((line: string | null) => void) | null = null;

  constructor(private readonly addr: string) {}

  private connect(): Promise<Socket> {
    const i = this.addr.lastIndexOf(":");
    const host = this.addr.slice(0, i);
    const port = Number(this.addr.slice(i + 1));
    return new Promise((resolve, reject) => {
      const s = new Socket();
      s.setNoDelay(true);
      s.once("error", reject);
      s.connect(port, host, () => {
        s.off("error", reject);
        s.on("error", () => this.fail(s));
        s.on("close", () => this.fail(s));
        s.on("data", (d: Buffer) => {
          this.buf += d.toString("utf8");
          const nl = this.buf.indexOf("\n");
          if (nl >= 0) {
            const line = this.buf.slice(0, nl);
            this.buf = this.buf.slice(nl + 1);
            const w = this.waiting;
            this.waiting = null;
            w?.(line);
          }
        });
        resolve(s);
      });
    });
  }

  private fail(s: Socket): void {
    if (this.sock === s) this.sock = null;
    s.destroy();
    const w = this.waiting;
    this.waiting = null;
    w?.(null);
  }

  /** True if the resource accepted the write; false for FENCED, ERR or a broken connection. */
  async write(token: number, writer: string, seq: number): Promise<boolean> {
    try {
      if (this.sock === null) {
        this.buf = "";
        this.sock = await this.connect();
      }
      const s = this.sock;
      const line = await new Promise<string | null>((resolve) => {
        const timer = setTimeout(() => {
          this.waiting = null;
          resolve(null);
        }, 5000);
        this.waiting = (l) => {
          clearTimeout(timer);
          resolve(l);
        };
        s.write(`W ${token} ${writer} ${seq}\n`);
      });
      if (line === null) {
        this.fail(s);
        return false;
      }
      return line.trim() === "OK";
    } catch {
      if (this.sock) this.fail(this.sock);
      return false;
    }
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Sleep `ms`, or less if `signal` aborts first. */
function sleepOrAbort(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2));
  const id = a["--id"] as string;
  const ttlMs = Number(a["--ttl-ms"] ?? "1000");
  const key = a["--key"] ?? "chaos:leader";
  const mode = a["--mode"] ?? "safe";
  if (mode !== "safe" && mode !== "ignore-deadline" && mode !== "reuse-owner") throw new Error(`unknown --mode ${mode}`);
  const unsafeLinger = mode === "ignore-deadline";
  const api = a["--api"] ?? "run";
  if (api !== "run" && api !== "oneshot" && api !== "oneshot-twice") throw new Error(`unknown --api ${api}`);
  // The hook needs the Elector object, which withLeadership() makes itself.
  if (api === "oneshot" && mode === "reuse-owner") throw new Error("--mode reuse-owner needs --api run");
  // Before the history opens: a malformed sentinel URL is a usage error (exit 2, one line).
  const nodes: (string | RedisOptions)[] = redisArgs(process.argv.slice(2)).map((u) => sentinelOptions(u) ?? u);
  const rec = new History(a["--out"] as string);
  // The owner starts with our id, so the orchestrator can map LEASE.GET's owner to us.
  const owner = `${id}-${process.pid}-${randomBytes(4).toString("hex")}`;
  rec.write({ ev: "start", t: monoNs(), elector: id, pid: process.pid, owner, mode });

  const options: ElectorOptions = {
    redis: nodes.length === 1 ? (nodes[0] as string | RedisOptions) : nodes,
    ...(nodes.length > 1 ? { nodeQuarantineMs: ttlMs } : {}),
    // Quorum campaigns: the id of the real node list (our URLs name our own proxies;
    // docs/conformance.md).
    ...(nodes.length > 1 && process.env["LEASE_HARNESS_MEMBERSHIP_ID"]
      ? { membershipId: process.env["LEASE_HARNESS_MEMBERSHIP_ID"] }
      : {}),
    key,
    ttlMs,
    owner,
    // Reconnect backoff capped at one TTL (library default 5 s): the harness measures
    // "Redis back -> next grant", which the cap bounds.
    backoffMinMs: 50,
    backoffMaxMs: ttlMs,
    logger: jsonLogger((l) => process.stderr.write(l), process.env["LEASE_LOG"] === "debug" ? "debug" : "info"),
  };
  const elector = new Elector(options);
  const stop = new AbortController();
  if (mode === "reuse-owner") unsafeReuseOwnerAcrossReigns(elector);
  const resource = a["--resource"] as string;

  let exiting = false;
  process.on("SIGTERM", () => {
    if (exiting) return;
    exiting = true;
    rec.write({ ev: "resign", t: monoNs() });
    if (api === "oneshot") stop.abort();
    else void elector.resign();
  });

  const write = async (res: ResourceClient, token: number, seq: number): Promise<void> => {
    const ok = await res.write(token, id, seq);
    rec.write({ ev: "ack", t: monoNs(), token, seq, ok });
  };

  /** The bug under test (ignore-deadline): work detached from the lease's lifetime. */
  const unsafeLoop = async (lease: LeaderContext): Promise<void> => {
    const res = new ResourceClient(resource);
    const hardStop = performance.now() + HARD_STOP_MS;
    let stopAfter: number | null = null;
    let seq = 0;
    while (performance.now() < hardStop) {
      if (lease.signal.aborted && stopAfter === null) stopAfter = performance.now() + LINGER_TTLS * ttlMs;
      if (stopAfter !== null && performance.now() >= stopAfter) break;
      seq += 1;
      rec.write({ ev: "check", t: monoNs(), token: lease.token, seq, deadline: deadlineNs(lease.deadline) });
      await sleep(PREP_MS);
      await write(res, lease.token, seq);
      await sleep(PERIOD_MS);
    }
    rec.write({ ev: "stop", t: monoNs(), token: lease.token, why: "unsafe linger over" });
  };

  /** One reign's work; `call`: the one-shot call it runs in (none for run()). */
  const reign = async (lease: LeaderContext, call?: number): Promise<void> => {
    const token = lease.token;
    // The reign's deadline even when the task starts after it passed (a pause between the
    // client's decision and this record): the checker needs when its right to act ended.
    rec.write({ ev: "grant", t: monoNs(), token, deadline: deadlineNs(reignDeadlineMs(lease)), ...(call === undefined ? {} : { call }) });
    if (unsafeLinger) {
      void unsafeLoop(lease);
      await new Promise<void>((r) => lease.signal.addEventListener("abort", () => r(), { once: true }));
      return;
    }
    const res = new ResourceClient(resource);
    let seq = 0;
    let why: string;
    for (;;) {
      // The check: decided here, on the monotonic clock, right before acting.
      if (!lease.isLeader()) {
        why = "not leader at check";
        break;
      }
      seq += 1;
      rec.write({ ev: "check", t: monoNs(), token, seq, deadline: deadlineNs(lease.deadline) });
      // Prepare: the window where a pause turns a write stale (only fencing saves it).
      await sleep(PREP_MS);
      await write(res, token, seq);
      await sleepOrAbort(PERIOD_MS, lease.signal);
      if (lease.signal.aborted) {
        why = "cancelled";
        break;
      }
    }
    rec.write({ ev: "stop", t: monoNs(), token, why });
  };

  /** One withLeadership() call per reign until resigned, each grant stamped with its call. */
  const oneShots = async (): Promise<void> => {
    const { redis: _r, key: _k, ttlMs: _t, ...settings } = options;
    let call = 0;
    while (!stop.signal.aborted) {
      call += 1;
      const thisCall = call;
      try {
        // Every run of the routine records its grant: a second run in one call is the
        // checker's to judge (reigns_per_call), from the history alone.
        await withLeadership(options.redis, key, ttlMs, (lease) => reign(lease, thisCall), { ...settings, signal: stop.signal });
      } catch (e) {
        // A lost term ends the call with LeadershipLost; a resign with the signal's reason.
        if (!stop.signal.aborted && !(e instanceof LeadershipLost)) throw e;
      }
    }
  };

  let why: string;
  try {
    if (api === "oneshot") {
      await oneShots();
      why = "resigned";
    } else {
      // run() returns when the task finishes; ours only returns when leadership ends, so
      // campaign again until resigned. oneshot-twice: every reign of this loop as call 1.
      const task = api === "oneshot-twice" ? (lease: LeaderContext) => reign(lease, 1) : (lease: LeaderContext) => reign(lease);
      for (;;) {
        const outcome = await elector.run(task);
        if (outcome.kind === "resigned") {
          why = "resigned";
          break;
        }
      }
    }
  } catch (e) {
    why = `error: ${e instanceof Error ? e.message : String(e)}`;
  }
  rec.write({ ev: "exit", t: monoNs(), why });
  rec.close();
  // Detached unsafe writers must not outlive the process's intent.
  process.exit(0);
}

main().catch((e: unknown) => {
  process.stderr.write(`conformance elector: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(2);
});
