package io.redislease;

import java.time.Duration;
import java.util.OptionalLong;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * What the leader task gets: its fencing token, its stop signal and its deadline. Instants are
 * {@link System#nanoTime()} values (CLOCK_MONOTONIC on Linux HotSpot).
 *
 * <p><b>Every reader reads the clock.</b> {@link #isLeader()}, {@link #isCancelled()} and the
 * future of {@link #cancelled()} ({@code isDone()}, {@code get(...)}, {@code join()},
 * {@code getNow}) compare {@link System#nanoTime()} with the stop point themselves, so they are
 * right at once after a pause (GC, SIGSTOP, a stalled elector thread), before the elector's own
 * thread ran. The first reader that sees the stop point passed ends the reign for everybody:
 * the signal fires (every future completes, the task thread is interrupted) and stays fired,
 * even if a renewal that was already under way would have moved the deadline.
 */
public final class LeaderContext {
    private final long token;
    private final String key;
    private final String owner;
    private final long stopBudgetNanos;
    private final CompletableFuture<Void> stop = new CompletableFuture<>();
    /** Guarded by this: the deadline and the latch move together (see {@link #extend}). */
    private long deadline;
    private boolean stopped;
    private volatile Thread taskThread;

    LeaderContext(long token, String key, String owner, long stopBudgetNanos, long deadline) {
        this.token = token;
        this.key = key;
        this.owner = owner;
        this.stopBudgetNanos = stopBudgetNanos;
        this.deadline = deadline;
    }

    /** Fencing token of this reign: pass it to the protected resource (LEASE.FENCE, a token column). */
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
     * A write fenced by this reign's token: {@code LEASE.FENCE key token command...} on your
     * connection ({@code connection.sync()}); see {@link LeaseFence#fence}.
     *
     * @throws FencedException a later reign holds the lease (or none does): nothing was written
     */
    public Object fence(io.lettuce.core.api.sync.BaseRedisCommands<String, String> redis, String... command) {
        return LeaseFence.fence(redis, key, token, command);
    }

    /**
     * "Check the deadline before every step": true only if the stop signal has not fired and
     * the stop point (deadline - stop budget) is still ahead. Reads the monotonic clock at
     * every call, so it is right at once after a GC pause or SIGSTOP, before any timer ran.
     */
    public boolean isLeader() {
        return !checkStopped();
    }

    /**
     * Completes at the stop point (or on resign / loss): stop now. A fresh future on each call,
     * so completing it yourself cannot fake or suppress the signal. Its {@code isDone()},
     * {@code get}, {@code join} and {@code getNow} read the clock (a future captured before a
     * pause is done at once after it); callbacks registered on it ({@code thenRun}...) run when
     * the signal fires, i.e. when the elector thread or any reader noticed the stop point.
     */
    public CompletableFuture<Void> cancelled() {
        StopFuture f = new StopFuture(this);
        stop.whenComplete((v, e) -> f.signal());
        return f;
    }

    /** Same as {@code !isLeader()}: the signal fired, or the stop point passed (reads the clock). */
    public boolean isCancelled() {
        return checkStopped();
    }

    /**
     * Current local deadline ({@link System#nanoTime()} base; moves forward with every confirmed
     * renewal), or empty once the signal fired. Past the stop point, before anything read the
     * clock, it still shows the last deadline, which is then in the past or less than the stop
     * budget ahead: compare it with {@link System#nanoTime()}, or use {@link #isLeader()}.
     */
    public synchronized OptionalLong deadlineNanos() {
        return stopped ? OptionalLong.empty() : OptionalLong.of(deadline);
    }

    /**
     * The reign's local deadline even after it stopped (the conformance elector's grant record:
     * a task that starts late, after a pause, still records when its right to act ended).
     */
    synchronized long reignDeadlineNanos() {
        return deadline;
    }

    /** Time left until the stop point (zero or negative once it passed). */
    public Duration timeLeft() {
        long stopAt;
        synchronized (this) {
            stopAt = deadline - stopBudgetNanos;
        }
        return Duration.ofNanos(stopAt - System.nanoTime());
    }

    /**
     * The one clock check of every reader: latches and fires once the stop point passed. Why
     * latch: a task that saw "stop" and stopped must never be told "go on" again by a later
     * call, and every object handed out must agree with every other.
     */
    private boolean checkStopped() {
        synchronized (this) {
            if (stopped) {
                return true;
            }
            if (System.nanoTime() - (deadline - stopBudgetNanos) < 0) {
                return false;
            }
            stopped = true;
        }
        // Outside the lock: completing runs the callbacks registered on the signal.
        signalStop();
        return true;
    }

    /** Nanoseconds until the stop point (for the waits of {@link StopFuture}). */
    private synchronized long nanosToStop() {
        return deadline - stopBudgetNanos - System.nanoTime();
    }

    private void signalStop() {
        if (stop.complete(null)) {
            Thread t = taskThread;
            if (t != null) {
                t.interrupt();
            }
        }
    }

    // ---- elector side

    void attach(Thread t) {
        taskThread = t;
    }

    boolean isTaskThread(Thread t) {
        return taskThread == t;
    }

    /**
     * Move the deadline forward after a confirmed renewal; false if the reign already ended
     * (a reader saw the stop point pass while the elector thread was stalled): the elector
     * then steps down instead, so the signal it handed out is never taken back.
     */
    synchronized boolean extend(long newDeadline) {
        if (stopped) {
            return false;
        }
        deadline = newDeadline;
        return true;
    }

    synchronized long deadline() {
        return deadline;
    }

    /** Fire the stop signal: latch, complete the future, then interrupt the task thread. */
    void fire() {
        synchronized (this) {
            stopped = true;
        }
        signalStop();
    }

    /**
     * The future {@link #cancelled()} hands out: completed when the signal fires, and done as
     * soon as any of its readers sees the stop point passed on the clock.
     */
    private static final class StopFuture extends CompletableFuture<Void> {
        private final LeaderContext ctx;

        StopFuture(LeaderContext ctx) {
            this.ctx = ctx;
        }

        void signal() {
            super.complete(null);
        }

        private boolean poll() {
            if (!super.isDone() && ctx.checkStopped()) {
                super.complete(null);
            }
            return super.isDone();
        }

        @Override
        public boolean isDone() {
            return poll();
        }

        @Override
        public Void getNow(Void valueIfAbsent) {
            poll();
            return super.getNow(valueIfAbsent);
        }

        @Override
        public Void join() {
            // join() is not interruptible: wait on (still reading the clock), keep the flag.
            boolean interrupted = false;
            try {
                while (true) {
                    try {
                        return waitFor(Long.MAX_VALUE);
                    } catch (InterruptedException e) {
                        interrupted = true;
                    } catch (TimeoutException | ExecutionException e) {
                        return super.join();
                    }
                }
            } finally {
                if (interrupted) {
                    Thread.currentThread().interrupt();
                }
            }
        }

        @Override
        public Void get() throws InterruptedException, ExecutionException {
            try {
                return waitFor(Long.MAX_VALUE);
            } catch (TimeoutException e) {
                return super.get();
            }
        }

        @Override
        public Void get(long timeout, TimeUnit unit) throws InterruptedException, ExecutionException, TimeoutException {
            return waitFor(unit.toNanos(timeout));
        }

        /**
         * Wait in slices that end at the stop point, so a wait that outlives it (or sleeps
         * through a pause) re-reads the clock when it wakes instead of trusting the signal.
         */
        private Void waitFor(long timeoutNanos) throws InterruptedException, ExecutionException, TimeoutException {
            long start = System.nanoTime();
            while (!poll()) {
                long left = timeoutNanos == Long.MAX_VALUE ? Long.MAX_VALUE : timeoutNanos - (System.nanoTime() - start);
                if (left <= 0) {
                    throw new TimeoutException();
                }
                long slice = Math.max(1L, Math.min(left, ctx.nanosToStop()));
                try {
                    super.get(slice, TimeUnit.NANOSECONDS);
                } catch (TimeoutException e) {
                    // slice over: check the clock again
                }
            }
            return super.get();
        }
    }
}
