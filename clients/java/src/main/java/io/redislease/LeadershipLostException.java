package io.redislease;

/**
 * A one-shot call's reign ended before its task returned
 * ({@link LeaderElector.Builder#callAsLeader(LeaderCallable)}): the renewal was refused or the
 * stop point passed. Thrown once the task has stopped (or overran its local deadline: then the
 * lease was not released). The task's value, if it returned one after the loss, is dropped: its
 * work may have outlived the lease, so it must not be taken as done under leadership. The
 * task's own exception, if it threw, is the {@linkplain #getCause() cause}.
 */
public final class LeadershipLostException extends Exception {
    private static final long serialVersionUID = 1L;

    private final StepDownReason reason;
    private final long token;

    LeadershipLostException(StepDownReason reason, long token, Throwable cause) {
        super("leadership lost: " + reason.label() + " (token " + token + ")", cause);
        this.reason = reason;
        this.token = token;
    }

    /** Why the reign ended ({@code RENEW_REJECTED} or {@code DEADLINE}). */
    public StepDownReason reason() {
        return reason;
    }

    /** The lost reign's fencing token. */
    public long token() {
        return token;
    }
}
