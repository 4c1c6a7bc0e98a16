/**
 * Release on Ctrl-C and on a service manager's stop: a library does not take over a process's
 * signals by itself (Node's convention: SIGINT and SIGTERM are the application's), so this is
 * one explicit call, which the README examples make.
 */

/** Anything that can be resigned: an Elector (or a LeaseClient-made one). */
export interface Resignable {
  resign(): Promise<void>;
}

/**
 * On the first of `signals` (default SIGINT and SIGTERM): remove these handlers, `resign()`
 * (stop the task, wait for it, LEASE.RELEASE: a follower takes over at once instead of after a
 * TTL), then, if no other listener for that signal is left, raise it again so the process ends
 * the way it would have without us (status 128 + signal number). A second Ctrl-C during the
 * resign gets Node's default action (immediate exit; the lease then expires on the server).
 * Returns a function that removes the handlers.
 */
export function resignOnSignals(
  target: Resignable,
  signals: readonly NodeJS.Signals[] = ["SIGINT", "SIGTERM"],
): () => void {
  const remove = (): void => {
    for (const s of signals) process.off(s, handler);
  };
  function handler(sig: NodeJS.Signals): void {
    remove();
    void target
      .resign()
      .catch(() => undefined)
      .finally(() => {
        // Why only without other listeners: an application that handles the signal itself
        // decides when to exit; raising it again would run its handler a second time.
        if (process.listenerCount(sig) === 0) process.kill(process.pid, sig);
      });
  }
  for (const s of signals) process.on(s, handler);
  return remove;
}
