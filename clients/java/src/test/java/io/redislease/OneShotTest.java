package io.redislease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** awaitLeadership(timeout) and the one-shot currentLeader() query, against a real server. */
class OneShotTest {
    private static final Duration TTL = Duration.ofMillis(2000);

    private static LeaderElector.Builder elector(RedisServer r, Candidate c) {
        return LeaderElector.builder().redis(r.uri()).key("oneshot").ttl(TTL).candidate(c);
    }

    @Test
    @Timeout(60)
    void awaitLeadershipAndWhoLeads() throws Exception {
        try (RedisServer r = RedisServer.start()) {
            ElectorTest.Recorder a = new ElectorTest.Recorder();
            ElectorTest.Recorder b = new ElectorTest.Recorder();
            LeaderElector eb = elector(r, b).build();
            try {
                // The first connection of this JVM may be slow on a busy machine: a generous bound.
                assertEquals(Optional.empty(), eb.currentLeader(Duration.ofSeconds(10)), "no lease yet; works before start()");
                LeaderContext ca;
                try (LeaderElector ea = elector(r, a).build()) {
                    assertEquals(Optional.empty(), ea.awaitLeadership(Duration.ofMillis(100)), "not started");
                    ea.start();
                    ca = ea.awaitLeadership(Duration.ofSeconds(10)).orElseThrow();
                    assertSame(a.granted.get(1, TimeUnit.SECONDS), ca);
                    LeaseInfo h = eb.currentLeader().orElseThrow();
                    assertEquals(ca.owner(), h.owner());
                    assertEquals(ca.token(), h.token());
                    eb.start();
                    long t0 = System.nanoTime();
                    assertEquals(Optional.empty(), eb.awaitLeadership(Duration.ofMillis(300)), "B waits while A leads");
                    assertTrue(System.nanoTime() - t0 >= TimeUnit.MILLISECONDS.toNanos(300), "waited the timeout");
                }
                // A resigned: B takes over and awaitLeadership returns its reign.
                LeaderContext cb = eb.awaitLeadership(Duration.ofSeconds(10)).orElseThrow();
                assertTrue(cb.token() > ca.token());
                assertEquals(cb.token(), eb.currentLeader().orElseThrow().token());
            } finally {
                eb.close();
            }
            long t0 = System.nanoTime();
            assertEquals(Optional.empty(), eb.awaitLeadership(Duration.ofSeconds(10)), "terminated: empty at once");
            assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(1));
            assertThrows(IllegalStateException.class, eb::currentLeader);
        }
    }
}
