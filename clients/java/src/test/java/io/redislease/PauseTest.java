package io.redislease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A leader JVM frozen with SIGSTOP past its TTL: the lease expires on the server and another
 * elector takes over with a higher token; after SIGCONT the old leader's task sees at once that
 * it is no longer leader and makes no further write, and its stop signal fires.
 */
class PauseTest {
    private static final long TTL_MS = 2000;

    private static void signal(long pid, String sig) throws Exception {
        Process k = new ProcessBuilder("kill", "-" + sig, Long.toString(pid)).inheritIO().start();
        assertEquals(0, k.waitFor(), "kill -" + sig);
    }

    /**
     * Wait until every thread of {@code pid} is stopped. Why: kill(2) returns once SIGSTOP is
     * queued; on a loaded machine the process's threads may run on for tens of ms until the
     * chosen thread handles it (seen here: 6 writes after kill returned).
     */
    private static void awaitStopped(long pid) throws Exception {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (true) {
            boolean all = true;
            try (java.util.stream.Stream<Path> tasks = Files.list(Path.of("/proc/" + pid + "/task"))) {
                for (Path t : (Iterable<Path>) tasks::iterator) {
                    String stat;
                    try {
                        stat = Files.readString(t.resolve("stat"));
                    } catch (java.io.IOException gone) {
                        continue; // a thread that just ended
                    }
                    char state = stat.charAt(stat.lastIndexOf(')') + 2);
                    if (state != 'T' && state != 't') {
                        all = false;
                        break;
                    }
                }
            }
            if (all) {
                return;
            }
            if (System.nanoTime() - until > 0) {
                fail("the child did not stop after SIGSTOP");
            }
            Thread.sleep(1);
        }
    }

    private static List<String[]> lines(Path f, String kind) throws Exception {
        List<String[]> r = new ArrayList<>();
        if (!Files.exists(f)) {
            return r;
        }
        for (String l : Files.readAllLines(f)) {
            String[] w = l.split(" ");
            if (w[0].equals(kind)) {
                r.add(w);
            }
        }
        return r;
    }

    @Test
    @Timeout(90)
    void sigstoppedLeaderNeverWritesAfterSigcont() throws Exception {
        RedisServer.requireAvailable();
        Path dir = Files.createTempDirectory("lease-java-pause-");
        Path out = dir.resolve("child.log");
        try (RedisServer r = RedisServer.start()) {
            String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
            Process child = new ProcessBuilder(java, "-XX:TieredStopAtLevel=1", "-cp", System.getProperty("java.class.path"),
                    PausedLeaderChild.class.getName(), Integer.toString(r.port), "paused", Long.toString(TTL_MS),
                    out.toString()).redirectErrorStream(true).redirectOutput(dir.resolve("child.stderr").toFile()).start();
            try {
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                long oldToken = 0;
                long stoppedAt = 0;
                // Freeze the child while it leads. On a starved machine it may have lost its
                // lease by itself just before the freeze (correctly: it stepped down); then
                // let it go on and try again.
                for (int attempt = 0; attempt < 10 && oldToken == 0; attempt++) {
                    while (lines(out, "WRITE").size() < 5 * (attempt + 1)) {
                        if (System.nanoTime() - until > 0 || !child.isAlive()) {
                            fail("child never led: " + Files.readString(dir.resolve("child.stderr")));
                        }
                        Thread.sleep(20);
                    }
                    signal(child.pid(), "STOP");
                    awaitStopped(child.pid());
                    stoppedAt = System.nanoTime();
                    List<String[]> grants = lines(out, "GRANT");
                    String last = grants.get(grants.size() - 1)[1];
                    boolean ended = lines(out, "STOP").stream().anyMatch(w -> w[1].equals(last));
                    if (ended) {
                        signal(child.pid(), "CONT");
                    } else {
                        oldToken = Long.parseLong(last);
                    }
                }
                assertTrue(oldToken != 0, "could not freeze the child while it led");
                final long frozenToken = oldToken;
                final long frozenAt = stoppedAt;

                // The frozen leader cannot renew: the server expires its lease after the TTL and
                // grants it to a new elector, with a higher token.
                ElectorTest.Recorder b = new ElectorTest.Recorder();
                try (LeaderElector eb = LeaderElector.builder().redis(r.uri()).key("paused").ttl(Duration.ofMillis(TTL_MS))
                        .candidate(b).build().start()) {
                    LeaderContext cb = b.granted.get(10, TimeUnit.SECONDS);
                    assertTrue(cb.token() > oldToken, "new leader has a higher token");
                    long pausedFor = 2 * TTL_MS - (System.nanoTime() - stoppedAt) / 1_000_000;
                    if (pausedFor > 0) {
                        Thread.sleep(pausedFor);
                    }
                    // Taken before sending: the child resumes as soon as the signal lands, before
                    // the kill command returns.
                    long contAt = System.nanoTime();
                    signal(child.pid(), "CONT");
                    until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                    while (lines(out, "STOP").stream().noneMatch(w -> w[1].equals(Long.toString(frozenToken)))
                            || lines(out, "REVOKED").size() < lines(out, "GRANT").size()) {
                        if (System.nanoTime() - until > 0) {
                            fail("old leader never stepped down after SIGCONT");
                        }
                        Thread.sleep(20);
                    }
                    Thread.sleep(500); // would-be writes after resuming have time to show up

                    // No write decided after the freeze: every check happened before SIGSTOP.
                    // (A write whose check passed just before SIGSTOP would carry that earlier
                    // check instant: that is the stale write only fencing can stop.)
                    for (String[] w : lines(out, "WRITE")) {
                        long checkedAt = Long.parseLong(w[3]);
                        long deadline = Long.parseLong(w[4]);
                        assertTrue(checkedAt - stoppedAt < 0, "write " + w[2] + " decided after the freeze");
                        assertTrue(checkedAt - (deadline - TTL_MS * 1_000_000L / 5) < 0, "write " + w[2] + " checked past its stop point");
                    }
                    String[] stop = lines(out, "STOP").stream().filter(w -> w[1].equals(Long.toString(frozenToken)))
                            .findFirst().orElseThrow();
                    long stopT = Long.parseLong(stop[3]);
                    assertTrue(stopT - contAt >= 0, "task stopped after resuming: stopped " + frozenAt + " cont " + contAt
                            + " stop " + stopT + "\n" + String.join("\n", Files.readAllLines(out)));
                    // Issue 33: what the stop objects said after SIGCONT. The sampler's first read
                    // after resuming ran in a race with the elector thread; whichever ran first,
                    // every object must say stop, because each reads the clock itself.
                    List<String[]> after = lines(out, "SAMPLE").stream()
                            .filter(w -> w[1].equals(Long.toString(frozenToken)) && Long.parseLong(w[2]) - contAt >= 0)
                            .toList();
                    assertTrue(!after.isEmpty(), "the sampler read the objects after SIGCONT");
                    for (String[] w : after) {
                        assertEquals("true true false", w[3] + " " + w[4] + " " + w[5],
                                "captured.isDone isCancelled isLeader after SIGCONT at " + w[2]);
                    }
                    List<String[]> revoked = lines(out, "REVOKED");
                    String reason = revoked.get(revoked.size() - 1)[1];
                    assertTrue(reason.equals("deadline") || reason.equals("renew_rejected"), reason);
                    System.out.printf("SIGSTOP %d ms: new leader token %d > %d; after SIGCONT the old task stopped "
                            + "in %.1f ms (%s), step-down reason %s, no write after the freeze; first read after SIGCONT (%.1f ms): "
                            + "captured future done, isCancelled, not leader%n",
                            (contAt - stoppedAt) / 1_000_000, cb.token(), oldToken, (stopT - contAt) / 1e6, stop[2], reason,
                            (Long.parseLong(after.get(0)[2]) - contAt) / 1e6);
                    assertTrue(lines(out, "GRANT").stream().allMatch(g -> Long.parseLong(g[3]) - frozenAt < 0),
                            "the old leader did not lead again while the new one holds the lease");
                    assertTrue(cb.isLeader(), "the new leader still leads");
                    assertTrue(eb.isLeader());
                }
            } finally {
                child.destroyForcibly();
                child.waitFor();
            }
        }
    }
}
