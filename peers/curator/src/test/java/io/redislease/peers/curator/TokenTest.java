package io.redislease.peers.curator;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.redislease.peers.SyntheticToken;
import org.junit.jupiter.api.Test;

/** The token rules the peers' READMEs state, on the pure functions that compute them. */
class TokenTest {
    private static final String NODE7 = "/chaos_leader/_c_5f0e4c1a-2b9d-4c11-9f3e-0d6c1b7a8e21-latch-0000000007";
    private static final String NODE8 = "/chaos_leader/_c_0a1b2c3d-0000-4000-8000-000000000000-latch-0000000008";

    @Test
    void latchTokenIsSequenceTimesAMillionPlusReign() {
        assertEquals(7_000_003L, CuratorElector.tokenOf(NODE7, 3));
    }

    @Test
    void aLaterNodeOutranksEveryReignOfAnEarlierOne() {
        // However often a process regained leadership on node 7, node 8's first reign is higher.
        assertTrue(CuratorElector.tokenOf(NODE8, 1) > CuratorElector.tokenOf(NODE7, CuratorElector.REIGNS_PER_NODE - 1));
        // And a second reign on the same node is higher than the first.
        assertTrue(CuratorElector.tokenOf(NODE7, 2) > CuratorElector.tokenOf(NODE7, 1));
    }

    @Test
    void largestSequenceStaysBelowTwoToThe53() {
        // ZooKeeper's sequence is a signed 32-bit counter printed in 10 digits.
        String last = "/p/_c_x-latch-" + Integer.MAX_VALUE;
        assertTrue(CuratorElector.tokenOf(last, CuratorElector.REIGNS_PER_NODE - 1) < (1L << 53));
    }

    @Test
    void syntheticTokenOrdersByGrantTimeAndSeparatesSlots() {
        long t = 1_234_567_890_123L;
        assertTrue(SyntheticToken.at(t + 1_000, 0) > SyntheticToken.at(t, 63));
        assertNotEquals(SyntheticToken.at(t, 1), SyntheticToken.at(t, 2));
        assertEquals(SyntheticToken.at(t, 1), SyntheticToken.at(t + 999 - (t % 1000), 1));
    }
}
