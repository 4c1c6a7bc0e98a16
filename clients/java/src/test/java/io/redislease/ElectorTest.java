package io.redislease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lettuce.core.protocol.ProtocolVersion;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The elector against real redis-server processes with the module loaded. */
class ElectorTest {
    /** 2 s rather than 1 s: a CPU-starved CI machine can stall a JVM thread for a few hundred ms. */
    private static final Duration TTL = Duration.ofMillis(2000);

    /** A candidate that records its reign and works until told to stop. */
    static final class Recorder implements Candidate {
        final CompletableFuture<LeaderContext> granted = new CompletableFuture<>();
        final CompletableFuture<StepDownReason> revoked = new CompletableFuture<>();
        final AtomicLong grantedAt = new AtomicLong();
        final AtomicLong cancelSeenAt = new AtomicLong();
        final AtomicLong deadlineAtCancel = new AtomicLong();
        final AtomicLong taskEndedAt = new AtomicLong();

        @Override
        public void onGranted(LeaderContext ctx) throws Exception {
            grantedAt.set(System.nanoTime());
            granted.complete(ctx);
            ctx.cancelled().thenRun(() -> {
                cancelSeenAt.set(System.nanoTime());
            });
            long dl = ctx.deadlineNanos().orElse(0);
            try {
                while (ctx.isLeader()) {
                    dl = ctx.deadlineNanos().orElse(dl);
                    Thread.sleep(5);
                }
            } catch (InterruptedException e) {
                // the stop signal
            } finally {
                deadlineAtCancel.set(dl);
                taskEndedAt.set(System.nanoTime());
            }
        }

        @Override
        public void onRevoked(StepDownReason reason) {
            revoked.complete(reason);
        }
    }

    private static LeaderElector.Builder elector(RedisServer r, String key, Candidate c) {
        return LeaderElector.builder().redis(r.uri()).key(key).ttl(TTL).candidate(c);
    }

    @Test
    @Timeout(60)
    void handOverOnResignIsImmediate() throws Exception {
        try (RedisServer r = RedisServer.start()) {
            Recorder a = new Recorder();
            Recorder b = new Recorder();
            RecordingMetrics mb = new RecordingMetrics();
            try (LeaderElector ea = elector(r, "handover", a).build().start()) {
                LeaderContext ca = a.granted.get(10, TimeUnit.SECONDS);
                try (LeaderElector eb = elector(r, "handover", b).metrics(mb).build().start()) {
                    // Long enough for A to renew (T/3) several times and for B's BLOCK to wait
                    // past its stop window, so B also goes through the late-reply re-ask (R7).
                    Thread.sleep(TTL.toMillis());
                    assertTrue(ca.isLeader(), "A still leads after renewals");
                    assertFalse(b.granted.isDone(), "B waits while A leads");
                    assertFalse(eb.isLeader());
                    assertEquals(ca.owner() + " " + ca.token(), r.command("LEASE.GET", "handover").replaceAll(" \\d+$", ""));

                    long resignAt = System.nanoTime();
                    ea.resign();
                    LeaderContext cb = b.granted.get(5, TimeUnit.SECONDS);
                    double ms = (b.grantedAt.get() - resignAt) / 1e6;
                    System.out.printf("hand-over on resign: %.1f ms (A stopped its task, released; B granted)%n", ms);
                    assertTrue(ms < 1000, "hand-over took " + ms + " ms");
                    assertTrue(cb.token() > ca.token(), "new token is higher");
                    assertTrue(eb.isLeader());
                    // Order (R13): A's task had stopped before B was granted.
                    assertTrue(a.taskEndedAt.get() != 0 && a.taskEndedAt.get() - b.grantedAt.get() < 0,
                            "A's task stopped before B's grant");
                    assertEquals(StepDownReason.RESIGNED, a.revoked.get(5, TimeUnit.SECONDS));
                    assertFalse(ca.isLeader());
                    assertTrue(mb.count("acquire:late") >= 1, "B's long BLOCK grant went through the late-reply re-ask");
                }
            }
        }
    }

    /**
     * The hand-over path of a follower opens no connection: its BLOCK waited past its stop
     * window, so the grant is late (R7) and it re-asks without BLOCK; that re-ask must go on
     * the connection the BLOCK's reply came on. On the command connection, which a follower has
     * never opened, it first opened one (about 30 ms of Java's hand-over in the campaigns).
     */
    @Test
    @Timeout(60)
    void lateGrantReAskOpensNoConnection() throws Exception {
        try (RedisServer r = RedisServer.start()) {
            // The holder is this test (10 s lease), so the only connections the elector under
            // test opens are its own.
            String token = r.command("LEASE.ACQUIRE", "reask", "holder", "10000").substring(1);
            Recorder b = new Recorder();
            RecordingMetrics mb = new RecordingMetrics();
            Duration ttl = Duration.ofMillis(1000);
            long before = r.connectionsReceived();
            try (LeaderElector eb = LeaderElector.builder().redis(r.uri()).key("reask").ttl(ttl).candidate(b)
                    .metrics(mb).build().start()) {
                // Longer than B's stop window (under one TTL): its grant will come late.
                Thread.sleep(ttl.toMillis() + 500);
                assertFalse(eb.isLeader(), "B waits while the holder leads");
                assertEquals(":1", r.command("LEASE.RELEASE", "reask", "holder", token));
                b.granted.get(5, TimeUnit.SECONDS);
                // Read at once: B's first renewal (a renew interval later) opens the command
                // connection, which is not what this test is about.
                long after = r.connectionsReceived();
                assertEquals(1, mb.count("acquire:late"), "B's grant went through the late-reply re-ask (R7)");
                assertEquals(1, mb.count("acquire:granted"));
                // after - before: B's connections + the RELEASE's + the second INFO's.
                assertEquals(1, after - before - 2, "B opened one connection (the BLOCK's) up to its grant");
            }
        }
    }

    @Test
    @Timeout(60)
    void redisKilledStepsDownBeforeTheDeadline() throws Exception {
        try (RedisServer r = RedisServer.start()) {
            Recorder a = new Recorder();
            RecordingMetrics m = new RecordingMetrics();
            try (LeaderElector e = elector(r, "killed", a).metrics(m).build().start()) {
                LeaderContext ctx = a.granted.get(10, TimeUnit.SECONDS);
                Thread.sleep(500);
                long killedAt = System.nanoTime();
                r.kill();
                assertEquals(StepDownReason.DEADLINE, a.revoked.get(5, TimeUnit.SECONDS));
                long deadline = a.deadlineAtCancel.get();
                long stopAt = deadline - e.timing().stopBudgetNanos();
                System.out.printf("redis killed: stop signal %.1f ms after the kill, %.1f ms before the deadline; "
                        + "task ended %.1f ms before the deadline%n", (a.cancelSeenAt.get() - killedAt) / 1e6,
                        (deadline - a.cancelSeenAt.get()) / 1e6, (deadline - a.taskEndedAt.get()) / 1e6);
                assertTrue(a.cancelSeenAt.get() != 0, "stop signal fired");
                assertTrue(a.cancelSeenAt.get() - stopAt >= 0, "not before the stop point: errors keep the old deadline");
                assertTrue(a.cancelSeenAt.get() - deadline < 0, "stop signal before the deadline");
                assertTrue(a.taskEndedAt.get() - deadline < 0, "task ended before the deadline");
                assertFalse(ctx.isLeader());
                assertTrue(m.count("error:renew:connection") + m.count("error:renew:timeout") >= 1);
                assertEquals(0, m.count("overrun"));
            }
        }
    }

    @Test
    @Timeout(60)
    void listenerSeesTheLeaderUnderResp2AndResp3() throws Exception {
        try (RedisServer r = RedisServer.start()) {
            for (ProtocolVersion v : List.of(ProtocolVersion.RESP2, ProtocolVersion.RESP3)) {
                String key = "observe-" + v;
                Recorder a = new Recorder();
                List<Optional<LeaseInfo>> seen = new CopyOnWriteArrayList<>();
                CompletableFuture<LeaseInfo> held = new CompletableFuture<>();
                try (LeaderElector e = elector(r, key, a).protocolVersion(v).observeInterval(Duration.ofMillis(50))
                        .leaderListener(h -> {
                            seen.add(h);
                            h.ifPresent(held::complete);
                        }).build().start()) {
                    LeaderContext ctx = a.granted.get(10, TimeUnit.SECONDS);
                    LeaseInfo h = held.get(5, TimeUnit.SECONDS);
                    assertEquals(ctx.owner(), h.owner(), v.toString());
                    assertEquals(e.owner() + "#1", ctx.owner(), "the first reign's owner is base#1 (R17)");
                    assertEquals(ctx.token(), h.token(), v.toString());
                    assertTrue(h.pttl().toMillis() > 0 && h.pttl().toMillis() <= TTL.toMillis(), v.toString());
                }
                assertFalse(seen.isEmpty());
            }
        }
    }

    @Test
    @Timeout(60)
    void prometheusRendersTheRustClientsMetricNames() throws Exception {
        try (RedisServer r = RedisServer.start()) {
            PrometheusMeterRegistry reg = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
            Recorder a = new Recorder();
            LeaderElector e = elector(r, "metrics", a).metrics(new MicrometerElectorMetrics(reg, "metrics")).build().start();
            a.granted.get(10, TimeUnit.SECONDS);
            Thread.sleep(TTL.toMillis() / 2); // at least one renewal
            String leading = reg.scrape();
            e.close();
            String text = reg.scrape();
            assertTrue(leading.contains("lease_is_leader{key=\"metrics\"} 1"), leading);
            java.util.regex.Matcher dl = java.util.regex.Pattern.compile("lease_deadline_seconds\\{key=\"metrics\"\\} ([0-9.E-]+)").matcher(leading);
            assertTrue(dl.find() && Double.parseDouble(dl.group(1)) > 0.0, "deadline seconds while leading: " + leading);
            for (String want : new String[] {
                "lease_is_leader{key=\"metrics\"} 0",
                "lease_token{key=\"metrics\"} 0",
                "lease_transitions_total{key=\"metrics\",reason=\"acquired\",to=\"leader\"} 1",
                "lease_transitions_total{key=\"metrics\",reason=\"resigned\",to=\"follower\"} 1",
                "lease_acquire_attempts_total{key=\"metrics\",result=\"granted\"} 1",
                "lease_renew_total{key=\"metrics\",result=\"renewed\"}",
                "lease_renew_latency_seconds_bucket{key=\"metrics\",le=\"5.0E-4\"}",
                "lease_renew_latency_seconds_bucket{key=\"metrics\",le=\"2.5\"}",
                "lease_renew_latency_seconds_count{key=\"metrics\"}",
                "lease_deadline_seconds{key=\"metrics\"} 0",
                "lease_redis_up{key=\"metrics\"} 1",
                "lease_task_overrun_total{key=\"metrics\"} 0",
            }) {
                assertTrue(text.contains(want), "missing " + want + " in\n" + text);
            }
        }
    }

    @Test
    void invalidConfigurationIsRefusedBeforeConnecting() {
        Candidate c = ctx -> {};
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> LeaderElector.builder()
                .redis(io.lettuce.core.RedisURI.create("redis://127.0.0.1:1")).key("k").ttl(TTL)
                .stopBudget(TTL.multipliedBy(7).dividedBy(10)).candidate(c).build());
        assertTrue(e.getMessage().startsWith("invalid configuration: stop_window:"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> LeaderElector.builder()
                .redis(io.lettuce.core.RedisURI.create("redis://127.0.0.1:1")).key("").ttl(TTL).candidate(c).build());
        assertTrue(e.getMessage().startsWith("invalid configuration: key:"), e.getMessage());
        String owner = LeaderElector.defaultOwner();
        assertTrue(owner.matches(".+-" + ProcessHandle.current().pid() + "-[0-9a-f]{8}"), owner);
    }

    @Test
    @Timeout(60)
    void taskThatReturnsEndsTheReignAndReleases() throws Exception {
        try (RedisServer r = RedisServer.start()) {
            AtomicReference<Long> firstToken = new AtomicReference<>();
            CompletableFuture<Long> second = new CompletableFuture<>();
            CompletableFuture<StepDownReason> reason = new CompletableFuture<>();
            Candidate c = new Candidate() {
                @Override
                public void onGranted(LeaderContext ctx) {
                    if (!firstToken.compareAndSet(null, ctx.token())) {
                        second.complete(ctx.token());
                        try {
                            ctx.cancelled().get();
                        } catch (Exception e) {
                            // stop
                        }
                    }
                }

                @Override
                public void onRevoked(StepDownReason why) {
                    reason.complete(why);
                }
            };
            try (LeaderElector e = elector(r, "exit", c).build().start()) {
                assertEquals(StepDownReason.TASK_EXITED, reason.get(10, TimeUnit.SECONDS));
                // Released, so the elector's next campaign is granted at once with a new token.
                long t2 = second.get(5, TimeUnit.SECONDS);
                assertNotNull(firstToken.get());
                assertTrue(t2 > firstToken.get());
                assertTrue(e.isLeader());
            }
        }
    }

    @Test
    @Timeout(60)
    void taskIgnoringItsStopSignalOverrunsAndTheLeaseIsNotReleased() throws Exception {
        try (RedisServer r = RedisServer.start()) {
            java.util.concurrent.atomic.AtomicBoolean finish = new java.util.concurrent.atomic.AtomicBoolean();
            CompletableFuture<LeaderContext> granted = new CompletableFuture<>();
            CompletableFuture<StepDownReason> revoked = new CompletableFuture<>();
            Candidate stubborn = new Candidate() {
                @Override
                public void onGranted(LeaderContext ctx) {
                    granted.complete(ctx);
                    while (!finish.get()) { // ignores the future and swallows the interrupt
                        try {
                            Thread.sleep(5);
                        } catch (InterruptedException e) {
                            // ignored on purpose
                        }
                    }
                }

                @Override
                public void onRevoked(StepDownReason reason) {
                    revoked.complete(reason);
                }
            };
            RecordingMetrics m = new RecordingMetrics();
            LeaderElector e = elector(r, "overrun", stubborn).metrics(m).build().start();
            try {
                LeaderContext ctx = granted.get(10, TimeUnit.SECONDS);
                CompletableFuture<Void> done = e.resign();
                assertEquals(StepDownReason.RESIGNED, revoked.get(10, TimeUnit.SECONDS));
                done.get(10, TimeUnit.SECONDS);
                long at = System.nanoTime();
                assertTrue(at - ctx.deadline() >= 0, "waited for the task until the deadline");
                assertEquals(1, m.count("overrun"));
                // R13: not released; the lease is still ours on the server until it expires.
                String held = r.command("LEASE.GET", "overrun");
                assertTrue(held.startsWith(ctx.owner() + " " + ctx.token()), held);
            } finally {
                finish.set(true);
            }
        }
    }

    @Test
    @Timeout(60)
    void minReplicasLeadsOnlyOnAcknowledgedGrants() throws Exception {
        try (RedisServer primary = RedisServer.start()) {
            // No replica: every grant stays unconfirmed (R11), so the elector never leads.
            Recorder lonely = new Recorder();
            RecordingMetrics m = new RecordingMetrics();
            try (LeaderElector e = elector(primary, "replicated", lonely).minReplicas(1, Duration.ofMillis(100))
                    .metrics(m).build().start()) {
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
                while (m.count("acquire:unconfirmed") < 3) { // granted, WAIT acked 0, re-asked, ...
                    assertTrue(System.nanoTime() - until < 0, "no unconfirmed grant counted");
                    Thread.sleep(20);
                }
                assertFalse(lonely.granted.isDone(), "led on a grant no replica acknowledged");
                assertFalse(e.isLeader());
            }
            // R14: the resigned elector released the unconfirmed grant it held on the server.
            assertEquals("$-1", primary.command("LEASE.GET", "replicated"));

            // With a replica that acknowledges: leads, and renewals keep counting.
            try (RedisServer replica = RedisServer.start(RedisServer.freePort(), 0, "--replicaof", "127.0.0.1",
                    Integer.toString(primary.port))) {
                long connectBy = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
                // WAIT 1 answers 1 once the replica is connected and in sync.
                while (!":1".equals(primary.command("WAIT", "1", "50"))) {
                    assertTrue(System.nanoTime() - connectBy < 0, "replica never connected");
                    Thread.sleep(50);
                }
                Recorder a = new Recorder();
                RecordingMetrics ma = new RecordingMetrics();
                try (LeaderElector e = elector(primary, "replicated", a).minReplicas(1, Duration.ofMillis(200))
                        .metrics(ma).build().start()) {
                    LeaderContext ctx = a.granted.get(10, TimeUnit.SECONDS);
                    Thread.sleep(TTL.toMillis());
                    assertTrue(ctx.isLeader(), "acknowledged renewals keep the lead");
                    assertTrue(ma.count("renew:renewed") >= 1);
                    assertTrue(e.isLeader());
                    assertTrue(replica.command("LEASE.GET", "replicated").startsWith(ctx.owner() + " "),
                            "the replica has the grant");
                }
            }
        }
    }
}
