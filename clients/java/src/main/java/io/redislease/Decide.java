package io.redislease;

import java.nio.charset.StandardCharsets;

/**
 * The election loop's decisions as pure functions of (timing, instants, reply). No I/O and no
 * clock reads: every instant is passed in (nanoseconds of {@link System#nanoTime()}, compared
 * by subtraction so the arbitrary origin and wrap-around do not matter). {@link LeaderElector}
 * only executes what these functions return.
 *
 * <p>The rules are the ones of docs/client-protocol.md; their tests are the shared vectors in
 * conformance/vectors/*.json (loaded by {@code VectorsTest}), which every client runs.
 */
final class Decide {
    private Decide() {}

    static final long MICRO = 1_000L;
    static final long MILLI = 1_000_000L;
    static final long SECOND = 1_000_000_000L;

    // ---------------------------------------------------------------- configuration

    /** The timing derived from a TTL; durations derived from T are floored to whole µs. */
    static LeaseTiming defaults(long ttlMillis) {
        long tUs = Math.multiplyExact(ttlMillis, 1_000L);
        return new LeaseTiming(
                ttlMillis,
                0.01,
                Math.min(tUs / 100, 50_000L) * MICRO,
                (tUs / 5) * MICRO,
                (tUs / 3) * MICRO,
                Math.max(tUs / 5, 50_000L) * MICRO,
                5 * SECOND,
                0,
                (tUs / 10) * MICRO,
                50 * MILLI,
                5 * SECOND);
    }

    /** A refused configuration: the shared rule name and a human explanation. */
    record Problem(String rule, String why) {
        @Override
        public String toString() {
            return rule + ": " + why;
        }
    }

    /** The first rule a configuration breaks, or null if it is usable. */
    static Problem configProblem(LeaseTiming t, String key, String owner) {
        if (key == null || key.isEmpty()) {
            return new Problem("key", "key is empty");
        }
        // Bytes, not characters: the module counts bytes (lease.max-owner-len, default 256).
        // R17: the configured owner is the base of base#reign, so at most 239 bytes: '#' and
        // any reign number up to 2^53-1 (16 digits) must still fit in 256.
        int ownerBytes = owner == null ? 0 : owner.getBytes(StandardCharsets.UTF_8).length;
        if (ownerBytes == 0 || ownerBytes > MAX_BASE_BYTES) {
            return new Problem("owner", "owner must be 1..=" + MAX_BASE_BYTES
                    + " UTF-8 bytes (the elector sends owner#reign, at most 256 bytes)");
        }
        if (t.ttlMillis() < 1) {
            return new Problem("ttl", "ttl must be at least 1 ms");
        }
        // Why 2^53: every number on the wire must stay exact in JSON and JavaScript clients.
        if (t.ttlMillis() >= (1L << 53)) {
            return new Problem("ttl", "ttl must be below 2^53 ms");
        }
        // Why: a negative drift would push the local deadline past the server's expiry.
        if (!(t.drift() >= 0.0 && t.drift() < 0.5)) {
            return new Problem("drift", "drift must be in [0, 0.5)");
        }
        if (t.renewIntervalNanos() <= 0) {
            return new Problem("renew_interval", "renew_interval must be positive");
        }
        if (t.blockTimeoutNanos() < MILLI) {
            return new Problem("block_timeout", "block_timeout must be at least 1 ms (BLOCK 0 blocks forever)");
        }
        // Why: the task is told to stop at deadline - stop_budget; if that is not after the
        // first renewal, a leader would be cancelled before it ever renews.
        if (t.stopBudgetNanos() < 0
                || satAdd(t.stopBudgetNanos(), t.renewIntervalNanos()) >= leadTimeNanos(t)) {
            return new Problem("stop_window", "renew_interval + stop_budget must be below ttl*(1-drift)-margin");
        }
        if (t.opTimeoutNanos() <= 0) {
            return new Problem("op_timeout", "op_timeout must be positive");
        }
        if (t.backoffMinNanos() <= 0 || t.backoffMaxNanos() < t.backoffMinNanos()) {
            return new Problem("backoff", "backoff needs 0 < min <= max");
        }
        // Why: WAIT takes whole ms and WAIT n 0 waits forever.
        if (t.minReplicas() > 0 && t.waitTimeoutNanos() < MILLI) {
            return new Problem("wait_timeout", "wait_timeout must be at least 1 ms when min_replicas > 0");
        }
        if (t.minReplicas() < 0) {
            return new Problem("min_replicas", "min_replicas must not be negative");
        }
        return null;
    }

    // ---------------------------------------------------------------- reigns (R17)

    /** The largest reign number: every language holds integers up to 2^53-1 exactly. */
    static final long MAX_REIGN = (1L << 53) - 1;

    /**
     * The longest owner base: base + '#' + a reign of up to 16 digits must fit the server's
     * default lease.max-owner-len of 256 bytes.
     */
    static final int MAX_BASE_BYTES = 239;

    /**
     * R17: the owner sent on the wire for reign {@code reign}: {@code base#reign}, or null when
     * the base is empty or over 239 UTF-8 bytes, or the counter is outside 1..2^53-1 (refused,
     * never truncated). Why per reign: an abandoned RELEASE or RENEW of an earlier reign may
     * still execute after a new campaign began; with the same owner the new campaign's ACQUIRE
     * would be an idempotent refresh of the old grant and the stale RELEASE would end the new
     * reign while it acts. With a new owner the stale command names an owner that no longer
     * holds anything and answers 0.
     */
    static String reignOwner(String base, long reign) {
        int bytes = base == null ? 0 : base.getBytes(StandardCharsets.UTF_8).length;
        if (bytes == 0 || bytes > MAX_BASE_BYTES || reign < 1 || reign > MAX_REIGN) {
            return null;
        }
        return base + "#" + reign;
    }

    /** An event of the election loop, as far as the reign counter is concerned (R17). */
    enum ReignEvent {
        GRANTED("granted"),
        UNCONFIRMED("unconfirmed"),
        NOT_GRANTED("not_granted"),
        ERROR("error"),
        STEPPED_DOWN("stepped_down");

        private final String label;

        ReignEvent(String label) {
            this.label = label;
        }

        String label() {
            return label;
        }

        static ReignEvent fromLabel(String s) {
            for (ReignEvent e : values()) {
                if (e.label.equals(s)) {
                    return e;
                }
            }
            return null;
        }
    }

    /**
     * R17: the reign counter after {@code event}. Only a step-down advances it. Why nothing
     * else: within one campaign the R7 (late reply), R11 (unacknowledged) and R16 (failed
     * ACQUIRE that may have been granted) re-asks must refresh the campaign's own grant, which
     * needs the same owner. (Past 2^53-1 the result is refused by {@link #reignOwner}.)
     */
    static long nextReign(long reign, ReignEvent event) {
        return event == ReignEvent.STEPPED_DOWN && reign < Long.MAX_VALUE ? reign + 1 : reign;
    }

    // ---------------------------------------------------------------- deadlines

    /**
     * Usable leadership time per grant/renewal: {@code ttl * (1 - drift) - margin}, at least 0.
     * Why (1 - drift): our clock may run slow relative to the server's by up to drift. Why the
     * margin: time passes between checking the deadline and the work that relies on it.
     */
    static long leadTimeNanos(LeaseTiming t) {
        double scaled = (double) t.ttlMillis() * (double) MILLI * (1.0 - t.drift());
        long lead = scaled >= (double) Long.MAX_VALUE ? Long.MAX_VALUE : Math.round(scaled);
        return Math.max(0L, lead - t.marginNanos());
    }

    /**
     * Local deadline of a grant/renewal whose command was SENT at {@code sentAt}. Why the
     * send instant and not the reply: the server starts its TTL when it executes the command,
     * which is after we sent it, so sentAt + lead time is never after the server's expiry.
     */
    static long localDeadline(LeaseTiming t, long sentAt) {
        return sentAt + leadTimeNanos(t);
    }

    /** When the task is told to stop: stop_budget before the deadline, so it HAS stopped by it. */
    static long stopAt(LeaseTiming t, long deadline) {
        return deadline - t.stopBudgetNanos();
    }

    /** Stop leading on the clock alone (checked whenever the loop or the task wakes up). */
    static boolean mustStop(LeaseTiming t, long deadline, long now) {
        return now - stopAt(t, deadline) >= 0;
    }

    /**
     * The loop's own time limit for one command: block + op_timeout (+ wait_timeout when
     * min_replicas > 0); {@code blockNanos} null = no BLOCK.
     */
    static long opLimitNanos(LeaseTiming t, Long blockNanos) {
        long wait = t.minReplicas() > 0 ? t.waitTimeoutNanos() : 0L;
        return satAdd(satAdd(blockNanos == null ? 0L : blockNanos, t.opTimeoutNanos()), wait);
    }

    /** The WAIT sent on the same connection right after a grant/renewal. */
    record WaitFor(int replicas, long timeoutMillis) {}

    /** The WAIT to send after a write that took effect, or null without min_replicas. */
    static WaitFor waitFor(LeaseTiming t) {
        return t.minReplicas() > 0 ? new WaitFor(t.minReplicas(), wireMillis(t.waitTimeoutNanos())) : null;
    }

    /** A duration as the whole ms the module and WAIT take: floored, at least 1 (0 = forever). */
    static long wireMillis(long nanos) {
        return Math.max(1L, nanos / MILLI);
    }

    /** Delay before a failed renewal / unconfirmed grant is retried: renew/4, at least 10 ms. */
    static long retryIntervalNanos(LeaseTiming t) {
        return Math.max(t.renewIntervalNanos() / 4, 10 * MILLI);
    }

    // ---------------------------------------------------------------- backoff

    /** Upper bound of {@link #backoffNanos}: min(max, min * 2^min(attempt, 20)). */
    static long backoffCapNanos(LeaseTiming t, long attempt) {
        // The exponent is clamped first so a long outage cannot overflow the multiplication.
        int exp = (int) Math.max(0L, Math.min(attempt, 20L));
        long cap;
        try {
            cap = Math.multiplyExact(t.backoffMinNanos(), 1L << exp);
        } catch (ArithmeticException overflow) {
            cap = Long.MAX_VALUE;
        }
        return Math.min(cap, t.backoffMaxNanos());
    }

    /**
     * Capped exponential backoff with full jitter; {@code unit} is a uniform draw in [0, 1).
     * Why full jitter: 50 followers that lost Redis at the same moment must not reconnect in
     * the same millisecond.
     */
    static long backoffNanos(LeaseTiming t, long attempt, double unit) {
        double u = Double.isNaN(unit) ? 0.0 : Math.max(0.0, Math.min(1.0, unit));
        return Math.round(backoffCapNanos(t, attempt) * u);
    }

    /**
     * Pause after a nil ACQUIRE ({@code blockNanos} = the BLOCK it was sent with, or null).
     * BLOCK answers nil only after its timeout, so a follower normally asks again at once; a
     * BLOCKing ask that came back nil in less than half its timeout means something else is
     * going on (a proxy, a server that does not block) and the follower must not spin.
     */
    static long notGrantedPauseNanos(LeaseTiming t, Long blockNanos, long sentAt, long now, double unit) {
        if (blockNanos != null && now - sentAt < blockNanos / 2) {
            return backoffNanos(t, 0, unit) + t.backoffMinNanos();
        }
        return 0L;
    }

    // ---------------------------------------------------------------- errors

    /** One failed command: its kind, the grace to wait (GRACE only, else -1) and the message. */
    record Failure(ErrorKind kind, long graceNanos, String message) {
        static Failure of(ErrorKind kind, String message) {
            return new Failure(kind, -1L, message);
        }

        @Override
        public String toString() {
            return kind.label() + " (" + message + ")";
        }
    }

    /** Classify a server error line by its first word (its code), e.g. {@code GRACE 2345 ms left}. */
    static Failure classifyError(String line) {
        String msg = line == null ? "" : line.strip();
        String[] words = msg.split("\\s+", 3);
        String code = words.length > 0 ? words[0] : "";
        switch (code) {
            case "GRACE": {
                // The module's contract: GRACE <ms> ... An unparsable number still means grace;
                // wait a short default rather than hammering the server.
                long ms = 100;
                if (words.length > 1) {
                    try {
                        ms = Long.parseLong(words[1]);
                        if (ms < 0) {
                            ms = 100;
                        }
                    } catch (NumberFormatException e) {
                        ms = 100;
                    }
                }
                return new Failure(ErrorKind.GRACE, ms * MILLI, msg);
            }
            case "READONLY":
                return Failure.of(ErrorKind.READONLY, msg);
            case "NOREPLICAS":
                return Failure.of(ErrorKind.NOREPLICAS, msg);
            case "LOADING":
                return Failure.of(ErrorKind.LOADING, msg);
            case "FENCED":
                return Failure.of(ErrorKind.FENCED, msg);
            case "MEMBERSHIP":
                return Failure.of(ErrorKind.MEMBERSHIP, msg);
            case "ERR":
            case "WRONGTYPE":
                return Failure.of(ErrorKind.REJECTED, msg);
            default:
                return Failure.of(ErrorKind.SERVER, msg);
        }
    }

    // ---------------------------------------------------------------- acquire

    /** The result of LEASE.ACQUIRE (+ WAIT). */
    sealed interface AcquireResult permits Granted, NotGranted, Failed {}

    /** Granted {@code token}; {@code acked} = WAIT's reply, null when no WAIT was sent. */
    record Granted(long token, Integer acked) implements AcquireResult {}

    /** nil: not granted (a BLOCK timed out). */
    record NotGranted() implements AcquireResult {}

    /** Any failure, already classified (used by both acquire and renew). */
    record Failed(Failure failure) implements AcquireResult, RenewResult {}

    /** What a follower does with an ACQUIRE result. */
    sealed interface AcquireDecision permits Lead, Unconfirmed, NotGrantedAgain, Grace, Backoff {}

    /** Confirmed grant: lead until {@code deadline}, renew at {@code nextRenew}. */
    record Lead(long token, long deadline, long nextRenew) implements AcquireDecision {}

    /**
     * Granted, but it does not count (replicas did not acknowledge it, or the reply came too
     * late to leave any leadership time). Do not lead; ask again without BLOCK after
     * {@code retryInNanos} (same owner: the server refreshes and returns the same token).
     */
    record Unconfirmed(long token, long retryInNanos, UnconfirmedWhy why) implements AcquireDecision {}

    /** Why a grant does not count yet (the {@code why} of on_acquire.json's unconfirmed). */
    enum UnconfirmedWhy {
        /** The reply came after its own stop point (R7). */
        LATE_REPLY("late_reply"),
        /** Fewer replicas acknowledged it than min_replicas (R11). */
        REPLICAS_NOT_ACKED("replicas_not_acked");

        private final String label;

        UnconfirmedWhy(String label) {
            this.label = label;
        }

        /** The name the vectors, logs and metrics use. */
        String label() {
            return label;
        }

        @Override
        public String toString() {
            return label;
        }
    }

    /** Not granted: ask again (after {@link #notGrantedPauseNanos}). */
    record NotGrantedAgain() implements AcquireDecision {}

    /** The server is in its grace period for this long. */
    record Grace(long waitNanos) implements AcquireDecision {}

    /** Error: back off (exponentially, with jitter) and retry. */
    record Backoff(ErrorKind kind) implements AcquireDecision {}

    static AcquireDecision onAcquire(LeaseTiming t, long sentAt, long now, AcquireResult result) {
        if (result instanceof NotGranted) {
            return new NotGrantedAgain();
        }
        if (result instanceof Failed f) {
            Failure e = f.failure();
            if (e.kind() == ErrorKind.GRACE) {
                return new Grace(Math.max(0L, e.graceNanos()));
            }
            return new Backoff(e.kind());
        }
        Granted g = (Granted) result;
        // Why: with min_replicas, a grant only the primary knows can vanish in a failover to a
        // replica that never saw it, and the new primary would grant it again. Never lead on it.
        if (t.minReplicas() > 0 && (g.acked() == null || g.acked() < t.minReplicas())) {
            // Why not faster: replicas catching up take time; no point in hammering.
            return new Unconfirmed(g.token(), retryIntervalNanos(t), UnconfirmedWhy.REPLICAS_NOT_ACKED);
        }
        long deadline = localDeadline(t, sentAt);
        // Why: a reply after the stop point leaves no safe leadership time; starting the task
        // would mean starting it to kill it. Re-ask without BLOCK at once instead.
        if (mustStop(t, deadline, now)) {
            return new Unconfirmed(g.token(), 0L, UnconfirmedWhy.LATE_REPLY);
        }
        return new Lead(g.token(), deadline, sentAt + t.renewIntervalNanos());
    }

    // ---------------------------------------------------------------- renew

    /** The result of LEASE.RENEW (+ WAIT). */
    sealed interface RenewResult permits Renewed, NotHeld, Failed {}

    /** RENEW replied 1; {@code acked} = WAIT's reply, null when no WAIT was sent. */
    record Renewed(Integer acked) implements RenewResult {}

    /** RENEW replied 0. */
    record NotHeld() implements RenewResult {}

    /** What a leader does with a RENEW result. */
    sealed interface RenewDecision permits Extend, StepDown, Retry {}

    /** Renewed and confirmed: new deadline, next renewal. */
    record Extend(long deadline, long nextRenew) implements RenewDecision {}

    /** Stop leading now. */
    record StepDown(StepDownReason reason) implements RenewDecision {}

    /** The renewal did not count; keep the OLD deadline and try again at {@code at}. */
    record Retry(long at, RetryWhy why) implements RenewDecision {}

    /** Why a renewal did not count (the {@code why} of on_renew.json's retry). */
    enum RetryWhy {
        /** No reply within the op limit (R5). */
        TIMEOUT("timeout"),
        /** Any other failure. */
        ERROR("error"),
        /** Fewer replicas acknowledged it than min_replicas (R11). */
        REPLICAS_NOT_ACKED("replicas_not_acked");

        private final String label;

        RetryWhy(String label) {
            this.label = label;
        }

        /** The name the vectors, logs and metrics use. */
        String label() {
            return label;
        }

        @Override
        public String toString() {
            return label;
        }
    }

    static RenewDecision onRenew(LeaseTiming t, long deadline, long sentAt, long now, RenewResult result) {
        long stop = stopAt(t, deadline);
        // Why 0 wins over everything: it is the server's word that we no longer hold the lease
        // (expired or taken); the local deadline is no longer backed by anything.
        if (result instanceof NotHeld) {
            return new StepDown(StepDownReason.RENEW_REJECTED);
        }
        if (result instanceof Renewed r) {
            // Why: an unacknowledged renewal may be lost in a failover; the new primary then
            // expires the lease at the OLD expiry, so only the old deadline is backed.
            if (t.minReplicas() > 0 && (r.acked() == null || r.acked() < t.minReplicas())) {
                return retry(t, stop, now, RetryWhy.REPLICAS_NOT_ACKED);
            }
            long fresh = localDeadline(t, sentAt);
            // The deadline never moves back (a renewal sent before an earlier confirmed one).
            long newDeadline = fresh - deadline >= 0 ? fresh : deadline;
            if (mustStop(t, newDeadline, now)) {
                return new StepDown(StepDownReason.DEADLINE);
            }
            return new Extend(newDeadline, sentAt + t.renewIntervalNanos());
        }
        Failure f = ((Failed) result).failure();
        return retry(t, stop, now, f.kind() == ErrorKind.TIMEOUT ? RetryWhy.TIMEOUT : RetryWhy.ERROR);
    }

    /**
     * Errors and timeouts say nothing about the lease: the last confirmed deadline still holds,
     * so keep leading and retrying until the stop point, then step down.
     */
    private static RenewDecision retry(LeaseTiming t, long stop, long now, RetryWhy why) {
        if (now - stop >= 0) {
            return new StepDown(StepDownReason.DEADLINE);
        }
        long at = now + retryIntervalNanos(t);
        return new Retry(at - stop > 0 ? stop : at, why);
    }

    /**
     * Whether to send LEASE.RELEASE after the task stopped. Not after renew_rejected: the
     * server already said we do not hold it. After every other reason, so a follower takes
     * over at once.
     */
    static boolean releaseAfter(StepDownReason reason) {
        return reason != StepDownReason.RENEW_REJECTED;
    }

    private static long satAdd(long a, long b) {
        long r = a + b;
        // Overflow iff both operands have the same sign and the result's sign differs.
        if (((a ^ r) & (b ^ r)) < 0) {
            return a < 0 ? Long.MIN_VALUE : Long.MAX_VALUE;
        }
        return r;
    }
}
