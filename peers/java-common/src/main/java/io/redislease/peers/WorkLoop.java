package io.redislease.peers;

import java.util.concurrent.TimeUnit;

/**
 * The leader's work of docs/conformance.md, the same for every peer so that only the library
 * under test differs: mode {@code safe} checks the library, prepares 15 ms, writes its token to
 * the resource, sleeps 25 ms (or stops on the stop signal); mode {@code ignore-deadline} (the
 * negative control) writes from a detached thread that never asks the library and lingers 3 TTLs
 * after the reign ended.
 */
public final class WorkLoop {
    private static final long PREP_MS = 15;
    private static final long PERIOD_MS = 25;
    private static final int LINGER_TTLS = 3;

    /** What the library says about the current reign. */
    public interface Leadership {
        /** The library's "am I still leader" (a peer maps errors to false). */
        boolean isLeader();

        /** The library's local deadline on CLOCK_MONOTONIC, 0 when it reports none. */
        long deadlineNs();
    }

    private final History history;
    private final String resource;
    private final String writer;
    private final long ttlMs;
    private final boolean ignoreDeadline;

    public WorkLoop(History history, ElectorArgs args) {
        this.history = history;
        this.resource = args.resource;
        this.writer = args.id;
        this.ttlMs = args.ttlMs;
        if (args.mode.equals("safe")) {
            this.ignoreDeadline = false;
        } else if (args.mode.equals("ignore-deadline")) {
            this.ignoreDeadline = true;
        } else {
            // reuse-owner strips the reign suffix of redis-lease owners (R17); a peer's lock
            // names its holder its own way, so the control has nothing to act on here.
            ElectorArgs.fail("--mode " + args.mode + ": a peer elector runs safe or ignore-deadline");
            throw new IllegalStateException("unreachable");
        }
    }

    /**
     * One reign on the calling thread: records {@code grant}, works while the library says
     * leader and the stop signal has not fired, records {@code stop}. Returns the reason.
     */
    public String reign(long token, Leadership l, StopSignal stop) {
        history.grant(token, l.deadlineNs());
        if (ignoreDeadline) {
            Thread t = new Thread(() -> lingeringWorker(token, l, stop), "unsafe-worker-" + token);
            t.setDaemon(true);
            t.start();
            // The reign's own task follows the library as the safe one does; the worker does not.
            while (!stop.isFired() && l.isLeader()) {
                stop.await(PERIOD_MS);
            }
            stop.fire("not leader");
            return stop.why();
        }
        String why;
        long seq = 0;
        try (Resource res = new Resource(resource)) {
            while (true) {
                // The check: decided here, right before acting, by asking the library.
                if (stop.isFired()) {
                    why = stop.why();
                    break;
                }
                if (!l.isLeader()) {
                    why = "not leader at check";
                    break;
                }
                seq++;
                history.check(token, seq, l.deadlineNs());
                // Prepare: deliberately NOT cut by the stop signal (the window where a pause lands).
                sleepUninterruptibly(PREP_MS);
                history.ack(token, seq, res.write(token, writer, seq));
                if (stop.await(PERIOD_MS)) {
                    why = stop.why();
                    break;
                }
            }
        }
        history.stop(token, why);
        return why;
    }

    private void lingeringWorker(long token, Leadership l, StopSignal stop) {
        long seq = 0;
        long stopAfter = 0;
        boolean stopping = false;
        // Bounded: LINGER_TTLS after the end it ignores, and 10 min in any case.
        long hardStop = System.nanoTime() + TimeUnit.MINUTES.toNanos(10);
        try (Resource res = new Resource(resource)) {
            while (System.nanoTime() - hardStop < 0) {
                if (stop.isFired() && !stopping) {
                    stopping = true;
                    stopAfter = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ttlMs * LINGER_TTLS);
                }
                if (stopping && System.nanoTime() - stopAfter >= 0) {
                    break;
                }
                seq++;
                history.check(token, seq, l.deadlineNs());
                sleepUninterruptibly(PREP_MS);
                history.ack(token, seq, res.write(token, writer, seq));
                sleepUninterruptibly(PERIOD_MS);
            }
        }
        history.stop(token, "unsafe linger over");
    }

    public static void sleepUninterruptibly(long ms) {
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
        boolean interrupted = false;
        long left;
        while ((left = until - System.nanoTime()) > 0) {
            try {
                TimeUnit.NANOSECONDS.sleep(left);
            } catch (InterruptedException e) {
                interrupted = true;
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }
}
