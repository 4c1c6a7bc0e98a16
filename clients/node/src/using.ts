/**
 * One-shot leadership in node-redlock's `using` style:
 *
 *   await withLeadership(redis, "jobs:report", 10_000, async (lease) => {
 *     for (const step of steps) {
 *       if (!lease.isLeader()) break;      // reads the clock: right even after a stall
 *       await step(lease.token);           // fenced with lease.token where the resource can
 *     }
 *   });
 *
 * Campaigns until elected, runs the routine ONCE in that one reign while keeping the lease
 * renewed, then releases the lease and ends; it never campaigns a second time.
 * - The routine returned while still leader: resolves with its value (after the release).
 * - The routine threw while still leader: rejects with its error (after the release).
 * - The reign ended first (renewal refused, stop point reached): `lease.signal` aborted, and once
 *   the routine has stopped (or the local deadline passed) the promise rejects with a
 *   `LeadershipLost` (`reason`, `token`; `cause` = the routine's error if it threw). The
 *   routine's value, if it returned one after the loss, is dropped: its work may have outlived
 *   the lease, so the caller must not take it as done under leadership.
 * - `settings.signal` aborted: resigns; rejects with the signal's reason.
 */
import { Elector, type ElectorOptions, type LeaderContext } from "./elector.js";
import type { ConnectionSpec } from "./transport.js";

/** Everything of ElectorOptions but the connection, key and TTL, plus an abort signal. */
export type LeadershipSettings = Omit<ElectorOptions, "redis" | "key" | "ttlMs"> & {
  /** Give up campaigning (or stop the routine's leadership) when this aborts. */
  signal?: AbortSignal;
};

export async function withLeadership<T>(
  redis: ConnectionSpec | ConnectionSpec[],
  key: string,
  ttlMs: number,
  routine: (lease: LeaderContext) => Promise<T> | T,
  settings: LeadershipSettings = {},
): Promise<T> {
  const { signal, ...rest } = settings;
  signal?.throwIfAborted();
  const elector = new Elector({ ...rest, redis, key, ttlMs });
  const onAbort = (): void => void elector.resign();
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    const outcome = await elector.runOneReign(routine);
    if (outcome.kind === "task_finished") return outcome.value;
    if (outcome.kind === "lost") throw outcome.lost;
    // Resigned through `signal` before the routine ran to completion.
    throw signal?.reason ?? new Error("withLeadership: resigned");
  } finally {
    signal?.removeEventListener("abort", onAbort);
  }
}

/** A connection spec bound once, like a Redlock instance: `client.using(key, ttl, routine)`. */
export class LeaseClient {
  constructor(
    readonly redis: ConnectionSpec | ConnectionSpec[],
    readonly defaults: Omit<LeadershipSettings, "signal"> = {},
  ) {}

  /** withLeadership() on this client's connection. */
  using<T>(key: string, ttlMs: number, routine: (lease: LeaderContext) => Promise<T> | T, settings: LeadershipSettings = {}): Promise<T> {
    return withLeadership(this.redis, key, ttlMs, routine, { ...this.defaults, ...settings });
  }

  /** withLeadership() under its issue's name. */
  withLeadership<T>(key: string, ttlMs: number, routine: (lease: LeaderContext) => Promise<T> | T, settings: LeadershipSettings = {}): Promise<T> {
    return this.using(key, ttlMs, routine, settings);
  }

  /** A long-running Elector for `key` on this client's connection. */
  elector(key: string, ttlMs: number, options: Omit<LeadershipSettings, "signal"> = {}): Elector {
    return new Elector({ ...this.defaults, ...options, redis: this.redis, key, ttlMs });
  }
}
