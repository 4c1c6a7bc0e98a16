package io.redislease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * R17 against a real server: every reign campaigns with its own owner ({@code base#reign}), so a
 * RELEASE or RENEW of an earlier reign that executes late (abandoned by the loop, delivered by
 * the kernel afterwards) cannot end or extend the next reign. The stale command is played by
 * the test itself, with the strongest possible match: the earlier reign's owner and the
 * CURRENT reign's token. The negative control (one owner for every reign, the old behaviour)
 * shows that the same command then ends the current reign while the elector still leads.
 */
class ReignTest {
    private static final Duration TTL = Duration.ofMillis(2000);

    /** First reign: the task returns at once (task_exited, released); second: works until stopped. */
    static final class TwoReigns implements Candidate {
        final List<LeaderContext> reigns = new CopyOnWriteArrayList<>();
        final CompletableFuture<LeaderContext> second = new CompletableFuture<>();

        @Override
        public void onGranted(LeaderContext ctx) throws Exception {
            reigns.add(ctx);
            if (reigns.size() == 1) {
                return;
            }
            second.complete(ctx);
            ctx.cancelled().get();
        }
    }

    private static LeaderElector.Builder elector(RedisServer r, String key, Candidate c) {
        return LeaderElector.builder().redis(r.uri()).key(key).ttl(TTL).candidate(c);
    }

    @Test
    @Timeout(60)
    void aLateReleaseOfAnEarlierReignCannotEndTheNextOne() throws Exception {
        try (RedisServer r = RedisServer.start()) {
            TwoReigns c = new TwoReigns();
            try (LeaderElector e = elector(r, "reign", c).build().start()) {
                LeaderContext two = c.second.get(10, TimeUnit.SECONDS);
                LeaderContext one = c.reigns.get(0);
                assertEquals(e.owner() + "#1", one.owner());
                assertEquals(e.owner() + "#2", two.owner());
                assertEquals(two.owner() + " " + two.token(), r.command("LEASE.GET", "reign").replaceAll(" \\d+$", ""));
                // The late commands of reign 1: they name an owner that holds nothing.
                assertEquals(":0", r.command("LEASE.RENEW", "reign", one.owner(), Long.toString(two.token()), "2000"));
                assertEquals(":0", r.command("LEASE.RELEASE", "reign", one.owner(), Long.toString(two.token())));
                assertTrue(r.command("LEASE.GET", "reign").startsWith(two.owner() + " " + two.token()),
                        "reign 2 still holds the lease");
                assertTrue(two.isLeader());
            }
        }
    }

    @Test
    @Timeout(60)
    void negativeControlOneOwnerForEveryReign() throws Exception {
        try (RedisServer r = RedisServer.start()) {
            TwoReigns c = new TwoReigns();
            try (LeaderElector e = elector(r, "reuse", c).reuseOwnerAcrossReigns().build().start()) {
                LeaderContext two = c.second.get(10, TimeUnit.SECONDS);
                LeaderContext one = c.reigns.get(0);
                assertEquals(one.owner(), two.owner(), "the old behaviour: one owner across reigns");
                assertEquals(e.owner() + "#1", two.owner());
                assertTrue(two.isLeader());
                // The same late RELEASE now matches and frees the lease under a leader that
                // still believes it leads: the next elector could be granted at once.
                assertEquals(":1", r.command("LEASE.RELEASE", "reuse", one.owner(), Long.toString(two.token())));
                assertNotEquals(two.owner(), r.command("LEASE.GET", "reuse").split(" ")[0]);
            }
        }
    }

    @Test
    void aBaseThatCannotCarryEveryReignIsRefused() {
        LeaderElector.Builder b = LeaderElector.builder().redis(io.lettuce.core.RedisURI.create("redis://127.0.0.1:1"))
                .key("k").ttl(TTL).candidate(ctx -> {});
        b.owner("x".repeat(239)).build().close();
        IllegalArgumentException tooLong = assertThrows(IllegalArgumentException.class,
                () -> b.owner("x".repeat(240)).build());
        assertTrue(tooLong.getMessage().startsWith("invalid configuration: owner:"), tooLong.getMessage());
        IllegalArgumentException multiByte = assertThrows(IllegalArgumentException.class,
                () -> b.owner("é".repeat(120)).build());
        assertTrue(multiByte.getMessage().startsWith("invalid configuration: owner:"), multiByte.getMessage());
    }
}
