import type { ErrorKind, StepDownReason } from "./decide.js";

/**
 * What the elector reports to a metrics backend. The core depends on no metrics library: the
 * default sink does nothing; `redis-lease/prometheus` (PromMetrics) implements this on
 * prom-client (an optional peer dependency) with the Rust client's metric names and labels:
 *
 * | metric | type | labels (plus `key`) |
 * |---|---|---|
 * | lease_is_leader | gauge 0/1 | |
 * | lease_token | gauge (0 when not leading) | |
 * | lease_transitions_total | counter | to (leader/follower), reason |
 * | lease_acquire_attempts_total | counter | result (granted, not_granted, unconfirmed, late, grace, error) |
 * | lease_renew_total | counter | result (renewed, rejected, unconfirmed, error) |
 * | lease_renew_latency_seconds | histogram | |
 * | lease_deadline_seconds | gauge: seconds to the local deadline (0 when not leading) | |
 * | lease_redis_errors_total | counter | op, kind |
 * | lease_redis_up | gauge 0/1 | |
 * | lease_task_overrun_total | counter | |
 */
export interface MetricsSink {
  /** Became leader: `deadlineMs` on the performance.now() time line. */
  leader(token: number, deadlineMs: number, reason: "acquired"): void;
  /** Stepped down: the `reason` label of lease_transitions_total. */
  follower(reason: StepDownReason): void;
  /** The local deadline moved (renewal), or null when not leading. */
  deadline(deadlineMs: number | null): void;
  acquire(result: string): void;
  renew(result: string, latencySeconds: number): void;
  redisError(op: string, kind: ErrorKind): void;
  redisUp(up: boolean): void;
  taskOverrun(): void;
}

/** Default sink: no metrics. */
export const noMetrics: MetricsSink = {
  leader: () => undefined,
  follower: () => undefined,
  deadline: () => undefined,
  acquire: () => undefined,
  renew: () => undefined,
  redisError: () => undefined,
  redisUp: () => undefined,
  taskOverrun: () => undefined,
};
