package io.redislease;

import java.time.Duration;
import java.util.OptionalLong;
import java.util.concurrent.CompletableFuture;

/**
 * What the leader task gets: its fencing token, its stop signal and its deadline. Instants are
 * {@link System#nanoTime()} values (CLOCK_MONOTONIC on Linux HotSpot).
 */
public final class LeaderContext {
    private final long token;
    private final String key;
    private final String owner;
    private final long stopBudgetNanos;
    private final CompletableFuture<Void> stop = new CompletableFuture<>();
    private volatile long deadline;
    private volatile Thread taskThread;

    LeaderContext(long token, String key, String owner, long stopBudgetNanos, long deadline) {
        this.token = token;
        this.key = key;
        this.owner = owner;
        this.stopBudgetNanos = stopBudgetNanos;
        this.deadline = deadline;
    }

    /** Fencing token of this term: pass it to the protected resource (LEASE.FENCE, a token column). */
    public long token() {
        return token;
    }

    public String key() {
        return key;
    }

    /** The owner this reign holds the lease as, {@code base#reign} (R17); what LEASE.GET shows. */
    public String owner() {
        return owner;
    }

    /**
     * "Check the deadline before every step": true only if the stop signal has not fired and
     * the stop point (deadline - stop budget) is still ahead. Reads the monotonic clock at
     * every call, so it is right at once after a GC pause or SIGSTOP, before any timer ran.
     */
    public boolean isLeader() {
        if (stop.isDone()) {
            return false;
        }
        return System.nanoTime() - (deadline - stopBudgetNanos) < 0;
    }

    /**
     * Completes at the stop point (or on resign / loss): stop now. A fresh dependent copy on
     * each call, so completing it yourself cannot fake or suppress the signal.
     */
    public CompletableFuture<Void> cancelled() {
        return stop.copy();
    }

    public boolean isCancelled() {
        return stop.isDone();
    }

    /**
     * Current local deadline ({@link System#nanoTime()} base; moves forward with every confirmed
     * renewal), or empty once the reign ended.
     */
    public OptionalLong deadlineNanos() {
        return stop.isDone() ? OptionalLong.empty() : OptionalLong.of(deadline);
    }

    /** Time left until the stop point (zero or negative once it passed). */
    public Duration timeLeft() {
        return Duration.ofNanos(deadline - stopBudgetNanos - System.nanoTime());
    }

    // ---- elector side

    void attach(Thread t) {
        taskThread = t;
    }

    boolean isTaskThread(Thread t) {
        return taskThread == t;
    }

    void extend(long newDeadline) {
        deadline = newDeadline;
    }

    long deadline() {
        return deadline;
    }

    /** Fire the stop signal: complete the future, then interrupt the task thread. */
    void fire() {
        if (stop.complete(null)) {
            Thread t = taskThread;
            if (t != null) {
                t.interrupt();
            }
        }
    }
}
