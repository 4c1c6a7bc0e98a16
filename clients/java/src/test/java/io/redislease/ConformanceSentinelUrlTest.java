package io.redislease;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lettuce.core.RedisCredentials;
import io.lettuce.core.RedisURI;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * The conformance elector's redis+sentinel:// parser (no server): the URLs the harness hands out
 * under --topology sentinel, and the malformed ones it must refuse in one line.
 */
class ConformanceSentinelUrlTest {
    private static List<String> sentinels(RedisURI u) {
        return u.getSentinels().stream().map(s -> s.getHost() + ":" + s.getPort()).toList();
    }

    private static RedisCredentials credentials(RedisURI u) {
        return u.getCredentialsProvider() == null ? null : u.getCredentialsProvider().resolveCredentials().block();
    }

    @Test
    void aUrlOfAnotherSchemeIsNotASentinelUrl() {
        assertNull(ConformanceSentinelUrl.parse("redis://127.0.0.1:6379/"));
        assertNull(ConformanceSentinelUrl.parse("rediss://u:p@h:1/2"));
        assertNull(ConformanceSentinelUrl.parse("redis-sentinel://h:1#m"));
    }

    @Test
    void theHarnessUrlNamesEverySentinelInOrderAndTheMaster() {
        RedisURI u = ConformanceSentinelUrl.parse("redis+sentinel://127.0.0.1:26001,127.0.0.1:26002,[::1]:26003/leases");
        assertEquals(List.of("127.0.0.1:26001", "127.0.0.1:26002", "::1:26003"), sentinels(u));
        assertEquals("leases", u.getSentinelMasterId());
        assertEquals(0, u.getDatabase());
        RedisCredentials c = credentials(u);
        assertTrue(c == null || !c.hasPassword(), "no credentials");
    }

    @Test
    void credentialsAndDbGoToThePrimaryPercentDecoded() {
        RedisURI u = ConformanceSentinelUrl.parse("redis+sentinel://:p%40ss+1@s1:26379/m/3");
        assertEquals(List.of("s1:26379"), sentinels(u));
        assertEquals("m", u.getSentinelMasterId());
        assertEquals(3, u.getDatabase());
        RedisCredentials c = credentials(u);
        assertFalse(c.hasUsername());
        assertArrayEquals("p@ss+1".toCharArray(), c.getPassword());

        RedisURI v = ConformanceSentinelUrl.parse("redis+sentinel://lease:hunter2@s1:26379,s2:26380/m/");
        assertEquals(List.of("s1:26379", "s2:26380"), sentinels(v));
        assertEquals(0, v.getDatabase());
        RedisCredentials d = credentials(v);
        assertEquals("lease", d.getUsername());
        assertArrayEquals("hunter2".toCharArray(), d.getPassword());
        // The Sentinels are asked without credentials, as the Rust client does.
        for (RedisURI s : v.getSentinels()) {
            RedisCredentials sc = credentials(s);
            assertTrue(sc == null || !sc.hasPassword(), "sentinel " + s + " has no password");
        }
    }

    @Test
    void malformedSentinelUrlsThrowAOneLineError() {
        String[][] bad = {
            {"redis+sentinel://s1:26379", "needs /master-name"},
            {"redis+sentinel://s1:26379/", "needs a master name"},
            {"redis+sentinel:///m", "names no sentinel"},
            {"redis+sentinel://,/m", "names no sentinel"},
            {"redis+sentinel://u:p@/m", "names no sentinel"},
            {"redis+sentinel://s1/m", "needs host:port"},
            {"redis+sentinel://s1:x/m", "bad port"},
            {"redis+sentinel://s1:70000/m", "bad port"},
            {"redis+sentinel://:26379/m", "empty host"},
            {"redis+sentinel://s1:1/m/x", "bad db"},
            {"redis+sentinel://s1:1/m/1/2", "unexpected path"},
            {"redis+sentinel://hunter2@s1:1/m", "[user]:password@"},
            {"redis+sentinel://:%zz@s1:1/m", "percent-encoding"},
        };
        for (String[] b : bad) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ConformanceSentinelUrl.parse(b[0]), b[0]);
            assertTrue(e.getMessage().contains(b[1]), b[0] + ": " + e.getMessage());
            assertFalse(e.getMessage().contains("\n"), b[0]);
        }
    }
}
