/**
 * The election loop's decisions as plain functions of (config, times, reply). No I/O and no
 * clock reads: every instant is passed in, so each rule is checked by the shared decision
 * vectors (conformance/vectors/*.json, loaded by test/vectors.test.ts). The loop in
 * elector.ts only executes what these functions return.
 *
 * Units: every time is a number of MICROSECONDS, instants on one arbitrary monotonic time line
 * (the loop uses performance.now() * 1000), exactly like the vectors. The one exception is
 * `ttlMs`, the TTL as sent to the server. This is a port of client/src/decide.rs.
 */

/** Everything a decision needs to know (the vectors' configuration object). */
export interface DecisionConfig {
  /** Lease TTL sent with ACQUIRE/RENEW, whole milliseconds. */
  ttlMs: number;
  /** Max relative clock-rate difference, client vs server (0.01 = 1 %). */
  drift: number;
  marginUs: number;
  /** The task is told to stop this long before the local deadline. */
  stopBudgetUs: number;
  renewIntervalUs: number;
  /** The loop's own time limit for one command (added to BLOCK and WAIT). */
  opTimeoutUs: number;
  /** BLOCK of a follower's ACQUIRE. */
  blockTimeoutUs: number;
  minReplicas: number;
  waitTimeoutUs: number;
  backoffMinUs: number;
  backoffMaxUs: number;
}

/**
 * Why a reign ended (the `reason` label of lease_transitions_total). A string-literal union
 * with a const of the same name: `reason === StepDownReason.Deadline`, or the text itself.
 */
export const StepDownReason = {
  /** LEASE.RENEW answered 0: the server says we do not hold the lease. */
  RenewRejected: "renew_rejected",
  /** The stop point came before a renewal confirmed the lease (R3, R9). */
  Deadline: "deadline",
  /** resign(), or the AbortSignal given to run()/withLeadership(). */
  Resigned: "resigned",
  /** The leader task returned (or threw) by itself. */
  TaskExited: "task_exited",
} as const;
export type StepDownReason = (typeof StepDownReason)[keyof typeof StepDownReason];

/** Failure kinds (the `kind` label of lease_redis_errors_total; docs/client-protocol.md §4). */
export const ErrorKind = {
  Connection: "connection",
  Timeout: "timeout",
  Grace: "grace",
  ReadOnly: "readonly",
  NoReplicas: "noreplicas",
  Loading: "loading",
  Fenced: "fenced",
  /** Quorum mode only (protocol Q9): that node's key is bound to another node list; a refusal of that node. */
  Membership: "membership",
  Rejected: "rejected",
  Server: "server",
  Protocol: "protocol",
} as const;
export type ErrorKind = (typeof ErrorKind)[keyof typeof ErrorKind];

/** Why a grant does not count yet (the `why` of on_acquire.json's `unconfirmed`). */
export const UnconfirmedWhy = {
  /** The reply came after its own stop point (R7). */
  LateReply: "late_reply",
  /** Fewer replicas acknowledged it than minReplicas (R11). */
  ReplicasNotAcked: "replicas_not_acked",
} as const;
export type UnconfirmedWhy = (typeof UnconfirmedWhy)[keyof typeof UnconfirmedWhy];

/** Why a renewal did not count (the `why` of on_renew.json's `retry`). */
export const RetryWhy = {
  /** No reply within the op limit (R5). */
  Timeout: "timeout",
  /** Any other failure. */
  Error: "error",
  /** Fewer replicas acknowledged it than minReplicas (R11). */
  ReplicasNotAcked: "replicas_not_acked",
} as const;
export type RetryWhy = (typeof RetryWhy)[keyof typeof RetryWhy];

/** A classified failure; `graceUs` only for kind "grace". */
export interface Failure {
  kind: ErrorKind;
  graceUs: number | null;
}

/** The WAIT sent on the same connection right after a grant/renewal. */
export interface WaitFor {
  replicas: number;
  timeoutMs: number;
}

const MS = 1000;
/** 2^53: every number on the wire must stay exact in JSON and JavaScript. */
export const TWO_POW_53 = 9007199254740992;

/** The configuration derived from a TTL (defaults), durations floored to whole µs. */
export function configDefaults(ttlMs: number): DecisionConfig {
  const ttlUs = ttlMs * MS;
  return {
    ttlMs,
    drift: 0.01,
    marginUs: Math.min(Math.floor(ttlUs / 100), 50 * MS),
    stopBudgetUs: Math.floor(ttlUs / 5),
    renewIntervalUs: Math.floor(ttlUs / 3),
    opTimeoutUs: Math.max(Math.floor(ttlUs / 5), 50 * MS),
    blockTimeoutUs: 5_000 * MS,
    minReplicas: 0,
    waitTimeoutUs: Math.floor(ttlUs / 10),
    backoffMinUs: 50 * MS,
    backoffMaxUs: 5_000 * MS,
  };
}

/** UTF-8 length: the module counts owner bytes, not characters. */
function utf8Bytes(s: string): number {
  return new TextEncoder().encode(s).length;
}

/** The longest owner base (R17): base + "#" + any reign up to 2^53-1 (16 digits) fits 256 bytes. */
export const MAX_OWNER_BASE_BYTES = 239;
/** The largest reign counter: exact in every language (JSON, JavaScript numbers). */
export const MAX_REIGN = TWO_POW_53 - 1;

/**
 * R17: the owner sent on the wire for reign `reign`: `base#reign`; null if the base is not
 * 1..=239 UTF-8 bytes or the counter is not an integer in [1, 2^53-1] (refused, never
 * truncated). Why per reign: every command the loop abandons may still execute later (the
 * kernel delivers bytes already written, even after the connection closed). With one owner for
 * every reign, a new reign's ACQUIRE is an idempotent refresh of a lease an earlier reign held
 * (same token), and that reign's late RELEASE then ends the NEW reign while it acts: two
 * leaders. With `base#n` the late command names an owner that no longer holds anything.
 */
export function reignOwner(base: string, reign: number): string | null {
  const bytes = utf8Bytes(base);
  if (bytes < 1 || bytes > MAX_OWNER_BASE_BYTES) return null;
  if (!Number.isSafeInteger(reign) || reign < 1 || reign > MAX_REIGN) return null;
  return `${base}#${reign}`;
}

/** Events of the loop that next_reign() is asked about (next_reign.json). */
export const ReignEvent = {
  Granted: "granted",
  Unconfirmed: "unconfirmed",
  NotGranted: "not_granted",
  Error: "error",
  SteppedDown: "stepped_down",
} as const;
export type ReignEvent = (typeof ReignEvent)[keyof typeof ReignEvent];

/**
 * R17: the reign counter after `event`. Only a step-down (leaving the leader state for any
 * reason) advances it. Why nothing else: inside one campaign the R7/R16 re-asks (late grant,
 * unacked grant, timed-out ACQUIRE) must refresh the campaign's OWN grant, so they keep the
 * owner.
 */
export function nextReign(reign: number, event: ReignEvent): number {
  return event === ReignEvent.SteppedDown ? reign + 1 : reign;
}

/**
 * The first rule a configuration breaks, as [rule, why]; null if it is usable. Rule names are
 * shared with every client (config_validate.json). Checked before anything is sent.
 */
export function configProblem(
  cfg: DecisionConfig,
  key: string,
  owner: string,
): [string, string] | null {
  if (key.length === 0) return ["key", "key is empty"];
  // `owner` is the base (R17): base + "#" + any reign number must fit the server's 256 bytes.
  const ownerBytes = utf8Bytes(owner);
  if (ownerBytes === 0 || ownerBytes > MAX_OWNER_BASE_BYTES) {
    return ["owner", `owner (the base of base#reign) must be 1..=${MAX_OWNER_BASE_BYTES} UTF-8 bytes`];
  }
  if (!Number.isInteger(cfg.ttlMs) || cfg.ttlMs < 1) {
    return ["ttl", "ttl must be a whole number of ms, at least 1"];
  }
  // Why 2^53: every number on the wire must stay exact in JSON and JavaScript.
  if (cfg.ttlMs >= TWO_POW_53) return ["ttl", "ttl must be below 2^53 ms"];
  // Why: a negative drift would push the local deadline past the server's expiry.
  if (!(cfg.drift >= 0 && cfg.drift < 0.5)) return ["drift", "drift must be in [0, 0.5)"];
  if (!(cfg.renewIntervalUs > 0)) return ["renew_interval", "renew_interval must be positive"];
  if (!(cfg.blockTimeoutUs >= MS)) {
    return ["block_timeout", "block_timeout must be at least 1 ms (BLOCK 0 blocks forever)"];
  }
  // Why: the task is told to stop at deadline - stop_budget; if that is not after the first
  // renewal, a leader would be cancelled before it ever renews.
  if (!(cfg.stopBudgetUs >= 0) || cfg.stopBudgetUs + cfg.renewIntervalUs >= leadTime(cfg)) {
    return ["stop_window", "renew_interval + stop_budget must be below ttl*(1-drift)-margin"];
  }
  if (!(cfg.opTimeoutUs > 0)) return ["op_timeout", "op_timeout must be positive"];
  if (!(cfg.backoffMinUs > 0) || !(cfg.backoffMaxUs >= cfg.backoffMinUs)) {
    return ["backoff", "backoff needs 0 < min <= max"];
  }
  // Why: WAIT takes whole ms and `WAIT n 0` waits forever.
  if (cfg.minReplicas > 0 && !(cfg.waitTimeoutUs >= MS)) {
    return ["wait_timeout", "wait_timeout must be at least 1 ms when min_replicas > 0"];
  }
  return null;
}

/**
 * The usable leadership time per grant/renewal: ttl * (1 - drift) - margin, rounded to the
 * nearest µs, never below 0.
 */
export function leadTime(cfg: DecisionConfig): number {
  return Math.max(0, Math.round(cfg.ttlMs * MS * (1 - cfg.drift)) - cfg.marginUs);
}

/**
 * Local deadline of a grant/renewal whose command was SENT at `sentAtUs`.
 *
 * Why the send instant (taken before sending) and not the reply time: the server starts its
 * TTL when it executes the command, which is after we sent it, so sent_at + ttl is never later
 * than the server's expiry as long as clock rates agree. Why (1 - drift): they may not agree
 * exactly. Why - margin: time passes between checking the deadline and the work relying on it.
 */
export function localDeadline(cfg: DecisionConfig, sentAtUs: number): number {
  return sentAtUs + leadTime(cfg);
}

/** When the task is told to stop: stop_budget before the deadline, so it HAS stopped by it. */
export function stopAt(cfg: DecisionConfig, deadlineUs: number): number {
  return deadlineUs - cfg.stopBudgetUs;
}

/** Stop leading on the clock alone (checked whenever the loop or the task wakes up). */
export function mustStop(cfg: DecisionConfig, deadlineUs: number, nowUs: number): boolean {
  return nowUs >= stopAt(cfg, deadlineUs);
}

/** The loop's own time limit for one command: block + op_timeout (+ wait_timeout). */
export function opLimit(cfg: DecisionConfig, blockUs: number | null): number {
  const wait = cfg.minReplicas > 0 ? cfg.waitTimeoutUs : 0;
  return (blockUs ?? 0) + cfg.opTimeoutUs + wait;
}

/** The WAIT to send after a write: none without min_replicas; whole ms, floored, at least 1. */
export function waitFor(cfg: DecisionConfig): WaitFor | null {
  if (cfg.minReplicas <= 0) return null;
  return { replicas: cfg.minReplicas, timeoutMs: wireMs(cfg.waitTimeoutUs) };
}

/**
 * A duration as the whole milliseconds the module and WAIT take: floored, at least 1.
 * Why at least 1: BLOCK 0 and WAIT n 0 mean "forever", and the module refuses a ttl of 0.
 */
export function wireMs(us: number): number {
  return Math.max(1, Math.floor(us / MS));
}

/** Upper bound of backoff(): min(max, min * 2^min(attempt, 20)) (exponent clamped first). */
export function backoffCap(cfg: DecisionConfig, attempt: number): number {
  const exp = Math.min(Math.max(0, attempt), 20);
  return Math.min(cfg.backoffMaxUs, cfg.backoffMinUs * 2 ** exp);
}

/**
 * Capped exponential backoff with full jitter: cap * clamp(unit, 0, 1), `unit` a uniform draw
 * in [0, 1) passed in. Why full jitter: after a Redis restart, 50 followers that lost their
 * connection at the same moment must not reconnect in the same millisecond.
 */
export function backoff(cfg: DecisionConfig, attempt: number, unit: number): number {
  return backoffCap(cfg, attempt) * Math.min(1, Math.max(0, unit));
}

/**
 * Pause after a nil ACQUIRE reply (`blockUs` = the BLOCK it was sent with, null = none).
 * Why: BLOCK answers nil only after its timeout, so a follower asks again at once; a BLOCKing
 * ask that came back nil in under half its timeout means something else is going on (a proxy,
 * a server that does not block) and the follower must not spin on it.
 */
export function notGrantedPause(
  cfg: DecisionConfig,
  blockUs: number | null,
  sentAtUs: number,
  nowUs: number,
  unit: number,
): number {
  if (blockUs !== null && Math.max(0, nowUs - sentAtUs) < blockUs / 2) {
    return backoff(cfg, 0, unit) + cfg.backoffMinUs;
  }
  return 0;
}

/** Delay before a failed renewal / unconfirmed grant is retried: renew_interval/4, >= 10 ms. */
export function retryInterval(cfg: DecisionConfig): number {
  return Math.max(Math.floor(cfg.renewIntervalUs / 4), 10 * MS);
}

/** Whether LEASE.RELEASE is sent after stepping down for `reason`. */
export function releaseAfter(reason: StepDownReason): boolean {
  // Why not after renew_rejected: the server already said we do not hold it.
  return reason !== "renew_rejected";
}

/**
 * Classify a server error line by its first word (its code), e.g. `GRACE 2345 ms left: ...`.
 * The loop decides on the kind alone.
 */
export function classifyServerError(line: string): Failure {
  const trimmed = line.trim();
  const space = trimmed.indexOf(" ");
  const code = space < 0 ? trimmed : trimmed.slice(0, space);
  const detail = space < 0 ? "" : trimmed.slice(space + 1).trim();
  switch (code) {
    case "GRACE": {
      // The module's contract: GRACE <ms> ... An unparsable number still means grace; wait a
      // short default (100 ms) rather than hammering the server.
      const first = detail.split(/\s+/)[0] ?? "";
      const ms = /^[0-9]+$/.test(first) ? Number(first) : 100;
      return { kind: "grace", graceUs: ms * MS };
    }
    case "READONLY":
      return { kind: "readonly", graceUs: null };
    case "NOREPLICAS":
      return { kind: "noreplicas", graceUs: null };
    case "LOADING":
      return { kind: "loading", graceUs: null };
    case "FENCED":
      return { kind: "fenced", graceUs: null };
    case "MEMBERSHIP":
      return { kind: "membership", graceUs: null };
    case "ERR":
    case "WRONGTYPE":
      // Our request is wrong: retrying does not help (the loop retries slowly and logs it).
      return { kind: "rejected", graceUs: null };
    default:
      return { kind: "server", graceUs: null };
  }
}

/** A failure of the transport itself (no server error line). */
export function classifyTransport(kind: "timeout" | "connection" | "protocol"): Failure {
  return { kind, graceUs: null };
}

/** The result of ACQUIRE (+ WAIT): a token, nil, or a classified failure. */
export type AcquireResult =
  | { reply: "granted"; token: number; acked: number | null }
  | { reply: "nil" }
  | { reply: "error"; failure: Failure };

export type AcquireDecision =
  | { action: "lead"; token: number; deadlineUs: number; nextRenewUs: number }
  | {
      action: "unconfirmed";
      token: number;
      retryInUs: number;
      why: UnconfirmedWhy;
    }
  | { action: "not_granted" }
  | { action: "grace"; waitUs: number }
  | { action: "backoff"; kind: ErrorKind };

/** What a follower does with an ACQUIRE result. */
export function onAcquire(
  cfg: DecisionConfig,
  sentAtUs: number,
  nowUs: number,
  result: AcquireResult,
): AcquireDecision {
  switch (result.reply) {
    case "nil":
      return { action: "not_granted" };
    case "error":
      if (result.failure.kind === "grace") {
        return { action: "grace", waitUs: result.failure.graceUs ?? 100 * MS };
      }
      return { action: "backoff", kind: result.failure.kind };
    case "granted": {
      const token = result.token;
      // Why: with min_replicas, a grant only the primary knows can vanish in a failover to a
      // replica that never saw it, and the new primary would grant it again. Never lead on it.
      if (cfg.minReplicas > 0 && (result.acked ?? 0) < cfg.minReplicas) {
        // Why not faster: each retry refreshes our unused grant; replicas need time.
        return {
          action: "unconfirmed",
          token,
          retryInUs: retryInterval(cfg),
          why: "replicas_not_acked",
        };
      }
      const deadlineUs = localDeadline(cfg, sentAtUs);
      // Why: a reply that came after its own stop point leaves no safe leadership time
      // (typical after a long BLOCK); re-ask at once without BLOCK: same owner = refresh.
      if (nowUs >= stopAt(cfg, deadlineUs)) {
        return { action: "unconfirmed", token, retryInUs: 0, why: "late_reply" };
      }
      return {
        action: "lead",
        token,
        deadlineUs,
        nextRenewUs: sentAtUs + cfg.renewIntervalUs,
      };
    }
  }
}

/** The result of RENEW (+ WAIT). */
export type RenewResult =
  | { reply: "renewed"; acked: number | null }
  | { reply: "not_held" }
  | { reply: "error"; failure: Failure };

export type RenewDecision =
  | { action: "renewed"; deadlineUs: number; nextRenewUs: number }
  | { action: "step_down"; reason: StepDownReason }
  | { action: "retry"; atUs: number; why: RetryWhy };

/** What a leader does with a RENEW result (or failure). */
export function onRenew(
  cfg: DecisionConfig,
  deadlineUs: number,
  sentAtUs: number,
  nowUs: number,
  result: RenewResult,
): RenewDecision {
  const stop = stopAt(cfg, deadlineUs);
  const retry = (why: RetryWhy): RenewDecision => {
    // Why: errors and timeouts say nothing about the lease; the last confirmed deadline still
    // holds, so keep leading and retrying until the stop point, then step down.
    if (nowUs >= stop) return { action: "step_down", reason: "deadline" };
    return { action: "retry", atUs: Math.min(nowUs + retryInterval(cfg), stop), why };
  };
  switch (result.reply) {
    case "not_held":
      // Why: 0 is the server's word that we no longer hold the lease. The local deadline may
      // still be ahead, but it is backed by nothing: step down at once.
      return { action: "step_down", reason: "renew_rejected" };
    case "renewed": {
      // Why: an unacknowledged renewal may be lost in a failover; the new primary then expires
      // the lease at the OLD expiry, so only the old deadline is backed.
      if (cfg.minReplicas > 0 && (result.acked ?? 0) < cfg.minReplicas) {
        return retry("replicas_not_acked");
      }
      // The deadline never moves back (a renewal sent before the current grant cannot
      // shorten it).
      const newDeadline = Math.max(localDeadline(cfg, sentAtUs), deadlineUs);
      if (nowUs >= stopAt(cfg, newDeadline)) return { action: "step_down", reason: "deadline" };
      return {
        action: "renewed",
        deadlineUs: newDeadline,
        nextRenewUs: sentAtUs + cfg.renewIntervalUs,
      };
    }
    case "error":
      return retry(result.failure.kind === "timeout" ? "timeout" : "error");
  }
}
