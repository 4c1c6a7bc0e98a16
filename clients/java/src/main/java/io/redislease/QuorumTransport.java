package io.redislease;

import io.lettuce.core.RedisURI;
import io.lettuce.core.protocol.CommandArgs;
import io.lettuce.core.resource.ClientResources;
import java.io.IOException;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Function;
import java.util.function.Predicate;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Quorum mode (docs/client-protocol.md §9a, docs/quorum.md): one lease across N independent
 * Redis primaries with the module, one fencing token per reign that rises across reigns.
 *
 * <p>Used by {@link LeaderElector}'s loop in place of one connection, so every timing rule of
 * the single-node loop holds unchanged: the local deadline counts from the instant the loop
 * takes before calling {@link #acquire} / {@link #renew} (which send to every node in
 * parallel), the task stops at the stop point, a reply after the stop point does not start a
 * reign (R7). What changes is what one "reply" means: a round. The decisions are
 * {@link QuorumDecide}'s.
 *
 * <ul>
 * <li>acquire: LEASE.ACQUIRE on all nodes, never BLOCK (Q2), each awaited at most
 * op_timeout/2; with a majority of grants, LEASE.RAISE every granting node to the highest
 * token granted; a reign only if a majority confirmed the raise (Q3). Otherwise the partial
 * grants are released at once and the owner is retired (Q4). After a plain refusal the
 * follower waits with BLOCK on the wait node alone, then runs a fresh round (Q10).
 * <li>renew: LEASE.RENEW on all nodes; renewed on a majority of 1s; lost once a majority can
 * no longer say 1; the nodes that did not say 0 are released only after the task stopped (Q5).
 * <li>release: on all nodes, the wait node's last (Q10).
 * </ul>
 *
 * <p>Each node has its own Lettuce client with the elector's safe options (no auto-reconnect,
 * no Lettuce command timeout: see {@link Transport#safeOptions}); every new connection reads
 * the server's run_id (INFO server) before it is used (Q6, Q7). Each caller (the loop, the
 * observer, a one-shot query) uses its own {@link Conns}; a connection with a reply the round
 * stopped waiting for is closed (R6).
 */
final class QuorumTransport {
    private static final Logger log = LoggerFactory.getLogger(QuorumTransport.class);
    private final String key;
    private final long ttlMillis;
    /** Each node's reply is awaited at most this long, so acquire + raise fit in op_timeout. */
    private final long stepNanos;
    private final long quarantineNanos;
    private final long connectTimeoutNanos;
    private final Transport.Connector[] nodes;

    // Guarded by this.
    /** identities[i]: the run_id last seen at node i, null = none yet. */
    private final String[] identities;
    /** quarantinedUntil[i] (System.nanoTime()): node i counts toward nothing before (Q7). */
    private final long[] quarantinedUntil;
    private final boolean[] quarantined;
    /** held[i]: the token node i holds for us in the current reign, 0 = none. */
    private final long[] held;
    /** Counts acquire and release calls: a renewal round older than the last must not touch held. */
    private long gen;
    /** The owner of the last acquire round (what get looks for). */
    private String owner;
    /** An acquire round released partial grants under owner (takeRetiredOwner). */
    private boolean retired;
    /**
     * The instant (System.nanoTime()) before the sends of the round the last acquire's result
     * rests on, when that round ran after a wait (Q10, takeRoundStart); null = none.
     */
    private Long roundStart;

    /** The node followers wait on with BLOCK (Q10, {@link QuorumDecide#waitNode}). */
    private final int waitNode;
    /** The loop's per-command budget: the wait leaves room for two steps. */
    private final long opTimeoutNanos;
    /** The longest wait on the wait node (Q10). */
    private final long renewIntervalNanos;

    /**
     * {@code MEMBERSHIP <id>} of the node list, sent with every ACQUIRE, RENEW and RAISE (Q9);
     * null only in the negative control ({@link #dropMembershipForTest}). Why (issue 32):
     * electors with different node lists (a node replacement half done) can find disjoint
     * majorities; binding each key to one list's id keeps them apart.
     */
    private volatile String membership;
    /** The last round's membership refusal was logged (once per change; the loop's thread only). */
    private boolean membershipReported;
    /** How many times a membership refusal was logged (tests: reported once, not per round). */
    private volatile int membershipReports;

    QuorumTransport(List<RedisURI> uris, String key, LeaseTiming timing, long configuredQuarantineNanos,
            ClientResources resources, Transport.Settings settings) {
        this.key = key;
        this.ttlMillis = timing.ttlMillis();
        this.stepNanos = Math.max(timing.opTimeoutNanos() / 2, Decide.MILLI);
        this.quarantineNanos = QuorumDecide.quarantineNanos(timing.ttlMillis() * Decide.MILLI, configuredQuarantineNanos,
                timing.drift());
        this.connectTimeoutNanos = Transport.connectTimeoutNanos(timing);
        this.opTimeoutNanos = timing.opTimeoutNanos();
        this.renewIntervalNanos = timing.renewIntervalNanos();
        this.waitNode = QuorumDecide.waitNode(uris.stream().map(QuorumTransport::nodeUrl).toList());
        int n = uris.size();
        this.nodes = new Transport.Connector[n];
        for (int i = 0; i < n; i++) {
            nodes[i] = Transport.standalone(uris.get(i), resources, connectTimeoutNanos, settings);
        }
        this.membership = membershipId(uris);
        this.identities = new String[n];
        this.quarantinedUntil = new long[n];
        this.quarantined = new boolean[n];
        this.held = new long[n];
    }

    int size() {
        return nodes.length;
    }

    /**
     * The URL a node is known by for Q10's wait node (the smallest one): redis://host:port/db
     * (rediss:// with TLS, unix://path). Every elector of one membership must pick the same
     * node, in any list order (only liveness depends on it). Built here rather than with
     * RedisURI.toString(), which is not a stable format.
     */
    static String nodeUrl(RedisURI u) {
        if (u.getSocket() != null) {
            return "unix://" + u.getSocket();
        }
        return (u.isSsl() ? "rediss" : "redis") + "://" + u.getHost() + ":" + u.getPort() + "/" + u.getDatabase();
    }

    /** A node's identity in the membership id (Q9), from its URI. */
    static String nodeIdentity(RedisURI u) {
        if (u.getSocket() != null) {
            return QuorumDecide.unixIdentity(u.getSocket());
        }
        String host = u.getHost() == null || u.getHost().isEmpty() ? "localhost" : u.getHost();
        return QuorumDecide.tcpIdentity(host, u.getPort());
    }

    /**
     * The membership id of a node list as the wire spells it (16 hex digits, Q9): what an
     * operator passes to {@code LEASE.MEMBERSHIP key old new} when the node set changes
     * (docs/quorum.md §4.1). The order does not matter; the spelling of each address does.
     */
    static String membershipId(List<RedisURI> uris) {
        List<String> ids = new ArrayList<>();
        for (RedisURI u : uris) {
            ids.add(nodeIdentity(u));
        }
        return QuorumDecide.membershipId(ids);
    }

    /** Appends {@code MEMBERSHIP <id>} (Q9) to an ACQUIRE, RENEW or RAISE. */
    private CommandArgs<String, String> withMembership(CommandArgs<String, String> a) {
        String m = membership;
        return m == null ? a : a.add("MEMBERSHIP").add(m);
    }

    /** An override of the computed id ({@link LeaderElector.Builder#membershipId}). */
    void membershipOverride(String id) {
        membership = id;
    }

    /** The negative control of the tests only: the protocol before Q9 (no MEMBERSHIP sent). */
    void dropMembershipForTest() {
        membership = null;
    }

    int membershipReports() {
        return membershipReports;
    }

    /**
     * Logs a round lost to membership refusals once, until a round ends otherwise: only an
     * operator can fix it, and the loop polls every 50..100 ms.
     */
    private void reportMembership(boolean refused) {
        if (refused && !membershipReported) {
            membershipReports++;
            log.error("quorum: nodes refuse this elector's node list (their lease key is bound to another membership); "
                    + "electors use different node lists? see docs/quorum.md 4.1 key={} membership={} reason=membership_mismatch",
                    key, membership);
        }
        membershipReported = refused;
    }

    void shutdown() {
        for (Transport.Connector c : nodes) {
            c.shutdown();
        }
    }

    /** One caller's connections, one per node. Not thread-safe: one thread per Conns. */
    final class Conns {
        private final CompletableFuture<Transport.Link>[] links;
        private final long[] openedAt;
        /**
         * lingering[i]: the outcome (its failure, or null) of a call a decided round stopped
         * waiting for but did not abandon (see {@link #round}); it may still answer until
         * lingerUntil[i]. null = none.
         */
        private final CompletableFuture<Decide.Failure>[] lingering;
        private final long[] lingerUntil;

        @SuppressWarnings("unchecked")
        Conns() {
            links = (CompletableFuture<Transport.Link>[]) new CompletableFuture<?>[nodes.length];
            openedAt = new long[nodes.length];
            lingering = (CompletableFuture<Decide.Failure>[]) new CompletableFuture<?>[nodes.length];
            lingerUntil = new long[nodes.length];
        }

        /** Keeps node i's connection with a call still on it, answered by {@code until} or closed then. */
        void linger(int i, CompletableFuture<Decide.Failure> outcome, long until) {
            lingering[i] = outcome;
            lingerUntil[i] = until;
        }

        /**
         * Before node i's connection is used again: a call left on it by a decided round
         * either answered (the connection stays, unless the answer was a broken link) or is
         * past its own time limit, and is abandoned now: closed (R6). One still in time is
         * left alone: the new command queues behind it on the same connection and Lettuce
         * matches replies in order, so its reply is never read as the new command's.
         */
        private void settle(int i) {
            CompletableFuture<Decide.Failure> p = lingering[i];
            if (p == null) {
                return;
            }
            if (p.isDone()) {
                lingering[i] = null;
                dropIfBroken(i, p.join());
            } else if (System.nanoTime() - lingerUntil[i] > 0) {
                drop(i);
            }
        }

        private CompletableFuture<Transport.Link> link(int i) {
            settle(i);
            CompletableFuture<Transport.Link> l = links[i];
            // A connect still under way is kept across rounds (it sends no lease command), so
            // that a slow first connect (cold JVM) does not start over every round; but not
            // past the connect timeout (a server that accepts and never answers).
            if (l != null && !l.isDone() && System.nanoTime() - openedAt[i] > connectTimeoutNanos) {
                drop(i);
                l = null;
            }
            if (l == null) {
                l = connectChecked(i);
                links[i] = l;
                openedAt[i] = System.nanoTime();
            }
            return l;
        }

        private boolean prepared;

        /**
         * Before the first round only: open every node's connection and wait for them, at most
         * the connect timeout (max(op_timeout, 1 s)). Why: a cold JVM's first Lettuce
         * connection (class loading, Netty, the handshake, INFO) can take longer than a round's
         * step (op_timeout/2); without this the first rounds would time out on every node and
         * log a spurious "redis unreachable". Called before the loop takes a round's send
         * instant, so no deadline depends on it; later rounds never wait here (a partitioned
         * node must not slow every poll down).
         */
        void prepare(CompletableFuture<?> abort) {
            if (prepared) {
                return;
            }
            prepared = true;
            List<CompletableFuture<?>> all = new ArrayList<>();
            for (int i = 0; i < links.length; i++) {
                all.add(link(i));
            }
            try {
                Transport.await(CompletableFuture.allOf(all.toArray(new CompletableFuture<?>[0])),
                        System.nanoTime() + connectTimeoutNanos, abort);
            } catch (Exception e) {
                // A node that failed or is still connecting is dealt with by the rounds.
                if (e instanceof InterruptedException) {
                    Thread.currentThread().interrupt();
                }
            }
        }

        /** After node i answered with {@code f} (null: a reply): a broken link is not reused. */
        void dropIfBroken(int i, Decide.Failure f) {
            if (f != null && Transport.dropsConnection(f.kind())) {
                drop(i);
            }
        }

        void drop(int i) {
            CompletableFuture<Transport.Link> l = links[i];
            links[i] = null;
            lingering[i] = null;
            if (l != null) {
                l.whenComplete((link, e) -> {
                    if (link != null) {
                        link.close();
                    }
                });
            }
        }

        void close() {
            for (int i = 0; i < links.length; i++) {
                CompletableFuture<Transport.Link> l = links[i];
                if (l == null || !l.isDone()) {
                    drop(i); // closes it when (if) it connects
                    continue;
                }
                links[i] = null;
                if (!l.isCompletedExceptionally()) {
                    // Closed once, and waited for a little (before the client shuts down).
                    try {
                        l.join().close().get(1, TimeUnit.SECONDS);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    } catch (Exception e) {
                        // closed or broken either way
                    }
                }
            }
        }
    }

    Conns conns() {
        return new Conns();
    }

    /** A node's new connection, usable only once its server identity checked out (Q6, Q7). */
    private CompletableFuture<Transport.Link> connectChecked(int i) {
        return nodes[i].connect().thenCompose(link -> link.conn.async().info("server").toCompletableFuture()
                .handle((info, e) -> {
                    String problem = e != null
                            ? "INFO server failed (" + Transport.classify(e).message() + "); quorum mode needs each node's "
                                    + "run_id (grant +info to the elector's ACL user, docs/security.md §3)"
                            : checkNew(i, QuorumDecide.runIdOf(info));
                    if (problem != null) {
                        link.close();
                        throw new IllegalStateException("quorum: node " + (i + 1) + ": " + problem);
                    }
                    return link;
                }));
    }

    /** Records a new connection's identity; a reason it must not be used, or null. */
    private synchronized String checkNew(int i, String id) {
        if (id == null) {
            return "INFO server has no run_id";
        }
        QuorumDecide.IdentityCheck c = QuorumDecide.checkIdentity(i, id, identities);
        switch (c.kind()) {
            case FIRST:
            case SAME:
                identities[i] = id;
                return null;
            case CHANGED:
                identities[i] = id;
                quarantined[i] = true;
                quarantinedUntil[i] = System.nanoTime() + quarantineNanos;
                return "server identity changed (run_id " + id + "); it counts toward no grant or renewal for "
                        + quarantineNanos / Decide.MILLI + " ms";
            default:
                return "the same server as node " + (c.of() + 1) + " (same run_id); it counts toward nothing";
        }
    }

    /** Why before anything is sent: a quarantined node's reply must not count. */
    private synchronized boolean isQuarantined(int i) {
        if (quarantined[i] && System.nanoTime() - quarantinedUntil[i] < 0) {
            return true;
        }
        quarantined[i] = false;
        return false;
    }

    /**
     * Sends {@code send} to every node in {@code targets} in parallel and collects replies until
     * {@code done} says the round is decided, every target answered, or the step (bounded by
     * {@code until}) is over. Nodes that did not answer in time are "no reply" and their
     * connection is closed (R6): its reply must never be read as a later command's. A node
     * the round stopped waiting for only because {@code done} decided it early keeps its
     * call and connection until the step's end ({@link Conns#settle}).
     */
    private <T> List<QuorumDecide.Reply<T>> round(Conns c, List<Integer> targets,
            Function<Integer, CommandCall> send, Parser<T> parse, Predicate<List<QuorumDecide.Reply<T>>> done,
            long until) {
        int n = nodes.length;
        List<QuorumDecide.Reply<T>> replies = new ArrayList<>(Arrays.asList(newSilent(n)));
        LinkedBlockingQueue<Integer> arrived = new LinkedBlockingQueue<>();
        Map<Integer, CompletableFuture<QuorumDecide.Reply<T>>> pending = new HashMap<>();
        for (int i : targets) {
            if (isQuarantined(i)) {
                replies.set(i, QuorumDecide.Reply.failed(Decide.Failure.of(ErrorKind.CONNECTION,
                        "quorum: node " + (i + 1) + ": quarantined (its server identity changed)")));
                continue;
            }
            CommandCall call = send.apply(i);
            CompletableFuture<QuorumDecide.Reply<T>> f = c.link(i)
                    .thenCompose(link -> link.dispatch(call.cmd(), call.args()))
                    .handle((v, e) -> {
                        if (e != null) {
                            return QuorumDecide.Reply.<T>failed(Transport.classify(e));
                        }
                        try {
                            return QuorumDecide.Reply.of(parse.parse(v));
                        } catch (Transport.CommandFailed x) {
                            return QuorumDecide.Reply.<T>failed(x.failure);
                        }
                    });
            pending.put(i, f);
            f.whenComplete((r, e) -> arrived.add(i));
        }
        long end = System.nanoTime() + stepNanos;
        if (until - end < 0) {
            end = until;
        }
        int left = pending.size();
        boolean decided = false;
        try {
            while (left > 0) {
                long wait = end - System.nanoTime();
                Integer i = wait > 0 ? arrived.poll(wait, TimeUnit.NANOSECONDS) : null;
                if (i == null) {
                    break;
                }
                left--;
                QuorumDecide.Reply<T> r = pending.remove(i).join();
                replies.set(i, r);
                c.dropIfBroken(i, r.failure());
                if (done != null && done.test(replies)) {
                    decided = true;
                    break;
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        for (Map.Entry<Integer, CompletableFuture<QuorumDecide.Reply<T>>> e : pending.entrySet()) {
            if (decided) {
                // Decided early (a renewal's majority): the slow node's call is not abandoned,
                // only not waited for; it keeps its own limit (the step's end). Why not close
                // it as before: the next command to that node then had to reconnect (connect,
                // HELLO, INFO identity check), which made it the slowest node of the next round
                // again, so it was reconnected on almost every renewal; and the leader's
                // RELEASE to it paid a connect on the hand-over's critical path (quorum
                // hand-over 2.3x the single primary's, docs/quorum.md §8). One connection per
                // node across rounds also keeps one elector's commands to a node in the order
                // sent (docs/client-protocol.md §5, quorum rounds), as the Rust reference does.
                c.linger(e.getKey(), e.getValue().thenApply(QuorumDecide.Reply::failure), end);
            } else {
                // Not answered within the step (or interrupted): abandoned, closed (R6).
                c.drop(e.getKey());
            }
        }
        return replies;
    }

    @SuppressWarnings("unchecked")
    private static <T> QuorumDecide.Reply<T>[] newSilent(int n) {
        QuorumDecide.Reply<T>[] a = (QuorumDecide.Reply<T>[]) new QuorumDecide.Reply<?>[n];
        Arrays.fill(a, QuorumDecide.Reply.silent());
        return a;
    }

    private record CommandCall(Transport.Cmd cmd, CommandArgs<String, String> args) {}

    @FunctionalInterface
    private interface Parser<T> {
        T parse(Object v) throws Transport.CommandFailed;
    }

    private List<Integer> all() {
        List<Integer> a = new ArrayList<>();
        for (int i = 0; i < nodes.length; i++) {
            a.add(i);
        }
        return a;
    }

    /**
     * LEASE.RELEASE for every (node, token) in parallel, best effort; how many released, or -1
     * if none did and some failed. Bounded by one step of its own (not the caller's limit): a
     * partial grant left behind blocks everyone for a TTL.
     */
    private int releaseOn(Conns c, String owner, List<QuorumDecide.NodeToken> pairs) {
        if (pairs.isEmpty()) {
            return 0;
        }
        Map<Integer, Long> tok = new HashMap<>();
        List<Integer> targets = new ArrayList<>();
        for (QuorumDecide.NodeToken p : pairs) {
            tok.put(p.node(), p.token());
            targets.add(p.node());
        }
        List<QuorumDecide.Reply<Boolean>> replies = round(c, targets,
                i -> new CommandCall(Transport.Cmd.RELEASE, Transport.args(key).add(owner).add(tok.get(i))),
                v -> Transport.parseFlag(Transport.Cmd.RELEASE, v), null, System.nanoTime() + stepNanos);
        int released = 0;
        boolean failed = false;
        for (int i : targets) {
            QuorumDecide.Reply<Boolean> r = replies.get(i);
            if (r.ok() && Boolean.TRUE.equals(r.value())) {
                released++;
            } else if (!r.ok()) {
                failed = true;
            }
        }
        return released == 0 && failed ? -1 : released;
    }

    /** How one campaign round ended: the result, and (a plain refusal) its replies for Q10. */
    private record RoundEnd(Decide.AcquireResult result, List<QuorumDecide.Reply<Long>> refused) {}

    /**
     * A campaign (Q2–Q4 and Q10), bounded by {@code until}: a round; after a plain refusal a
     * wait on the wait node, and on its grant a fresh round. {@code blockNanos}: the loop's
     * BLOCK budget (null: no wait, e.g. re-asking for an unconfirmed grant). Throws Aborted
     * when {@code abort} completes during the wait (the loop then looks for a stray grant).
     */
    Decide.AcquireResult acquire(Conns c, String owner, long until, Long blockNanos, CompletableFuture<?> abort)
            throws Transport.Aborted {
        synchronized (this) {
            roundStart = null;
        }
        RoundEnd first = acquireRound(c, owner, until);
        if (first.refused() == null) {
            return first.result();
        }
        OptionalLong wait = QuorumDecide.waitAfterRefusal(first.refused(), waitNode, false, blockNanos, opTimeoutNanos,
                renewIntervalNanos);
        if (wait.isEmpty()) {
            return first.result();
        }
        // Q10: wait on the wait node until it is released or expires (it then grants us that one
        // node, which is no reign), and go straight into a fresh round. Why this is safe: the
        // wait node's grant counts for nothing by itself; what counts is the fresh round, whose
        // every counted node set its expiry after start, the instant taken before that round's
        // sends, which the loop then measures the deadline from.
        long limit = System.nanoTime() + wait.getAsLong() + stepNanos;
        if (until - limit < 0) {
            limit = until;
        }
        if (!blockingAcquire(waitNode, owner, wait.getAsLong(), limit, abort)) {
            return new Decide.NotGranted(); // timed out (nil), failed, the node went away: ask again
        }
        long start = System.nanoTime();
        RoundEnd second = acquireRound(c, owner, until);
        if (second.refused() != null) {
            // Every node refused, the wait node included (it lost our grant meanwhile, e.g. it
            // restarted): the loop asks again.
            return second.result();
        }
        synchronized (this) {
            roundStart = start;
        }
        return second.result();
    }

    /**
     * Q10's LEASE.ACQUIRE ... BLOCK on node {@code i} alone, on a connection of its own (identity
     * checked like every other), closed afterwards: whether it granted. Why not the node's
     * shared connection: a blocked connection holds back every later command on it, so the
     * next round would find this node silent; and if the wait is abandoned (resign), closing
     * the connection is what tells the server to stop waiting for us (a grant it made just
     * before is found and released by the loop's stray release, as for any abandoned acquire).
     */
    private boolean blockingAcquire(int i, String owner, long waitNanos, long until, CompletableFuture<?> abort)
            throws Transport.Aborted {
        if (isQuarantined(i)) {
            return false;
        }
        CompletableFuture<Transport.Link> lf = connectChecked(i);
        try {
            CompletableFuture<Object> reply = lf.thenCompose(link -> link.dispatch(Transport.Cmd.ACQUIRE,
                    Transport.args(key).add(owner).add(ttlMillis).add("BLOCK").add(Decide.wireMillis(waitNanos))));
            Object v = Transport.await(reply, until, abort);
            Long t = Transport.parseToken(v);
            return t != null && t > 0;
        } catch (TimeoutException | ExecutionException | Transport.CommandFailed e) {
            return false;
        } finally {
            lf.whenComplete((link, e) -> {
                if (link != null) {
                    link.close();
                }
            });
        }
    }

    /** Q10: see {@link #acquire}; once, 0 = none (as a nanoTime instant, compared by the loop). */
    synchronized OptionalLong takeRoundStart() {
        Long r = roundStart;
        roundStart = null;
        return r == null ? OptionalLong.empty() : OptionalLong.of(r);
    }

    /** One campaign round (Q2–Q4), bounded by {@code until}. */
    private RoundEnd acquireRound(Conns c, String owner, long until) {
        int n = nodes.length;
        int need = QuorumDecide.majority(n);
        synchronized (this) {
            this.owner = owner;
            gen++;
            // What an earlier round left here is not this round's: a round only holds what it
            // confirms below.
            Arrays.fill(held, 0L);
        }
        // Never BLOCK (Q2): no single node knows when a majority frees up; a refused follower
        // waits on one node instead (Q10, acquire).
        List<QuorumDecide.Reply<Long>> replies = round(c, all(),
                i -> new CommandCall(Transport.Cmd.ACQUIRE, withMembership(Transport.args(key).add(owner).add(ttlMillis))),
                // Why every node gets the step's time, even once a majority can no longer
                // grant (where the Go and Rust ports stop early): a grant still on its way is
                // one this round must release (Q4), and a node the round stops waiting for has
                // its connection closed (R6); the next round would reconnect it and again be
                // too late behind the fast refusals: a grant left behind every round. A reign
                // on all N nodes also survives more later faults.
                Transport::parseToken, null, until);
        QuorumDecide.AfterAcquire d = QuorumDecide.afterAcquire(replies);
        if (d instanceof QuorumDecide.Raise r) {
            List<QuorumDecide.Reply<Boolean>> confirmed = round(c, r.nodes(),
                    i -> new CommandCall(Transport.Cmd.RAISE,
                            withMembership(Transport.args(key).add(owner).add(replies.get(i).value()).add(r.target()))),
                    v -> Transport.parseFlag(Transport.Cmd.RAISE, v), null, until);
            if (QuorumDecide.raiseConfirmed(confirmed, n)) {
                synchronized (this) {
                    for (int i = 0; i < n; i++) {
                        QuorumDecide.Reply<Boolean> x = confirmed.get(i);
                        held[i] = x.ok() && Boolean.TRUE.equals(x.value()) ? r.target() : 0L;
                    }
                }
                return new RoundEnd(new Decide.Granted(r.target(), null), null);
            }
            // Not confirmed: the grants (raised or not) must not block anyone for a TTL (Q4). A
            // node that did not answer the raise may hold either token: release with the
            // granted one unless it confirmed (a RELEASE with the wrong token is a no-op, and
            // the grant then expires on its own).
            List<QuorumDecide.NodeToken> pairs = new ArrayList<>();
            for (int i : r.nodes()) {
                QuorumDecide.Reply<Boolean> x = confirmed.get(i);
                long t = x.ok() && Boolean.TRUE.equals(x.value()) ? r.target() : replies.get(i).value();
                pairs.add(new QuorumDecide.NodeToken(i, t));
            }
            retire();
            releaseOn(c, owner, pairs);
            // Not leading either way; but a node that refused the raise with a server error
            // (NOPERM: an ACL without +lease.raise) is a fault the operator must see, not a
            // contender: report it (the loop logs, counts and backs off) instead of polling in
            // silence forever. Unreachable nodes are faults of the moment: not reported here. A
            // MEMBERSHIP refusal is no fault either: it counts as no confirmation (Q9).
            for (int i : r.nodes()) {
                Decide.Failure f = confirmed.get(i).failure();
                if (f != null && !f.kind().unreachable() && !QuorumDecide.isMembership(f)) {
                    return new RoundEnd(new Decide.Failed(new Decide.Failure(f.kind(), f.graceNanos(),
                            "quorum: node " + (i + 1) + " refused LEASE.RAISE: " + f.message())), null);
                }
            }
            return new RoundEnd(new Decide.NotGranted(), null);
        }
        QuorumDecide.Abort a = (QuorumDecide.Abort) d;
        if (!a.release().isEmpty()) {
            retire();
            releaseOn(c, owner, a.release());
        }
        reportMembership(a.mismatch());
        if (a.error() != null) {
            return new RoundEnd(new Decide.Failed(new Decide.Failure(a.error().kind(), a.error().graceNanos(),
                    "quorum: fewer than " + need + " of " + n + " nodes could grant (" + a.error().message() + ")")),
                    null);
        }
        // A membership mismatch (Q9) is no refusal Q10 could wait out.
        return new RoundEnd(new Decide.NotGranted(), a.release().isEmpty() && !a.mismatch() ? replies : null);
    }

    /**
     * Marks the current owner retired (Q4). Why before the RELEASE is sent: the RELEASE may be
     * abandoned and execute late, after a next round under the same owner refreshed that node
     * (same token), and free it inside the new reign; with a new owner it matches nothing.
     */
    private synchronized void retire() {
        retired = true;
    }

    /** Whether the last acquire round retired its owner (the loop then advances the reign). */
    synchronized boolean takeRetiredOwner() {
        boolean r = retired;
        retired = false;
        return r;
    }

    /** After a lost renewal: whether some node may still hold our lease (released after the task stopped). */
    synchronized boolean holdsAfterRejection() {
        for (long h : held) {
            if (h != 0) {
                return true;
            }
        }
        return false;
    }

    /** A renewal round (Q5), bounded by {@code until}. */
    Decide.RenewResult renew(Conns c, String owner, long token, long until) {
        int n = nodes.length;
        int need = QuorumDecide.majority(n);
        long[] h;
        long g;
        synchronized (this) {
            h = held.clone();
            g = gen;
        }
        List<QuorumDecide.Reply<Boolean>> replies = round(c, all(),
                i -> new CommandCall(Transport.Cmd.RENEW,
                        withMembership(Transport.args(key).add(owner).add(h[i] != 0 ? h[i] : token).add(ttlMillis))),
                v -> Transport.parseFlag(Transport.Cmd.RENEW, v), QuorumDecide::renewDecided, until);
        switch (QuorumDecide.afterRenew(replies)) {
            case RENEWED:
                return new Decide.Renewed(null);
            case LOST:
                for (QuorumDecide.Reply<Boolean> r : replies) {
                    if (r.replied() && QuorumDecide.isMembership(r.failure())) {
                        // The operator rebound nodes to another list (docs/quorum.md §4.1): this
                        // reign ends here, by design.
                        log.warn("quorum: renewal refused: nodes are bound to another membership now key={} owner={} "
                                + "reason=membership_mismatch", key, owner);
                        break;
                    }
                }
                // Stepping down. The nodes that still said 1 are NOT released here: our task has
                // not stopped yet, and such a node can complete another elector's majority with
                // nodes that said 0 (one wiped, one holding that elector's partial grant): a
                // successor would reign while we still act (Q5; the model check found it). The
                // loop releases them once the task has stopped (holdsAfterRejection, R13). Every
                // node that did not say 0 may still hold our lease (said 1, failed, or the round
                // did not wait for it).
                synchronized (this) {
                    if (gen == g) {
                        for (int i = 0; i < n; i++) {
                            QuorumDecide.Reply<Boolean> r = replies.get(i);
                            if (r.ok() && Boolean.FALSE.equals(r.value())) {
                                held[i] = 0L;
                            } else if (held[i] == 0L) {
                                held[i] = token;
                            }
                        }
                    }
                }
                return new Decide.NotHeld();
            default:
                ErrorKind kind = ErrorKind.TIMEOUT;
                for (QuorumDecide.Reply<Boolean> r : replies) {
                    if (r.replied() && r.failure() != null) {
                        kind = r.failure().kind();
                        break;
                    }
                }
                return new Decide.Failed(Decide.Failure.of(kind,
                        "quorum: renewal not confirmed by " + need + " of " + n + " nodes"));
        }
    }

    /** Releases on every node (each with the token it holds for us, else {@code token}); whether any released. */
    boolean release(Conns c, String owner, long token) throws Transport.CommandFailed {
        List<QuorumDecide.NodeToken> pairs = new ArrayList<>();
        synchronized (this) {
            for (int i = 0; i < held.length; i++) {
                pairs.add(new QuorumDecide.NodeToken(i, held[i] != 0 ? held[i] : token));
                held[i] = 0L;
            }
            gen++;
        }
        // Q10: the wait node's RELEASE is sent last (all are sent at once, without waiting for
        // replies). Its release wakes the one follower waiting there, whose next round should
        // find the other nodes already free: their RELEASEs left before it, and the wake plus
        // that round take at least a round trip more. A round that still overtakes one on
        // another node is refused there and falls back to polling. Order only affects
        // liveness: a release frees, it never grants.
        pairs.sort((x, y) -> Boolean.compare(x.node() == waitNode, y.node() == waitNode));
        int r = releaseOn(c, owner, pairs);
        if (r < 0) {
            throw new Transport.CommandFailed(Decide.Failure.of(ErrorKind.CONNECTION, "quorum: no node released"));
        }
        return r > 0;
    }

    /**
     * LEASE.GET on every node. If the owner of the last round holds any node, that holding is
     * returned (and each node's token remembered, so that release frees strays with the token
     * each carries: used after a resign with a round in flight). Otherwise the owner holding a
     * majority of nodes, if any (what a listener observes); null if none.
     */
    LeaseInfo get(Conns c, long until) throws Transport.CommandFailed {
        int n = nodes.length;
        List<QuorumDecide.Reply<LeaseInfo>> replies = round(c, all(),
                i -> new CommandCall(Transport.Cmd.GET, Transport.args(key)), Transport::parseHolder, null, until);
        LeaseInfo mine = null;
        Map<String, Integer> count = new HashMap<>();
        Map<String, LeaseInfo> byOwner = new HashMap<>();
        int answered = 0;
        Decide.Failure first = null;
        synchronized (this) {
            for (int i = 0; i < n; i++) {
                QuorumDecide.Reply<LeaseInfo> r = replies.get(i);
                if (!r.replied()) {
                    continue;
                }
                if (r.failure() != null) {
                    first = first == null ? r.failure() : first;
                    continue;
                }
                answered++;
                LeaseInfo h = r.value();
                if (h == null) {
                    continue;
                }
                if (owner != null && h.owner().equals(owner)) {
                    held[i] = h.token();
                    mine = h;
                }
                count.merge(h.owner(), 1, Integer::sum);
                byOwner.put(h.owner(), h);
            }
        }
        if (mine != null) {
            return mine;
        }
        for (Map.Entry<String, Integer> e : count.entrySet()) {
            if (e.getValue() >= QuorumDecide.majority(n)) {
                return byOwner.get(e.getKey());
            }
        }
        if (answered == 0) {
            throw new Transport.CommandFailed(
                    first != null ? first : Decide.Failure.of(ErrorKind.TIMEOUT, "quorum: no node answered LEASE.GET"));
        }
        return null;
    }

    // ---------------------------------------------------------------- start-time check (Q6)

    /**
     * The addresses a node URI names, for the start-time duplicate check (Q6): every address
     * its host resolves to (so localhost and 127.0.0.1 meet), or the canonical path of a unix
     * socket. The db number is left out on purpose: db 0 and db 1 are one server.
     */
    static List<String> serverAddresses(RedisURI u) {
        if (u.getSocket() != null) {
            Path p = Path.of(u.getSocket()).toAbsolutePath();
            try {
                p = p.toRealPath();
            } catch (IOException e) {
                // not there yet: compare the absolute path
            }
            return List.of("unix:" + p);
        }
        String host = u.getHost() == null || u.getHost().isEmpty() ? "localhost" : u.getHost();
        List<String> out = new ArrayList<>();
        try {
            for (InetAddress a : InetAddress.getAllByName(host)) {
                out.add(a.getHostAddress().replaceAll("%.*$", "") + ":" + u.getPort());
            }
        } catch (UnknownHostException e) {
            // A name that does not resolve yet cannot be compared here; the run_id check on
            // connect still catches a duplicate.
            out.add(host.toLowerCase(java.util.Locale.ROOT) + ":" + u.getPort());
        }
        return out;
    }

    /** A reason the node list names one server twice under any spelling (Q6), or null. */
    static String duplicateProblem(List<RedisURI> uris) {
        List<List<String>> addrs = new ArrayList<>();
        for (RedisURI u : uris) {
            addrs.add(serverAddresses(u));
        }
        for (int i = 0; i < uris.size(); i++) {
            for (int j = i + 1; j < uris.size(); j++) {
                for (String a : addrs.get(i)) {
                    if (addrs.get(j).contains(a)) {
                        return "nodes " + (i + 1) + " and " + (j + 1) + " are the same server (" + a
                                + "): one server would count twice toward a majority";
                    }
                }
            }
        }
        return null;
    }
}
