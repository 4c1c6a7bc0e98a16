package io.redislease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Issue 33: what every object the elector hands out reports once the stop point passed while
 * the elector's own thread could not run. The stall is deterministic: the elector thread is
 * held inside a metrics call right after a renewal reply (a slow metrics sink, or a pause of
 * that one thread), until the clock is past the reign's stop point. Then the test reads ONE
 * object first (each variant another one, so that each is shown to read the clock by itself),
 * and after that every other one: all must say "stop". At the old code (flags set only by the
 * elector thread) every first read said "go on".
 */
class StalledElectorTest {
    private static final Duration TTL = Duration.ofMillis(2000);

    /** Holds the elector thread in the first successful renewal's metrics call. */
    static final class StallingMetrics extends RecordingMetrics {
        final CountDownLatch stalled = new CountDownLatch(1);
        final CountDownLatch release = new CountDownLatch(1);

        @Override
        public void renew(String result, long latencyNanos) {
            super.renew(result, latencyNanos);
            if (result.equals("renewed") && stalled.getCount() > 0) {
                stalled.countDown();
                try {
                    release.await(60, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        }
    }

    /** Captures a stop future at grant, then sleeps without reading anything. */
    static final class Sleeper implements Candidate {
        final CompletableFuture<LeaderContext> granted = new CompletableFuture<>();
        final AtomicReference<CompletableFuture<Void>> captured = new AtomicReference<>();
        final AtomicLong callbackAt = new AtomicLong();
        final AtomicLong interruptedAt = new AtomicLong();
        final CompletableFuture<StepDownReason> revoked = new CompletableFuture<>();

        @Override
        public void onGranted(LeaderContext ctx) {
            CompletableFuture<Void> f = ctx.cancelled();
            f.thenRun(() -> callbackAt.set(System.nanoTime()));
            captured.set(f);
            granted.complete(ctx);
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (System.nanoTime() - until < 0) {
                try {
                    Thread.sleep(20);
                } catch (InterruptedException e) {
                    interruptedAt.set(System.nanoTime());
                    return;
                }
            }
        }

        @Override
        public void onRevoked(StepDownReason reason) {
            revoked.complete(reason);
        }
    }

    @ParameterizedTest(name = "first read: {0}")
    @ValueSource(strings = {"ctx.isCancelled", "captured.isDone", "captured.get", "captured.join", "elector.leadership",
        "ctx.isLeader"})
    @Timeout(60)
    void everyObjectSaysStopAfterTheStopPointWhileTheElectorIsStalled(String first) throws Exception {
        try (RedisServer r = RedisServer.start()) {
            StallingMetrics m = new StallingMetrics();
            Sleeper task = new Sleeper();
            try (LeaderElector e = LeaderElector.builder().redis(r.uri()).key("stalled").ttl(TTL).candidate(task)
                    .metrics(m).build().start()) {
                LeaderContext ctx = task.granted.get(10, TimeUnit.SECONDS);
                CompletableFuture<Void> captured = task.captured.get();
                try {
                    assertTrue(m.stalled.await(10, TimeUnit.SECONDS), "the elector renewed");
                    // timeLeft() reads the clock but decides nothing: it does not end the reign.
                    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                    while (!ctx.timeLeft().isNegative()) {
                        if (System.nanoTime() - until > 0) {
                            fail("the stop point never passed");
                        }
                        Thread.sleep(5);
                    }
                    Thread.sleep(5);
                    long pastBy = -ctx.timeLeft().toNanos();
                    boolean stop;
                    switch (first) {
                        case "ctx.isCancelled" -> stop = ctx.isCancelled();
                        case "captured.isDone" -> stop = captured.isDone();
                        case "captured.get" -> {
                            // A wait begun before the stall would return the same way: it waits
                            // in slices that end at the stop point.
                            long t0 = System.nanoTime();
                            captured.get(5, TimeUnit.SECONDS);
                            stop = System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(1);
                        }
                        case "captured.join" -> {
                            // join() on another thread, bounded here: at the old code it hung.
                            CompletableFuture<Void> joined = CompletableFuture.runAsync(captured::join);
                            try {
                                joined.get(1, TimeUnit.SECONDS);
                                stop = true;
                            } catch (java.util.concurrent.TimeoutException ex) {
                                stop = false;
                            }
                        }
                        case "elector.leadership" -> stop = e.leadership().isEmpty();
                        case "ctx.isLeader" -> stop = !ctx.isLeader();
                        default -> throw new AssertionError(first);
                    }
                    assertTrue(stop, first + " said 'go on' " + pastBy / 1e6 + " ms past the stop point");
                    // After the first reader, every object agrees (the reign is latched over).
                    assertFalse(ctx.isLeader(), "ctx.isLeader");
                    assertTrue(ctx.isCancelled(), "ctx.isCancelled");
                    assertTrue(captured.isDone(), "the future captured before the stall");
                    assertTrue(ctx.cancelled().isDone(), "a fresh cancelled()");
                    assertTrue(ctx.deadlineNanos().isEmpty(), "deadlineNanos once the signal fired");
                    assertFalse(e.isLeader(), "elector.isLeader");
                    assertTrue(e.leadership().isEmpty(), "elector.leadership");
                    // The signal fired from the reader's thread: callbacks ran, the task was interrupted.
                    assertTrue(task.callbackAt.get() != 0, "thenRun on the captured future ran");
                    long t = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
                    while (task.interruptedAt.get() == 0 && System.nanoTime() - t < 0) {
                        Thread.sleep(2);
                    }
                    assertTrue(task.interruptedAt.get() != 0, "the task thread was interrupted");
                    System.out.printf("elector stalled: first read %s %.1f ms past the stop point said stop; task "
                            + "interrupted %.1f ms after the callback%n", first, pastBy / 1e6,
                            (task.interruptedAt.get() - task.callbackAt.get()) / 1e6);
                } finally {
                    m.release.countDown();
                }
                // The elector, once it runs again, does not take the signal back: it steps down.
                assertEquals(StepDownReason.DEADLINE, task.revoked.get(10, TimeUnit.SECONDS));
                assertFalse(ctx.isLeader());
            }
        }
    }
}
