// Loader of the shared decision vectors: runs one case of any decision file against
// src/decide.ts or src/quorumDecide.ts and compares the result with the case's `expect`.
import assert from "node:assert/strict";
import { join } from "node:path";
import * as d from "../src/decide.js";
import * as q from "../src/quorumDecide.js";
import { membershipIdOf, nodeIdentity } from "../src/quorum.js";
import { clientDir } from "./support.js";

export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
export type Obj = { [k: string]: Json };

export interface VectorCase {
  name: string;
  config?: Obj;
  input: Obj;
  expect: Obj;
}
export interface VectorFile {
  decision: string;
  defaults?: { config?: Obj };
  cases: VectorCase[];
}

export const vectorsDir = join(clientDir(), "..", "..", "conformance", "vectors");

/** Vector configuration keys -> DecisionConfig fields. */
const CONFIG_KEYS: Record<string, keyof d.DecisionConfig> = {
  ttl_ms: "ttlMs",
  drift: "drift",
  margin_us: "marginUs",
  stop_budget_us: "stopBudgetUs",
  renew_interval_us: "renewIntervalUs",
  op_timeout_us: "opTimeoutUs",
  block_timeout_us: "blockTimeoutUs",
  min_replicas: "minReplicas",
  wait_timeout_us: "waitTimeoutUs",
  backoff_min_us: "backoffMinUs",
  backoff_max_us: "backoffMaxUs",
};

function num(v: Json | undefined, what: string): number {
  if (typeof v !== "number") throw new Error(`${what}: expected a number, got ${JSON.stringify(v)}`);
  return v;
}
function str(v: Json | undefined, what: string): string {
  if (typeof v !== "string") throw new Error(`${what}: expected a string, got ${JSON.stringify(v)}`);
  return v;
}
function obj(v: Json | undefined, what: string): Obj {
  if (v === null || typeof v !== "object" || Array.isArray(v)) {
    throw new Error(`${what}: expected an object, got ${JSON.stringify(v)}`);
  }
  return v;
}

function configOf(file: VectorFile, c: VectorCase): d.DecisionConfig {
  const merged: Obj = { ...(file.defaults?.config ?? {}), ...(c.config ?? {}) };
  const cfg: Partial<d.DecisionConfig> = {};
  for (const [k, v] of Object.entries(merged)) {
    const field = CONFIG_KEYS[k];
    if (field === undefined) throw new Error(`unknown config key ${k}`);
    cfg[field] = num(v, k);
  }
  for (const field of Object.values(CONFIG_KEYS)) {
    if (cfg[field] === undefined) throw new Error(`config key for ${field} missing`);
  }
  return cfg as d.DecisionConfig;
}

function failureOf(r: Obj): d.Failure {
  const kind = str(r["kind"], "result.kind") as d.ErrorKind;
  const g = r["grace_us"];
  return { kind, graceUs: g === undefined || g === null ? null : num(g, "grace_us") };
}

function acquireResult(r: Obj): d.AcquireResult {
  switch (r["reply"]) {
    case "granted": {
      const acked = r["acked"];
      return {
        reply: "granted",
        token: num(r["token"], "token"),
        acked: acked === null || acked === undefined ? null : num(acked, "acked"),
      };
    }
    case "nil":
      return { reply: "nil" };
    case "error":
      return { reply: "error", failure: failureOf(r) };
    default:
      throw new Error(`unknown acquire reply ${JSON.stringify(r["reply"])}`);
  }
}

function renewResult(r: Obj): d.RenewResult {
  switch (r["reply"]) {
    case "renewed": {
      const acked = r["acked"];
      return {
        reply: "renewed",
        acked: acked === null || acked === undefined ? null : num(acked, "acked"),
      };
    }
    case "not_held":
      return { reply: "not_held" };
    case "error":
      return { reply: "error", failure: failureOf(r) };
    default:
      throw new Error(`unknown renew reply ${JSON.stringify(r["reply"])}`);
  }
}

function arr(v: Json | undefined, what: string): Json[] {
  if (!Array.isArray(v)) throw new Error(`${what}: expected an array, got ${JSON.stringify(v)}`);
  return v;
}

/** A round's ACQUIRE replies, one per node in node order (null = no reply in time). */
function acquireReplies(input: Obj): q.AcquireReply[] {
  return arr(input["replies"], "replies").map((r): q.AcquireReply => {
    if (r === null) return null;
    const a = acquireResult(obj(r, "reply"));
    if (a.reply === "granted") return a.token;
    if (a.reply === "nil") return "refused";
    return { fail: a.failure, message: "vector" };
  });
}

function renewReplies(input: Obj): Array<q.NodeReply<boolean>> {
  return arr(input["replies"], "replies").map((r): q.NodeReply<boolean> => {
    if (r === null) return null;
    const a = renewResult(obj(r, "reply"));
    if (a.reply === "error") return { fail: a.failure, message: "vector" };
    return a.reply === "renewed";
  });
}

const nullableBlock = (v: Json | undefined): number | null =>
  v === null || v === undefined ? null : num(v, "block_us");

/** Run one case's decision; the result uses the vectors' key names. */
export function actual(file: VectorFile, c: VectorCase): Obj {
  const input = c.input;
  switch (file.decision) {
    case "config_defaults": {
      const cfg = d.configDefaults(num(input["ttl_ms"], "ttl_ms"));
      const out: Obj = {};
      for (const [k, field] of Object.entries(CONFIG_KEYS)) out[k] = cfg[field];
      return out;
    }
    case "config_validate": {
      const p = d.configProblem(
        configOf(file, c),
        str(input["key"], "key"),
        str(input["owner"], "owner"),
      );
      return { valid: p === null, rule: p === null ? null : p[0] };
    }
    case "deadline": {
      const cfg = configOf(file, c);
      const deadline = d.localDeadline(cfg, num(input["sent_at_us"], "sent_at_us"));
      return {
        lead_time_us: d.leadTime(cfg),
        deadline_us: deadline,
        stop_at_us: d.stopAt(cfg, deadline),
      };
    }
    case "op_limit":
      return { limit_us: d.opLimit(configOf(file, c), nullableBlock(input["block_us"])) };
    case "wait_for": {
      const w = d.waitFor(configOf(file, c));
      return { wait: w === null ? null : { replicas: w.replicas, timeout_ms: w.timeoutMs } };
    }
    case "retry_interval":
      return { retry_us: d.retryInterval(configOf(file, c)) };
    case "backoff": {
      const cfg = configOf(file, c);
      const attempt = num(input["attempt"], "attempt");
      const unit = num(input["unit"], "unit");
      return { cap_us: d.backoffCap(cfg, attempt), delay_us: d.backoff(cfg, attempt, unit) };
    }
    case "classify_error": {
      let f: d.Failure;
      if (input["error"] !== undefined) {
        f = d.classifyServerError(str(input["error"], "error"));
      } else {
        const t = str(input["transport"], "transport");
        if (t !== "timeout" && t !== "connection" && t !== "protocol") {
          throw new Error(`unknown transport failure ${t}`);
        }
        f = d.classifyTransport(t);
      }
      return { kind: f.kind, grace_us: f.graceUs };
    }
    case "on_acquire": {
      const a = d.onAcquire(
        configOf(file, c),
        num(input["sent_at_us"], "sent_at_us"),
        num(input["now_us"], "now_us"),
        acquireResult(obj(input["result"], "result")),
      );
      switch (a.action) {
        case "lead":
          return {
            action: a.action,
            token: a.token,
            deadline_us: a.deadlineUs,
            next_renew_us: a.nextRenewUs,
          };
        case "unconfirmed":
          return { action: a.action, token: a.token, retry_in_us: a.retryInUs, why: a.why };
        case "not_granted":
          return { action: a.action };
        case "grace":
          return { action: a.action, wait_us: a.waitUs };
        case "backoff":
          return { action: a.action, kind: a.kind };
      }
      break;
    }
    case "not_granted_pause":
      return {
        pause_us: d.notGrantedPause(
          configOf(file, c),
          nullableBlock(input["block_us"]),
          num(input["sent_at_us"], "sent_at_us"),
          num(input["now_us"], "now_us"),
          num(input["unit"], "unit"),
        ),
      };
    case "on_renew": {
      const r = d.onRenew(
        configOf(file, c),
        num(input["deadline_us"], "deadline_us"),
        num(input["sent_at_us"], "sent_at_us"),
        num(input["now_us"], "now_us"),
        renewResult(obj(input["result"], "result")),
      );
      switch (r.action) {
        case "renewed":
          return { action: r.action, deadline_us: r.deadlineUs, next_renew_us: r.nextRenewUs };
        case "step_down":
          return { action: r.action, reason: r.reason };
        case "retry":
          return { action: r.action, at_us: r.atUs, why: r.why };
      }
      break;
    }
    case "must_stop":
      return {
        stop: d.mustStop(
          configOf(file, c),
          num(input["deadline_us"], "deadline_us"),
          num(input["now_us"], "now_us"),
        ),
      };
    case "step_down": {
      const reason = str(input["reason"], "reason");
      if (!["renew_rejected", "deadline", "resigned", "task_exited"].includes(reason)) {
        throw new Error(`unknown step-down reason ${reason}`);
      }
      return { release: d.releaseAfter(reason as d.StepDownReason) };
    }
    case "reign_owner":
      return { reign_owner: d.reignOwner(str(input["owner"], "owner"), num(input["reign"], "reign")) };
    case "next_reign": {
      const event = str(input["event"], "event");
      if (!["granted", "unconfirmed", "not_granted", "error", "stepped_down"].includes(event)) {
        throw new Error(`unknown reign event ${event}`);
      }
      return { reign: d.nextReign(num(input["reign"], "reign"), event as d.ReignEvent) };
    }
    case "quorum_after_acquire": {
      const a = q.afterAcquire("correct", acquireReplies(input), 0);
      switch (a.action) {
        case "raise":
          return { action: "raise", target: a.target, nodes: a.nodes };
        case "abort": {
          const failed = typeof a.outcome === "string" ? null : a.outcome.fail;
          return {
            action: "abort",
            partial: a.release.map(([n, t]) => [n, t]),
            outcome: typeof a.outcome === "string" ? a.outcome : "error",
            error_kind: failed === null ? null : failed.kind,
            grace_us: failed !== null && failed.kind === "grace" ? failed.graceUs : null,
          };
        }
        case "act_unified":
          throw new Error("act_unified is a negative control's");
      }
      break;
    }
    case "quorum_after_renew": {
      const r = renewReplies(input);
      return { action: q.afterRenew("correct", r), confirmed: q.raiseConfirmed("correct", r, r.length) };
    }
    case "quorum_wait": {
      const urls = arr(input["urls"], "urls").map((u) => str(u, "url"));
      const released = input["released_any"];
      if (typeof released !== "boolean") throw new Error("released_any: expected a boolean");
      const node = q.waitNode(urls);
      const wait = q.waitAfterRefusal(
        acquireReplies(input),
        node,
        released,
        nullableBlock(input["block_us"]),
        configOf(file, c).opTimeoutUs,
        configOf(file, c).renewIntervalUs,
      );
      return { wait_node: node, wait_us: wait };
    }
    case "quorum_identity": {
      const known = arr(input["known"], "known").map((k) => (k === null ? null : str(k, "known")));
      const r = q.checkIdentity(num(input["me"], "me"), str(input["seen"], "seen"), known);
      return { check: r.kind, of: r.kind === "duplicate" ? r.of : null };
    }
    case "quorum_quarantine": {
      const cfg = configOf(file, c);
      return { quarantine_us: q.quarantineUs(cfg.ttlMs, num(input["node_quarantine_us"], "node_quarantine_us"), cfg.drift) };
    }
    case "membership_id": {
      const nodes = input["nodes"];
      if (!Array.isArray(nodes)) throw new Error("nodes: expected an array");
      const urls = nodes.map((u, i) => str(u, `nodes[${i}]`));
      const ids = urls.map(nodeIdentity).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
      return { identities: ids, membership_id: membershipIdOf(urls) };
    }
  }
  throw new Error(`unknown decision ${JSON.stringify(file.decision)}`);
}

/** Compare expect against actual: every expect key must be known; *_us within ±1 µs. */
export function compare(where: string, expect: Json, got: Json | undefined, key: string): void {
  if (Array.isArray(expect)) {
    if (!Array.isArray(got) || got.length !== expect.length) {
      assert.fail(`${where}: ${key}: expected ${JSON.stringify(expect)}, got ${JSON.stringify(got)}`);
    }
    expect.forEach((v, i) => compare(where, v, got[i], key));
    return;
  }
  if (expect !== null && typeof expect === "object" && !Array.isArray(expect)) {
    if (got === null || typeof got !== "object" || Array.isArray(got) || got === undefined) {
      assert.fail(`${where}: ${key}: expected ${JSON.stringify(expect)}, got ${JSON.stringify(got)}`);
    }
    for (const k of Object.keys(expect)) {
      if (!(k in got)) assert.fail(`${where}: unknown key "${k}" in expect (not produced by this decision)`);
    }
    for (const k of Object.keys(got)) {
      if (!(k in expect)) assert.fail(`${where}: produced key "${k}" missing from expect`);
    }
    for (const [k, v] of Object.entries(expect)) compare(where, v, got[k], k);
    return;
  }
  if (Array.isArray(expect)) {
    if (!Array.isArray(got) || got.length !== expect.length) {
      assert.fail(`${where}: ${key}: expected ${JSON.stringify(expect)}, got ${JSON.stringify(got)}`);
    }
    expect.forEach((v, i) => compare(where, v, got[i], key));
    return;
  }
  if (key.endsWith("_us") && typeof expect === "number") {
    if (typeof got !== "number" || Math.abs(Math.round(got) - expect) > 1) {
      assert.fail(`${where}: ${key}: expected ${expect} (±1 µs), got ${JSON.stringify(got)}`);
    }
    return;
  }
  if (expect !== got) {
    assert.fail(`${where}: ${key}: expected ${JSON.stringify(expect)}, got ${JSON.stringify(got)}`);
  }
}

/** Check every case of one parsed file; returns one message per failing case (file + case). */
export function checkFile(name: string, file: VectorFile): string[] {
  if (!Array.isArray(file.cases) || file.cases.length === 0) return [`${name}: no cases`];
  const failures: string[] = [];
  for (const c of file.cases) {
    const where = `${name} / case "${c.name}"`;
    try {
      compare(where, c.expect, actual(file, c), "expect");
    } catch (e) {
      const msg = e instanceof Error ? e.message : String(e);
      failures.push(msg.startsWith(name) ? msg : `${where}: ${msg}`);
    }
  }
  return failures;
}
