package io.redislease;

/**
 * Where an elector reports its metrics. {@link #NOOP} by default; {@link MicrometerElectorMetrics}
 * publishes them to a Micrometer registry (Micrometer is an optional dependency: only users who
 * construct that class need it on their class path). Calls come from the elector thread and
 * must not block.
 */
public interface ElectorMetrics {
    /** Became leader with {@code token}; {@code deadlineNanos} on the {@link System#nanoTime()} base. */
    void leader(long token, long deadlineNanos);

    /** Stepped down for {@code reason} ({@link StepDownReason#label()} is the metrics label). */
    void follower(StepDownReason reason);

    /** The local deadline moved (a confirmed renewal). */
    void deadline(long deadlineNanos);

    /** One ACQUIRE attempt by result: granted, not_granted, unconfirmed, late, grace, error. */
    void acquire(String result);

    /** One RENEW attempt by result (renewed, rejected, unconfirmed, error) and its round trip. */
    void renew(String result, long latencyNanos);

    /** One failed command: {@code op} (acquire, renew, release, get) and {@link ErrorKind#label()}. */
    void redisError(String op, ErrorKind kind);

    /** Whether the last command reached Redis. */
    void redisUp(boolean up);

    /** The task had not stopped by the local deadline. */
    void taskOverrun();

    /** Discards everything. */
    ElectorMetrics NOOP = new ElectorMetrics() {
        @Override
        public void leader(long token, long deadlineNanos) {}

        @Override
        public void follower(StepDownReason reason) {}

        @Override
        public void deadline(long deadlineNanos) {}

        @Override
        public void acquire(String result) {}

        @Override
        public void renew(String result, long latencyNanos) {}

        @Override
        public void redisError(String op, ErrorKind kind) {}

        @Override
        public void redisUp(boolean up) {}

        @Override
        public void taskOverrun() {}
    };
}
