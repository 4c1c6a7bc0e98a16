package io.redislease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.redislease.QuorumDecide.Abort;
import io.redislease.QuorumDecide.AfterRenew;
import io.redislease.QuorumDecide.IdentityKind;
import io.redislease.QuorumDecide.NodeToken;
import io.redislease.QuorumDecide.Raise;
import io.redislease.QuorumDecide.Reply;
import java.util.List;
import org.junit.jupiter.api.Test;

/** Quorum mode's pure decisions (docs/client-protocol.md §9a), as in client/src/quorum_decide.rs. */
class QuorumDecideTest {
    private static final Decide.Failure CONN = Decide.Failure.of(ErrorKind.CONNECTION, "refused");

    private static Reply<Long> tok(long t) {
        return Reply.of(t);
    }

    private static Reply<Long> nil() {
        return Reply.of(null);
    }

    @Test
    void majorityIsOfTheConfiguredNodes() {
        assertEquals(2, QuorumDecide.majority(2));
        assertEquals(2, QuorumDecide.majority(3));
        assertEquals(3, QuorumDecide.majority(4));
        assertEquals(3, QuorumDecide.majority(5));
        // Two silent nodes of three: one grant is not a majority, whoever answered.
        assertTrue(QuorumDecide.afterAcquire(List.of(tok(5), Reply.silent(), Reply.silent())) instanceof Abort);
    }

    @Test
    void aMajorityOfGrantsRaisesToTheHighestToken() {
        QuorumDecide.AfterAcquire d = QuorumDecide.afterAcquire(List.of(tok(3), nil(), tok(9)));
        assertEquals(new Raise(9, List.of(0, 2)), d);
        d = QuorumDecide.afterAcquire(List.of(tok(3), tok(4), tok(2)));
        assertEquals(new Raise(4, List.of(0, 1, 2)), d);
    }

    @Test
    void partialGrantsAreReleased() {
        // Split vote: held by others on two nodes: not granted (poll again), our grant released.
        QuorumDecide.AfterAcquire d = QuorumDecide.afterAcquire(List.of(tok(7), nil(), nil()));
        assertEquals(new Abort(List.of(new NodeToken(0, 7)), null), d);
        // Errors and silence kept a majority out of reach: an error (back off), grant released.
        d = QuorumDecide.afterAcquire(List.of(tok(7), Reply.failed(CONN), Reply.silent()));
        assertEquals(new Abort(List.of(new NodeToken(0, 7)), CONN), d);
    }

    @Test
    void refusalsAloneMeanNotGranted() {
        // One nil and two silent nodes: the refusal alone does not explain the missing
        // majority (1 + 2 > 3 is false) and silence does: an error, back off.
        Abort a = (Abort) QuorumDecide.afterAcquire(List.of(nil(), Reply.silent(), Reply.silent()));
        assertEquals(ErrorKind.TIMEOUT, a.error().kind());
        // Two nils: a majority is held by someone else: poll, no error.
        a = (Abort) QuorumDecide.afterAcquire(List.of(nil(), nil(), Reply.failed(CONN)));
        assertNull(a.error());
        assertTrue(a.release().isEmpty());
    }

    @Test
    void graceIsPassedOn() {
        Decide.Failure g = Decide.classifyError("GRACE 1500 ms left");
        Abort a = (Abort) QuorumDecide.afterAcquire(List.of(Reply.failed(CONN), Reply.failed(g), Reply.silent()));
        assertEquals(ErrorKind.GRACE, a.error().kind());
        assertEquals(1500 * Decide.MILLI, a.error().graceNanos());
    }

    @Test
    void raiseNeedsAMajorityOfConfirmations() {
        assertTrue(QuorumDecide.raiseConfirmed(List.of(Reply.of(true), Reply.silent(), Reply.of(true)), 3));
        assertFalse(QuorumDecide.raiseConfirmed(List.of(Reply.of(true), Reply.of(false), Reply.silent()), 3));
        assertFalse(QuorumDecide.raiseConfirmed(List.of(Reply.of(true), Reply.failed(CONN), Reply.silent()), 3));
    }

    @Test
    void renewalRound() {
        assertEquals(AfterRenew.RENEWED, QuorumDecide.afterRenew(List.of(Reply.of(true), Reply.of(true), Reply.silent())));
        assertEquals(AfterRenew.LOST, QuorumDecide.afterRenew(List.of(Reply.of(true), Reply.of(false), Reply.of(false))));
        // One 0 and silence: neither (keep the old deadline, retry until the stop point).
        assertEquals(AfterRenew.UNKNOWN,
                QuorumDecide.afterRenew(List.of(Reply.of(true), Reply.of(false), Reply.failed(CONN))));
        assertTrue(QuorumDecide.renewDecided(List.of(Reply.of(false), Reply.of(false), Reply.silent())));
        assertFalse(QuorumDecide.renewDecided(List.of(Reply.of(true), Reply.silent(), Reply.silent())));
    }

    @Test
    void identities() {
        String[] known = {"a", null, "c"};
        assertEquals(IdentityKind.FIRST, QuorumDecide.checkIdentity(1, "b", known).kind());
        assertEquals(IdentityKind.SAME, QuorumDecide.checkIdentity(0, "a", known).kind());
        assertEquals(IdentityKind.CHANGED, QuorumDecide.checkIdentity(0, "z", known).kind());
        // A swapped node that lands on another node's server is a duplicate, not a change.
        QuorumDecide.IdentityCheck d = QuorumDecide.checkIdentity(2, "a", known);
        assertEquals(IdentityKind.DUPLICATE, d.kind());
        assertEquals(0, d.of());
        assertEquals(IdentityKind.DUPLICATE, QuorumDecide.checkIdentity(1, "c", known).kind());
    }

    @Test
    void quarantineIsAtLeastTheTtlStretchedByDrift() {
        long s = Decide.SECOND;
        assertEquals(30 * s, QuorumDecide.quarantineNanos(s, 30 * s, 0.0));
        assertEquals(45 * s, QuorumDecide.quarantineNanos(45 * s, 30 * s, 0.0));
        // 30 s of the server's clock last up to 30 / 0.99 s on ours.
        assertEquals(30_303, QuorumDecide.quarantineNanos(s, 30 * s, 0.01) / Decide.MILLI);
    }

    @Test
    void runIdIsReadFromInfo() {
        assertEquals("abc123", QuorumDecide.runIdOf("# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\ntcp_port:1\r\n"));
        assertNull(QuorumDecide.runIdOf("# Server\r\nredis_version:7.0.15\r\n"));
    }

    /** Q10: one wait node for every order of a node set; wait only on a held wait node. */
    @Test
    void waitNodeAndWhenToWait() {
        List<String> a = List.of("redis://c:1", "redis://a:1", "redis://b:1");
        List<String> b = List.of("redis://b:1", "redis://a:1", "redis://c:1");
        assertEquals("redis://a:1", a.get(QuorumDecide.waitNode(a)));
        assertEquals("redis://a:1", b.get(QuorumDecide.waitNode(b)));
        assertEquals(0, QuorumDecide.waitNode(List.of()));
        long ms = Decide.MILLI;
        Reply<Long> busy = Reply.of(null);
        Reply<Long> down = Reply.failed(Decide.Failure.of(ErrorKind.CONNECTION, "down"));
        List<Reply<Long>> held = List.of(busy, busy, Reply.silent());
        assertEquals(4800 * ms, QuorumDecide.waitAfterRefusal(held, 0, false, 5000 * ms, 200 * ms, 9000 * ms).getAsLong());
        // At most the cap: a wait node that stops answering must not hold us for the BLOCK.
        assertEquals(333 * ms, QuorumDecide.waitAfterRefusal(held, 0, false, 5000 * ms, 200 * ms, 333 * ms).getAsLong());
        assertTrue(QuorumDecide.waitAfterRefusal(held, 2, false, 5000 * ms, 200 * ms, 9000 * ms).isEmpty(), "the wait node silent");
        assertTrue(QuorumDecide.waitAfterRefusal(List.of(down, busy, busy), 0, false, 5000 * ms, 200 * ms, 9000 * ms).isEmpty(),
                "the wait node failed");
        assertTrue(QuorumDecide.waitAfterRefusal(held, 0, true, 5000 * ms, 200 * ms, 9000 * ms).isEmpty(), "owner retired (Q4)");
        assertTrue(QuorumDecide.waitAfterRefusal(List.of(Reply.of(7L), busy, busy), 0, false, 5000 * ms, 200 * ms, 9000 * ms).isEmpty(),
                "granted");
        assertTrue(QuorumDecide.waitAfterRefusal(held, 0, false, null, 200 * ms, 9000 * ms).isEmpty(), "no BLOCK budget");
        assertTrue(QuorumDecide.waitAfterRefusal(held, 0, false, 200 * ms, 200 * ms, 9000 * ms).isEmpty(), "too little BLOCK budget");
    }
}
