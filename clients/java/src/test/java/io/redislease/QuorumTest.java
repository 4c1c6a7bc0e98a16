package io.redislease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.lettuce.core.RedisURI;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Quorum mode (docs/client-protocol.md §9a) against 3 real redis-server processes. */
class QuorumTest {
    private static final Duration TTL = Duration.ofMillis(2000);

    /** Three servers, closed together. */
    static final class Three implements AutoCloseable {
        final List<RedisServer> s = new ArrayList<>();

        Three() throws Exception {
            for (int i = 0; i < 3; i++) {
                s.add(RedisServer.start());
            }
        }

        List<RedisURI> uris() {
            return s.stream().map(RedisServer::uri).toList();
        }

        @Override
        public void close() throws java.io.IOException {
            for (RedisServer r : s) {
                r.close();
            }
        }
    }

    private static LeaderElector.Builder elector(Three t, String key, Candidate c) {
        return LeaderElector.builder().quorum(t.uris()).key(key).ttl(TTL).candidate(c);
    }

    /** "owner token pttl" of LEASE.GET on one node, or null. */
    private static String[] holder(RedisServer r, String key) throws Exception {
        String g = r.command("LEASE.GET", key);
        return g == null || g.startsWith("$-1") || g.startsWith("_") || g.startsWith("*-1") ? null : g.split(" ");
    }

    @Test
    @Timeout(60)
    void tokensAreUnifiedOnTheHighestGrant() throws Exception {
        try (Three t = new Three()) {
            // Push node 2's token watermark far ahead of the others' (a grant raised high and
            // released): its next grant is the highest, and the reign must take it.
            String tok = t.s.get(1).command("LEASE.ACQUIRE", "unify", "warm#1", "20000");
            assertTrue(tok.startsWith(":"), tok);
            long high = Long.parseLong(tok.substring(1)) + 1_000_000_000_000L;
            assertEquals(":1", t.s.get(1).command("LEASE.RAISE", "unify", "warm#1", tok.substring(1), Long.toString(high)));
            assertEquals(":1", t.s.get(1).command("LEASE.RELEASE", "unify", "warm#1", Long.toString(high)));
            ElectorTest.Recorder a = new ElectorTest.Recorder();
            try (LeaderElector e = elector(t, "unify", a).build().start()) {
                LeaderContext ctx = a.granted.get(20, TimeUnit.SECONDS);
                assertTrue(e.isLeader());
                assertTrue(ctx.token() > high, "the raise took node 2's higher token: " + ctx.token() + " <= " + high);
                for (RedisServer r : t.s) {
                    String[] h = holder(r, "unify");
                    assertEquals(ctx.owner(), h[0]);
                    assertEquals(ctx.token(), Long.parseLong(h[1]), "one token on every node");
                }
            }
        }
    }

    @Test
    @Timeout(60)
    void survivesOneNodeDownAndStepsDownWithoutAMajority() throws Exception {
        try (Three t = new Three()) {
            ElectorTest.Recorder a = new ElectorTest.Recorder();
            try (LeaderElector e = elector(t, "down", a).build().start()) {
                LeaderContext ctx = a.granted.get(20, TimeUnit.SECONDS);
                t.s.get(2).kill();
                // Three TTLs on two nodes of three: still the same reign (renewals counted).
                long until = System.nanoTime() + 3 * TTL.toNanos();
                while (System.nanoTime() < until) {
                    assertTrue(ctx.isLeader(), "lost the lease with a majority up");
                    Thread.sleep(20);
                }
                assertFalse(a.revoked.isDone());
                long tokenOnNode1 = Long.parseLong(holder(t.s.get(0), "down")[1]);
                assertEquals(ctx.token(), tokenOnNode1);
                // A second node down: no majority can renew: the reign ends within one TTL.
                long killedAt = System.nanoTime();
                t.s.get(1).kill();
                StepDownReason why = a.revoked.get(TTL.toMillis() * 2, TimeUnit.MILLISECONDS);
                assertEquals(StepDownReason.DEADLINE, why);
                assertTrue(a.taskEndedAt.get() - killedAt < TTL.toNanos(), "task stopped within one TTL");
                assertFalse(e.isLeader());
            }
        }
    }

    @Test
    @Timeout(90)
    void twoElectorsNeverLeadTogether() throws Exception {
        try (Three t = new Three()) {
            ElectorTest.Recorder a = new ElectorTest.Recorder();
            ElectorTest.Recorder b = new ElectorTest.Recorder();
            try (LeaderElector ea = elector(t, "two", a).owner("a").build().start();
                    LeaderElector eb = elector(t, "two", b).owner("b").build().start()) {
                // Whoever wins first, the other must not lead while it does.
                long until = System.nanoTime() + 20 * Decide.SECOND;
                while (!a.granted.isDone() && !b.granted.isDone()) {
                    if (System.nanoTime() > until) {
                        fail("nobody led");
                    }
                    Thread.sleep(10);
                }
                boolean aFirst = a.granted.isDone();
                ElectorTest.Recorder first = aFirst ? a : b;
                ElectorTest.Recorder second = aFirst ? b : a;
                LeaderElector winner = aFirst ? ea : eb;
                long watch = System.nanoTime() + 2 * TTL.toNanos();
                while (System.nanoTime() < watch) {
                    assertFalse(second.granted.isDone(), "two leaders at once");
                    Thread.sleep(20);
                }
                long t1 = first.granted.get().token();
                winner.resign().get(10, TimeUnit.SECONDS);
                LeaderContext c2 = second.granted.get(20, TimeUnit.SECONDS);
                assertTrue(second.grantedAt.get() - first.taskEndedAt.get() > 0, "the successor started after the task stopped");
                assertTrue(c2.token() > t1, "the token rises across reigns: " + t1 + " then " + c2.token());
            }
        }
    }

    @Test
    @Timeout(60)
    void partialGrantsAreReleasedAndTheOwnerRetired() throws Exception {
        try (Three t = new Three()) {
            // Nodes 1 and 2 are held by two others: every round gets one grant (node 3), which
            // must be released at once, under an owner never used again.
            assertTrue(t.s.get(0).command("LEASE.ACQUIRE", "split", "x#1", "20000").startsWith(":"));
            assertTrue(t.s.get(1).command("LEASE.ACQUIRE", "split", "y#1", "20000").startsWith(":"));
            ElectorTest.Recorder a = new ElectorTest.Recorder();
            try (Monitor m = new Monitor(t.s.get(2).uri().getPort());
                    LeaderElector e = elector(t, "split", a).owner("me").build().start()) {
                // What node 3 is sent, in order: the grants of each owner end with a RELEASE, and
                // an owner that released is never sent again (a grant kept, or refreshed by the
                // same owner, would hold node 3 for good).
                List<String[]> cmds = m.lease(4 * TTL.toNanos(), 12);
                List<String> owners = new ArrayList<>();
                String open = null;
                for (String[] c : cmds) {
                    String line = String.join(" ", c);
                    assertTrue(c[2].startsWith("me#"), line);
                    assertFalse(owners.contains(c[2]), "a retired owner reused: " + line);
                    if (c[0].equals("LEASE.ACQUIRE")) {
                        assertTrue(open == null || open.equals(c[2]), "a new owner before " + open + " released: " + line);
                        open = c[2];
                    } else if (c[0].equals("LEASE.RELEASE")) {
                        assertEquals(open, c[2], line);
                        owners.add(c[2]);
                        open = null;
                    } else {
                        fail("a raise with one grant of three: " + line);
                    }
                }
                assertTrue(owners.size() >= 3, "partial grants released and owners retired: " + owners);
                assertFalse(a.granted.isDone() || e.isLeader(), "led on one node of three");
                List<String> seen = owners;
                // Free a node: the elector leads, with a later reign's owner.
                String x = holder(t.s.get(0), "split")[1];
                t.s.get(0).command("LEASE.RELEASE", "split", "x#1", x);
                LeaderContext ctx = a.granted.get(20, TimeUnit.SECONDS);
                assertNotEquals("me#1", ctx.owner());
                assertFalse(seen.contains(ctx.owner()), "a retired owner reused: " + ctx.owner());
            }
        }
    }

    /** blocked_clients of INFO clients, summed over the nodes. */
    private static long blockedClients(Three t) throws Exception {
        long n = 0;
        for (RedisServer r : t.s) {
            java.util.regex.Matcher m = java.util.regex.Pattern.compile("blocked_clients:(\\d+)")
                    .matcher(r.command("INFO", "clients"));
            n += m.find() ? Long.parseLong(m.group(1)) : 0L;
        }
        return n;
    }

    /**
     * Q10: a resign during the wait ends it at once: close() returns promptly and the wait's own
     * connection is gone (no client left blocked on the wait node).
     */
    @Test
    @Timeout(60)
    void aResignDuringTheWaitWithdrawsIt() throws Exception {
        try (Three t = new Three()) {
            for (RedisServer r : t.s) {
                assertTrue(r.command("LEASE.ACQUIRE", "wresign", "holder", "20000").startsWith(":"));
            }
            ElectorTest.Recorder a = new ElectorTest.Recorder();
            LeaderElector e = LeaderElector.builder().quorum(t.uris()).key("wresign").ttl(Duration.ofMillis(600))
                    .candidate(a).build().start();
            long until = System.nanoTime() + 10 * Decide.SECOND;
            while (blockedClients(t) != 1) {
                assertTrue(System.nanoTime() < until, "no follower blocked on one node within 10 s");
                Thread.sleep(5);
            }
            long t0 = System.nanoTime();
            e.close();
            long took = System.nanoTime() - t0;
            assertTrue(took < Decide.SECOND, "close took " + took / Decide.MILLI + " ms: the wait held it up");
            until = System.nanoTime() + 2 * Decide.SECOND;
            while (blockedClients(t) != 0) {
                assertTrue(System.nanoTime() < until, "a client still blocked 2 s after the resign");
                Thread.sleep(5);
            }
            assertFalse(a.granted.isDone());
        }
    }

    /** LEASE.ACQUIRE calls a node has served (INFO commandstats). */
    private static long acquireCalls(RedisServer r) throws Exception {
        java.util.regex.Matcher m = java.util.regex.Pattern.compile("cmdstat_lease\\.acquire:calls=(\\d+)")
                .matcher(r.command("INFO", "commandstats"));
        return m.find() ? Long.parseLong(m.group(1)) : 0L;
    }

    /**
     * Q10: a refused follower waits on the wait node (the smallest URL) instead of polling every
     * node, and takes over as soon as the holder releases. Would catch: a follower polling
     * (about 15 rounds in the 1.5 s below at the 50..100 ms pause of a not-granted round, so
     * about 15 ACQUIREs on every node), a wait that never wakes (it would end only 4.8 s after
     * it began), or a wake that does not lead.
     */
    @Test
    @Timeout(60)
    void aRefusedFollowerWaitsOnOneNodeAndTakesOverOnRelease() throws Exception {
        try (Three t = new Three()) {
            long[] before = new long[3];
            for (int i = 0; i < 3; i++) {
                assertTrue(t.s.get(i).command("LEASE.ACQUIRE", "wait", "holder", "20000").startsWith(":"));
                before[i] = acquireCalls(t.s.get(i));
            }
            ElectorTest.Recorder a = new ElectorTest.Recorder();
            // TTL 3 s: the wait is capped at the renew interval (1 s).
            try (LeaderElector e = LeaderElector.builder().quorum(t.uris()).key("wait").ttl(Duration.ofSeconds(3))
                    .candidate(a).owner("q-a").build().start()) {
                Thread.sleep(1500);
                assertFalse(a.granted.isDone(), "led while another held every node");
                for (int i = 0; i < 3; i++) {
                    long calls = acquireCalls(t.s.get(i)) - before[i];
                    // One round, then the wait (one more call on the wait node only).
                    // A round and the wait, once more after the cap (4 on the wait node), plus the odd
                    // round that ended before the wait node answered: at most 7; polling: ~15.
                    assertTrue(calls <= 7, "node " + i + ": " + calls + " ACQUIREs in 1.5 s: the follower polls");
                    assertTrue(calls >= 1, "node " + i + ": never asked");
                }
                // The holder lets go, the wait node last (as a resigning leader does): the
                // waiting follower leads at once, long before its wait or the holder's 20 s
                // lease would end.
                List<RedisURI> uris = t.uris();
                List<Integer> order = new ArrayList<>(List.of(0, 1, 2));
                order.sort((x, y) -> QuorumTransport.nodeUrl(uris.get(x)).compareTo(QuorumTransport.nodeUrl(uris.get(y))));
                order.add(order.remove(0));
                for (int i : order) {
                    String[] h = holder(t.s.get(i), "wait");
                    assertEquals("holder", h[0]);
                    assertEquals(":1", t.s.get(i).command("LEASE.RELEASE", "wait", "holder", h[1]));
                }
                LeaderContext ctx = a.granted.get(2, TimeUnit.SECONDS);
                assertTrue(e.isLeader());
                for (RedisServer r : t.s) {
                    String[] h = holder(r, "wait");
                    assertTrue(h != null && h[0].startsWith("q-a#") && Long.parseLong(h[1]) == ctx.token(),
                            "node holds " + (h == null ? null : String.join(" ", h)) + ", want the follower's token " + ctx.token());
                }
            }
        }
    }

    @Test
    @Timeout(90)
    void aNodeWhoseServerChangedCountsTowardNothingForTheQuarantine() throws Exception {
        Duration quarantine = Duration.ofSeconds(4);
        try (Three t = new Three()) {
            ElectorTest.Recorder a = new ElectorTest.Recorder();
            try (LeaderElector e = elector(t, "swap", a).nodeQuarantine(quarantine).build().start()) {
                a.granted.get(20, TimeUnit.SECONDS);
                // Node 3's server is replaced by a fresh one on the same port (no lease, no
                // grace: it grants at once), then node 2 dies. Nodes 1 + new 3 would be a
                // "majority" the old reign's state is not on.
                int port3 = t.s.get(2).uri().getPort();
                t.s.get(2).close();
                t.s.set(2, RedisServer.start(port3));
                long swappedAt = System.nanoTime();
                t.s.get(1).kill();
                a.revoked.get(3 * TTL.toMillis(), TimeUnit.MILLISECONDS);
                // Not again before the quarantine (counted from when the change was seen,
                // after swappedAt) is over.
                long until = swappedAt + quarantine.toNanos() - 200 * Decide.MILLI;
                while (System.nanoTime() < until) {
                    assertFalse(e.isLeader(), "led on a node whose server changed, within its quarantine");
                    Thread.sleep(10);
                }
                // After it, nodes 1 and 3 are a majority again.
                long deadline = System.nanoTime() + 20 * Decide.SECOND;
                while (!e.isLeader()) {
                    assertTrue(System.nanoTime() < deadline, "never led again after the quarantine");
                    Thread.sleep(10);
                }
            }
        }
    }

    /** MONITOR on one server: the LEASE.* commands it runs, in order. */
    static final class Monitor implements AutoCloseable {
        private final java.net.Socket sock;
        private final java.io.BufferedReader in;

        Monitor(int port) throws java.io.IOException {
            sock = new java.net.Socket("127.0.0.1", port);
            sock.getOutputStream().write("MONITOR\r\n".getBytes(java.nio.charset.StandardCharsets.US_ASCII));
            in = new java.io.BufferedReader(
                    new java.io.InputStreamReader(sock.getInputStream(), java.nio.charset.StandardCharsets.UTF_8));
            if (!"+OK".equals(in.readLine())) {
                throw new java.io.IOException("MONITOR refused");
            }
        }

        /** Up to {@code max} LEASE.ACQUIRE/RELEASE/RAISE commands within {@code nanos}: [cmd, key, owner, ...]. */
        List<String[]> lease(long nanos, int max) throws java.io.IOException {
            List<String[]> out = new ArrayList<>();
            long until = System.nanoTime() + nanos;
            java.util.regex.Pattern arg = java.util.regex.Pattern.compile("\"((?:[^\"\\\\]|\\\\.)*)\"");
            while (out.size() < max && System.nanoTime() < until) {
                sock.setSoTimeout((int) Math.max(1, (until - System.nanoTime()) / Decide.MILLI));
                String line;
                try {
                    line = in.readLine();
                } catch (java.net.SocketTimeoutException e) {
                    break;
                }
                if (line == null) {
                    break;
                }
                java.util.regex.Matcher mm = arg.matcher(line);
                List<String> a = new ArrayList<>();
                while (mm.find()) {
                    a.add(mm.group(1));
                }
                if (!a.isEmpty() && a.get(0).toUpperCase(java.util.Locale.ROOT).matches("LEASE\\.(ACQUIRE|RELEASE|RAISE)")) {
                    a.set(0, a.get(0).toUpperCase(java.util.Locale.ROOT));
                    out.add(a.toArray(new String[0]));
                }
            }
            return out;
        }

        @Override
        public void close() throws java.io.IOException {
            sock.close();
        }
    }

    @Test
    void oneServerListedTwiceIsRefused() throws Exception {
        try (Three t = new Three()) {
            int port = t.s.get(0).uri().getPort();
            for (RedisURI twin : List.of(RedisURI.create("redis://localhost:" + port),
                    RedisURI.create("redis://127.0.0.1:" + port + "/1"))) {
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                        () -> LeaderElector.builder().quorum(List.of(t.s.get(0).uri(), t.s.get(1).uri(), twin))
                                .key("dup").ttl(TTL).candidate(ctx -> {}).build());
                assertTrue(e.getMessage().contains("same server"), e.getMessage());
            }
            // Three distinct servers are accepted.
            LeaderElector.builder().quorum(t.uris()).key("dup").ttl(TTL).candidate(ctx -> {}).build().close();
        }
    }
    private static void awaitCount(RecordingMetrics m, String k, long n) throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (m.count(k) < n) {
            if (System.nanoTime() - until > 0) {
                fail("never reached " + n + " x " + k + ": " + m.counts);
            }
            Thread.sleep(10);
        }
    }

    /**
     * A renewal round decided by a majority keeps the slow node's call and connection (until
     * the step's end): the next command to that node queues behind it instead of reconnecting.
     * Before, the slow node's connection was closed and reopened (connect, HELLO, INFO) on the
     * next command, which made that node the slowest again, and the leader's RELEASE paid a
     * connect on the hand-over path (docs/quorum.md §8). Node 3's writes are paused longer
     * than a renew interval (so at least one RENEW waits there) and shorter than the step
     * (op_timeout/2), so its reply arrives in time.
     */
    @Test
    @Timeout(60)
    void aNodeSlowerThanTheRenewalMajorityKeepsItsConnection() throws Exception {
        try (Three t = new Three()) {
            ElectorTest.Recorder a = new ElectorTest.Recorder();
            RecordingMetrics m = new RecordingMetrics();
            try (LeaderElector e = LeaderElector.builder().quorum(t.uris()).key("slow").ttl(Duration.ofMillis(6000))
                    .renewInterval(Duration.ofMillis(300)).opTimeout(Duration.ofMillis(1200)).candidate(a).metrics(m)
                    .build().start()) {
                LeaderContext ctx = a.granted.get(20, TimeUnit.SECONDS);
                awaitCount(m, "renew:renewed", 2);
                RedisServer slow = t.s.get(2);
                long before = slow.connectionsReceived();
                slow.command("CLIENT", "PAUSE", "450", "WRITE");
                awaitCount(m, "renew:renewed", m.count("renew:renewed") + 5);
                long after = slow.connectionsReceived();
                // Our own two commands (CLIENT PAUSE, the second INFO) opened a connection each.
                assertEquals(before + 2, after, "the elector reconnected to the slow node");
                assertTrue(ctx.isLeader() && e.isLeader());
                // The slow node's RENEWs were applied, late (it still holds this reign's token).
                assertEquals(ctx.token(), Long.parseLong(holder(slow, "slow")[1]));
            }
        }
    }
}
