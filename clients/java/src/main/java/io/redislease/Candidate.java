package io.redislease;

/**
 * What an elected instance does (Spring Integration's Candidate / Curator's LeaderSelector
 * shape).
 *
 * <p>{@link #onGranted(LeaderContext)} IS the leader's work: it runs on its own thread, for as
 * long as the reign lasts. It must return promptly once {@link LeaderContext#cancelled()}
 * completes (or its thread is interrupted): both happen {@code stopBudget} before the local
 * deadline, so a task that stops within the stop budget has stopped before leadership can
 * end. Work that cannot be fenced should call {@link LeaderContext#isLeader()} before every
 * step. If it returns (or throws) by itself, the reign ends ({@code task_exited}), the lease is
 * released and the elector campaigns again.
 */
public interface Candidate {
    /** We lead, with {@code ctx.token()}. Runs on a dedicated thread; may block for the reign. */
    void onGranted(LeaderContext ctx) throws Exception;

    /**
     * The reign ended for {@code reason}; called on the elector thread after the task stopped
     * (or overran its deadline) and after the lease was released. Must not block.
     */
    default void onRevoked(StepDownReason reason) {}
}
