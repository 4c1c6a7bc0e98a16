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
