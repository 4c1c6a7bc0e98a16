/**
 * One-shot leadership in node-redlock's `using` style:
 *
 *   await withLeadership(redis, "jobs:report", 10_000, async (lease) => {
 *     for (const step of steps) {
 *       if (lease.signal.aborted) break;   // or: if (!lease.isLeader()) break;
 *       await step(lease.token, { signal: lease.signal });
 *     }
 *   });
 *
 * Campaigns until elected, runs the routine once while keeping the lease renewed, then
 * releases the lease and resolves with the routine's value (rejects with its error, after the
 * release). If leadership is lost meanwhile, `lease.signal` aborts before the local deadline;
 * the routine's value is still returned once it stopped (check `lease.signal.aborted` to know).
 */
import { Elector, type ElectorOptions, type Lease } from "./elector.js";
import type { ConnectionSpec } from "./transport.js";

/** Everything of ElectorOptions but the connection, key and TTL, plus an abort signal. */
export type LeadershipSettings = Omit<ElectorOptions, "redis" | "key" | "ttlMs"> & {
  /** Give up campaigning (or stop the routine's leadership) when this aborts. */
  signal?: AbortSignal;
};

export async function withLeadership<T>(
  redis: ConnectionSpec,
  key: string,
  ttlMs: number,
  routine: (lease: Lease) => Promise<T> | T,
  settings: LeadershipSettings = {},
): Promise<T> {
  const { signal, ...rest } = settings;
  signal?.throwIfAborted();
  const elector = new Elector({ ...rest, redis, key, ttlMs });
  const onAbort = (): void => void elector.resign();
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    const outcome = await elector.run(routine);
    if (outcome.kind === "task_finished") return outcome.value;
    // Resigned through `signal` before the routine ran to completion.
    throw signal?.reason ?? new Error("withLeadership: resigned");
  } finally {
    signal?.removeEventListener("abort", onAbort);
  }
}

/** A connection spec bound once, like a Redlock instance: `client.using(key, ttl, routine)`. */
export class LeaseClient {
  constructor(
    readonly redis: ConnectionSpec,
    readonly defaults: Omit<LeadershipSettings, "signal"> = {},
  ) {}

  /** withLeadership() on this client's connection. */
  using<T>(key: string, ttlMs: number, routine: (lease: Lease) => Promise<T> | T, settings: LeadershipSettings = {}): Promise<T> {
    return withLeadership(this.redis, key, ttlMs, routine, { ...this.defaults, ...settings });
  }

  /** withLeadership() under its issue's name. */
  withLeadership<T>(key: string, ttlMs: number, routine: (lease: Lease) => Promise<T> | T, settings: LeadershipSettings = {}): Promise<T> {
    return this.using(key, ttlMs, routine, settings);
  }

  /** A long-running Elector for `key` on this client's connection. */
  elector(key: string, ttlMs: number, options: Omit<LeadershipSettings, "signal"> = {}): Elector {
    return new Elector({ ...this.defaults, ...options, redis: this.redis, key, ttlMs });
  }
}
