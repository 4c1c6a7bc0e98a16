package io.redislease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Builder.callAsLeader, the one-shot API (issue 25), against a real server. */
class CallAsLeaderTest {
    private static final Duration TTL = Duration.ofMillis(2000);

    private static LeaderElector.Builder builder(RedisServer r, String key) {
        return LeaderElector.builder().redis(r.uri()).key(key).ttl(TTL);
    }

    private static boolean free(RedisServer r, String key) throws IOException {
        String v = r.command("LEASE.GET", key);
        return v.equals("$-1") || v.equals("*-1");
    }

    /**
     * The reign is lost while the task runs: LeadershipLostException once the task stopped, the
     * task ran once, and no second campaign (the lease is free afterwards and nobody took it).
     */
    @Test
    @Timeout(60)
    void aLostReignEndsTheCallAfterTheTaskStopped() throws Exception {
        try (RedisServer r = RedisServer.start()) {
            AtomicInteger runs = new AtomicInteger();
            AtomicLong stoppedAt = new AtomicLong();
            LeadershipLostException lost = assertThrows(LeadershipLostException.class,
                    () -> builder(r, "lost").callAsLeader(ctx -> {
                        runs.incrementAndGet();
                        r.command("DEL", "lost"); // the lease is gone: the next renewal says 0
                        try {
                            ctx.cancelled().get();
                        } catch (InterruptedException e) {
                            // the stop signal's interrupt
                        }
                        // A task that takes a moment to stop: the call must wait for it.
                        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(50);
                        while (System.nanoTime() - until < 0) {
                            Thread.onSpinWait();
                        }
                        stoppedAt.set(System.nanoTime());
                        return "done after the loss";
                    }));
            long thrownAt = System.nanoTime();
            assertEquals(StepDownReason.RENEW_REJECTED, lost.reason());
            assertTrue(lost.token() > 0);
            assertNull(lost.getCause());
            assertEquals(1, runs.get(), "one reign per call");
            assertTrue(stoppedAt.get() != 0 && stoppedAt.get() - thrownAt <= 0, "thrown before the task stopped");
            assertTrue(free(r, "lost"), "campaigned again after the call");
        }
    }

    /**
     * The task returns while leading: its value, the lease released. A second call with the
     * same owner is a new reign (R17: the reign numbers continue across the calls' electors).
     */
    @Test
    @Timeout(60)
    void aFinishedTaskReturnsItsValueAfterTheRelease() throws Exception {
        try (RedisServer r = RedisServer.start()) {
            LeaderElector.Builder b = builder(r, "done").owner("oneshot-" + ProcessHandle.current().pid());
            CompletableFuture<LeaderContext> first = new CompletableFuture<>();
            long token = b.callAsLeader(ctx -> {
                first.complete(ctx);
                return ctx.token();
            });
            assertEquals(first.get().token(), token);
            assertTrue(free(r, "done"), "not released");
            String owner2 = b.callAsLeader(LeaderContext::owner);
            assertEquals(first.get().owner().replaceAll("#\\d+$", "#2"), owner2);
            assertTrue(first.get().owner().endsWith("#1"), first.get().owner());
        }
    }

    /** The task throws while leading: the call rethrows it (after the release). */
    @Test
    @Timeout(60)
    void aFailingTaskRethrowsItsException() throws Exception {
        try (RedisServer r = RedisServer.start()) {
            IllegalStateException boom = new IllegalStateException("boom");
            IllegalStateException got = assertThrows(IllegalStateException.class,
                    () -> builder(r, "fails").callAsLeader(ctx -> {
                        throw boom;
                    }));
            assertSame(boom, got);
            assertTrue(free(r, "fails"), "not released");
        }
    }

    /** Interrupting the caller resigns: the task is stopped, then the lease released. */
    @Test
    @Timeout(60)
    void interruptingTheCallerResigns() throws Exception {
        try (RedisServer r = RedisServer.start()) {
            CompletableFuture<Long> granted = new CompletableFuture<>();
            AtomicLong taskEnd = new AtomicLong();
            CompletableFuture<Throwable> result = new CompletableFuture<>();
            Thread caller = new Thread(() -> {
                try {
                    builder(r, "intr").callAsLeader(ctx -> {
                        granted.complete(ctx.token());
                        try {
                            ctx.cancelled().get();
                        } catch (InterruptedException e) {
                            // stop signal
                        }
                        taskEnd.set(System.nanoTime());
                        return null;
                    });
                    result.complete(null);
                } catch (Exception e) {
                    result.complete(e);
                }
            });
            caller.start();
            granted.get(10, TimeUnit.SECONDS);
            caller.interrupt();
            Throwable t = result.get(10, TimeUnit.SECONDS);
            assertTrue(t instanceof InterruptedException, String.valueOf(t));
            assertTrue(taskEnd.get() != 0, "the task was not stopped before the call ended");
            assertTrue(free(r, "intr"), "not released on resign");
        }
    }
}
