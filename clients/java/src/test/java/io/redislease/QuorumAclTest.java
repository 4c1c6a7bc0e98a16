package io.redislease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.lettuce.core.RedisURI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Quorum mode as docs/security.md §3's quorum-mode elector user (the rules read from the file):
 * the elector leads with one token on every node, renews and releases everywhere, and counts no
 * error (INFO for the run_id check, RAISE and RELEASE all granted). Negative control: without
 * {@code +lease.raise} it never leads, and counts the refused RAISE as an error (logged by the
 * loop) instead of polling in silence as if another elector held the lease.
 */
class QuorumAclTest {
    private static final Duration TTL = Duration.ofMillis(2000);

    static List<String> quorumRecipe() throws Exception {
        for (String line : Files.readAllLines(Path.of("../../docs/security.md"))) {
            String l = line.strip();
            String prefix = "ACL SETUSER elector on >... ";
            if (l.startsWith(prefix) && l.contains("+lease.raise")) {
                return Arrays.asList(l.substring(prefix.length()).split("\\s+"));
            }
        }
        throw new AssertionError("docs/security.md has no quorum-mode `ACL SETUSER elector on >... +lease.raise` line");
    }

    /** Three servers with the user elector under {@code rules}, and that user's URIs. */
    static List<RedisURI> aclNodes(List<RedisServer> nodes, List<String> rules) throws Exception {
        List<RedisURI> uris = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            RedisServer r = RedisServer.start();
            nodes.add(r);
            List<String> cmd = new ArrayList<>(List.of("ACL", "SETUSER", "elector", "on", ">elector-pw"));
            cmd.addAll(rules);
            assertEquals("+OK", r.command(cmd.toArray(new String[0])));
            uris.add(RedisURI.builder().withHost("127.0.0.1").withPort(r.port)
                    .withAuthentication("elector", "elector-pw").build());
        }
        return uris;
    }

    /** "owner token pttl" of LEASE.GET on one node, or null. */
    private static String[] holder(RedisServer r, String key) throws Exception {
        String g = r.command("LEASE.GET", key);
        return g == null || g.startsWith("$-1") || g.startsWith("_") || g.startsWith("*-1") ? null : g.split(" ");
    }

    private static List<String> errors(RecordingMetrics m) {
        return m.counts.keySet().stream().filter(k -> k.startsWith("error:") || k.equals("up:false")).toList();
    }

    @Test
    @Timeout(90)
    void theQuorumRecipesUserLeadsRenewsAndReleasesOnEveryNode() throws Exception {
        List<RedisServer> nodes = new ArrayList<>();
        try {
            List<RedisURI> uris = aclNodes(nodes, quorumRecipe());
            String key = "leases:java-quorum-acl";
            ElectorTest.Recorder a = new ElectorTest.Recorder();
            RecordingMetrics m = new RecordingMetrics();
            try (LeaderElector e = LeaderElector.builder().quorum(uris).key(key).ttl(TTL).candidate(a).metrics(m)
                    .build().start()) {
                LeaderContext ctx = a.granted.get(20, TimeUnit.SECONDS);
                assertTrue(e.isLeader());
                for (RedisServer r : nodes) {
                    String[] h = holder(r, key);
                    assertNotNull(h, "node " + r.port + " holds nothing");
                    assertEquals(Long.toString(ctx.token()), h[1]);
                }
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (m.count("renew:renewed") < 1) {
                    if (System.nanoTime() - until > 0) {
                        fail("no renewal as the recipe's user: " + m.counts);
                    }
                    Thread.sleep(20);
                }
                assertTrue(ctx.isLeader());
            }
            for (RedisServer r : nodes) {
                assertNull(holder(r, key), "node " + r.port + " not released by the recipe's user");
            }
            assertTrue(errors(m).isEmpty(), "errors as the quorum recipe's user: " + m.counts);
        } finally {
            for (RedisServer r : nodes) {
                r.close();
            }
        }
    }

    @Test
    @Timeout(90)
    void withoutLeaseRaiseItNeverLeadsAndCountsTheRefusal() throws Exception {
        List<RedisServer> nodes = new ArrayList<>();
        try {
            List<String> rules = new ArrayList<>(quorumRecipe());
            assertTrue(rules.remove("+lease.raise"));
            List<RedisURI> uris = aclNodes(nodes, rules);
            ElectorTest.Recorder a = new ElectorTest.Recorder();
            RecordingMetrics m = new RecordingMetrics();
            try (LeaderElector e = LeaderElector.builder().quorum(uris).key("leases:java-quorum-acl-2").ttl(TTL)
                    .candidate(a).metrics(m).build().start()) {
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (m.count("error:acquire:server") < 1) {
                    assertFalse(a.granted.isDone(), "led without +lease.raise");
                    if (System.nanoTime() - until > 0) {
                        fail("the refused RAISE was never counted as an error: " + m.counts);
                    }
                    Thread.sleep(20);
                }
                assertFalse(a.granted.isDone(), "led without +lease.raise");
                assertFalse(e.isLeader());
            }
        } finally {
            for (RedisServer r : nodes) {
                r.close();
            }
        }
    }
}
