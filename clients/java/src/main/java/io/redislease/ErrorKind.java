package io.redislease;

/**
 * What kind of failure one command hit. The election loop decides on the kind alone; the
 * label is also the {@code kind} label of {@code lease_redis_errors_total}.
 */
public enum ErrorKind {
    /** Could not connect, or the connection broke (the server may or may not have run it). */
    CONNECTION("connection"),
    /** No reply within the loop's own time limit (the server may or may not have run it). */
    TIMEOUT("timeout"),
    /** {@code GRACE <ms> ...}: the server started or was promoted recently. */
    GRACE("grace"),
    /** {@code READONLY}: we talk to a replica. */
    READONLY("readonly"),
    /** {@code NOREPLICAS}: min-replicas-to-write refused the write. */
    NOREPLICAS("noreplicas"),
    /** {@code LOADING}: the server is loading its dataset. */
    LOADING("loading"),
    /** {@code FENCED}: a stale token was used with LEASE.FENCE. */
    FENCED("fenced"),
    /**
     * {@code MEMBERSHIP} (quorum mode only, protocol Q9): that node's key is bound to another
     * node list; a refusal of that node, not an error of the round.
     */
    MEMBERSHIP("membership"),
    /** {@code ERR} / {@code WRONGTYPE}: our request is wrong; retrying does not help. */
    REJECTED("rejected"),
    /** Any other server error code (MASTERDOWN, BUSY, NOPERM, ...). */
    SERVER("server"),
    /** The reply had an unexpected shape (module/client version mismatch). */
    PROTOCOL("protocol");

    private final String label;

    ErrorKind(String label) {
        this.label = label;
    }

    /** Stable, low-cardinality label (metrics, logs, vectors). */
    public String label() {
        return label;
    }

    /** True when the server could not be reached at all (as opposed to answering an error). */
    public boolean unreachable() {
        return this == CONNECTION || this == TIMEOUT;
    }
}
