package io.redislease;

/** Why leadership ended; the label is the {@code reason} of {@code lease_transitions_total}. */
public enum StepDownReason {
    /** LEASE.RENEW answered 0: the server says we do not hold the lease. */
    RENEW_REJECTED("renew_rejected"),
    /** Renewals kept failing until the stop point (deadline minus stop budget). */
    DEADLINE("deadline"),
    /** {@link LeaderElector#resign()} / {@link LeaderElector#close()}. */
    RESIGNED("resigned"),
    /** {@link Candidate#onGranted(LeaderContext)} returned (or threw) by itself. */
    TASK_EXITED("task_exited");

    private final String label;

    StepDownReason(String label) {
        this.label = label;
    }

    public String label() {
        return label;
    }

    /** The reason with this label, or null. */
    public static StepDownReason fromLabel(String label) {
        for (StepDownReason r : values()) {
            if (r.label.equals(label)) {
                return r;
            }
        }
        return null;
    }
}
