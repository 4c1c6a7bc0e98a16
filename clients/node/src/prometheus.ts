/**
 * Optional prom-client metrics (import "redis-lease/prometheus"; prom-client is an optional
 * peer dependency, loaded only by this module). Same names, labels and buckets as the Rust
 * client (client/src/metrics.rs); every series carries the label `key`, so several electors
 * share one registry.
 */
import { Counter, Gauge, Histogram, Registry, register as defaultRegistry } from "prom-client";
import type { ErrorKind, StepDownReason } from "./decide.js";
import type { MetricsSink } from "./metrics.js";

interface Families {
  isLeader: Gauge<"key">;
  token: Gauge<"key">;
  transitions: Counter<"key" | "to" | "reason">;
  acquire: Counter<"key" | "result">;
  renew: Counter<"key" | "result">;
  renewLatency: Histogram<"key">;
  deadlineSeconds: Gauge<"key">;
  redisErrors: Counter<"key" | "op" | "kind">;
  redisUp: Gauge<"key">;
  taskOverrun: Counter<"key">;
  /** key -> current deadline (performance.now() ms), read at scrape time. */
  deadlines: Map<string, number | null>;
}

const perRegistry = new WeakMap<Registry, Families>();

function families(registry: Registry): Families {
  const known = perRegistry.get(registry);
  if (known) return known;
  const registers = [registry];
  const deadlines = new Map<string, number | null>();
  const f: Families = {
    isLeader: new Gauge({ name: "lease_is_leader", help: "1 while this instance leads", labelNames: ["key"], registers }),
    token: new Gauge({ name: "lease_token", help: "Current fencing token (0 when not leading)", labelNames: ["key"], registers }),
    transitions: new Counter({
      name: "lease_transitions_total",
      help: "Leadership transitions",
      labelNames: ["key", "to", "reason"],
      registers,
    }),
    acquire: new Counter({
      name: "lease_acquire_attempts_total",
      help: "LEASE.ACQUIRE attempts by result",
      labelNames: ["key", "result"],
      registers,
    }),
    renew: new Counter({ name: "lease_renew_total", help: "LEASE.RENEW attempts by result", labelNames: ["key", "result"], registers }),
    renewLatency: new Histogram({
      name: "lease_renew_latency_seconds",
      help: "LEASE.RENEW round trip (incl. WAIT)",
      labelNames: ["key"],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5],
      registers,
    }),
    deadlineSeconds: new Gauge({
      name: "lease_deadline_seconds",
      help: "Seconds to the local leadership deadline",
      labelNames: ["key"],
      registers,
      // Fresh at every scrape, like the Rust client's render().
      collect() {
        const now = performance.now();
        for (const [key, d] of deadlines) this.set({ key }, d === null ? 0 : Math.max(0, (d - now) / 1000));
      },
    }),
    redisErrors: new Counter({
      name: "lease_redis_errors_total",
      help: "Failed Redis commands",
      labelNames: ["key", "op", "kind"],
      registers,
    }),
    redisUp: new Gauge({ name: "lease_redis_up", help: "1 if the last command reached Redis", labelNames: ["key"], registers }),
    taskOverrun: new Counter({
      name: "lease_task_overrun_total",
      help: "Leader task still running at the local deadline",
      labelNames: ["key"],
      registers,
    }),
    deadlines,
  };
  perRegistry.set(registry, f);
  return f;
}

/** Metrics of one elector (one lease key) in `registry` (default: prom-client's global one). */
export class PromMetrics implements MetricsSink {
  private readonly f: Families;
  readonly registry: Registry;

  constructor(readonly key: string, registry: Registry = defaultRegistry) {
    this.registry = registry;
    this.f = families(registry);
    this.f.deadlines.set(key, null);
    this.f.isLeader.set({ key }, 0);
    this.f.token.set({ key }, 0);
  }

  leader(token: number, deadlineMs: number, reason: "acquired"): void {
    const key = this.key;
    this.f.isLeader.set({ key }, 1);
    this.f.token.set({ key }, token);
    this.f.transitions.inc({ key, to: "leader", reason });
    this.deadline(deadlineMs);
  }
  follower(reason: StepDownReason): void {
    const key = this.key;
    this.f.isLeader.set({ key }, 0);
    this.f.token.set({ key }, 0);
    this.f.transitions.inc({ key, to: "follower", reason });
    this.deadline(null);
  }
  deadline(deadlineMs: number | null): void {
    this.f.deadlines.set(this.key, deadlineMs);
  }
  acquire(result: string): void {
    this.f.acquire.inc({ key: this.key, result });
  }
  renew(result: string, latencySeconds: number): void {
    this.f.renew.inc({ key: this.key, result });
    this.f.renewLatency.observe({ key: this.key }, latencySeconds);
  }
  redisError(op: string, kind: ErrorKind): void {
    this.f.redisErrors.inc({ key: this.key, op, kind });
  }
  redisUp(up: boolean): void {
    this.f.redisUp.set({ key: this.key }, up ? 1 : 0);
  }
  taskOverrun(): void {
    this.f.taskOverrun.inc({ key: this.key });
  }
}
