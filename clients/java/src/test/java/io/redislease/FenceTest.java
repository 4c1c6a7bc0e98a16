package io.redislease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.api.sync.RedisCommands;
import java.time.Duration;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The fencing helper on the application's own Lettuce connection: a write under the live
 * token is applied and returns the inner reply; after a hand-over the old token is refused
 * with {@link FencedException} and the write is not applied.
 */
class FenceTest {
    private static final Duration TTL = Duration.ofMillis(2000);

    @Test
    @Timeout(60)
    void aStaleTokenIsRefusedAndTheWriteNotApplied() throws Exception {
        try (RedisServer r = RedisServer.start()) {
            RedisClient app = RedisClient.create(r.uri());
            try (StatefulRedisConnection<String, String> conn = app.connect()) {
                RedisCommands<String, String> redis = conn.sync();
                ElectorTest.Recorder a = new ElectorTest.Recorder();
                LeaderContext ca;
                try (LeaderElector ea = LeaderElector.builder().redis(r.uri()).key("jobs").ttl(TTL).candidate(a).build()
                        .start()) {
                    ca = a.granted.get(10, TimeUnit.SECONDS);
                    assertTrue(ea.isLeader());
                    assertEquals("OK", ca.fence(redis, "SET", "report", "from-a"));
                    Object left = ca.fence(redis);
                    assertTrue(left instanceof Long ms && ms > 0 && ms <= TTL.toMillis(), "remaining ms: " + left);
                    // An error of the inner command is not a fencing refusal.
                    RedisCommandExecutionException inner = assertThrows(RedisCommandExecutionException.class,
                            () -> ca.fence(redis, "INCR", "report"));
                    assertFalse(inner instanceof FencedException, inner.toString());
                }
                // A resigned; B leads with a higher token.
                ElectorTest.Recorder b = new ElectorTest.Recorder();
                try (LeaderElector eb = LeaderElector.builder().redis(r.uri()).key("jobs").ttl(TTL).candidate(b).build()
                        .start()) {
                    LeaderContext cb = b.granted.get(10, TimeUnit.SECONDS);
                    assertTrue(cb.token() > ca.token());
                    assertTrue(eb.isLeader());
                    FencedException stale = assertThrows(FencedException.class,
                            () -> ca.fence(redis, "SET", "report", "stale-from-a"));
                    assertEquals(ca.token(), stale.token());
                    assertEquals("jobs", stale.key());
                    assertTrue(stale.getMessage().startsWith("FENCED"), stale.getMessage());
                    assertEquals("from-a", redis.get("report"), "the stale write was not applied");
                    ExecutionException async = assertThrows(ExecutionException.class,
                            () -> LeaseFence.fenceAsync(conn.async(), "jobs", ca.token(), "SET", "report", "x")
                                    .get(5, TimeUnit.SECONDS));
                    assertInstanceOf(FencedException.class, async.getCause());
                    assertEquals("from-a", redis.get("report"));
                    assertEquals("OK", LeaseFence.fence(redis, "jobs", cb.token(), "SET", "report", "from-b"));
                    assertEquals("from-b", redis.get("report"));
                    assertEquals(2L, cb.fence(redis, "RPUSH", "log", "x", "y"));
                }
            } finally {
                app.shutdown();
            }
        }
    }
}
