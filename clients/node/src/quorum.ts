/**
 * Quorum mode's transport (protocol §9a; the Rust reference is client/src/quorum.rs, ported as
 * clients/go/quorum.go and clients/python/redis_lease/_quorum.py).
 *
 * The election loop (elector.ts) stays what it is: the deadline counts from the instant taken
 * before the first send of a round, the stop point, the late grant, the release after the task
 * stopped, the per-reign owner. What changes is what one "reply" means: a round over N
 * independent primaries, one command to every node in parallel, each awaited at most
 * opTimeout/2 (two steps, ACQUIRE and RAISE, must fit in the loop's limit of one non-blocking
 * ACQUIRE). The decisions are quorumDecide.ts. A follower whose round was refused waits with
 * BLOCK on one node and runs a fresh round when woken (Q10, acquire).
 *
 * Node identity (Q6, Q7): every new connection to a node first reads INFO server's run_id; a
 * node that answers with another node's server counts toward nothing, a node whose server
 * changed is quarantined.
 */
import { lookup } from "node:dns/promises";
import { realpathSync } from "node:fs";
import { Command } from "ioredis";
import { wireMs, type DecisionConfig, type Failure } from "./decide.js";
import type { Logger } from "./log.js";
import * as q from "./quorumDecide.js";
import * as t from "./transport.js";
import { connectionFactory, Link, type ConnectionSpec, type LeaseInfo, type Outcome, type RedisConnection } from "./transport.js";

const nowUs = (): number => performance.now() * 1000;

/** Default of ElectorOptions.nodeQuarantineMs: the module's default lease.max-ttl. */
export const DEFAULT_NODE_QUARANTINE_MS = 30_000;

/** A round was abandoned (resign, stop point). */
export const ABORTED = Symbol("aborted");
export type Aborted = typeof ABORTED;

type Cmd<T> = ((c: RedisConnection) => Promise<T>) | null;

/** A failure of one node as the loop sees it (a single node's failed Outcome). */
export interface RoundFailure {
  failure: Failure;
  message: string;
}

function toReply<T>(o: Outcome<T> | null): q.NodeReply<T> {
  if (o === null) return null;
  if (o.ok) return o.value;
  if ("aborted" in o) return null;
  // A timeout is "no reply": the node may or may not have run the command.
  if (o.failure.kind === "timeout") return null;
  return { fail: o.failure, message: o.message };
}

/** LEASE.RAISE key owner token target: 1 = our lease now carries `target`, 0 = not held. */
async function raiseLease(c: RedisConnection, key: string, owner: string, token: number, target: number, membership: string | null): Promise<boolean> {
  const args: Array<string | number> = [key, owner, token, target];
  if (membership !== null) args.push("MEMBERSHIP", membership); // Q9
  const cmd = t.routed(key, "LEASE.RAISE", args);
  c.sendCommand(cmd);
  const n = t.parseInteger(await cmd.promise, "LEASE.RAISE");
  if (n === 1) return true;
  if (n === 0) return false;
  throw new t.ProtocolError(`LEASE.RAISE replied ${n}, expected 0 or 1`);
}

// ---- start-time duplicate check (Q6) ----

function specAddress(spec: ConnectionSpec): { host: string; port: number } | { path: string } | null {
  let host: string | undefined;
  let port: number | undefined;
  let path: string | undefined;
  if (typeof spec === "string") {
    const u = new URL(spec);
    if (u.protocol === "unix:") path = u.pathname;
    else if (u.protocol === "redis:" || u.protocol === "rediss:") {
      host = u.hostname.replace(/^\[(.*)\]$/, "$1") || "localhost";
      port = u.port === "" ? 6379 : Number(u.port);
    } else throw new RangeError(`quorum: unsupported node URL ${JSON.stringify(spec)} (redis://, rediss://, unix://)`);
  } else {
    if ("cluster" in spec || (spec as { isCluster?: boolean }).isCluster === true) {
      throw new RangeError("quorum: a node must be one primary, not a Redis Cluster");
    }
    const o = ((spec as { options?: unknown }).options ?? spec) as { host?: string; port?: number; path?: string; sentinels?: unknown };
    if (o.sentinels !== undefined) return null; // compared by run_id on connect only
    path = o.path;
    host = o.host ?? "localhost";
    port = o.port ?? 6379;
  }
  if (path !== undefined) return { path };
  return { host: host ?? "localhost", port: port ?? 6379 };
}

/**
 * Every address node `spec` names: each socket address its host resolves to (so `localhost`
 * and `127.0.0.1` meet), or the canonical path of a unix socket. The db number is left out on
 * purpose: db 0 and db 1 are one server. A name that does not resolve is compared as written
 * (the run_id check on connect still catches a duplicate).
 */
export async function serverAddresses(spec: ConnectionSpec): Promise<string[]> {
  const a = specAddress(spec);
  if (a === null) return [];
  if ("path" in a) {
    try {
      return [realpathSync(a.path)];
    } catch {
      return [a.path];
    }
  }
  try {
    const all = await lookup(a.host, { all: true });
    return [...new Set(all.map((x) => `${x.address}:${a.port}`))].sort();
  } catch {
    return [`${a.host}:${a.port}`];
  }
}

/**
 * The URL a node is known by for Q10's wait node (the smallest one): a URL as given, or for
 * options / a client `redis://host:port/db` (`rediss` with TLS, `unix://path`). Every elector
 * of one membership must pick the same node, in any list order (only liveness depends on it).
 */
export function nodeUrl(spec: ConnectionSpec): string {
  if (typeof spec === "string") return spec;
  const o = ((spec as { options?: unknown }).options ?? spec) as { host?: string; port?: number; path?: string; db?: number; tls?: unknown };
  if (o.path !== undefined) return `unix://${o.path}`;
  return `${o.tls === undefined ? "redis" : "rediss"}://${o.host ?? "localhost"}:${o.port ?? 6379}/${o.db ?? 0}`;
}

// ---- the membership id (Q9) ----

/** A node's identity in the membership id (quorumDecide.tcpIdentity, Q9): from a URL or ioredis options. */
export function nodeIdentity(spec: ConnectionSpec): string {
  const a = specAddress(spec);
  if (a === null) throw new RangeError("quorum: a Sentinel node has no membership identity (Q9): give each node's host and port or URL");
  return "path" in a ? q.unixIdentity(a.path) : q.tcpIdentity(a.host, a.port);
}

/**
 * The membership id of a node list as the wire spells it (16 hex digits, Q9): every quorum
 * elector sends it with each ACQUIRE, RENEW and RAISE, and it is what an operator passes to
 * `LEASE.MEMBERSHIP key old new` when the node set changes (docs/quorum.md §4.1). The order of
 * the list does not matter; the spelling of each address does (localhost and 127.0.0.1 differ).
 */
export function membershipIdOf(nodes: ReadonlyArray<ConnectionSpec>): string {
  return q.membershipId(nodes.map(nodeIdentity));
}

/** Q6: why the node list names one server twice under any spelling, or null. */
export async function duplicateProblem(nodes: ConnectionSpec[]): Promise<string | null> {
  const addrs = await Promise.all(nodes.map(serverAddresses));
  for (let i = 0; i < nodes.length; i++) {
    for (let j = i + 1; j < nodes.length; j++) {
      const common = (addrs[i] ?? []).filter((x) => (addrs[j] ?? []).includes(x));
      if (common.length > 0) {
        return `quorum: nodes ${i + 1} and ${j + 1} are the same server (${common[0] ?? ""}): one server would count twice toward a majority`;
      }
    }
  }
  return null;
}

/** The quorum transport of one elector. */
export class Quorum {
  readonly n: number;
  readonly control: q.QuorumControl;
  private readonly stepUs: number;
  private readonly quarantineUs: number;
  private readonly links: Link[];
  private readonly observeLinks: Link[];
  /** The run_id last seen at each node, and each node's quarantine end (monotonic µs). */
  private readonly known: Array<string | null>;
  private readonly quarantinedUntil: number[];
  /** Connections whose identity was checked (each new connection is checked once). */
  private readonly checked = new WeakSet<object>();
  /**
   * The token each node holds for us in the current reign (all the reign's token, except under
   * the "no-unify" control).
   */
  private held: Array<number | null>;
  /** A campaign round released partial grants under its owner (see takeRetiredOwner). */
  private retired = false;
  /** The node followers wait on with BLOCK (Q10, quorumDecide.waitNode). */
  readonly waitNode: number;
  private readonly opTimeoutUs: number;
  /** The longest wait on the wait node (Q10). */
  private readonly renewIntervalUs: number;
  private readonly connectMs: number;
  /**
   * The instant (µs) before the sends of the round the last acquire's result rests on, when
   * that round ran after a wait (see takeRoundStart).
   */
  private roundStart: number | null = null;
  /**
   * `MEMBERSHIP <id>` of the node list, sent with every ACQUIRE, RENEW and RAISE (Q9). Why
   * (issue 32): electors with different node lists (a node replacement half done) can find
   * disjoint majorities; binding each key to one list's id keeps them apart. Null only in the
   * negative control of the tests.
   */
  membership: string | null;
  /** The last round's refusal for membership was reported (logged once per change). */
  private membershipReported = false;

  constructor(
    readonly nodes: ConnectionSpec[],
    cfg: DecisionConfig,
    nodeQuarantineMs: number,
    private readonly log: Logger,
    control: q.QuorumControl = "correct",
  ) {
    if (nodes.length < 2) throw new RangeError("quorum: needs at least 2 nodes (3 or 5 to tolerate 1 or 2 faulty)");
    if (cfg.minReplicas > 0) {
      // Each node is its own primary; replicas of a node add nothing to the majority argument.
      throw new RangeError("quorum: minReplicas is not supported (the majority is the replication)");
    }
    if (!(nodeQuarantineMs >= 0) || !Number.isFinite(nodeQuarantineMs)) throw new RangeError("quorum: nodeQuarantineMs must be >= 0");
    for (const s of nodes) specAddress(s); // refuses unsupported specs now
    this.membership = membershipIdOf(nodes);
    this.n = nodes.length;
    this.control = control;
    this.stepUs = Math.max(Math.floor(cfg.opTimeoutUs / 2), 1000);
    this.quarantineUs = q.quarantineUs(cfg.ttlMs, nodeQuarantineMs * 1000, cfg.drift);
    const connectMs = Math.max(100, this.stepUs / 1000);
    this.connectMs = connectMs;
    this.opTimeoutUs = cfg.opTimeoutUs;
    this.renewIntervalUs = cfg.renewIntervalUs;
    this.waitNode = q.waitNode(nodes.map(nodeUrl));
    this.links = nodes.map((s, i) => new Link(connectionFactory(s, connectMs), log, `node${i + 1}`));
    this.observeLinks = nodes.map((s, i) => new Link(connectionFactory(s, connectMs), log, `observe${i + 1}`));
    this.known = nodes.map(() => null);
    this.quarantinedUntil = nodes.map(() => 0);
    this.held = nodes.map(() => null);
  }

  close(): void {
    this.closeCommands();
    this.closeObserve();
  }

  /** The campaign/renewal connections (closed when run() ends). */
  closeCommands(): void {
    for (const l of this.links) l.close();
  }

  /** The observe connections (currentLeader(), `leader` events). */
  closeObserve(): void {
    for (const l of this.observeLinks) l.close();
  }

  /**
   * Q6/Q7 on a connection's first use: null if node `i` may be used, else why not (the
   * connection is then dropped by throwing).
   */
  private onConnect(i: number, info: string): string | null {
    const seen = q.runIdOf(info);
    if (seen === null) return `quorum: node ${i + 1}: INFO server has no run_id`;
    const c = q.checkIdentity(i, seen, this.known);
    if (c.kind === "duplicate") {
      return `quorum: node ${i + 1} is the same server as node ${c.of + 1} (same run_id); it counts toward nothing`;
    }
    this.known[i] = seen;
    if (c.kind === "changed") {
      this.quarantinedUntil[i] = nowUs() + this.quarantineUs;
      return `quorum: node ${i + 1}: another server answers there now (run_id changed); quarantined for ${Math.round(this.quarantineUs / 1000)} ms`;
    }
    return null;
  }

  private checkedCmd<T>(i: number, fn: (c: RedisConnection) => Promise<T>): (c: RedisConnection) => Promise<T> {
    return async (c) => {
      if (!this.checked.has(c)) {
        const cmd = new Command("INFO", ["server"], { replyEncoding: "utf8" });
        c.sendCommand(cmd);
        const info = await cmd.promise;
        const why = this.onConnect(i, typeof info === "string" ? info : String(info));
        // A plain Error: classified as a connection failure, so the link drops it.
        if (why !== null) throw new Error(why);
        this.checked.add(c);
      }
      return fn(c);
    };
  }

  /**
   * One round: `cmds[i]` on node i (null: not that node), in parallel, each bounded by
   * `untilUs`; returns once all answered, or `done(replies so far)` is true, or at `untilUs`.
   * Commands still in flight then complete in the background (bounded by the same limit);
   * their replies no longer matter.
   */
  private round<T>(
    links: Link[],
    cmds: Array<Cmd<T>>,
    untilUs: number,
    signal: AbortSignal | undefined,
    done: (r: Array<q.NodeReply<T>>) => boolean = () => false,
    order: number[] = cmds.map((_, i) => i),
  ): Promise<Array<q.NodeReply<T>> | Aborted> {
    return new Promise((resolve) => {
      const out: Array<q.NodeReply<T>> = cmds.map(() => null);
      let pending = 0;
      let finished = false;
      const finish = (): void => {
        if (finished) return;
        finished = true;
        resolve(signal?.aborted === true ? ABORTED : out);
      };
      // Sent in `order` (only liveness depends on it: Q10's wait node last on release).
      order.forEach((i) => {
        const fn = cmds[i] ?? null;
        if (fn === null) return;
        const until = this.quarantinedUntil[i] ?? 0;
        if (nowUs() < until) {
          // A quarantined node's reply must not count, and a grant it made would only block
          // others for a TTL: nothing is sent.
          out[i] = { fail: { kind: "connection", graceUs: null }, message: `quorum: node ${i + 1}: quarantined (its server identity changed)` };
          return;
        }
        pending += 1;
        const link = links[i] as Link;
        void link.run(Math.max(1, (untilUs - nowUs()) / 1000), signal, this.checkedCmd(i, fn)).then((o) => {
          out[i] = toReply(o);
          if (!o.ok && !("aborted" in o) && o.failure.kind !== "timeout") {
            this.log.debug("quorum node failed", { node: i + 1, kind: o.failure.kind, error: o.message });
          }
          pending -= 1;
          if (pending === 0 || signal?.aborted === true || done(out)) finish();
        });
      });
      if (pending === 0 || done(out)) finish();
    });
  }

  /**
   * Logs a round lost to membership refusals once, until a round ends otherwise: only an
   * operator can fix it, and the loop polls every 50..100 ms.
   */
  private reportMembership(refused: boolean): void {
    if (refused && !this.membershipReported) {
      this.log.error(
        "quorum: nodes refuse this elector's node list (their lease key is bound to another membership); electors use different node lists? see docs/quorum.md 4.1",
        { membership: this.membership, reason: "membership_mismatch" },
      );
    }
    this.membershipReported = refused;
  }

  private until(loopUntilUs: number): number {
    return Math.min(nowUs() + this.stepUs, loopUntilUs);
  }

  /**
   * Q4 + R17: a round that released partial grants retired its owner; the loop must advance
   * the reign so that the next round does not send it again (that round's RELEASE may still
   * execute late and would free a node the next round refreshed).
   */
  takeRetiredOwner(): boolean {
    const r = this.retired;
    this.retired = false;
    return r;
  }

  /**
   * Q10: the instant (µs) before the sends of the round the last acquire's result rests on,
   * when that round ran after a wait (once; null otherwise). Every node counted in that round
   * set its expiry after this instant, so the loop may measure the deadline from it (when it
   * is later than its own sentAt).
   */
  takeRoundStart(): number | null {
    const r = this.roundStart;
    this.roundStart = null;
    return r;
  }

  /** After a lost renewal: nodes that still said 1 are released only after the task stopped (Q5, R13). */
  holdsAfterRejection(): boolean {
    return this.held.some((h) => h !== null);
  }

  /**
   * Q2-Q4 and Q10: a token to lead on, "nil" (not granted: poll again), or a failure (back off).
   * `blockUs`: the loop's BLOCK budget (null: no wait, e.g. re-asking for an unconfirmed grant).
   */
  async acquire(
    key: string,
    owner: string,
    ttlMs: number,
    loopUntilUs: number,
    signal: AbortSignal,
    blockUs: number | null = null,
  ): Promise<number | "nil" | RoundFailure | Aborted> {
    this.roundStart = null;
    const first = await this.acquireRound(key, owner, ttlMs, loopUntilUs, signal);
    if (!(typeof first === "object" && "refused" in first)) return first;
    const wait = q.waitAfterRefusal(
      first.refused,
      this.waitNode,
      false,
      blockUs,
      this.opTimeoutUs,
      this.renewIntervalUs,
    );
    if (wait === null) return "nil";
    // Q10: wait on the wait node until it is released or expires (it then grants us that one
    // node, which is no reign), and go straight into a fresh round. Why this is safe: the wait
    // node's grant counts for nothing by itself; what counts is the fresh round, whose every
    // counted node set its expiry after `start`, the instant taken before that round's sends,
    // which the loop then measures the deadline from.
    const woken = await this.blockingAcquire(this.waitNode, key, owner, ttlMs, wait, Math.min(nowUs() + wait + this.stepUs, loopUntilUs), signal);
    if (woken === ABORTED) return ABORTED;
    if (!woken) return "nil"; // timed out (nil), failed, or the node went away: the loop asks again
    const start = nowUs();
    const second = await this.acquireRound(key, owner, ttlMs, loopUntilUs, signal);
    // Every node refused, the wait node included (it lost our grant meanwhile, e.g. it
    // restarted): the loop asks again.
    if (typeof second === "object" && "refused" in second) return "nil";
    this.roundStart = start;
    return second;
  }

  /**
   * Q10's LEASE.ACQUIRE ... BLOCK on node `i` alone, on a connection of its own (identity
   * checked like every other), closed afterwards: true if it granted. Why not the node's
   * shared link: a blocked connection holds back every later command on it, so the next round
   * would find this node silent; and if the wait is abandoned (resign), closing the
   * connection is what tells the server to stop waiting for us (a grant it made just before
   * is found and released by the loop's stray release, as for any abandoned acquire).
   */
  private async blockingAcquire(
    i: number,
    key: string,
    owner: string,
    ttlMs: number,
    waitUs: number,
    untilUs: number,
    signal: AbortSignal,
  ): Promise<boolean | Aborted> {
    if (nowUs() < (this.quarantinedUntil[i] ?? 0)) return false;
    const spec = this.nodes[i] as ConnectionSpec;
    const link = new Link(connectionFactory(spec, this.connectMs), this.log, `wait${i + 1}`);
    try {
      const o = await link.run(Math.max(1, (untilUs - nowUs()) / 1000), signal, this.checkedCmd(i, (c) => t.acquire(c, key, owner, ttlMs, wireMs(waitUs), null)));
      if (!o.ok) return "aborted" in o ? ABORTED : false;
      return o.value.token !== null;
    } finally {
      link.close();
    }
  }

  /**
   * One campaign round (Q2-Q4). A plain refusal (no reign, nothing released, not an error)
   * returns its replies, for Q10.
   */
  private async acquireRound(
    key: string,
    owner: string,
    ttlMs: number,
    loopUntilUs: number,
    signal: AbortSignal,
  ): Promise<number | "nil" | RoundFailure | Aborted | { refused: q.AcquireReply[] }> {
    const n = this.n;
    const m = q.need(this.control, n);
    // What an earlier round left here is not this round's: a round only holds what it
    // confirms below.
    this.held = this.nodes.map(() => null);
    // Decided early only when a majority can no longer grant. Otherwise every node gets the
    // step's time, even after a majority granted: a reign on all N nodes survives more later
    // faults than one on a bare majority.
    // And not before the wait node answered: whether a refused follower waits (Q10) depends on
    // that node's reply; deciding on the others' refusals first would make it poll instead.
    const decided = (r: q.AcquireReply[]): boolean =>
      r.filter((x) => x !== null && typeof x !== "number").length > n - m && r[this.waitNode] !== null;
    const replies = await this.round<number | "refused">(
      this.links,
      this.nodes.map(() => async (c: RedisConnection) => (await t.acquire(c, key, owner, ttlMs, null, null, this.membership)).token ?? "refused"),
      this.until(loopUntilUs),
      signal,
      decided,
    );
    if (replies === ABORTED) return ABORTED;
    const a = q.afterAcquire(this.control, replies, Math.floor(Math.random() * 2 ** 30));
    if (a.action === "raise") {
      const granted = new Map<number, number>();
      replies.forEach((r, i) => {
        if (typeof r === "number") granted.set(i, r);
      });
      const cmds: Array<Cmd<boolean>> = this.nodes.map(() => null);
      for (const i of a.nodes) cmds[i] = (c) => raiseLease(c, key, owner, granted.get(i) ?? 0, a.target, this.membership);
      const rr = await this.round(this.links, cmds, this.until(loopUntilUs), signal);
      if (rr === ABORTED) {
        // The loop releases whatever we may hold (releaseStray), with the tokens GET reports.
        return ABORTED;
      }
      if (q.raiseConfirmed(this.control, rr, n)) {
        this.held = rr.map((r) => (r === true ? a.target : null));
        return a.target;
      }
      // Not confirmed: the grants (raised or not) must not block anyone for a TTL: a node that
      // confirmed holds the target, the others are released with their own grant.
      const pairs: Array<[number, number]> = a.nodes.map((i) => [i, rr[i] === true ? a.target : granted.get(i) ?? 0]);
      this.retired = this.retired || pairs.length > 0;
      await this.releaseOn(key, owner, pairs);
      // Not leading either way; but a node that refused the raise with a server error
      // (NOPERM: an ACL without +lease.raise) is a fault the operator must see, not a
      // contender: report it (the loop logs, counts and backs off) instead of polling in
      // silence forever. Unreachable nodes are faults of the moment: not reported here. A
      // MEMBERSHIP refusal is no fault either: it counts as no confirmation (Q9).
      for (const i of a.nodes) {
        const r = rr[i];
        if (q.isFail(r) && r.fail.kind !== "connection" && r.fail.kind !== "timeout" && !q.isMembership(r)) {
          return { failure: r.fail, message: `quorum: node ${i + 1} refused LEASE.RAISE: ${r.message}` };
        }
      }
      return "nil";
    }
    if (a.action === "act_unified") {
      this.held = a.perNode.slice();
      return a.token;
    }
    this.retired = this.retired || a.release.length > 0;
    await this.releaseOn(key, owner, a.release);
    this.reportMembership(a.outcome === "membership_mismatch");
    // A membership mismatch (Q9) is no refusal Q10 could wait out.
    if (a.outcome === "membership_mismatch") return "nil";
    if (a.outcome === "not_granted") return a.release.length > 0 ? "nil" : { refused: replies };
    return { failure: a.outcome.fail, message: `quorum: fewer than ${m} of ${n} nodes could grant (${a.outcome.message})` };
  }

  /**
   * Q5: true renewed, false lost (step down), a failure = unknown (keep the deadline): the
   * replies of a single-node RENEW, so the loop reads them as it reads those.
   */
  async renew(key: string, owner: string, token: number, ttlMs: number, loopUntilUs: number, signal: AbortSignal): Promise<boolean | RoundFailure | Aborted> {
    const n = this.n;
    const m = q.need(this.control, n);
    const held = this.held.slice();
    const raw = await this.round<boolean>(
      this.links,
      held.map((h) => (c: RedisConnection) => t.renew(c, key, owner, h ?? token, ttlMs, null, this.membership).then((r) => r.renewed)),
      this.until(loopUntilUs),
      signal,
      (r) => r.filter((x) => x === true).length >= m || r.filter(q.renewRefused).length > n - m,
    );
    if (raw === ABORTED) return ABORTED;
    const after = q.afterRenew(this.control, raw);
    if (after === "renewed") return true;
    if (after === "lost") {
      if (raw.some(q.isMembership)) {
        // The operator rebound nodes to another list (docs/quorum.md §4.1): this reign ends
        // here, by design.
        this.log.warn("quorum: renewal refused: nodes are bound to another membership now", { reason: "membership_mismatch" });
      }
      // Stepping down. The nodes that still said 1 are NOT released here: our task has not
      // stopped yet, and such a node can complete another elector's majority with nodes that
      // said 0 (one wiped, one holding that elector's partial grant): a successor would reign
      // while we still act (found by the model check). The loop releases them once the task
      // has stopped (holdsAfterRejection, R13).
      this.held = held.map((h, i) => (raw[i] === true ? h ?? token : null));
      return false;
    }
    const first = raw.find(q.isFail);
    return {
      failure: first?.fail ?? { kind: "timeout", graceUs: null },
      message: `quorum: renewal not confirmed by ${m} of ${n} nodes${first === undefined ? "" : ` (${first.message})`}`,
    };
  }

  /**
   * On every node, with the token each holds for us (best effort): true if any released.
   *
   * Q10: the wait node's RELEASE is sent last (all are sent at once, without waiting for
   * replies). Its release wakes the one follower waiting there, whose next round should find
   * the other nodes already free: their RELEASEs left before it, and the wake plus that round
   * take at least a round trip more. A round that still overtakes one on another node is
   * refused there and falls back to polling. Order only affects liveness: a release frees, it
   * never grants.
   */
  async release(key: string, owner: string, token: number): Promise<boolean> {
    const pairs: Array<[number, number]> = this.held.map((h, i) => [i, h ?? token]);
    pairs.sort((a, b) => Number(a[0] === this.waitNode) - Number(b[0] === this.waitNode));
    const got = await this.releaseOn(key, owner, pairs);
    this.held = this.nodes.map(() => null);
    return got > 0;
  }

  /**
   * Our own holding on any node (after a resign with a round in flight: the loop then releases
   * it, on every node with the token each holds).
   */
  async getOwn(key: string, owner: string): Promise<LeaseInfo | null> {
    const raw = await this.round(this.links, this.nodes.map(() => (c: RedisConnection) => t.get(c, key)), nowUs() + this.stepUs, undefined);
    if (raw === ABORTED) return null;
    let found: LeaseInfo | null = null;
    raw.forEach((x, i) => {
      if (x !== null && !q.isFail(x) && x.owner === owner) {
        // Stray grants may carry different tokens: remember each.
        this.held[i] = x.token;
        found = x;
      }
    });
    return found;
  }

  /** The lease a majority of the nodes report for one owner (the smallest remaining TTL), else null. */
  async observe(key: string, limitMs: number): Promise<LeaseInfo | null> {
    const raw = await this.round(this.observeLinks, this.nodes.map(() => (c: RedisConnection) => t.get(c, key)), nowUs() + limitMs * 1000, undefined);
    if (raw === ABORTED) return null;
    const seen = raw.filter((x): x is LeaseInfo => x !== null && !q.isFail(x));
    const m = q.majority(this.n);
    for (const info of seen) {
      const same = seen.filter((x) => x.owner === info.owner);
      if (same.length >= m) return same.reduce((a, b) => (b.pttlMs < a.pttlMs ? b : a));
    }
    return null;
  }

  private async releaseOn(key: string, owner: string, pairs: Array<[number, number]>): Promise<number> {
    if (pairs.length === 0) return 0;
    const cmds: Array<Cmd<boolean>> = this.nodes.map(() => null);
    for (const [i, tok] of pairs) cmds[i] = (c) => t.release(c, key, owner, tok);
    const raw = await this.round(this.links, cmds, nowUs() + this.stepUs, undefined, undefined, pairs.map((p) => p[0]));
    if (raw === ABORTED) return 0;
    return raw.filter((x) => x === true).length;
  }
}
