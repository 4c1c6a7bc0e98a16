package io.redislease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.api.sync.RedisCommands;
import io.lettuce.core.protocol.ProtocolVersion;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The least-privilege users of docs/security.md §3, exactly as written there: the elector leads,
 * renews and releases as {@code elector} under RESP2 and RESP3 with no error on any command it
 * sends (connect handshake included); the leader's task writes through {@code LEASE.FENCE} as
 * {@code worker}, which can run its granted inner command and nothing else.
 */
class AclTest {
    private static final Duration TTL = Duration.ofMillis(2000);
    static final String ELECTOR = "resetkeys resetchannels -@all +lease.acquire +lease.renew +lease.release +lease.get +wait ~leases:*";
    static final String WORKER = "resetkeys resetchannels -@all +lease.fence +hset ~leases:* ~report:*";

    private static void setUser(RedisServer r, String name, String rules) throws Exception {
        List<String> cmd = new java.util.ArrayList<>(List.of("ACL", "SETUSER", name, "on", ">" + name + "-pw"));
        cmd.addAll(List.of(rules.split(" ")));
        assertEquals("+OK", r.command(cmd.toArray(new String[0])));
    }

    private static RedisURI as(RedisServer r, String user) {
        return RedisURI.builder().withHost("127.0.0.1").withPort(r.port).withAuthentication(user, user + "-pw").build();
    }

    @Test
    @Timeout(90)
    void theElectorAndWorkerUsersOfTheSecurityRecipe() throws Exception {
        try (RedisServer r = RedisServer.start()) {
            setUser(r, "elector", ELECTOR);
            setUser(r, "worker", WORKER);
            for (ProtocolVersion v : List.of(ProtocolVersion.RESP2, ProtocolVersion.RESP3)) {
                String key = "leases:java-" + v;
                ElectorTest.Recorder a = new ElectorTest.Recorder();
                RecordingMetrics m = new RecordingMetrics();
                RedisClient app = RedisClient.create(as(r, "worker"));
                try (StatefulRedisConnection<String, String> conn = app.connect()) {
                    RedisCommands<String, String> worker = conn.sync();
                    LeaderContext ctx;
                    try (LeaderElector e = LeaderElector.builder().redis(as(r, "elector")).protocolVersion(v).key(key)
                            .ttl(TTL).candidate(a).metrics(m).build().start()) {
                        ctx = a.granted.get(15, TimeUnit.SECONDS);
                        assertEquals(1L, ctx.fence(worker, "HSET", "report:" + v, "by", ctx.owner()));
                        RedisCommandExecutionException denied = assertThrows(RedisCommandExecutionException.class,
                                () -> ctx.fence(worker, "SET", "report:plain", "x"));
                        assertFalse(denied instanceof FencedException, denied.toString());
                        assertTrue(denied.getMessage().startsWith("NOPERM") || denied.getMessage().contains("acl verification failed"),
                                denied.getMessage());
                        Thread.sleep(TTL.toMillis()); // renewals as the elector user
                        assertTrue(ctx.isLeader());
                        assertTrue(e.isLeader());
                        assertTrue(m.count("renew:renewed") >= 1, m.counts.toString());
                    }
                    assertTrue(a.revoked.isDone(), "resigned");
                    String nil = r.command("LEASE.GET", key);
                    assertTrue(nil.equals("$-1") || nil.equals("*-1"), "released as the elector user: " + nil);
                    List<String> errors = m.counts.keySet().stream()
                            .filter(k -> k.startsWith("error:") || k.equals("up:false")).toList();
                    assertTrue(errors.isEmpty(), v + ": errors as the least-privilege elector: " + m.counts);
                } finally {
                    app.shutdown();
                }
            }
        }
    }
}
