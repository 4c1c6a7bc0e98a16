package io.redislease;

/**
 * The candidate behind {@link LeaderElector.Builder#callAsLeader(LeaderCallable)}: runs the
 * task once and keeps what the call returns or throws. Written by the task thread and the
 * elector thread; read by the caller after the elector terminated (which happens after both).
 */
final class OneShot<T> implements Candidate {
    private final LeaderCallable<T> task;
    private volatile boolean ran;
    private volatile long token;
    private volatile T value;
    private volatile Throwable failure;
    private volatile StepDownReason reason;

    OneShot(LeaderCallable<T> task) {
        this.task = task;
    }

    @Override
    public void onGranted(LeaderContext ctx) {
        if (ran) {
            // Unreachable: a one-shot elector leads once. Never run the task a second time.
            return;
        }
        ran = true;
        token = ctx.token();
        try {
            value = task.call(ctx);
        } catch (Exception | Error e) {
            // The caller's to see (after the reign), not the elector's to log.
            failure = e;
        }
    }

    @Override
    public void onRevoked(StepDownReason r) {
        reason = r;
    }

    /** The call's result, once the elector terminated. */
    T outcome() throws Exception {
        StepDownReason r = reason;
        if (r == null) {
            throw new IllegalStateException("the elector ended before it was elected (see its log)");
        }
        Throwable f = failure;
        if (r != StepDownReason.TASK_EXITED) {
            // RESIGNED is handled by the caller (interrupt); DEADLINE, RENEW_REJECTED: lost.
            throw new LeadershipLostException(r, token, f);
        }
        if (f instanceof Exception e) {
            throw e;
        }
        if (f instanceof Error e) {
            throw e;
        }
        return value;
    }
}
