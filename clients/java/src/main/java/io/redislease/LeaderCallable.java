package io.redislease;

/**
 * The work of one one-shot call ({@link LeaderElector.Builder#callAsLeader(LeaderCallable)}):
 * runs once, in one reign, on the reign's own thread. Like a {@link Candidate}'s
 * {@code onGranted}, it must return promptly once {@link LeaderContext#cancelled()} completes
 * (or its thread is interrupted), and should call {@link LeaderContext#isLeader()} before every
 * step that cannot be fenced.
 *
 * @param <T> the call's value
 */
@FunctionalInterface
public interface LeaderCallable<T> {
    /** We lead, with {@code ctx.token()}; the value is the call's if we still lead on return. */
    T call(LeaderContext ctx) throws Exception;
}
