package io.redislease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lettuce.core.RedisURI;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Quorum mode's membership id (docs/client-protocol.md Q9, issue 32 item 1): electors with
 * different node lists during a rolling node replacement must never lead together.
 *
 * <p>The reproduction (as client/tests/quorum_membership.rs): some electors use {A, B, C},
 * others already {A, B, D}. X (old list) reigns on the bare majority {A, C} because B was
 * frozen during its campaign (a bare majority stays bare for the whole reign); B is free. Y
 * (new list) then finds B and D free: without the membership id Y reigns on {B, D} while X
 * still leads on {A, C}. With it, B is bound to the old list since the reign before and refuses
 * Y, so Y has only D.
 */
class QuorumMembershipTest {
    private static final Duration TTL = Duration.ofMillis(1000);
    private static final Decide.Failure MISMATCH = Decide.classifyError(
            "MEMBERSHIP this key is bound to membership 1111222233334444, not 5555666677778888: x");

    private static <T> QuorumDecide.Reply<T> mm() {
        return QuorumDecide.Reply.failed(MISMATCH);
    }

    @Test
    void aMembershipRefusalIsARefusalNotAnError() {
        assertEquals(ErrorKind.MEMBERSHIP, MISMATCH.kind());
        QuorumDecide.Reply<Long> busy = QuorumDecide.Reply.of(null);
        QuorumDecide.Reply<Long> down = QuorumDecide.Reply.failed(Decide.Failure.of(ErrorKind.CONNECTION, "down"));
        // Like "held by someone else": not granted (poll again), flagged so that it is reported.
        assertEquals(new QuorumDecide.Abort(List.of(new QuorumDecide.NodeToken(2, 4)), null, true),
                QuorumDecide.afterAcquire(List.of(mm(), busy, QuorumDecide.Reply.of(4L))));
        assertEquals(new QuorumDecide.Abort(List.of(), null, true),
                QuorumDecide.afterAcquire(List.of(mm(), mm(), down)));
        assertEquals(new QuorumDecide.Abort(List.of(new QuorumDecide.NodeToken(2, 4)), null, false),
                QuorumDecide.afterAcquire(List.of(busy, busy, QuorumDecide.Reply.of(4L))));
        assertInstanceOf(QuorumDecide.Raise.class,
                QuorumDecide.afterAcquire(List.of(mm(), QuorumDecide.Reply.of(8L), QuorumDecide.Reply.of(4L))));
        // In a renewal round like a 0; in a raise round no confirmation.
        QuorumDecide.Reply<Boolean> yes = QuorumDecide.Reply.of(true);
        assertEquals(QuorumDecide.AfterRenew.LOST, QuorumDecide.afterRenew(List.of(yes, mm(), mm())));
        assertEquals(QuorumDecide.AfterRenew.RENEWED, QuorumDecide.afterRenew(List.of(yes, yes, mm())));
        assertEquals(QuorumDecide.AfterRenew.UNKNOWN,
                QuorumDecide.afterRenew(List.of(yes, mm(), QuorumDecide.Reply.silent())));
        assertFalse(QuorumDecide.raiseConfirmed(List.of(yes, mm(), QuorumDecide.Reply.silent()), 3));
    }

    @Test
    void membershipIdOfUris() {
        List<RedisURI> l = List.of(RedisURI.create("redis://node-c.example"),
                RedisURI.Builder.redis("Node-A.Example.", 7000).withDatabase(2).build(),
                RedisURI.create("redis://node-b.example:7000"));
        assertEquals("93db45cf361ecc72", QuorumTransport.membershipId(l));
        assertEquals("unix:/run/r.sock", QuorumTransport.nodeIdentity(RedisURI.Builder.socket("/run/r.sock").build()));
    }

    /** A running elector. */
    private static final class Run implements AutoCloseable {
        final LeaderElector e;

        Run(List<RedisURI> nodes, String owner, boolean withId) {
            e = LeaderElector.builder().quorum(nodes).key("q-members").ttl(TTL).owner(owner)
                    .candidate(new ElectorTest.Recorder()).build();
            if (!withId) {
                // The negative control: the protocol before Q9 (no MEMBERSHIP argument).
                e.quorumTransport().dropMembershipForTest();
            }
            e.start();
        }

        void awaitLeader(String what) throws InterruptedException {
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (!e.isLeader()) {
                assertTrue(System.nanoTime() - until < 0, what + " within 10 s");
                Thread.sleep(5);
            }
        }

        @Override
        public void close() {
            e.close();
        }
    }

    /** The scenario; the longest time (ms) X and Y both led (0: never together), and Y's reports. */
    private static long[] mixedLists(boolean withId) throws Exception {
        List<RedisServer> s = new ArrayList<>();
        try {
            for (int i = 0; i < 4; i++) {
                s.add(RedisServer.start());
            }
            List<RedisURI> old = List.of(s.get(0).uri(), s.get(1).uri(), s.get(2).uri());
            List<RedisURI> neu = List.of(s.get(0).uri(), s.get(1).uri(), s.get(3).uri());
            // Before the replacement: a reign of the old list on all three nodes, then a hand-over.
            try (Run w = new Run(old, "w", withId)) {
                w.awaitLeader("w leads");
            }
            // X campaigns with B frozen: it reigns on the bare majority {A, C}.
            s.get(1).signal("STOP");
            Run x;
            try {
                x = new Run(old, "x", withId);
                x.awaitLeader("x leads");
            } finally {
                s.get(1).signal("CONT");
            }
            // Y, already moved to the new list, campaigns while X leads.
            try (Run xx = x; Run y = new Run(neu, "y", withId)) {
                long since = 0;
                long longest = 0;
                long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(3);
                while (System.nanoTime() - end < 0) {
                    long now = System.nanoTime();
                    if (xx.e.isLeader() && y.e.isLeader()) {
                        since = since == 0 ? now : since;
                        longest = Math.max(longest, now - since);
                    } else {
                        since = 0;
                    }
                    Thread.sleep(2);
                }
                return new long[] {TimeUnit.NANOSECONDS.toMillis(longest), y.e.quorumTransport().membershipReports()};
            }
        } finally {
            for (RedisServer r : s) {
                r.close();
            }
        }
    }

    /** Would catch: two electors with different node lists leading at once (issue 32 item 1). */
    @Test
    @Timeout(90)
    void electorsWithDifferentNodeListsNeverLeadTogether() throws Exception {
        RedisServer.requireAvailable();
        long[] r = mixedLists(true);
        assertEquals(0, r[0], "X (old list) and Y (new list) led together for " + r[0] + " ms");
        // Y's rounds were refused for membership every 50..100 ms for 3 s: reported once.
        assertEquals(1, r[1], "membership refusal reports");
    }

    /** The negative control: without the membership id the scenario must overlap. */
    @Test
    @Timeout(90)
    void withoutTheMembershipIdTheyDoLeadTogether() throws Exception {
        RedisServer.requireAvailable();
        long[] r = mixedLists(false);
        assertTrue(r[0] > 500, "the scenario no longer reproduces issue 32 (" + r[0] + " ms together)");
    }
}
