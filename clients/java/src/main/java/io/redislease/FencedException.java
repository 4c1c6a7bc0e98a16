package io.redislease;

import io.lettuce.core.RedisCommandExecutionException;

/**
 * {@code LEASE.FENCE} refused the write: the token is not the live lease's token (a later
 * reign holds the lease, or none does). The inner command was NOT executed. A subclass of
 * Lettuce's {@link RedisCommandExecutionException}, so handlers of Redis errors still see it.
 */
public final class FencedException extends RedisCommandExecutionException {
    private static final long serialVersionUID = 1L;

    private final String key;
    private final long token;

    FencedException(String key, long token, String serverMessage) {
        super(serverMessage + " (key " + key + ", token " + token + ")");
        this.key = key;
        this.token = token;
    }

    /** The lease key the write was fenced by. */
    public String key() {
        return key;
    }

    /** The stale token that was refused. */
    public long token() {
        return token;
    }
}
