package io.redislease;

/**
 * The timing settings of one elector, all derived from the TTL unless overridden
 * ({@link Decide#defaults(long)}). Durations are nanoseconds on the local monotonic clock
 * ({@link System#nanoTime()}); {@code ttlMillis} is the TTL exactly as sent to the server.
 *
 * @param ttlMillis lease TTL sent with every ACQUIRE/RENEW
 * @param drift maximum relative clock-rate difference between this host and the server
 * @param marginNanos extra safety subtracted from the local deadline
 * @param stopBudgetNanos the task is told to stop this long before the deadline
 * @param renewIntervalNanos time between renewals
 * @param opTimeoutNanos the loop's own time limit for one command (plus BLOCK / WAIT)
 * @param blockTimeoutNanos BLOCK of a follower's ACQUIRE
 * @param minReplicas replicas that must acknowledge ({@code WAIT}) a grant/renewal; 0 = none
 * @param waitTimeoutNanos timeout of {@code WAIT}
 * @param backoffMinNanos reconnect backoff lower bound
 * @param backoffMaxNanos reconnect backoff cap
 */
public record LeaseTiming(
        long ttlMillis,
        double drift,
        long marginNanos,
        long stopBudgetNanos,
        long renewIntervalNanos,
        long opTimeoutNanos,
        long blockTimeoutNanos,
        int minReplicas,
        long waitTimeoutNanos,
        long backoffMinNanos,
        long backoffMaxNanos) {

    public LeaseTiming withDrift(double v) {
        return new LeaseTiming(ttlMillis, v, marginNanos, stopBudgetNanos, renewIntervalNanos, opTimeoutNanos,
                blockTimeoutNanos, minReplicas, waitTimeoutNanos, backoffMinNanos, backoffMaxNanos);
    }

    public LeaseTiming withMarginNanos(long v) {
        return new LeaseTiming(ttlMillis, drift, v, stopBudgetNanos, renewIntervalNanos, opTimeoutNanos,
                blockTimeoutNanos, minReplicas, waitTimeoutNanos, backoffMinNanos, backoffMaxNanos);
    }

    public LeaseTiming withStopBudgetNanos(long v) {
        return new LeaseTiming(ttlMillis, drift, marginNanos, v, renewIntervalNanos, opTimeoutNanos,
                blockTimeoutNanos, minReplicas, waitTimeoutNanos, backoffMinNanos, backoffMaxNanos);
    }

    public LeaseTiming withRenewIntervalNanos(long v) {
        return new LeaseTiming(ttlMillis, drift, marginNanos, stopBudgetNanos, v, opTimeoutNanos,
                blockTimeoutNanos, minReplicas, waitTimeoutNanos, backoffMinNanos, backoffMaxNanos);
    }

    public LeaseTiming withOpTimeoutNanos(long v) {
        return new LeaseTiming(ttlMillis, drift, marginNanos, stopBudgetNanos, renewIntervalNanos, v,
                blockTimeoutNanos, minReplicas, waitTimeoutNanos, backoffMinNanos, backoffMaxNanos);
    }

    public LeaseTiming withBlockTimeoutNanos(long v) {
        return new LeaseTiming(ttlMillis, drift, marginNanos, stopBudgetNanos, renewIntervalNanos, opTimeoutNanos,
                v, minReplicas, waitTimeoutNanos, backoffMinNanos, backoffMaxNanos);
    }

    public LeaseTiming withMinReplicas(int n, long waitNanos) {
        return new LeaseTiming(ttlMillis, drift, marginNanos, stopBudgetNanos, renewIntervalNanos, opTimeoutNanos,
                blockTimeoutNanos, n, waitNanos, backoffMinNanos, backoffMaxNanos);
    }

    public LeaseTiming withBackoffNanos(long min, long max) {
        return new LeaseTiming(ttlMillis, drift, marginNanos, stopBudgetNanos, renewIntervalNanos, opTimeoutNanos,
                blockTimeoutNanos, minReplicas, waitTimeoutNanos, min, max);
    }
}
