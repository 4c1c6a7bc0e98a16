package io.redislease.peers;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * The "stop signal" of docs/conformance.md's work loop: fired by the library's own revocation
 * callback where it has one (Curator's {@code notLeader()}) or by SIGTERM (resign). One per
 * reign; the first reason wins.
 */
public final class StopSignal {
    private final CountDownLatch fired = new CountDownLatch(1);
    private volatile String why = "";

    public synchronized void fire(String reason) {
        if (fired.getCount() > 0) {
            why = reason;
            fired.countDown();
        }
    }

    public boolean isFired() {
        return fired.getCount() == 0;
    }

    public String why() {
        return why;
    }

    /** Waits up to {@code ms}; true once fired. An interrupt counts as fired (we are stopping). */
    public boolean await(long ms) {
        try {
            return fired.await(ms, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            fire("interrupted");
            return true;
        }
    }
}
