package io.redislease;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Protocol Q2: a quorum round never BLOCKs, so a follower polls "with the loop's jittered
 * pause" between rounds (at least {@code backoff_min}, 50 ms by default), not back to back. A
 * follower that re-asks at once sends 3 ACQUIREs per round trip to every node for as long as
 * another elector leads: thousands a second on loopback.
 */
class QuorumFollowerPaceTest {
    private static final Duration TTL = Duration.ofMillis(2000);

    @Test
    @Timeout(90)
    void aQuorumFollowerPausesBetweenRounds() throws Exception {
        try (QuorumTest.Three t = new QuorumTest.Three()) {
            ElectorTest.Recorder a = new ElectorTest.Recorder();
            ElectorTest.Recorder b = new ElectorTest.Recorder();
            RecordingMetrics mb = new RecordingMetrics();
            try (LeaderElector ea = LeaderElector.builder().quorum(t.uris()).key("pace").ttl(TTL).candidate(a)
                    .build().start()) {
                a.granted.get(20, TimeUnit.SECONDS);
                assertTrue(ea.isLeader());
                try (LeaderElector eb = LeaderElector.builder().quorum(t.uris()).key("pace").ttl(TTL).candidate(b)
                        .metrics(mb).build().start()) {
                    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                    while (mb.count("acquire:not_granted") < 1) {
                        if (System.nanoTime() - until > 0) {
                            fail("the follower never asked: " + mb.counts);
                        }
                        Thread.sleep(10);
                    }
                    long n0 = mb.count("acquire:not_granted");
                    long t0 = System.nanoTime();
                    Thread.sleep(1000); // the window in which rounds are counted (not a wait for a state)
                    long rounds = mb.count("acquire:not_granted") - n0;
                    double secs = (System.nanoTime() - t0) / 1e9;
                    // A pause of at least backoff_min (50 ms) between rounds: at most 20 a
                    // second; 40 leaves room for rounds that end at once.
                    assertTrue(rounds <= 40 * secs, "the follower made " + rounds + " rounds in " + secs
                            + " s (a pause of at least 50 ms allows about 20 a second)");
                    assertTrue(rounds >= 1, "the follower stopped asking");
                    assertFalse(b.granted.isDone() || eb.isLeader(), "two leaders");
                }
            }
        }
    }
}
