/**
 * Quorum mode's decisions (protocol §9a, docs/quorum.md) as plain functions of the replies of
 * one round: no I/O, no clock. A port of client/src/quorum_decide.rs (as the Go and Python
 * ports are).
 *
 * quorum.ts sends the commands and executes what these return; the single-node rules (the
 * deadline from the instant before the first send, the stop point, backoff) stay those of
 * decide.ts, because the quorum transport sits UNDER the same election loop.
 *
 * A node's reply in one round: `null` (no reply before the round's limit: it may or may not
 * have run the command), `{ fail }` (an error reply or a broken connection), or the value
 * (ACQUIRE: the token, or "refused" for nil; RAISE/RENEW/RELEASE: true for 1, false for 0).
 */
import { createHash } from "node:crypto";
import type { Failure } from "./decide.js";

/** A failure of one node in one round. */
export interface NodeFail {
  fail: Failure;
  message: string;
}

export type NodeReply<T> = null | NodeFail | T;
/** ACQUIRE's reply at one node: the granted token, "refused" (nil: held by someone else), ... */
export type AcquireReply = NodeReply<number | "refused">;

export function isFail(r: unknown): r is NodeFail {
  return typeof r === "object" && r !== null && "fail" in r;
}

/**
 * Q1: the smallest number of nodes that is more than half of `n`. Any two sets of this size
 * share a node, which is what both safety arguments rest on (docs/quorum.md §3).
 */
export function majority(n: number): number {
  return Math.floor(n / 2) + 1;
}

/** Deliberately broken variants for negative controls; never use outside a test. */
export type QuorumControl =
  | "correct"
  // Skip the raise: act on the token of any one granting node (breaks "one token per reign").
  | "no-unify"
  // Lead on a single grant (breaks "any two majorities intersect").
  | "minority";

/** Grants (and raise confirmations) a round needs on `n` nodes. */
export function need(control: QuorumControl, n: number): number {
  return control === "minority" ? 1 : majority(n);
}

// ---- node identity (Q6, Q7) ----

export type IdentityCheck =
  /** The first identity seen at this node: remember it. */
  | { kind: "first" }
  /** The same server as before (a reconnect). */
  | { kind: "same" }
  /**
   * Another server answers at this node's address now (a restart, or a VIP / DNS name / proxy
   * moved to a spare): it has none of the old one's leases, and if it has been up longer than
   * its grace it grants at once. It counts toward nothing for a quarantine.
   */
  | { kind: "changed" }
  /**
   * The same server as node `of` (one URL twice under another spelling, a unix socket and a
   * TCP port of one server, db 0 and db 1): one server must never count twice.
   */
  | { kind: "duplicate"; of: number };

/**
 * Node `me`'s new connection reports server identity `seen` (run_id); `known[i]` is the
 * identity last seen at node i. A duplicate wins over a change: a swapped node that lands on
 * another node's server must not count at all.
 */
export function checkIdentity(me: number, seen: string, known: ReadonlyArray<string | null>): IdentityCheck {
  for (let i = 0; i < known.length; i++) {
    if (i !== me && known[i] === seen) return { kind: "duplicate", of: i };
  }
  const mine = known[me] ?? null;
  if (mine === null) return { kind: "first" };
  return mine === seen ? { kind: "same" } : { kind: "changed" };
}

/**
 * Q7: how long (µs, on the client's clock) a node whose identity changed counts toward
 * nothing: at least the longest TTL any elector may have used on it (`configuredUs`, a
 * server duration, default 30 s), never less than this elector's own TTL, stretched by the
 * drift bound because the server's clock may run slower than ours by that much.
 */
export function quarantineUs(ttlMs: number, configuredUs: number, drift: number): number {
  return Math.ceil(Math.max(ttlMs * 1000, configuredUs) / (1 - drift));
}

/** run_id from an INFO server reply (null if absent or empty). */
export function runIdOf(info: string): string | null {
  for (const line of info.split(/\r?\n/)) {
    if (line.startsWith("run_id:")) {
      const v = line.slice("run_id:".length).trim();
      return v === "" ? null : v;
    }
  }
  return null;
}

// ---- the membership id (Q9) ----

/**
 * A TCP node's identity in the membership id (Q9, conformance/vectors/quorum/membership_id.json):
 * `tcp:<host>:<port>`, the host in lower case, an IPv6 address without its brackets, a trailing
 * dot removed. The scheme (TLS or not), credentials, db number and query are left out: they do
 * not change which server it is.
 */
export function tcpIdentity(host: string, port: number): string {
  const h = host.replace(/^\[(.*)\]$/, "$1").replace(/\.$/, "");
  return `tcp:${h.toLowerCase()}:${port}`;
}

/** A unix socket node's identity (Q9): `unix:<path>`, the path as written. */
export function unixIdentity(path: string): string {
  return `unix:${path}`;
}

/**
 * The membership id of a node list (Q9), as the wire spells it (16 lower-case hex digits):
 * SHA-256 of the identities sorted by their bytes and joined by "\n", the first 8 bytes read
 * big endian; 0 (never seen) becomes 1, because the module reserves 0 for "bound to nothing".
 * Sorted, so the list's order does not matter; every identity counts, so any change of the set
 * changes the id: electors with different node lists (a node replacement half done) are
 * refused by each other's nodes instead of forming disjoint majorities (issue 32).
 */
export function membershipId(identities: ReadonlyArray<string>): string {
  // By bytes (UTF-8), not by UTF-16 code units as the default sort would.
  const sorted = [...identities].sort((a, b) => Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8")));
  const digest = createHash("sha256").update(sorted.join("\n"), "utf8").digest();
  const id = digest.readBigUInt64BE(0);
  return (id === 0n ? 1n : id).toString(16).padStart(16, "0");
}

/** A node's MEMBERSHIP refusal (Q9): its key is bound to another node list. */
export function isMembership(r: unknown): boolean {
  return isFail(r) && r.fail.kind === "membership";
}

// ---- the campaign round (Q2-Q4) ----

export type AfterAcquire =
  /**
   * Enough grants: raise the lease on `nodes` to `target` (the highest token granted), then
   * lead on `target` if enough confirm.
   */
  | { action: "raise"; target: number; nodes: number[] }
  /** Negative control "no-unify": lead at once on `token`, each node keeping its own. */
  | { action: "act_unified"; token: number; perNode: Array<number | null> }
  /**
   * Not enough grants: release the partial grants `release` ([node, token]), then report
   * `outcome` to the loop: "not_granted" (a nil reply: poll again), "membership_mismatch"
   * (the same to the loop, but at least one node refused because its key is bound to another
   * membership, Q9: reported, because only an operator can resolve it, docs/quorum.md §4.1)
   * or a failure (back off).
   */
  | { action: "abort"; release: Array<[number, number]>; outcome: "not_granted" | "membership_mismatch" | NodeFail };

/**
 * Step 1. `replies[i]` is node i's LEASE.ACQUIRE reply.
 *
 * Why the maximum: every node of the previous reign's raise-majority has that reign's token as
 * its watermark, any majority contains one of them, and that node only grants above it; the
 * maximum over our majority is therefore above every earlier reign's token. `pick` only
 * matters for the "no-unify" control (which grant it acts on, modulo the count).
 */
export function afterAcquire(control: QuorumControl, replies: ReadonlyArray<AcquireReply>, pick: number): AfterAcquire {
  const n = replies.length;
  const m = need(control, n);
  const granted: Array<[number, number]> = [];
  replies.forEach((r, i) => {
    if (typeof r === "number") granted.push([i, r]);
  });
  if (n > 0 && granted.length >= m) {
    if (control === "no-unify") {
      const perNode: Array<number | null> = replies.map(() => null);
      for (const [i, tok] of granted) perNode[i] = tok;
      const chosen = granted[Math.abs(pick) % granted.length] as [number, number];
      return { action: "act_unified", token: chosen[1], perNode };
    }
    return { action: "raise", target: Math.max(...granted.map((g) => g[1])), nodes: granted.map((g) => g[0]) };
  }
  // A membership refusal (Q9) is a refusal like "held by someone else", not an error: that node
  // will not grant us, whatever we retry.
  const wrongMembership = replies.filter(isMembership).length;
  const refused = wrongMembership + replies.filter((r) => r === "refused").length;
  const failed = replies.filter(isFail).filter((r) => !isMembership(r));
  const silent = replies.filter((r) => r === null).length;
  // Why an error only when refusals alone cannot explain it: if enough nodes answered "held by
  // someone else", polling again soon is right; if a majority was out of reach because of
  // errors and silence, backing off is (and GRACE tells the loop how long).
  let outcome: "not_granted" | "membership_mismatch" | NodeFail;
  if (refused + m > n || failed.length + silent <= n - m) outcome = wrongMembership > 0 ? "membership_mismatch" : "not_granted";
  else {
    outcome =
      failed.find((f) => f.fail.kind === "grace") ??
      failed[0] ?? { fail: { kind: "timeout", graceUs: null }, message: "quorum: no reply in time" };
  }
  return { action: "abort", release: granted, outcome };
}

/**
 * Step 2: did enough nodes confirm the raise (reply 1) to lead on the target token? Why the
 * raise must reach a majority before we act: the next reign's token is above ours only because
 * its majority meets a node that KNOWS ours (docs/quorum.md §3, step T3).
 */
export function raiseConfirmed(control: QuorumControl, replies: ReadonlyArray<NodeReply<boolean>>, n: number): boolean {
  return replies.filter((r) => r === true).length >= need(control, n);
}

/**
 * After a renewal round:
 * - "renewed": a majority extended the lease; the new local deadline counts from the send;
 * - "lost": so many nodes said "not held" (0) that a majority can no longer confirm: step down;
 * - "unknown": neither yet (errors, silence): keep the old deadline, retry until the stop point.
 */
export type AfterRenew = "renewed" | "lost" | "unknown";

/**
 * A renewal reply that means "this node does not renew us": 0, or (Q9) a refusal because the
 * node's key is now bound to another membership (the operator moved it).
 */
export function renewRefused(r: NodeReply<boolean>): boolean {
  return r === false || isMembership(r);
}

/** Q5: M replies of 1 renew; more than N - M replies of 0 (or MEMBERSHIP refusals, Q9) lose; else unknown. */
export function afterRenew(control: QuorumControl, replies: ReadonlyArray<NodeReply<boolean>>): AfterRenew {
  const n = replies.length;
  const m = need(control, n);
  const ones = replies.filter((r) => r === true).length;
  const zeros = replies.filter(renewRefused).length;
  if (n > 0 && ones >= m) return "renewed";
  if (zeros > n - m) return "lost";
  return "unknown";
}

// ---- a refused follower's wait (Q10) ----

/**
 * Q10: the node every follower waits on, the one with the smallest URL, so that every elector
 * of one membership (the same node set, in any order) picks the same node. Why one node and
 * not all: waiting with BLOCK on every node would let a release wake a DIFFERENT follower on
 * each node (each node wakes its own first waiter), a split vote every time; on one node
 * exactly one follower wakes, holding that node, and its next round meets the other nodes
 * just freed by the same release round.
 */
export function waitNode(urls: ReadonlyArray<string>): number {
  let best = 0;
  urls.forEach((u, i) => {
    if (u < (urls[best] as string)) best = i;
  });
  return best;
}

/**
 * Q10: how long (µs) to wait on the wait node after a round that made no reign, or null to
 * report "not granted" at once (the loop then pauses and polls, as before Q10). `blockUs`: the
 * loop's BLOCK budget (null: none, e.g. re-asking for an unconfirmed grant).
 *
 * Wait only when the round released nothing (a round that released partial grants retired
 * its owner: the loop must take the next one first, Q4) and the wait node itself answered
 * "held" (someone holds it: its release or expiry is what wakes us; a node that was silent or
 * failed would only make us wait for nothing). The wait is the loop's BLOCK budget minus two
 * steps: the round before and the round after the wake must fit in the loop's limit for one
 * blocking acquire (block + op_timeout), and at most `capUs` (the renew interval): only the
 * wait node can wake us, so if it stops answering while the other nodes free up (frozen, cut
 * off), the next round comes after at most `capUs` instead of the whole BLOCK.
 */
export function waitAfterRefusal(
  replies: ReadonlyArray<AcquireReply>,
  node: number,
  releasedAny: boolean,
  blockUs: number | null,
  opTimeoutUs: number,
  capUs: number,
): number | null {
  if (blockUs === null) return null;
  const b = Math.min(blockUs - opTimeoutUs, capUs);
  const held = replies[node] === "refused";
  return held && !releasedAny && b >= 1000 ? b : null;
}
