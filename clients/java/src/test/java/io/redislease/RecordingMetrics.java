package io.redislease;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/** Counts every metrics call by name and labels, for assertions. */
class RecordingMetrics implements ElectorMetrics {
    final Map<String, AtomicLong> counts = new ConcurrentHashMap<>();

    private void inc(String k) {
        counts.computeIfAbsent(k, x -> new AtomicLong()).incrementAndGet();
    }

    long count(String k) {
        AtomicLong a = counts.get(k);
        return a == null ? 0 : a.get();
    }

    @Override
    public void leader(long token, long deadlineNanos) {
        inc("transition:leader:acquired");
    }

    @Override
    public void follower(StepDownReason reason) {
        inc("transition:follower:" + reason.label());
    }

    @Override
    public void deadline(long deadlineNanos) {
        inc("deadline");
    }

    @Override
    public void acquire(String result) {
        inc("acquire:" + result);
    }

    @Override
    public void renew(String result, long latencyNanos) {
        inc("renew:" + result);
    }

    @Override
    public void redisError(String op, ErrorKind kind) {
        inc("error:" + op + ":" + kind.label());
    }

    @Override
    public void redisUp(boolean up) {
        inc("up:" + up);
    }

    @Override
    public void taskOverrun() {
        inc("overrun");
    }
}
