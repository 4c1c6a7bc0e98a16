/**
 * Fencing writes into the same Redis: `LEASE.FENCE key token command...` runs `command` only
 * if `token` is the live lease's token, in the same atomic step as the check. A write fenced
 * this way is safe whenever it lands: after a pause, an event-loop stall, a retry or a resend
 * by ioredis, a stale token is refused by the server, so it runs on the application's own
 * connection with the application's own settings.
 */
import { Cluster, Redis } from "ioredis";
import { routed } from "./transport.js";

/** The server refused a fenced command: `token` is not the live lease's token; it did not run. */
export class FencedError extends Error {
  override name = "FencedError";
  constructor(
    readonly key: string,
    readonly token: number,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** One argument of a Redis command. */
export type CommandArg = string | number | Buffer;

/**
 * `LEASE.FENCE key token command...` on `redis` (the application's connection): resolves with
 * the inner command's reply (as ioredis decodes it: strings utf-8), rejects with a
 * FencedError if the token is stale (the command did not run), or with the server's error.
 * Without a command, the reply is the lease's remaining ms. Under Cluster the command's keys
 * must hash to the lease key's slot (use a hash tag, e.g. `{jobs:report}:state`).
 */
export async function fence(
  redis: Redis | Cluster,
  key: string,
  token: number,
  ...command: CommandArg[]
): Promise<unknown> {
  // Why refuse here: a token that is not an exact positive integer could be rounded into a
  // different (valid-looking) number on the wire.
  if (!Number.isSafeInteger(token) || token < 1) {
    throw new RangeError(`fence: token must be a positive integer below 2^53, got ${String(token)}`);
  }
  try {
    if (redis instanceof Redis || redis instanceof Cluster) {
      // Routed by the lease key under Cluster (ioredis does not know the module's key positions).
      const cmd = routed(key, "LEASE.FENCE", [key, token, ...command]);
      void redis.sendCommand(cmd);
      return await cmd.promise;
    }
    // An instance of another ioredis copy: a Command of ours would not fit its connection; its
    // own call() does (under Cluster routed to any node, then redirected by MOVED).
    return await (redis as { call(...args: CommandArg[]): Promise<unknown> }).call("LEASE.FENCE", key, token, ...command);
  } catch (e) {
    if (e instanceof Error && e.name === "ReplyError" && /^FENCED\b/.test(e.message)) {
      throw new FencedError(key, token, e.message, { cause: e });
    }
    throw e;
  }
}
