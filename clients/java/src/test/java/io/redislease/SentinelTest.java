package io.redislease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.lettuce.core.RedisURI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Sentinel: a primary, a replica (both with the module) and one Sentinel. The elector, given
 * only the Sentinel's address, leads on the primary; after {@code SENTINEL FAILOVER} promotes
 * the replica, the elector finds the new primary through Sentinel and leads there (the lease
 * either replicated, then renewed in place, or lost, then granted again with a higher token).
 */
class SentinelTest {
    private static final Duration TTL = Duration.ofMillis(2000);

    private static void await(String what, long seconds, Callable<Boolean> ok) throws Exception {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        while (true) {
            try {
                if (ok.call()) {
                    return;
                }
            } catch (java.io.IOException e) {
                // not up yet
            }
            if (System.nanoTime() - until > 0) {
                fail("timed out waiting for: " + what);
            }
            Thread.sleep(50);
        }
    }

    @Test
    @Timeout(120)
    void leadsThroughSentinelAndFollowsAPromotion() throws Exception {
        try (RedisServer primary = RedisServer.start(); RedisServer replica = RedisServer.start()) {
            assertEquals("+OK", replica.command("REPLICAOF", "127.0.0.1", Integer.toString(primary.port)));
            await("replica in sync", 20, () -> replica.command("INFO", "replication").contains("master_link_status:up"));
            int sport = RedisServer.freePort();
            Path conf = replica.dir().resolve("sentinel.conf");
            Files.writeString(conf, "port " + sport + "\nbind 127.0.0.1\nsentinel monitor mymaster 127.0.0.1 "
                    + primary.port + " 1\nsentinel down-after-milliseconds mymaster 1000\n"
                    + "sentinel failover-timeout mymaster 10000\n");
            Process sentinel = new ProcessBuilder(RedisServer.serverBinary(), conf.toString(), "--sentinel")
                    .redirectErrorStream(true).redirectOutput(replica.dir().resolve("sentinel.log").toFile()).start();
            try {
                await("sentinel knows the replica", 30,
                        // An empty array reads as "", one replica as its first element's header.
                        () -> !RedisServer.command(sport, "SENTINEL", "REPLICAS", "mymaster").isEmpty());
                ElectorTest.Recorder a = new ElectorTest.Recorder();
                RecordingMetrics m = new RecordingMetrics();
                RedisURI uri = RedisURI.Builder.sentinel("127.0.0.1", sport, "mymaster").build();
                try (LeaderElector e = LeaderElector.builder().redis(uri).key("sentinel").ttl(TTL).candidate(a).metrics(m)
                        .build().start()) {
                    LeaderContext first = a.granted.get(20, TimeUnit.SECONDS);
                    assertTrue(primary.command("LEASE.GET", "sentinel").startsWith(first.owner() + " " + first.token()),
                            "leads on the primary Sentinel names");
                    await("the lease replicated", 10, () -> replica.command("LEASE.GET", "sentinel").startsWith(first.owner()));
                    assertEquals("+OK", RedisServer.command(sport, "SENTINEL", "FAILOVER", "mymaster"));
                    await("the replica promoted", 30, () -> replica.command("INFO", "replication").contains("role:master"));
                    // Once the old primary is a replica it refuses writes (READONLY): renewals that
                    // succeed after that went to the new primary, found through Sentinel.
                    await("the old primary demoted", 30, () -> primary.command("INFO", "replication").contains("role:slave"));
                    long renewedBefore = m.count("renew:renewed") + m.count("acquire:granted");
                    await("two renewals or grants on the new primary", 30,
                            () -> m.count("renew:renewed") + m.count("acquire:granted") >= renewedBefore + 2);
                    // The elector leads on the new primary (its current reign's owner holds the lease there).
                    await("leading on the promoted replica", 30, () -> {
                        LeaderContext now = e.leadership().orElse(null);
                        return now != null && replica.command("LEASE.GET", "sentinel")
                                .startsWith(now.owner() + " " + now.token());
                    });
                    LeaderContext now = e.leadership().orElseThrow();
                    assertTrue(now.token() >= first.token(), "tokens never go back");
                    System.out.printf("sentinel failover: %s (token %d -> %d), renew errors after the promotion: %s%n",
                            now == first ? "kept the reign, renewed on the new primary" : "new reign on the new primary",
                            first.token(), now.token(), m.counts.keySet().stream().filter(k -> k.startsWith("error:")).toList());
                }
            } finally {
                sentinel.destroyForcibly();
                sentinel.waitFor();
            }
        }
    }
}
