/**
 * The election loop: executes what decide.ts decides, talks to Redis through transport.ts,
 * runs the leader task, emits events, logs and counts. Port of client/src/elector.rs.
 *
 * Time: every instant is performance.now() (monotonic; CLOCK_MONOTONIC on Linux), taken in µs
 * for the decisions. Node timers may fire up to ~1 ms early relative to performance.now()
 * (libuv's cached loop time), and arbitrarily late (busy loop, GC, SIGSTOP); so every wake-up
 * re-reads the clock and decides on it, never on the fact that a timer fired.
 */
import { EventEmitter } from "node:events";
import { hostname } from "node:os";
import { randomBytes } from "node:crypto";
import * as decide from "./decide.js";
import { ErrorKind, StepDownReason, type DecisionConfig, type Failure } from "./decide.js";
import { consoleLogger, type Logger } from "./log.js";
import { noMetrics, type MetricsSink } from "./metrics.js";
import * as t from "./transport.js";
import { fence, type CommandArg } from "./fence.js";
import type { Cluster, Redis } from "ioredis";
import { connectionFactory, Link, type ConnectionSpec, type LeaseInfo, type Outcome } from "./transport.js";
import { ABORTED, DEFAULT_NODE_QUARANTINE_MS, duplicateProblem, Quorum } from "./quorum.js";

/** Monotonic now, µs. */
const nowUs = (): number => performance.now() * 1000;

/** Options of an Elector. Durations in milliseconds; every default derives from `ttlMs`. */
export interface ElectorOptions {
  /**
   * Where Redis is (URL, ioredis options incl. Sentinel, a Redis/Cluster instance, or { cluster }).
   * An array of 2 or more (3 or 5 in practice) independent primaries is quorum mode (protocol
   * §9a): the lease is taken on a majority of them (README "Quorum mode").
   */
  redis: ConnectionSpec | ConnectionSpec[];
  /**
   * Quorum mode: how long a node whose server identity (run_id) changed counts toward nothing
   * (default 30000, the module's default lease.max-ttl; never less than the TTL; stretched by
   * the drift bound).
   */
  nodeQuarantineMs?: number;
  /**
   * Quorum mode: the membership id to send (protocol Q9, 16 lower-case hex digits) instead of
   * the one computed from the node addresses. For electors that reach the same servers under
   * different addresses (proxies, NAT, a test harness): each would compute its own id and the
   * first to bind a key would shut the others out. Every elector of one membership sets the same.
   */
  membershipId?: string;
  /** The lease key. */
  key: string;
  /** Lease TTL (server-side expiry), whole ms. */
  ttlMs: number;
  /**
   * Owner base; default host-pid-random, unique per process incarnation, 1..=239 UTF-8 bytes.
   * The owner sent to the server is `base#reign` (protocol R17), a new one after every
   * step-down; Electors made one after another with the same base continue its reign numbers.
   * Two Electors alive at the same time must not share a base.
   */
  owner?: string;
  /** Time between renewals (default ttl/3). */
  renewIntervalMs?: number;
  /** Max relative clock-rate difference client vs server (default 0.01). */
  drift?: number;
  /** Extra safety subtracted from the local deadline (default min(ttl/100, 50 ms)). */
  marginMs?: number;
  /** lease.signal aborts this long before the local deadline (default ttl/5); must cover the task's shutdown. */
  stopBudgetMs?: number;
  /** Time limit of one command (default max(ttl/5, 50 ms)). */
  opTimeoutMs?: number;
  /** BLOCK of a follower's LEASE.ACQUIRE (default 5000). */
  blockTimeoutMs?: number;
  /** Replicas that must acknowledge (WAIT) a grant/renewal for it to count (default 0). */
  minReplicas?: number;
  /** WAIT timeout (default ttl/10). */
  waitTimeoutMs?: number;
  /** Reconnect backoff bounds (default 50 ms .. 5 s), full jitter. */
  backoffMinMs?: number;
  backoffMaxMs?: number;
  /** Logger (default: console, info and above). */
  logger?: Logger;
  /** Metrics sink (default none; see `redis-lease/prometheus`). */
  metrics?: MetricsSink;
  /** How often a follower with `leader` listeners polls LEASE.GET (default renewIntervalMs). */
  observeIntervalMs?: number;
}

/** What the leader task gets. */
export interface LeaderContext {
  /** This reign's fencing token (an integer below 2^53): pass it to the protected resource. */
  readonly token: number;
  readonly key: string;
  /** The owner this reign holds the lease as, on the server: `base#reign` (protocol R17). */
  readonly owner: string;
  /**
   * Aborted at the stop point (deadline - stopBudget), or at once when leadership ends for any
   * other reason; `signal.reason` is a LeadershipLost error with the step-down reason.
   */
  readonly signal: AbortSignal;
  /**
   * The current local deadline, on the performance.now() time line (ms); moves forward with
   * each confirmed renewal; null once this reign ended. Work must be finished by then.
   */
  readonly deadline: number | null;
  /**
   * "Check the deadline after every step": true only while the signal is not aborted and the
   * stop point is still ahead on the monotonic clock (read at each call, so it is right even
   * as the first statement after a GC pause or SIGSTOP).
   */
  isLeader(): boolean;
  /**
   * `LEASE.FENCE key token command...` with this reign's key and token, on `redis` (your
   * application's connection): the command's reply, or a FencedError if a newer reign exists
   * (the command did not run). Safe whenever it lands, even after a stall: see fence().
   */
  fence(redis: Redis | Cluster, ...command: CommandArg[]): Promise<unknown>;
}

/** `lease.signal.reason` when leadership ends. */
export class LeadershipLost extends Error {
  override name = "LeadershipLost";
  /** `cause`: the one-shot routine's own error, when it threw after its reign ended. */
  constructor(readonly reason: StepDownReason, readonly token: number, options?: { cause?: unknown }) {
    super(`leadership ended: ${reason}`, options);
  }
}

export interface ElectedEvent {
  key: string;
  owner: string;
  token: number;
  /** Local deadline, performance.now() ms. */
  deadline: number;
}
export interface SteppedDownEvent {
  key: string;
  owner: string;
  token: number;
  reason: StepDownReason;
}

/** How run() ended. */
export type RunOutcome<R> = { kind: "resigned" } | { kind: "task_finished"; value: R };

/** How a campaign ended: run()'s outcomes, or (one reign only) the reign was lost. */
export type CampaignEnd<R> = RunOutcome<R> | { kind: "lost"; lost: LeadershipLost };

export interface ElectorEvents {
  /** This instance became leader (the task is starting). */
  elected: [ElectedEvent];
  /** Leadership ended (the task was told to stop). */
  "stepped-down": [SteppedDownEvent];
  /** As a follower: the observed leader changed (LEASE.GET); null = no live lease. */
  leader: [LeaseInfo | null];
}

/** host-pid-random: unique per incarnation, so a restarted process never inherits its old lease. */
export function defaultOwner(): string {
  return `${hostname() || "unknown"}-${process.pid}-${randomBytes(4).toString("hex")}`;
}

/** The decision configuration from ElectorOptions (ms -> µs, defaults from the TTL). */
export function decisionConfig(o: Omit<ElectorOptions, "redis" | "key" | "nodeQuarantineMs" | "membershipId">): DecisionConfig {
  const cfg = decide.configDefaults(o.ttlMs);
  const us = (ms: number | undefined, dflt: number): number => (ms === undefined ? dflt : Math.round(ms * 1000));
  return {
    ttlMs: o.ttlMs,
    drift: o.drift ?? cfg.drift,
    marginUs: us(o.marginMs, cfg.marginUs),
    stopBudgetUs: us(o.stopBudgetMs, cfg.stopBudgetUs),
    renewIntervalUs: us(o.renewIntervalMs, cfg.renewIntervalUs),
    opTimeoutUs: us(o.opTimeoutMs, cfg.opTimeoutUs),
    blockTimeoutUs: us(o.blockTimeoutMs, cfg.blockTimeoutUs),
    minReplicas: o.minReplicas ?? cfg.minReplicas,
    waitTimeoutUs: us(o.waitTimeoutMs, cfg.waitTimeoutUs),
    backoffMinUs: us(o.backoffMinMs, cfg.backoffMinUs),
    backoffMaxUs: us(o.backoffMaxMs, cfg.backoffMaxUs),
  };
}

class LeaseImpl implements LeaderContext {
  private readonly ac = new AbortController();
  private ended = false;
  private stopTimer: NodeJS.Timeout | null = null;
  /** When the signal actually fired (the task could first learn of the stop); set by abort(). */
  abortedAtUs = Number.POSITIVE_INFINITY;

  constructor(
    readonly token: number,
    readonly key: string,
    readonly owner: string,
    private deadlineUs: number,
    private readonly cfg: DecisionConfig,
    private readonly onStopPoint: () => void,
    private readonly quorumMode = false,
  ) {
    this.armStopTimer();
  }

  get signal(): AbortSignal {
    // Reading the signal re-checks the clock: right after a pause the timer that aborts it may
    // not have run yet, but whoever looks at it must already see it aborted.
    this.checkClock();
    return this.ac.signal;
  }

  get deadline(): number | null {
    return this.ended ? null : this.deadlineUs / 1000;
  }

  get deadlineMicros(): number {
    return this.deadlineUs;
  }

  isLeader(): boolean {
    if (this.ended || this.ac.signal.aborted) return false;
    return !this.checkClock();
  }

  fence(redis: Redis | Cluster, ...command: CommandArg[]): Promise<unknown> {
    // Why refused: no single node's check speaks for the majority; fence at the resource with
    // lease.token instead.
    if (this.quorumMode) return Promise.reject(new Error("fence() is not available in quorum mode: fence at the resource with lease.token"));
    return fence(redis, this.key, this.token, ...command);
  }

  /** True (and the signal aborted) if the stop point has passed. */
  private checkClock(): boolean {
    if (this.ac.signal.aborted) return true;
    if (decide.mustStop(this.cfg, this.deadlineUs, nowUs())) {
      this.abort("deadline");
      this.onStopPoint();
      return true;
    }
    return false;
  }

  /** A confirmed renewal moved the deadline (never backwards: decide.onRenew). */
  extend(deadlineUs: number): void {
    this.deadlineUs = deadlineUs;
    this.armStopTimer();
  }

  /**
   * Why a timer of its own: the signal must fire at the stop point even while the loop waits
   * for a renewal reply. It may fire early (then it re-arms) or late (pause), never decides
   * on the fact that it fired.
   */
  private armStopTimer(): void {
    if (this.stopTimer !== null) clearTimeout(this.stopTimer);
    if (this.ac.signal.aborted) return;
    const leftMs = (decide.stopAt(this.cfg, this.deadlineUs) - nowUs()) / 1000;
    this.stopTimer = setTimeout(() => {
      this.stopTimer = null;
      if (!this.checkClock()) this.armStopTimer();
    }, Math.max(0, leftMs));
  }

  abort(reason: StepDownReason): void {
    if (this.stopTimer !== null) {
      clearTimeout(this.stopTimer);
      this.stopTimer = null;
    }
    if (!this.ac.signal.aborted) {
      this.abortedAtUs = nowUs();
      this.ac.abort(new LeadershipLost(reason, this.token));
    }
  }

  end(reason: StepDownReason): void {
    this.abort(reason);
    this.ended = true;
  }
}

type TaskState<R> = { done: false } | { done: true; ok: true; value: R } | { done: true; ok: false; error: unknown };

type LeadEnd<R> =
  | { kind: "lost"; reason: StepDownReason; token: number; task: TaskState<R> }
  | { kind: "resigned" }
  | { kind: "finished"; value: R }
  | { kind: "failed"; error: unknown };

export interface Elector {
  on<K extends keyof ElectorEvents>(event: K, listener: (...args: ElectorEvents[K]) => void): this;
  once<K extends keyof ElectorEvents>(event: K, listener: (...args: ElectorEvents[K]) => void): this;
  off<K extends keyof ElectorEvents>(event: K, listener: (...args: ElectorEvents[K]) => void): this;
  emit<K extends keyof ElectorEvents>(event: K, ...args: ElectorEvents[K]): boolean;
}

/**
 * Electors that keep one owner across reigns: the behaviour before protocol R17, which lets a
 * late RELEASE of an earlier reign end the current one. Only for the conformance elector's
 * negative control (`--mode reuse-owner`); reachable through unsafeReuseOwnerAcrossReigns(),
 * which index.ts does not export (and package.json's "exports" hides this file).
 */
const reusesOwner = new WeakSet<object>();

/**
 * R17 across Elector objects: the next reign number of every owner base an application GAVE
 * (options.owner) in this process. Why: a new Elector (or a new withLeadership() call) with the
 * same given base would otherwise start again at reign 1, and its first ACQUIRE would refresh a
 * lease an earlier object's reign still holds (same owner, same token) — the issue-23 bug
 * across objects. Default bases are random per Elector, so they need no entry (the map stays as
 * small as the set of names the application chose).
 */
const givenBaseNextReign = new Map<string, number>();

/** NOT public API: make `e` reuse its first reign's owner forever (a known-unsafe mode). */
export function unsafeReuseOwnerAcrossReigns(e: Elector): void {
  reusesOwner.add(e);
}

/** One candidate for one lease key. */
export class Elector extends EventEmitter {
  readonly key: string;
  /** The owner base; the server sees `owner#reign` (see `currentOwner`). */
  readonly owner: string;
  readonly config: Readonly<DecisionConfig>;
  private readonly log: Logger;
  private readonly metrics: MetricsSink;
  /** Follower's BLOCKing ACQUIRE only: a blocked connection holds up everything behind it. */
  private readonly blockLink: Link;
  /** RENEW, RELEASE, GET, non-blocking ACQUIRE. */
  private readonly cmdLink: Link;
  /** LEASE.GET polling for `leader` events. */
  private readonly observeLink: Link;
  private readonly observeIntervalMs: number;

  private resigned = false;
  private running: Promise<unknown> | null = null;
  /** Abort of the command in flight (resign, stop point). */
  private currentOp: AbortController | null = null;
  /** Wakes the loop's current sleep (resign, task finished, stop point). */
  private waker: (() => void) | null = null;
  private redisUp: boolean | null = null;
  private leading: LeaseImpl | null = null;
  private observeTimer: NodeJS.Timeout | null = null;
  private lastObserved: string | undefined = undefined;
  /** currentLeader() calls in flight (they share observeLink with the `leader` polling). */
  private observeCalls = 0;
  /** R17: the reign counter; starts at 1, advanced only by a step-down (decide.nextReign). */
  private reign = 1;
  /** Whether the application gave the base (then its reigns continue across Electors). */
  private readonly givenBase: boolean;
  /** Quorum mode's transport (redis given as 2+ nodes), else null. */
  private readonly quorum: Quorum | null;

  constructor(options: ElectorOptions) {
    super();
    this.key = options.key;
    this.owner = options.owner ?? defaultOwner();
    this.givenBase = options.owner !== undefined;
    this.config = Object.freeze(decisionConfig(options));
    const problem = decide.configProblem(this.config, this.key, this.owner);
    if (problem !== null) throw new RangeError(`invalid configuration: ${problem[0]}: ${problem[1]}`);
    if (this.givenBase) this.reign = givenBaseNextReign.get(this.owner) ?? 1;
    const unsupported = t.ioredisProblem(t.IOREDIS_VERSION);
    if (unsupported !== null) throw new RangeError(unsupported);
    this.log = options.logger ?? consoleLogger();
    this.metrics = options.metrics ?? noMetrics;
    const specs = Array.isArray(options.redis) ? options.redis : [options.redis];
    const first = specs[0];
    if (first === undefined) throw new RangeError("invalid configuration: redis: an empty node list");
    this.quorum =
      specs.length > 1
        ? new Quorum(specs, this.config, options.nodeQuarantineMs ?? DEFAULT_NODE_QUARANTINE_MS, this.log)
        : null;
    if (this.quorum !== null && options.membershipId !== undefined) {
      const m = options.membershipId;
      if (!/^[0-9a-f]{16}$/.test(m) || /^0+$/.test(m)) {
        throw new RangeError("invalid configuration: membershipId: expected 16 lower-case hex digits, not all zero");
      }
      this.quorum.membership = m;
    }
    // In quorum mode the single-node links below are never used (they connect lazily).
    const factory = connectionFactory(first, Math.max(100, this.config.opTimeoutUs / 1000));
    this.blockLink = new Link(factory, this.log, "block");
    this.cmdLink = new Link(factory, this.log, "cmd");
    this.observeLink = new Link(factory, this.log, "observe");
    this.observeIntervalMs = options.observeIntervalMs ?? this.config.renewIntervalUs / 1000;
  }

  /** The owner the server sees for the current (or next) reign: `owner#reign` (protocol R17). */
  get currentOwner(): string {
    const o = decide.reignOwner(this.owner, this.reign);
    // Only past 2^53-1 reigns: refuse to campaign rather than reuse or wrap an owner.
    if (o === null) throw new RangeError(`reign counter ${this.reign} exhausted`);
    return o;
  }

  /** R17: a step-down ends the reign; the next campaign asks as a new owner. */
  private endReign(): void {
    if (reusesOwner.has(this)) return;
    this.reign = decide.nextReign(this.reign, "stepped_down");
    if (this.givenBase) givenBaseNextReign.set(this.owner, Math.max(this.reign, givenBaseNextReign.get(this.owner) ?? 1));
  }

  /** True while this instance leads (stop point ahead on the monotonic clock). */
  isLeader(): boolean {
    return this.leading?.isLeader() ?? false;
  }

  /** The current reign's token, or null when not leading. */
  get token(): number | null {
    return this.leading !== null && this.leading.isLeader() ? this.leading.token : null;
  }

  /**
   * Graceful stop: abort the task's signal, wait for it to stop, LEASE.RELEASE (so a waiting
   * follower takes over at once), and make run() return { kind: "resigned" }. Final: a resigned
   * elector does not campaign again. Resolves when run() has returned.
   */
  resign(): Promise<void> {
    this.resigned = true;
    this.currentOp?.abort();
    this.wake();
    const r = this.running;
    const ended = r === null ? Promise.resolve() : r.then(() => undefined, () => undefined);
    // Whatever connections remain (run() closes its own; a currentLeader() call may be in
    // flight) are closed: a resigned elector must not keep the process alive.
    return ended.then(() => this.closeLinks());
  }

  /** The same as resign(), under the name an ioredis user looks for: final, closes every connection. */
  close(): Promise<void> {
    return this.resign();
  }

  /**
   * LEASE.GET: the current leader (null = no live lease), bounded by opTimeout. Works on an
   * elector that never ran; its connection is closed after the call unless run() is active, so
   * it does not keep the process alive.
   */
  async currentLeader(): Promise<LeaseInfo | null> {
    this.observeCalls += 1;
    try {
      if (this.quorum !== null) return await this.quorum.observe(this.key, this.config.opTimeoutUs / 1000);
      const r = await this.observeLink.run(this.config.opTimeoutUs / 1000, undefined, (c) => t.get(c, this.key));
      if (r.ok) return r.value;
      if ("aborted" in r) throw new Error("LEASE.GET aborted");
      throw new Error(`LEASE.GET: ${r.failure.kind} (${r.message})`);
    } finally {
      this.observeCalls -= 1;
      // Why: an open socket keeps Node's event loop (the process) alive; outside run() nothing
      // else would ever close it.
      if (this.observeCalls === 0 && this.running === null) {
        this.observeLink.close();
        this.quorum?.closeObserve();
      }
    }
  }

  private closeLinks(): void {
    this.quorum?.close();
    this.blockLink.close();
    this.cmdLink.close();
    this.observeLink.close();
  }

  /**
   * Campaign; whenever elected, start task(lease) and keep the lease renewed while it runs.
   * When leadership is lost, lease.signal aborts (at the latest at the stop point) and the
   * elector campaigns again once the task stopped. Resolves on resign ({ kind: "resigned" })
   * or when the task returned by itself ({ kind: "task_finished", value }), after the lease was
   * released in both cases. Rejects with the task's error if the task threw (after release).
   * Redis errors never end run(): they are retried, logged and counted.
   *
   * `options.signal`: aborting it is resign() (final); already aborted, run() sends nothing
   * and resolves { kind: "resigned" }.
   */
  run<R>(task: (lease: LeaderContext) => R | Promise<R>, options: { signal?: AbortSignal } = {}): Promise<RunOutcome<R>> {
    return this.start(task, false, options.signal).then((end) => {
      // Unreachable: only a one-reign campaign ends on a lost reign.
      if (end.kind === "lost") throw end.lost;
      return end;
    });
  }

  /**
   * @internal Not public API (use withLeadership): campaign, lead once, end; see oneReign in
   * campaign(). Stripped from the .d.ts (stripInternal).
   */
  runOneReign<R>(task: (lease: LeaderContext) => R | Promise<R>): Promise<CampaignEnd<R>> {
    return this.start(task, true, undefined);
  }

  private start<R>(task: (lease: LeaderContext) => R | Promise<R>, oneReign: boolean, signal: AbortSignal | undefined): Promise<CampaignEnd<R>> {
    if (this.running !== null) return Promise.reject(new Error("run() is already running"));
    const onAbort = (): void => void this.resign();
    // Why set the flag directly when already aborted: resign() would only take effect after
    // the campaign started; this way not even the first ACQUIRE is sent.
    if (signal?.aborted) this.resigned = true;
    else signal?.addEventListener("abort", onAbort, { once: true });
    const p = this.campaign(task, oneReign).finally(() => {
      signal?.removeEventListener("abort", onAbort);
      this.running = null;
      this.stopObserving();
      // No connection outlives run(): they are remade lazily by the next run(). A
      // currentLeader() call in flight closes observeLink itself when it is done.
      this.blockLink.close();
      this.cmdLink.close();
      this.quorum?.closeCommands();
      if (this.observeCalls === 0) {
        this.observeLink.close();
        this.quorum?.closeObserve();
      }
    });
    this.running = p;
    return p;
  }

  private wake(): void {
    const w = this.waker;
    this.waker = null;
    w?.();
  }

  /** Sleep until `untilUs` (monotonic µs) or until woken (resign, task end, stop point). */
  private sleepUntil(untilUs: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        if (this.waker === done) this.waker = null;
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, (untilUs - nowUs()) / 1000));
      this.waker = done;
    });
  }

  /** Run one operation with the loop's limit; resign (and `extraAbort`) abandon it. */
  private async op<T>(
    link: Link,
    limitUs: number,
    fn: (c: t.RedisConnection) => Promise<T>,
    abortAtUs: number | null = null,
  ): Promise<Outcome<T>> {
    const ac = new AbortController();
    this.currentOp = ac;
    if (this.resigned) ac.abort();
    // The stop point aborts a renewal in flight: past it nothing else matters.
    const stopTimer =
      abortAtUs === null ? null : setTimeout(() => ac.abort(), Math.max(0, (abortAtUs - nowUs()) / 1000));
    try {
      return await link.run(limitUs / 1000, ac.signal, fn);
    } finally {
      if (stopTimer !== null) clearTimeout(stopTimer);
      if (this.currentOp === ac) this.currentOp = null;
    }
  }

  private fields(extra: Record<string, string | number | boolean | null> = {}): Record<string, string | number | boolean | null> {
    return { key: this.key, owner: decide.reignOwner(this.owner, this.reign) ?? this.owner, ...extra };
  }

  private emitSafe<K extends keyof ElectorEvents>(event: K, ...args: ElectorEvents[K]): void {
    try {
      this.emit(event, ...args);
    } catch (e) {
      // A throwing listener must not break the loop's safety steps.
      this.log.error("event listener threw", this.fields({ event, error: e instanceof Error ? e.message : String(e) }));
    }
  }

  /** Count errors; log when Redis becomes unreachable and when it is back. */
  private observe(op: string, r: Outcome<unknown>): void {
    let up: boolean;
    let failure: Failure | null = null;
    let message = "";
    if (r.ok) up = true;
    else if ("aborted" in r) return;
    else {
      failure = r.failure;
      message = r.message;
      this.metrics.redisError(op, failure.kind);
      const unreachable = failure.kind === "connection" || failure.kind === "timeout";
      // GRACE has its own log line; unreachability is logged on the transition.
      if (!unreachable && failure.kind !== "grace") {
        this.log.warn("redis error", this.fields({ op, kind: failure.kind, error: message }));
      }
      up = !unreachable;
    }
    if (this.redisUp !== up) {
      if (up && this.redisUp === false) this.log.info("redis reachable again", this.fields());
      if (!up && failure !== null) this.log.warn("redis unreachable", this.fields({ op, kind: failure.kind, error: message }));
      this.redisUp = up;
      this.metrics.redisUp(up);
    }
  }

  /**
   * The follower/leader loop. `oneReign`: end after the first reign whatever its outcome (the
   * one-shot API), instead of campaigning again after a lost reign.
   */
  private async campaign<R>(task: (lease: LeaderContext) => R | Promise<R>, oneReign: boolean): Promise<CampaignEnd<R>> {
    const cfg = this.config;
    let attempt = 0;
    // A grant the server gave us that we may not use (not acked by replicas, or too late). We
    // hold it on the server, so we re-ask WITHOUT BLOCK; same owner = refresh, same token.
    let unconfirmed: number | null = null;
    if (this.quorum !== null) {
      // Q6: refuse a node list that names one server twice under any spelling, before sending.
      const dup = await duplicateProblem(this.quorum.nodes);
      if (dup !== null) throw new RangeError(dup);
    }
    this.startObserving();
    for (;;) {
      if (this.resigned) {
        await this.releaseStray(unconfirmed !== null);
        return { kind: "resigned" };
      }
      // In quorum mode the rounds never BLOCK (Q2: no node knows when a majority frees up); the
      // BLOCK budget is that of the wait on one node after a refusal (Q10).
      const blockUs = unconfirmed === null ? cfg.blockTimeoutUs : null;
      const limitUs = decide.opLimit(cfg, blockUs);
      const w = decide.waitFor(cfg);
      const blockMs = blockUs === null ? null : decide.wireMs(blockUs);
      // Why a dedicated connection for BLOCK: it occupies its connection for up to the block
      // timeout; nothing else may queue behind it. Every campaign ask goes there, the R7/R11
      // re-ask without BLOCK included. Why the re-ask too: a hand-over is a BLOCK granted after
      // a wait longer than the stop window, then at once a re-ask (R7); on cmdLink, which a
      // follower has never used, that re-ask first had to open a connection in the middle of
      // the hand-over. R5 holds: the re-ask does not block and nothing else queues here; R6
      // holds: the BLOCK's reply was read (an abandoned call dropped the connection), and the
      // WAIT of a min-replicas ask follows its write on the same connection.
      const link = this.blockLink;
      // Why before sending: the deadline must count from a point no later than the moment the
      // server starts the TTL (connecting, if needed, happens after this: conservative).
      // R17: one owner per campaign (the re-asks below refresh our own grant); a step-down
      // inside lead() advances the reign, so the next campaign asks as a new owner.
      const owner = this.currentOwner;
      let sentAt = nowUs();
      const r =
        this.quorum !== null
          ? await this.quorumAcquire(this.quorum, owner, sentAt + limitUs, blockUs)
          : await this.op(link, limitUs, (c) => t.acquire(c, this.key, owner, cfg.ttlMs, blockMs, w));
      const now = nowUs();
      // Q10: a quorum grant made by a round that started after a wait is measured from that
      // round's start (never earlier than our own sentAt).
      const roundStart = this.quorum?.takeRoundStart() ?? null;
      if (roundStart !== null && roundStart > sentAt) sentAt = roundStart;
      if (!r.ok && "aborted" in r) {
        // Resigned while asking: the abandoned ACQUIRE may have been granted after all.
        await this.releaseStray(true);
        return { kind: "resigned" };
      }
      this.observe("acquire", r);
      if (this.quorum !== null && this.quorum.takeRetiredOwner()) {
        // Q4 + R17: that round released partial grants; its RELEASE may still execute late,
        // so its owner is never sent again.
        this.endReign();
      }
      const result: decide.AcquireResult = r.ok
        ? r.value.token === null
          ? { reply: "nil" }
          : { reply: "granted", token: r.value.token, acked: r.value.acked }
        : { reply: "error", failure: r.failure };
      const d = decide.onAcquire(cfg, sentAt, now, result);
      switch (d.action) {
        case "lead": {
          attempt = 0;
          unconfirmed = null;
          this.metrics.acquire("granted");
          const end = await this.lead(d.token, d.deadlineUs, d.nextRenewUs, task);
          switch (end.kind) {
            case "lost":
              // Why end here for the one-shot API: its routine runs once; a second reign would
              // run it again and hand back a value from a reign the caller never asked for.
              if (oneReign) {
                const cause = end.task.done && !end.task.ok ? { cause: end.task.error } : undefined;
                return { kind: "lost", lost: new LeadershipLost(end.reason, end.token, cause) };
              }
              break;
            case "resigned":
              return { kind: "resigned" };
            case "finished":
              return { kind: "task_finished", value: end.value };
            case "failed":
              throw end.error;
          }
          break;
        }
        case "unconfirmed":
          attempt = 0;
          unconfirmed = d.token;
          if (d.why === "late_reply") {
            // Expected after a long BLOCK (the grant's deadline counts from the send instant);
            // the re-ask without BLOCK refreshes it: debug, not a warning.
            this.metrics.acquire("late");
            this.log.debug("grant arrived after its stop point; re-asking without BLOCK", this.fields({ token: d.token, reason: d.why }));
          } else {
            this.metrics.acquire("unconfirmed");
            this.log.warn("grant not confirmed by replicas; not leading on it", this.fields({ token: d.token, reason: d.why }));
          }
          if (d.retryInUs > 0) await this.sleepUntil(nowUs() + d.retryInUs);
          break;
        case "not_granted": {
          attempt = 0;
          unconfirmed = null;
          this.metrics.acquire("not_granted");
          // Why: BLOCK answers nil only after its timeout; a much faster nil means something
          // else is going on, and we must not spin on it.
          // Quorum mode: a round never BLOCKs, so a refusal that did not wait (Q10: the wait
          // node down) is judged as a BLOCKing ask that came back at once: followers poll with
          // the loop's jittered pause instead of spinning (as the Go port does).
          const pause = decide.notGrantedPause(cfg, this.quorum !== null ? cfg.blockTimeoutUs : blockUs, sentAt, now, Math.random());
          if (pause > 0) await this.sleepUntil(nowUs() + pause);
          break;
        }
        case "grace":
          this.metrics.acquire("grace");
          this.log.info("server in grace period; waiting", this.fields({ grace_ms: Math.round(d.waitUs / 1000) }));
          await this.sleepUntil(nowUs() + d.waitUs);
          break;
        case "backoff": {
          this.metrics.acquire("error");
          const delay = decide.backoff(cfg, attempt, Math.random());
          attempt = Math.min(attempt + 1, 1 << 30);
          this.log.debug("acquire failed; backing off", this.fields({ kind: d.kind, backoff_ms: Math.round(delay / 1000), attempt }));
          await this.sleepUntil(nowUs() + delay);
          break;
        }
      }
    }
  }

  /** A quorum campaign round as the Outcome of one ACQUIRE (resign abandons it). */
  private async quorumAcquire(quorum: Quorum, owner: string, untilUs: number, blockUs: number | null): Promise<Outcome<t.Granted>> {
    const ac = new AbortController();
    this.currentOp = ac;
    if (this.resigned) ac.abort();
    try {
      const r = await quorum.acquire(this.key, owner, this.config.ttlMs, untilUs, ac.signal, blockUs);
      if (r === ABORTED) return { ok: false, aborted: true };
      if (r === "nil") return { ok: true, value: { token: null, acked: null } };
      if (typeof r === "number") return { ok: true, value: { token: r, acked: null } };
      return { ok: false, failure: r.failure, message: r.message };
    } finally {
      if (this.currentOp === ac) this.currentOp = null;
    }
  }

  /** A quorum renewal round as the Outcome of one RENEW (resign and the stop point abandon it). */
  private async quorumRenew(
    quorum: Quorum,
    owner: string,
    token: number,
    untilUs: number,
    stopUs: number,
  ): Promise<Outcome<{ renewed: boolean; acked: number | null }>> {
    const ac = new AbortController();
    this.currentOp = ac;
    if (this.resigned) ac.abort();
    // The stop point aborts a renewal round in flight: past it nothing else matters.
    const stopTimer = setTimeout(() => ac.abort(), Math.max(0, (stopUs - nowUs()) / 1000));
    try {
      const r = await quorum.renew(this.key, owner, token, this.config.ttlMs, untilUs, ac.signal);
      if (r === ABORTED) return { ok: false, aborted: true };
      if (typeof r === "boolean") return { ok: true, value: { renewed: r, acked: null } };
      return { ok: false, failure: r.failure, message: r.message };
    } finally {
      clearTimeout(stopTimer);
      if (this.currentOp === ac) this.currentOp = null;
    }
  }

  private async lead<R>(
    token: number,
    deadlineUs: number,
    nextRenewUs: number,
    task: (lease: LeaderContext) => R | Promise<R>,
  ): Promise<LeadEnd<R>> {
    const cfg = this.config;
    let deadline = deadlineUs;
    let nextRenew = nextRenewUs;
    // The reign's owner: every command of this reign (RENEW, RELEASE) names it.
    const owner = this.currentOwner;
    const lease = new LeaseImpl(token, this.key, owner, deadline, cfg, () => this.wake(), this.quorum !== null);
    this.leading = lease;
    this.metrics.leader(token, deadline / 1000, "acquired");
    this.log.info("became leader", this.fields({ token, reason: "acquired", lead_ms: Math.round((deadline - nowUs()) / 1000) }));
    this.emitSafe("elected", { key: this.key, owner, token, deadline: deadline / 1000 });

    // A holder, not a `let`: it is set by the task's callbacks, read by the loop.
    const task_: { state: TaskState<R> } = { state: { done: false } };
    void Promise.resolve()
      .then(() => task(lease))
      .then(
        (value) => {
          task_.state = { done: true, ok: true, value };
        },
        (error: unknown) => {
          task_.state = { done: true, ok: false, error };
        },
      )
      .finally(() => this.wake());

    let reason: StepDownReason;
    for (;;) {
      const stop = decide.stopAt(cfg, deadline);
      // Priority order, re-read from the clock and flags at every wake-up. Why the stop point
      // first: past it nothing else matters, not even a renewal that could still succeed.
      if (decide.mustStop(cfg, deadline, nowUs())) {
        reason = "deadline";
        break;
      }
      if (this.resigned) {
        reason = "resigned";
        break;
      }
      if (task_.state.done) {
        reason = "task_exited";
        break;
      }
      if (nowUs() < nextRenew) {
        await this.sleepUntil(Math.min(stop, nextRenew));
        continue;
      }
      const sentAt = nowUs();
      // Why: this may be the first instruction after a long pause (SIGSTOP, GC, VM freeze);
      // re-check the clock before trusting the leadership we think we have.
      if (decide.mustStop(cfg, deadline, sentAt)) {
        reason = "deadline";
        break;
      }
      const limitUs = decide.opLimit(cfg, null);
      const w = decide.waitFor(cfg);
      const r =
        this.quorum !== null
          ? await this.quorumRenew(this.quorum, owner, token, sentAt + limitUs, stop)
          : await this.op(this.cmdLink, limitUs, (c) => t.renew(c, this.key, owner, token, cfg.ttlMs, w), stop);
      const now = nowUs();
      if (!r.ok && "aborted" in r) continue; // resign or stop point: the checks above decide.
      this.observe("renew", r);
      const result: decide.RenewResult = r.ok
        ? r.value.renewed
          ? { reply: "renewed", acked: r.value.acked }
          : { reply: "not_held" }
        : { reply: "error", failure: r.failure };
      const d = decide.onRenew(cfg, deadline, sentAt, now, result);
      const latency = (now - sentAt) / 1e6;
      if (d.action === "renewed") {
        this.metrics.renew("renewed", latency);
        deadline = d.deadlineUs;
        nextRenew = d.nextRenewUs;
        lease.extend(deadline);
        this.metrics.deadline(deadline / 1000);
      } else if (d.action === "step_down") {
        this.metrics.renew(d.reason === "renew_rejected" ? "rejected" : "error", latency);
        reason = d.reason;
        break;
      } else {
        this.metrics.renew(d.why === "replicas_not_acked" ? "unconfirmed" : "error", latency);
        this.log.debug("renewal did not count; retrying", this.fields({ token, reason: d.why }));
        nextRenew = d.atUs;
      }
    }

    // Step down. Why end the lease (isLeader() false, signal aborted) before the task has
    // stopped: nobody may believe we lead past this point.
    lease.end(reason);
    this.leading = null;
    this.metrics.follower(reason);
    const f = this.fields({ token, reason });
    if (reason === "renew_rejected" || reason === "deadline") this.log.warn("lost leadership", f);
    else this.log.info("stepping down", f);
    this.emitSafe("stepped-down", { key: this.key, owner, token, reason });

    // The task was told at the stop point; give it until the deadline, or stopBudget of loop
    // time after its signal actually fired, whichever is later. Why the second bound: after an
    // event-loop stall (or a pause) the signal fires only when the loop runs again, possibly
    // past the deadline, and this code may run before the task had a single turn; judging then
    // would log a false overrun and skip the RELEASE of a task that stops at once. Waiting
    // longer is safe: the task runs (or not) whatever we wait, and the RELEASE still follows
    // its stop (R13); late, it names this reign's owner and token, so it answers 0 if the
    // lease already expired and went to someone else (R17).
    const taskDeadline = Math.max(deadline, lease.abortedAtUs + cfg.stopBudgetUs);
    while (!task_.state.done && nowUs() < taskDeadline) await this.sleepUntil(taskDeadline);
    const overrun = !task_.state.done;
    if (overrun) {
      // A JS task cannot be killed: count and log it. Protocol R13: do not RELEASE for a task
      // we cannot stop; the lease then ends on the server's own expiry (ttl*drift + margin after
      // our deadline), which keeps a successor out as long as it can. Past that only fencing
      // protects the resource from this task.
      this.metrics.taskOverrun();
      this.log.error("leader task still running at the local deadline and stopBudget after its signal (it ignores lease.signal); not releasing", f);
    }
    // Why release only now: the lease must stay ours until our task has stopped, otherwise the
    // next leader could start while we still work.
    // Quorum mode: after a lost renewal some nodes may still hold our lease (they said 1); they
    // are released now that the task has stopped (Q5, R13).
    const stillHeld = this.quorum !== null && this.quorum.holdsAfterRejection();
    if (!overrun && (decide.releaseAfter(reason) || stillHeld)) await this.release(owner, token);
    // R17: whatever happens to the RELEASE (answered, timed out and still in flight, not sent),
    // the next reign asks as a new owner, so a late RELEASE or RENEW of this one can only
    // answer 0.
    this.endReign();
    const s = task_.state;
    if (reason === "task_exited" && s.done) {
      return s.ok ? { kind: "finished", value: s.value } : { kind: "failed", error: s.error };
    }
    if (reason === "resigned") return { kind: "resigned" };
    return { kind: "lost", reason, token, task: s };
  }

  /** Best-effort LEASE.RELEASE (bounded by opTimeout); if it fails the lease expires on the server. */
  private async release(owner: string, token: number): Promise<void> {
    // Not abortable by resign: releasing IS the resign's last step.
    if (this.quorum !== null) {
      const released = await this.quorum.release(this.key, owner, token);
      this.log.info("released lease", this.fields({ token, released, nodes: this.quorum.n }));
      return;
    }
    const r = await this.cmdLink.run(this.config.opTimeoutUs / 1000, undefined, (c) => t.release(c, this.key, owner, token));
    this.observe("release", r);
    if (r.ok) this.log.info("released lease", this.fields({ token, released: r.value }));
    else if (!("aborted" in r)) {
      this.log.warn("release failed; the lease will expire on the server", this.fields({ token, error: r.message }));
    }
  }

  /** After resigning as a follower: an abandoned ACQUIRE may have been granted; release it if ours. */
  private async releaseStray(maybeGranted: boolean): Promise<void> {
    if (!maybeGranted) return;
    if (this.quorum !== null) {
      const owner = this.currentOwner;
      const mine = await this.quorum.getOwn(this.key, owner);
      if (mine !== null) await this.release(owner, mine.token);
      return;
    }
    const r = await this.cmdLink.run(this.config.opTimeoutUs / 1000, undefined, (c) => t.get(c, this.key));
    // The campaign's owner: a grant an abandoned ACQUIRE of this campaign may have obtained.
    const owner = this.currentOwner;
    if (r.ok && r.value !== null && r.value.owner === owner) await this.release(owner, r.value.token);
  }

  // ---- followers: observe the current leader (only while someone listens to `leader`) ----

  private startObserving(): void {
    const tick = async (): Promise<void> => {
      this.observeTimer = null;
      if (this.running === null) return;
      if (this.leading === null && this.listenerCount("leader") > 0) {
        const r: Outcome<LeaseInfo | null> =
          this.quorum !== null
            ? { ok: true, value: await this.quorum.observe(this.key, this.config.opTimeoutUs / 1000) }
            : await this.observeLink.run(this.config.opTimeoutUs / 1000, undefined, (c) => t.get(c, this.key));
        if (r.ok) {
          const id = r.value === null ? "" : `${r.value.owner}\u0000${r.value.token}`;
          if (id !== this.lastObserved) {
            this.lastObserved = id;
            this.emitSafe("leader", r.value);
          }
        }
      }
      if (this.running !== null) this.observeTimer = setTimeout(() => void tick(), this.observeIntervalMs);
    };
    this.observeTimer = setTimeout(() => void tick(), 0);
  }

  private stopObserving(): void {
    if (this.observeTimer !== null) clearTimeout(this.observeTimer);
    this.observeTimer = null;
    this.lastObserved = undefined;
  }
}

export { ErrorKind, StepDownReason };
