package io.redislease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lettuce.core.protocol.CommandArgs;
import java.util.concurrent.ExecutionException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Replies and error lines as they come through Lettuce from a real server, classified. */
class TransportTest {
    private static Object call(Transport.Link link, Transport.Cmd cmd, CommandArgs<String, String> a) throws Exception {
        long until = System.nanoTime() + 5_000_000_000L;
        return Transport.await(link.dispatch(cmd, a), until, null);
    }

    private static Decide.Failure failure(Transport.Link link, Transport.Cmd cmd, CommandArgs<String, String> a) {
        ExecutionException e = assertThrows(ExecutionException.class, () -> call(link, cmd, a));
        return Transport.classify(e.getCause());
    }

    @Test
    @Timeout(30)
    void repliesAndErrorsAreClassified() throws Exception {
        // Grace long enough to survive a slow start on a starved machine; the part after grace
        // runs on a second server without grace.
        try (RedisServer r = RedisServer.start(RedisServer.freePort(), 60_000); RedisServer r0 = RedisServer.start()) {
            Transport.Connector c = Transport.standalone(r.uri(), null, Decide.SECOND, Transport.Settings.DEFAULT);
            try {
                Transport.Slot slot = new Transport.Slot(c, Decide.SECOND);
                Transport.Link link = slot.get(System.nanoTime() + 5 * Decide.SECOND, null);

                // R10: a non-blocking ACQUIRE of a free lease during grace: GRACE <ms> ms left.
                Decide.Failure g = failure(link, Transport.Cmd.ACQUIRE, Transport.args("k").add("me").add(1000));
                assertEquals(ErrorKind.GRACE, g.kind(), g.toString());
                assertTrue(g.graceNanos() > 0 && g.graceNanos() <= 60 * Decide.SECOND, g.toString());

                // A ttl above lease.max-ttl: ERR -> rejected.
                Decide.Failure err = failure(link, Transport.Cmd.ACQUIRE, Transport.args("k").add("me").add(10_000_000));
                assertEquals(ErrorKind.REJECTED, err.kind(), err.toString());

                // A key of another type: WRONGTYPE -> rejected.
                r.command("SET", "str", "x");
                Decide.Failure wt = failure(link, Transport.Cmd.RENEW, Transport.args("str").add("me").add(1).add(1000));
                assertEquals(ErrorKind.REJECTED, wt.kind(), wt.toString());
                assertTrue(wt.message().startsWith("WRONGTYPE"), wt.message());

                slot.dropAndWait();
                c.shutdown();
                // Without grace: token, refresh (same token), nil for another owner, 1/0 flags, GET.
                c = Transport.standalone(r0.uri(), null, Decide.SECOND, Transport.Settings.DEFAULT);
                slot = new Transport.Slot(c, Decide.SECOND);
                link = slot.get(System.nanoTime() + 5 * Decide.SECOND, null);
                Long t1 = Transport.parseToken(call(link, Transport.Cmd.ACQUIRE, Transport.args("k").add("me").add(5000)));
                Long t2 = Transport.parseToken(call(link, Transport.Cmd.ACQUIRE, Transport.args("k").add("me").add(5000)));
                assertTrue(t1 != null && t1 > 0 && t1 < (1L << 53));
                assertEquals(t1, t2, "same owner: idempotent refresh keeps the token");
                assertNull(Transport.parseToken(call(link, Transport.Cmd.ACQUIRE, Transport.args("k").add("other").add(5000))));
                LeaseInfo h = Transport.parseHolder(call(link, Transport.Cmd.GET, Transport.args("k")));
                assertEquals("me", h.owner());
                assertEquals(t1.longValue(), h.token());
                assertTrue(Transport.parseFlag(Transport.Cmd.RENEW,
                        call(link, Transport.Cmd.RENEW, Transport.args("k").add("me").add(t1).add(5000))));
                assertTrue(!Transport.parseFlag(Transport.Cmd.RENEW,
                        call(link, Transport.Cmd.RENEW, Transport.args("k").add("me").add(t1 + 1).add(5000))));
                assertTrue(Transport.parseFlag(Transport.Cmd.RELEASE,
                        call(link, Transport.Cmd.RELEASE, Transport.args("k").add("me").add(t1))));
                assertNull(Transport.parseHolder(call(link, Transport.Cmd.GET, Transport.args("k"))));
                slot.dropAndWait();
            } finally {
                c.shutdown();
            }
        }
    }
}
