package io.redislease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.lettuce.core.RedisURI;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.cluster.api.StatefulRedisClusterConnection;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A 3-master Redis Cluster (redis-cli --cluster create) with the module on every node: the
 * elector leads on the primary of the key's slot, fences through the application's cluster
 * connection, and its first connect reports no error (issue 27: a spurious "redis
 * unreachable" on the first Cluster connect).
 */
class ClusterTest {
    private static final Duration TTL = Duration.ofMillis(2000);

    static List<RedisServer> startCluster() throws Exception {
        List<RedisServer> nodes = new ArrayList<>();
        try {
            for (int i = 0; i < 3; i++) {
                nodes.add(RedisServer.start(RedisServer.freePort(), 0, "--cluster-enabled", "yes",
                        "--cluster-node-timeout", "2000"));
            }
            List<String> cmd = new ArrayList<>(List.of("redis-cli", "--cluster", "create"));
            for (RedisServer n : nodes) {
                cmd.add("127.0.0.1:" + n.port);
            }
            cmd.addAll(List.of("--cluster-replicas", "0", "--cluster-yes"));
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes());
            assertEquals(0, p.waitFor(), "redis-cli --cluster create: " + out);
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            for (RedisServer n : nodes) {
                while (!n.command("CLUSTER", "INFO").contains("cluster_state:ok")) {
                    if (System.nanoTime() - until > 0) {
                        fail("cluster never became ok on port " + n.port);
                    }
                    Thread.sleep(50);
                }
            }
            return nodes;
        } catch (Exception | Error e) {
            for (RedisServer n : nodes) {
                n.close();
            }
            throw e;
        }
    }

    private static void ok(String reply, String what) {
        assertEquals("+OK", reply, what);
    }

    /** The node (of {@code nodes}) that serves {@code slot} according to itself. */
    private static RedisServer owner(List<RedisServer> nodes, int slot) throws Exception {
        for (RedisServer n : nodes) {
            String id = n.command("CLUSTER", "MYID");
            for (String line : n.command("CLUSTER", "NODES").split("\n")) {
                String[] w = line.trim().split(" ");
                if (w.length > 8 && w[0].equals(id)) {
                    for (int i = 8; i < w.length; i++) {
                        String[] range = w[i].split("-");
                        if (range[0].startsWith("[")) {
                            continue;
                        }
                        int lo = Integer.parseInt(range[0]);
                        int hi = range.length > 1 ? Integer.parseInt(range[1]) : lo;
                        if (slot >= lo && slot <= hi) {
                            return n;
                        }
                    }
                }
            }
        }
        throw new AssertionError("no node serves slot " + slot);
    }

    /** Move {@code slot} with its keys from {@code src} to {@code dst}: the documented resharding steps. */
    private static void migrate(List<RedisServer> nodes, int slot, RedisServer src, RedisServer dst, String... keys)
            throws Exception {
        String s = Integer.toString(slot);
        String srcId = src.command("CLUSTER", "MYID");
        String dstId = dst.command("CLUSTER", "MYID");
        ok(dst.command("CLUSTER", "SETSLOT", s, "IMPORTING", srcId), "importing");
        ok(src.command("CLUSTER", "SETSLOT", s, "MIGRATING", dstId), "migrating");
        List<String> cmd = new ArrayList<>(List.of("MIGRATE", "127.0.0.1", Integer.toString(dst.port), "", "0", "5000",
                "KEYS"));
        cmd.addAll(List.of(keys));
        String moved = src.command(cmd.toArray(new String[0]));
        assertTrue(moved.equals("+OK") || moved.equals("+NOKEY"), "MIGRATE: " + moved);
        for (RedisServer n : List.of(dst, src)) {
            ok(n.command("CLUSTER", "SETSLOT", s, "NODE", dstId), "setslot node");
        }
        for (RedisServer n : nodes) {
            if (n != src && n != dst) {
                ok(n.command("CLUSTER", "SETSLOT", s, "NODE", dstId), "setslot node");
            }
        }
    }

    @Test
    @Timeout(120)
    void keepsLeadingWhenTheLeaseKeysSlotMigrates() throws Exception {
        List<RedisServer> nodes = startCluster();
        try {
            String key = "{jobs}/lease";
            List<RedisURI> seeds = List.of(nodes.get(0).uri());
            ElectorTest.Recorder a = new ElectorTest.Recorder();
            RecordingMetrics m = new RecordingMetrics();
            RedisClusterClient app = RedisClusterClient.create(seeds);
            try (StatefulRedisClusterConnection<String, String> conn = app.connect();
                    LeaderElector e = LeaderElector.builder().cluster(seeds).key(key).ttl(TTL).candidate(a).metrics(m)
                            .build().start()) {
                LeaderContext ctx = a.granted.get(20, TimeUnit.SECONDS);
                assertEquals("OK", ctx.fence(conn.sync(), "SET", "{jobs}/report", "before"));
                int slot = Integer.parseInt(nodes.get(0).command("CLUSTER", "KEYSLOT", key).substring(1));
                RedisServer src = owner(nodes, slot);
                RedisServer dst = nodes.stream().filter(n -> n != src).findFirst().orElseThrow();
                migrate(nodes, slot, src, dst, key, "{jobs}/report");
                assertTrue(dst.command("LEASE.GET", key).startsWith(ctx.owner() + " " + ctx.token()),
                        "the lease moved with its slot");
                // Renewals after the move reach the new node (MOVED: reconnect with a fresh topology).
                long before = m.count("renew:renewed");
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
                while (m.count("renew:renewed") < before + 3) {
                    if (System.nanoTime() - until > 0) {
                        fail("no renewals after the slot moved: " + m.counts);
                    }
                    Thread.sleep(20);
                }
                assertTrue(ctx.isLeader(), "the reign survived the migration: " + m.counts);
                assertTrue(e.isLeader());
                String held = dst.command("LEASE.GET", key);
                assertTrue(held.startsWith(ctx.owner() + " " + ctx.token()), held);
                long pttl = Long.parseLong(held.substring(held.lastIndexOf(' ') + 1));
                assertTrue(pttl > TTL.toMillis() / 2, "renewed on the new node: pttl " + pttl);
                assertEquals("OK", ctx.fence(conn.sync(), "SET", "{jobs}/report", "after"));
                assertEquals("after", dst.command("GET", "{jobs}/report"));
                System.out.printf("slot %d migrated while leading: reign kept (token %d), metrics %s%n", slot, ctx.token(),
                        m.counts);
            } finally {
                app.shutdown();
            }
        } finally {
            for (RedisServer n : nodes) {
                n.close();
            }
        }
    }

    @Test
    @Timeout(90)
    void leadsOnAClusterWithoutASpuriousErrorOnTheFirstConnect() throws Exception {
        List<RedisServer> nodes = startCluster();
        try {
            List<RedisURI> seeds = List.of(nodes.get(0).uri());
            ElectorTest.Recorder a = new ElectorTest.Recorder();
            RecordingMetrics m = new RecordingMetrics();
            RedisClusterClient app = RedisClusterClient.create(seeds);
            try (StatefulRedisClusterConnection<String, String> conn = app.connect();
                    LeaderElector e = LeaderElector.builder().cluster(seeds).key("{jobs}/lease").ttl(TTL).candidate(a)
                            .metrics(m).build().start()) {
                LeaderContext ctx = a.granted.get(20, TimeUnit.SECONDS);
                assertTrue(e.isLeader());
                assertEquals("OK", ctx.fence(conn.sync(), "SET", "{jobs}/report", "x"));
                assertEquals("x", conn.sync().get("{jobs}/report"));
                Thread.sleep(TTL.toMillis()); // a few renewals
                assertTrue(ctx.isLeader());
                assertTrue(m.count("renew:renewed") >= 1);
                List<String> errors = m.counts.keySet().stream().filter(k -> k.startsWith("error:") || k.equals("up:false"))
                        .toList();
                assertTrue(errors.isEmpty(), "errors on a healthy cluster: " + m.counts);
            } finally {
                app.shutdown();
            }
        } finally {
            for (RedisServer n : nodes) {
                n.close();
            }
        }
    }
}
