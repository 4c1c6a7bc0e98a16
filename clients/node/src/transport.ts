/**
 * The Redis layer: the exact module commands the loop sends, their reply parsing, and the
 * connections they run on. Port of client/src/transport.rs on ioredis.
 *
 * Connections: the elector never uses the application's ioredis instance directly. It makes
 * its OWN connections from it (`duplicate()`) or from a URL / options, with the settings in
 * SAFE_REDIS_OPTIONS, because ioredis' defaults (offline queue, automatic reconnect, resend of
 * unanswered commands after a reconnect) would run a lease command at a moment the loop no
 * longer expects. Each `Link` owns one connection and throws it away after any connection
 * error, timeout or abandoned call; the next call makes a fresh one.
 */
import { Cluster, Command, Redis } from "ioredis";
import type { Pipeline } from "ioredis";
import { createRequire } from "node:module";
import type { ClusterNode, ClusterOptions, RedisOptions } from "ioredis";
import { classifyServerError, TWO_POW_53, type Failure, type WaitFor } from "./decide.js";
import type { Logger } from "./log.js";

/** An ioredis connection: plain/Sentinel (`Redis`) or `Cluster`. */
export type RedisConnection = Redis | Cluster;

/**
 * Where Redis is:
 * - a URL (`redis://host:port/db`, `rediss://...`),
 * - ioredis `RedisOptions` (plain, or Sentinel with `sentinels` + `name`),
 * - an existing `Redis` or `Cluster` instance (its options are copied with `duplicate()`;
 *   the instance itself is never used, so it is never blocked by BLOCK),
 * - `{ cluster: nodes, options }` for a Redis Cluster.
 */
export type ConnectionSpec =
  | string
  | RedisOptions
  | Redis
  | Cluster
  | { cluster: ClusterNode[]; options?: ClusterOptions };

/**
 * Options forced onto every connection the elector makes, and why:
 */
export const SAFE_REDIS_OPTIONS = {
  // We connect explicitly, inside the operation's own time limit.
  lazyConnect: true,
  // A command issued while the link is down must fail NOW (a connection error: the loop backs
  // off), not wait in the offline queue to be sent later, when its send instant (the base of
  // the deadline) is stale and the loop may already have given up on it.
  enableOfflineQueue: false,
  // No silent reconnect: when the link closes, every pending command is rejected ("Connection
  // is closed.") and the connection ends. The loop reconnects itself, with its capped,
  // fully jittered backoff (50 followers must not reconnect in the same millisecond).
  retryStrategy: (): null => null,
  // Belt and braces with the above: never keep a command waiting across reconnect attempts.
  maxRetriesPerRequest: 0,
  // ioredis' default (true) RESENDS commands that were sent but unanswered when the link broke.
  // A LEASE.ACQUIRE we abandoned (timeout, resign) would then be granted behind our back, and a
  // RENEW would run after the loop already decided on its failure.
  autoResendUnfulfilledCommands: false,
  autoResubscribe: false,
  enableAutoPipelining: false,
  // No per-command timer of ioredis: one value cannot fit both a BLOCKing ACQUIRE (block +
  // op_timeout) and a RENEW (op_timeout). Link.run() times each operation itself and, on
  // expiry, destroys the connection (a late reply must never be read by a later command).
  commandTimeout: undefined,
  // Integer replies as decimal strings, so that a token >= 2^53 is detected exactly and refused
  // as a protocol error instead of being rounded to a different (wrong) fencing token.
  stringNumbers: true,
  // Lease keys are used exactly as given (ioredis does not know the module's key positions).
  keyPrefix: undefined,
  // A reply error is the server's answer, not a reason to reconnect.
  reconnectOnError: null,
  readOnly: false,
  // No INFO "ready check" on connect: the least-privilege user (docs/security.md §3) may not
  // run INFO, and ioredis then console.warns on every connect. A server still loading answers
  // the lease commands with -LOADING, which the loop treats as an error and backs off from.
  enableReadyCheck: false,
} satisfies Partial<RedisOptions>;

/** The version of the ioredis this package runs on (a peer dependency: the application's). */
export const IOREDIS_VERSION: string = (createRequire(import.meta.url)("ioredis/package.json") as { version: string }).version;

/** The ioredis versions the install test (install-test.sh) runs the client with. */
export const SUPPORTED_IOREDIS = ">=5.3.0 <7 (tested: 5.3.0, 5.6.0, 5.8.0, 5.10.0, 5.11.1, 6.0.0)";

/**
 * Why an ioredis version cannot be used, or null. Checked when an Elector is made, so that an
 * unknown major is refused with this line instead of failing on every command later.
 */
export function ioredisProblem(version: string): string | null {
  const m = /^(\d+)\.(\d+)\./.exec(version);
  const major = Number(m?.[1] ?? NaN);
  const minor = Number(m?.[2] ?? NaN);
  // Why from 5.3: the named export `Redis` this package imports appeared in 5.3.0.
  if ((major === 5 && minor >= 3) || major === 6) return null;
  return `ioredis ${version} is not supported by redis-lease (supported: ${SUPPORTED_IOREDIS})`;
}

/** How each ConnectionSpec becomes a fresh, SAFE connection. */
export function connectionFactory(spec: ConnectionSpec, connectTimeoutMs: number): () => RedisConnection {
  const base = { ...SAFE_REDIS_OPTIONS, connectTimeout: connectTimeoutMs };
  if (typeof spec === "string") return () => new Redis(spec, base);
  // Duck-typed, not instanceof, and rebuilt with OUR classes from the instance's options (what
  // duplicate() does): the instance may come from another copy (version) of ioredis than ours
  // (a folder linked with its own node_modules), and commands built by one copy must not be
  // sent through another's connection.
  if (isInstance(spec)) {
    if (spec.isCluster) {
      const cluster = spec as Cluster;
      const nodes = (cluster as unknown as { startupNodes?: unknown }).startupNodes;
      if (!Array.isArray(nodes)) throw new TypeError("redis: a Cluster instance without startupNodes (not an ioredis Cluster?)");
      return () => new Cluster(nodes.slice(0), clusterOptions(cluster.options as ClusterOptions, base));
    }
    const redis = spec as Redis;
    return () => new Redis({ ...redis.options, ...base });
  }
  if ("cluster" in spec && Array.isArray(spec.cluster)) {
    const nodes = spec.cluster;
    const options = spec.options ?? {};
    return () => new Cluster(nodes, clusterOptions(options, base));
  }
  const options = spec as RedisOptions;
  return () => new Redis({ ...options, ...base });
}

function isInstance(spec: ConnectionSpec): spec is Redis | Cluster {
  return typeof spec === "object" && spec !== null && typeof (spec as { duplicate?: unknown }).duplicate === "function";
}

function clusterOptions(user: ClusterOptions, base: typeof SAFE_REDIS_OPTIONS & { connectTimeout: number }): ClusterOptions {
  // Node connections of a Cluster take everything but retryStrategy/offline queue from
  // redisOptions (ioredis manages those per node: no node reconnect, MOVED refreshes slots).
  const { retryStrategy: _r, enableOfflineQueue: _q, readOnly: _ro, ...nodeOpts } = base;
  return {
    ...user,
    lazyConnect: true,
    // Same reasons as SAFE_REDIS_OPTIONS: fail at once while not connected, no silent
    // reconnect of the whole cluster (the loop makes a new one, with its backoff).
    enableOfflineQueue: false,
    clusterRetryStrategy: () => null,
    // Lease writes must go to the slot's primary.
    scaleReads: "master",
    redisOptions: { ...(user.redisOptions ?? {}), ...nodeOpts },
  };
}

/** A reply of an unexpected shape (module/client version mismatch, token >= 2^53, ...). */
export class ProtocolError extends Error {
  override name = "ProtocolError";
}

/** The outcome of one bounded operation on a Link. */
export type Outcome<T> =
  | { ok: true; value: T }
  | { ok: false; failure: Failure; message: string }
  | { ok: false; aborted: true };

/** Classify anything ioredis (or our parsing) threw. */
export function classifyThrown(e: unknown): { failure: Failure; message: string; dropConnection: boolean } {
  const message = e instanceof Error ? e.message : String(e);
  if (e instanceof ProtocolError) {
    // A reply we do not understand: we cannot be sure what else is in flight on it.
    return { failure: { kind: "protocol", graceUs: null }, message, dropConnection: true };
  }
  if (e instanceof Error && e.name === "ReplyError") {
    // The server answered with an error line: classified by its first word; the connection is
    // in order (the reply was consumed in sequence). Except READONLY: we are talking to a
    // replica (failover, stale address); a new connection rediscovers the primary (Sentinel
    // asks the sentinels again, Cluster reloads its slots).
    const failure = classifyServerError(message);
    return { failure, message, dropConnection: failure.kind === "readonly" };
  }
  // Everything else (refused, reset, closed, "Stream isn't writeable", cluster refresh
  // failures, MaxRetriesPerRequestError): the link is broken or unusable.
  return { failure: { kind: "connection", graceUs: null }, message, dropConnection: true };
}

/** Sockets that already carry our permanent error listener (see Link.ensure). */
const guarded = new WeakSet<object>();

/**
 * One connection owned by the elector, replaced after any failure. Every call goes through
 * run(), which bounds it in time and honours an abort signal.
 */
export class Link {
  private conn: RedisConnection | null = null;
  private ready: Promise<void> | null = null;

  constructor(
    private readonly factory: () => RedisConnection,
    private readonly log: Logger,
    private readonly name: string,
  ) {}

  private ensure(): { conn: RedisConnection; ready: Promise<void> } {
    if (this.conn === null || this.ready === null) {
      const conn = this.factory();
      // Without a listener ioredis prints "Unhandled error event"; errors reach us through the
      // commands' rejections anyway.
      let cause: Error | null = null;
      conn.on("error", (err: Error) => {
        cause = err;
        this.log.debug("redis connection error", { link: this.name, error: err.message });
        // ioredis listens for only the FIRST error of a socket (stream.once("error")). A TLS
        // socket can emit a second one (the server's alert after a failed handshake, seen with
        // a wrong CA), which would be an uncaught exception killing the application. Keep a
        // listener on the socket for its whole life.
        const stream = (conn as { stream?: { on?: (ev: "error", fn: () => void) => unknown } }).stream;
        if (stream?.on !== undefined && !guarded.has(stream)) {
          guarded.add(stream);
          stream.on("error", () => undefined);
        }
      });
      this.conn = conn;
      this.ready = conn.connect().catch((err: unknown) => {
        this.drop(conn);
        // A failed TLS handshake (or refused socket) rejects connect() with only "Connection is
        // closed."; the reason came as an error event. Keep it in the message that is logged
        // ("redis unreachable"), or a wrong CA is indistinguishable from a server that is down.
        const c = cause as Error | null;
        if (c !== null && err instanceof Error && err.name !== "ReplyError" && !err.message.includes(c.message)) {
          throw new Error(`${err.message} (${c.message})`, { cause: c });
        }
        throw err;
      });
    }
    return { conn: this.conn, ready: this.ready };
  }

  /** Forget and destroy `conn` (if it is still ours). Pending commands reject; ignored. */
  drop(conn: RedisConnection | null = this.conn): void {
    if (conn === null) return;
    if (conn === this.conn) {
      this.conn = null;
      this.ready = null;
    }
    try {
      conn.disconnect();
    } catch {
      // already closed
    }
  }

  /**
   * Run `fn` on this link's connection, connecting first if needed, within `limitMs`.
   * Why the own timer: the server may never answer (partition, SIGSTOPped server). On timeout
   * or abort the call is abandoned and the connection destroyed: its reply is still in flight
   * and must never be read as the reply to a later command, nor hold up later commands.
   */
  run<T>(limitMs: number, signal: AbortSignal | undefined, fn: (c: RedisConnection) => Promise<T>): Promise<Outcome<T>> {
    return new Promise<Outcome<T>>((resolve) => {
      if (signal?.aborted) {
        resolve({ ok: false, aborted: true });
        return;
      }
      const { conn, ready } = this.ensure();
      let settled = false;
      const finish = (o: Outcome<T>, drop: boolean): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        if (drop) this.drop(conn);
        resolve(o);
      };
      const timer = setTimeout(() => {
        finish(
          { ok: false, failure: { kind: "timeout", graceUs: null }, message: `no reply within ${Math.round(limitMs)} ms` },
          true,
        );
      }, Math.max(1, limitMs));
      const onAbort = (): void => finish({ ok: false, aborted: true }, true);
      signal?.addEventListener("abort", onAbort, { once: true });
      ready
        .then(() => fn(conn))
        .then(
          (value) => finish({ ok: true, value }, false),
          (e: unknown) => {
            const c = classifyThrown(e);
            finish({ ok: false, failure: c.failure, message: c.message }, c.dropConnection);
          },
        );
    });
  }

  close(): void {
    this.drop();
  }
}

/**
 * Send one command routed by `routeKey`.
 * Why the explicit key: ioredis finds a command's keys only in its built-in command table;
 * module commands have none there, so a Cluster would send LEASE.* to a random node (a MOVED
 * round trip every time) and WAIT to a random node (where it would count nothing). Declaring
 * the lease key routes both to the key's slot owner, on the same node connection, which WAIT
 * needs (it counts the acks of this connection's own writes).
 */
function send(c: RedisConnection, routeKey: string, name: string, args: Array<string | number>): Promise<unknown> {
  const cmd = routed(routeKey, name, args);
  c.sendCommand(cmd);
  return cmd.promise;
}

/** A command routed by `routeKey` under Cluster (see send()), replies decoded as utf-8. */
export function routed(routeKey: string, name: string, args: Array<string | number | Buffer>): Command {
  const cmd = new Command(name, args, { replyEncoding: "utf8" });
  (cmd as unknown as { keys?: Array<string | Buffer> }).keys = [routeKey];
  return cmd;
}

function isCluster(c: RedisConnection): c is Cluster {
  return (c as { isCluster?: boolean }).isCluster === true;
}

/**
 * A lease write and then, if `needWait(reply)`, `WAIT` on THE SAME connection: WAIT counts
 * the replica acks of its own connection's writes, so on another connection it confirms
 * nothing (or, worse, answers at once with the replicas of a node that never saw the write).
 * Plain and Sentinel connections are one socket, so two sends in a row share it. Under Cluster
 * each command is routed by the slot map on its own, and the map can change between the two
 * (a MOVED, ASK, or ioredis' periodic refresh), so there the write and WAIT go as ONE pipeline
 * to one node; if the write is redirected (MOVED/ASK), the pair is sent again, as one pipeline,
 * to the node named by the redirect (after ASKING for ASK). The cost: a WAIT also follows a
 * write that did not need it (a nil ACQUIRE, a RENEW answered 0); it then returns at once
 * unless earlier writes of this connection are still unacknowledged (bounded by WAIT's timeout).
 */
async function writeThenWait(
  c: RedisConnection,
  key: string,
  name: string,
  args: Array<string | number>,
  w: WaitFor | null,
  needWait: (reply: unknown) => boolean,
): Promise<{ reply: unknown; acked: number | null }> {
  if (w === null) return { reply: await send(c, key, name, args), acked: null };
  if (!isCluster(c)) {
    const reply = await send(c, key, name, args);
    return { reply, acked: needWait(reply) ? await wait(c, key, w) : null };
  }
  const first = await pipelinePair(c.pipeline() as unknown as Pipeline, key, name, args, w, false);
  let out = first;
  if (first.redirect !== null) {
    const { kind, target } = first.redirect;
    if (kind === "MOVED") c.refreshSlotsCache();
    const node = c.nodes("all").find((n) => `${n.options.host ?? ""}:${n.options.port ?? ""}` === target);
    if (node === undefined) throw first.writeError;
    out = await pipelinePair(node.pipeline() as unknown as Pipeline, key, name, args, w, kind === "ASK");
    if (out.redirect !== null) throw out.writeError;
  }
  if (out.writeError !== null) throw out.writeError;
  const acked = needWait(out.reply) ? parseWait(out.waitReply, out.waitError) : null;
  return { reply: out.reply, acked };
}

interface PairResult {
  reply: unknown;
  writeError: Error | null;
  waitReply: unknown;
  waitError: Error | null;
  redirect: { kind: "MOVED" | "ASK"; target: string } | null;
}

async function pipelinePair(
  p: Pipeline,
  key: string,
  name: string,
  args: Array<string | number>,
  w: WaitFor,
  asking: boolean,
): Promise<PairResult> {
  if (asking) p.sendCommand(new Command("ASKING", [], { replyEncoding: "utf8" }));
  p.sendCommand(routed(key, name, args));
  // The route key on WAIT too: a pipeline on a Cluster must name one slot for all its commands.
  p.sendCommand(routed(key, "WAIT", [w.replicas, w.timeoutMs]));
  const results = (await p.exec()) ?? [];
  const off = asking ? 1 : 0;
  const [writeErr, reply] = results[off] ?? [new Error("pipeline lost the write's reply"), null];
  const [waitErr, waitReply] = results[off + 1] ?? [new Error("pipeline lost WAIT's reply"), null];
  let redirect: PairResult["redirect"] = null;
  if (writeErr !== null) {
    const m = /^(MOVED|ASK) [0-9]+ (\S+)/.exec(writeErr.message);
    if (m !== null) redirect = { kind: m[1] as "MOVED" | "ASK", target: m[2] ?? "" };
  }
  return { reply, writeError: writeErr, waitReply, waitError: waitErr, redirect };
}

function parseWait(v: unknown, err: Error | null): number {
  if (err !== null) throw err;
  const n = parseInteger(v, "WAIT");
  if (n < 0) throw new ProtocolError(`WAIT replied ${n}`);
  return n;
}

const INT = /^-?[0-9]+$/;

/** An integer reply as an exact JS number; anything else (or |n| >= 2^53) is a protocol error. */
export function parseInteger(v: unknown, what: string): number {
  if (typeof v === "string" && INT.test(v)) {
    const b = BigInt(v);
    if (b < BigInt(TWO_POW_53) && b > -BigInt(TWO_POW_53)) return Number(b);
  } else if (typeof v === "number" && Number.isSafeInteger(v)) {
    // A number that reached us rounded is never a safe integer when the true value is >= 2^53
    // (rounding does not go below 2^53), so this check cannot be fooled either.
    return v;
  }
  throw new ProtocolError(`${what} replied ${JSON.stringify(v)}, not an integer below 2^53`);
}

/** A fencing token: an integer in [1, 2^53). A token >= 2^53 is a protocol error. */
export function parseToken(v: unknown, what: string): number {
  const n = parseInteger(v, what);
  if (n < 1) throw new ProtocolError(`${what} replied token ${n}, not a positive integer`);
  return n;
}

function parseBool01(v: unknown, what: string): boolean {
  const n = parseInteger(v, what);
  if (n === 1) return true;
  if (n === 0) return false;
  throw new ProtocolError(`${what} replied ${n}, expected 0 or 1`);
}

/** LEASE.GET reply. */
export interface LeaseInfo {
  owner: string;
  token: number;
  /** Server-side time to live left, ms. */
  pttlMs: number;
}

/**
 * LEASE.GET: nil, or RESP2 [owner, token, pttl]; RESP3 a map owner/token/pttl (ioredis may
 * hand a map over as an object, a Map, or a flat [k, v, k, v] array).
 */
export function parseLeaseInfo(v: unknown): LeaseInfo | null {
  if (v === null || v === undefined) return null;
  let owner: unknown;
  let token: unknown;
  let pttl: unknown;
  if (Array.isArray(v) && v.length === 3) {
    [owner, token, pttl] = v as unknown[];
  } else if (Array.isArray(v) && v.length === 6) {
    const m = new Map<unknown, unknown>();
    for (let i = 0; i < 6; i += 2) m.set(v[i], v[i + 1]);
    [owner, token, pttl] = [m.get("owner"), m.get("token"), m.get("pttl")];
  } else if (v instanceof Map) {
    [owner, token, pttl] = [v.get("owner"), v.get("token"), v.get("pttl")];
  } else if (typeof v === "object") {
    const o = v as Record<string, unknown>;
    [owner, token, pttl] = [o["owner"], o["token"], o["pttl"]];
  } else {
    throw new ProtocolError(`LEASE.GET replied ${JSON.stringify(v)}`);
  }
  if (typeof owner !== "string") throw new ProtocolError("LEASE.GET owner is not a string");
  const ms = parseInteger(pttl, "LEASE.GET pttl");
  if (ms < 0) throw new ProtocolError(`LEASE.GET pttl ${ms}`);
  return { owner, token: parseToken(token, "LEASE.GET token"), pttlMs: ms };
}

/** ACQUIRE's value: the token (null = not granted) and, when WAIT was sent, the acks. */
export interface Granted {
  token: number | null;
  acked: number | null;
}

/** WAIT n timeout, right after the write it confirms (plain/Sentinel: the same socket). */
async function wait(c: RedisConnection, key: string, w: WaitFor): Promise<number> {
  return parseWait(await send(c, key, "WAIT", [w.replicas, w.timeoutMs]), null);
}

/** `LEASE.ACQUIRE key owner ttl [BLOCK ms]` (+ WAIT when granted and `w` is set). */
export async function acquire(
  c: RedisConnection,
  key: string,
  owner: string,
  ttlMs: number,
  blockMs: number | null,
  w: WaitFor | null,
  membership: string | null = null,
): Promise<Granted> {
  const args: Array<string | number> = [key, owner, ttlMs];
  if (blockMs !== null) args.push("BLOCK", blockMs);
  if (membership !== null) args.push("MEMBERSHIP", membership); // quorum mode (Q9)
  const r = await writeThenWait(c, key, "LEASE.ACQUIRE", args, w, (v) => v !== null);
  const token = r.reply === null ? null : parseToken(r.reply, "LEASE.ACQUIRE");
  return { token, acked: token === null ? null : r.acked };
}

/** `LEASE.RENEW key owner token ttl` (+ WAIT when renewed and `w` is set). */
export async function renew(
  c: RedisConnection,
  key: string,
  owner: string,
  token: number,
  ttlMs: number,
  w: WaitFor | null,
  membership: string | null = null,
): Promise<{ renewed: boolean; acked: number | null }> {
  const args: Array<string | number> = [key, owner, token, ttlMs];
  if (membership !== null) args.push("MEMBERSHIP", membership); // quorum mode (Q9)
  const r = await writeThenWait(c, key, "LEASE.RENEW", args, w, (v) => v === "1" || v === 1);
  const renewed = parseBool01(r.reply, "LEASE.RENEW");
  return { renewed, acked: renewed ? r.acked : null };
}

/** `LEASE.RELEASE key owner token`: true if it was held and is now free. */
export async function release(c: RedisConnection, key: string, owner: string, token: number): Promise<boolean> {
  return parseBool01(await send(c, key, "LEASE.RELEASE", [key, owner, token]), "LEASE.RELEASE");
}

/** `LEASE.GET key`. */
export async function get(c: RedisConnection, key: string): Promise<LeaseInfo | null> {
  return parseLeaseInfo(await send(c, key, "LEASE.GET", [key]));
}

/** `LEASE.FENCE key token`: remaining ms of the live lease if `token` is current; FENCED error if stale. */
export async function fence(c: RedisConnection, key: string, token: number): Promise<number> {
  return parseInteger(await send(c, key, "LEASE.FENCE", [key, token]), "LEASE.FENCE");
}
