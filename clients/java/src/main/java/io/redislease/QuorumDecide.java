package io.redislease;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.OptionalLong;

/**
 * Quorum mode's decisions (docs/client-protocol.md §9a, rules Q1–Q8; docs/quorum.md) as plain
 * functions of the replies of one round: no I/O, no clock. {@link QuorumTransport} sends the
 * commands and executes what these return. They mirror client/src/quorum_decide.rs and
 * clients/go/quorum_decide.go. The single-node rules (deadline from the instant before the
 * first send, stop point, backoff) stay {@link Decide}'s: the quorum transport sits under the
 * same election loop.
 */
final class QuorumDecide {
    private QuorumDecide() {}

    /**
     * The smallest number of nodes that is more than half of {@code n} (Q1): any two sets of
     * this size share a node, which is what both safety arguments rest on. Of the configured
     * nodes, never of the ones that answered: two partitions must not both have "a majority".
     */
    static int majority(int n) {
        return n / 2 + 1;
    }

    /**
     * A TCP node's identity in the membership id (Q9,
     * conformance/vectors/quorum/membership_id.json): {@code tcp:<host>:<port>}, the host in
     * lower case, an IPv6 address without its brackets, a trailing dot removed. The scheme (TLS
     * or not), credentials, db number and query are left out: they do not change which server
     * it is.
     */
    static String tcpIdentity(String host, int port) {
        String h = host;
        if (h.startsWith("[") && h.endsWith("]")) {
            h = h.substring(1, h.length() - 1);
        }
        if (h.endsWith(".")) {
            h = h.substring(0, h.length() - 1);
        }
        return "tcp:" + h.toLowerCase(Locale.ROOT) + ":" + port;
    }

    /** A unix socket node's identity (Q9): {@code unix:<path>}, the path as written. */
    static String unixIdentity(String path) {
        return "unix:" + path;
    }

    /**
     * The membership id of a node list (Q9) as the wire spells it, 16 lower-case hex digits:
     * SHA-256 of the identities sorted by their bytes and joined by "\n", the first 8 bytes
     * read big endian; 0 (never seen) becomes 1, because the module reserves 0 for "bound to
     * nothing". Sorted, so the list's order does not matter; every identity counts, so any
     * change of the set changes the id: electors with different node lists (a node replacement
     * half done) are refused by each other's nodes instead of forming disjoint majorities
     * (issue 32).
     */
    static String membershipId(List<String> identities) {
        byte[][] ids = new byte[identities.size()][];
        for (int i = 0; i < ids.length; i++) {
            ids[i] = identities.get(i).getBytes(StandardCharsets.UTF_8);
        }
        Arrays.sort(ids, Arrays::compareUnsigned);
        MessageDigest sha;
        try {
            sha = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is required of every Java platform", e);
        }
        for (int i = 0; i < ids.length; i++) {
            if (i > 0) {
                sha.update((byte) '\n');
            }
            sha.update(ids[i]);
        }
        byte[] d = sha.digest();
        long id = 0;
        for (int i = 0; i < 8; i++) {
            id = (id << 8) | (d[i] & 0xffL);
        }
        return String.format("%016x", id == 0 ? 1 : id);
    }

    /** A node's MEMBERSHIP refusal (Q9): its key is bound to another node list. */
    static boolean isMembership(Decide.Failure f) {
        return f != null && f.kind() == ErrorKind.MEMBERSHIP;
    }

    /** What a node's new connection reports as its server identity means (Q6, Q7). */
    enum IdentityKind {
        /** The first identity seen at this node: remember it. */
        FIRST,
        /** The same server as before (a reconnect). */
        SAME,
        /**
         * Another server answers at this node's address now (a restart, a VIP or DNS name moved
         * to a spare): it has none of the reign's state and counts toward nothing for the
         * quarantine (Q7).
         */
        CHANGED,
        /** The same server as node {@code of}: one server must never count twice (Q6). */
        DUPLICATE
    }

    record IdentityCheck(IdentityKind kind, int of) {}

    /**
     * Node {@code me}'s new connection reports {@code seen}; {@code known[i]} is the identity
     * last seen at node i (null = none yet). A duplicate is checked first: a swapped node that
     * lands on another node's server is a duplicate, not a change.
     */
    static IdentityCheck checkIdentity(int me, String seen, String[] known) {
        for (int i = 0; i < known.length; i++) {
            if (i != me && known[i] != null && known[i].equals(seen)) {
                return new IdentityCheck(IdentityKind.DUPLICATE, i);
            }
        }
        if (me >= known.length || known[me] == null) {
            return new IdentityCheck(IdentityKind.FIRST, -1);
        }
        return new IdentityCheck(known[me].equals(seen) ? IdentityKind.SAME : IdentityKind.CHANGED, -1);
    }

    /**
     * How long a node whose identity changed counts toward nothing, on this elector's clock: at
     * least the longest TTL any elector may have used on it ({@code configured}, default 30 s,
     * the module's default lease.max-ttl; never less than our own TTL). That is a duration of
     * the server's clock, so stretched by the drift bound: it lasts at most d / (1 - drift) on
     * an elector clock within the bound (the quorum model check uses the same bound).
     */
    static long quarantineNanos(long ttlNanos, long configuredNanos, double drift) {
        long d = Math.max(ttlNanos, configuredNanos);
        if (drift > 0.0 && drift < 1.0) {
            return (long) Math.ceil(d / (1.0 - drift));
        }
        return d;
    }

    /**
     * One node's reply in a round. {@code replied} false = no reply before the round's limit
     * (the node may or may not have run the command); otherwise {@code failure} or {@code value}.
     */
    record Reply<T>(boolean replied, T value, Decide.Failure failure) {
        static <T> Reply<T> silent() {
            return new Reply<>(false, null, null);
        }

        static <T> Reply<T> of(T value) {
            return new Reply<>(true, value, null);
        }

        static <T> Reply<T> failed(Decide.Failure f) {
            return new Reply<>(true, null, f);
        }

        boolean ok() {
            return replied && failure == null;
        }
    }

    /** A (node, token) pair: a grant to release. */
    record NodeToken(int node, long token) {}

    /** What step 1 of a campaign round decided. */
    sealed interface AfterAcquire permits Raise, Abort {}

    /**
     * Enough grants: raise the lease on {@code nodes} to {@code target} (the highest token
     * granted), then lead on it if enough confirm (Q3).
     */
    record Raise(long target, List<Integer> nodes) implements AfterAcquire {}

    /**
     * Not enough grants: release the partial grants in {@code release}, then tell the loop
     * "not granted" ({@code error} null: poll again) or the error (back off, R12; Q4).
     * {@code mismatch} (with {@code error} null): at least one node refused because its key is
     * bound to another membership (Q9): to the loop "not granted" (polling again is harmless,
     * the other list's reign may end), but reported (membership_mismatch), because only an
     * operator can resolve it (docs/quorum.md §4.1).
     */
    record Abort(List<NodeToken> release, Decide.Failure error, boolean mismatch) implements AfterAcquire {
        Abort(List<NodeToken> release, Decide.Failure error) {
            this(release, error, false);
        }
    }

    /**
     * Step 1 of a campaign round: {@code replies[i]} is node i's LEASE.ACQUIRE reply (a token,
     * or null for nil: held by another). Why the maximum: every node of the previous reign's
     * raise-majority has that reign's token as its watermark, any majority contains one of
     * them, and that node only grants above it; the maximum over our majority is therefore
     * above every earlier reign's token.
     */
    static AfterAcquire afterAcquire(List<Reply<Long>> replies) {
        int n = replies.size();
        int need = majority(n);
        List<NodeToken> granted = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            Reply<Long> r = replies.get(i);
            if (r.ok() && r.value() != null && r.value() > 0) {
                granted.add(new NodeToken(i, r.value()));
            }
        }
        if (n > 0 && granted.size() >= need) {
            long target = 0;
            List<Integer> nodes = new ArrayList<>();
            for (NodeToken g : granted) {
                target = Math.max(target, g.token());
                nodes.add(g.node());
            }
            return new Raise(target, List.copyOf(nodes));
        }
        int refused = 0;
        int silent = 0;
        int mismatch = 0;
        List<Decide.Failure> failed = new ArrayList<>();
        for (Reply<Long> r : replies) {
            if (!r.replied()) {
                silent++;
            } else if (isMembership(r.failure())) {
                // A refusal like "held by someone else", not an error (Q9): that node will not
                // grant us, whatever we retry.
                refused++;
                mismatch++;
            } else if (r.failure() != null) {
                failed.add(r.failure());
            } else if (r.value() == null || r.value() <= 0) {
                refused++;
            }
        }
        List<NodeToken> release = List.copyOf(granted);
        // Why an error only when refusals alone cannot explain it: if enough nodes answered
        // "held by someone else", polling again soon is right; if a majority was out of reach
        // because of errors and silence, backing off is (and GRACE tells the loop how long).
        if (refused + need > n || failed.size() + silent <= n - need) {
            return new Abort(release, null, mismatch > 0);
        }
        for (Decide.Failure f : failed) {
            if (f.kind() == ErrorKind.GRACE) {
                return new Abort(release, f);
            }
        }
        Decide.Failure e = failed.isEmpty() ? Decide.Failure.of(ErrorKind.TIMEOUT, "quorum: no reply from enough nodes")
                : failed.get(0);
        return new Abort(release, e);
    }

    /**
     * Step 2: did enough nodes confirm the raise (reply 1) to lead on the target token? Why the
     * raise must reach a majority before we act: the next reign's token is above ours only
     * because its majority meets a node that knows ours.
     */
    static boolean raiseConfirmed(List<Reply<Boolean>> replies, int n) {
        int yes = 0;
        for (Reply<Boolean> r : replies) {
            if (r.ok() && Boolean.TRUE.equals(r.value())) {
                yes++;
            }
        }
        return yes >= majority(n);
    }

    /** What a renewal round decided (Q5). */
    enum AfterRenew {
        /** A majority extended the lease: the new local deadline counts from the send instant. */
        RENEWED,
        /**
         * So many nodes said "not held" (0) that a majority can no longer confirm: step down now
         * (R9); the nodes that did not say 0 are released only after the task stopped.
         */
        LOST,
        /** Neither yet (errors, silence): keep the old deadline, retry until the stop point. */
        UNKNOWN
    }

    /**
     * A renewal reply that means "this node does not renew us": 0, or (Q9) a refusal because the
     * node's key is now bound to another membership (the operator moved it).
     */
    static boolean renewRefused(Reply<Boolean> r) {
        return (r.ok() && Boolean.FALSE.equals(r.value())) || (r.replied() && isMembership(r.failure()));
    }

    /** Q5 (a MEMBERSHIP refusal counts as a 0, Q9). */
    static AfterRenew afterRenew(List<Reply<Boolean>> replies) {
        int n = replies.size();
        int need = majority(n);
        int ones = 0;
        int zeros = 0;
        for (Reply<Boolean> r : replies) {
            if (r.ok() && Boolean.TRUE.equals(r.value())) {
                ones++;
            } else if (renewRefused(r)) {
                zeros++;
            }
        }
        if (n > 0 && ones >= need) {
            return AfterRenew.RENEWED;
        }
        if (zeros > n - need) {
            return AfterRenew.LOST;
        }
        return AfterRenew.UNKNOWN;
    }

    /** Whether a renewal round is decided already (ends the round early): RENEWED or LOST. */
    static boolean renewDecided(List<Reply<Boolean>> replies) {
        return afterRenew(replies) != AfterRenew.UNKNOWN;
    }

    /** run_id from an INFO server reply, null if absent. */
    static String runIdOf(String info) {
        if (info == null) {
            return null;
        }
        for (String l : info.split("\n")) {
            String s = l.strip();
            if (s.startsWith("run_id:")) {
                String v = s.substring("run_id:".length()).strip();
                return v.isEmpty() ? null : v;
            }
        }
        return null;
    }

    /**
     * The node every follower waits on (Q10): the one with the smallest URL, so that every
     * elector of one membership (the same node set, in any order) picks the same node. Why one
     * node and not all: waiting with BLOCK on every node would let a release wake a
     * <em>different</em> follower on each node (each node wakes its own first waiter), a split
     * vote every time; on one node exactly one follower wakes, holding that node, and its next
     * round meets the other nodes just freed by the same release round.
     */
    static int waitNode(List<String> urls) {
        int best = 0;
        for (int i = 1; i < urls.size(); i++) {
            if (urls.get(i).compareTo(urls.get(best)) < 0) {
                best = i;
            }
        }
        return best;
    }

    /**
     * How long (ns) to wait on the wait node after a round that made no reign (Q10); empty =
     * report "not granted" at once (the loop then pauses and polls, as before Q10).
     * {@code blockNanos} null: the loop gave no BLOCK budget (an unconfirmed grant's re-ask).
     *
     * <p>Wait only when the round released nothing (a round that released partial grants
     * retired its owner: the loop must take the next one first, Q4) and the wait node itself
     * answered "held" (someone holds it: its release or expiry is what wakes us; a node that
     * was silent or failed would only make us wait for nothing). The wait is the loop's BLOCK
     * budget minus two steps: the round before and the round after the wake must fit in the
     * loop's limit for one blocking acquire (block + op_timeout), and at most {@code capNanos} (the
     * renew interval): only the wait node can wake us, so if it stops answering while the other
     * nodes free up (frozen, cut off), the next round comes after at most the cap, not the BLOCK.
     */
    static OptionalLong waitAfterRefusal(List<Reply<Long>> replies, int node, boolean releasedAny, Long blockNanos,
            long opTimeoutNanos, long capNanos) {
        if (blockNanos == null) {
            return OptionalLong.empty();
        }
        long b = Math.min(blockNanos - opTimeoutNanos, capNanos);
        boolean held = node >= 0 && node < replies.size() && replies.get(node).ok()
                && (replies.get(node).value() == null || replies.get(node).value() <= 0);
        return held && !releasedAny && b >= 1_000_000L ? OptionalLong.of(b) : OptionalLong.empty();
    }
}
