package io.redislease;

import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisException;
import io.lettuce.core.RedisURI;
import io.lettuce.core.SslOptions;
import io.lettuce.core.protocol.CommandArgs;
import io.lettuce.core.protocol.ProtocolVersion;
import io.lettuce.core.resource.ClientResources;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One candidate for one lease key: campaigns with {@code LEASE.ACQUIRE ... BLOCK}, runs the
 * {@link Candidate} while leader, renews, steps down safely, releases on resign.
 *
 * <pre>{@code
 * try (LeaderElector e = LeaderElector.builder()
 *         .redis(RedisURI.create("redis://10.0.0.5:6379"))
 *         .key("jobs/nightly-report").ttl(Duration.ofSeconds(10))
 *         .candidate(ctx -> { while (ctx.isLeader()) { work(ctx.token()); } })
 *         .build()) {
 *     e.start();
 *     ...
 * }
 * }</pre>
 *
 * <p>The loop runs on its own thread; every decision comes from {@link Decide}. Redis errors
 * are never thrown to the caller: they are retried with backoff, logged, and counted.
 */
public final class LeaderElector implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(LeaderElector.class);

    /**
     * Default node quarantine of quorum mode (Q7): the module's default {@code lease.max-ttl},
     * the longest lease a node whose server changed can have lost.
     */
    public static final Duration DEFAULT_NODE_QUARANTINE = Duration.ofSeconds(30);

    /**
     * R17 across elector objects: the next reign number of every owner base an application
     * GAVE ({@link Builder#owner(String)}). Why: electors made one after another with the same
     * base (one per {@link Builder#callAsLeader} call, or a rebuilt elector) would otherwise
     * start again at reign 1, and a late command of an earlier object's reign could then act
     * on a later one's lease (issue 23). Default owners are unique per elector: not kept.
     */
    private static final java.util.concurrent.ConcurrentHashMap<String, Long> GIVEN_BASE_NEXT_REIGN =
            new java.util.concurrent.ConcurrentHashMap<>();

    private final String key;
    /** The configured owner id (unique per process incarnation); the wire owner is base#reign (R17). */
    private final String base;
    /** Negative control of the conformance harness only: keep reign 1's owner for every reign. */
    private final boolean reuseOwner;
    private final LeaseTiming timing;
    private final Candidate candidate;
    private final ElectorMetrics metrics;
    /** Whether the application gave the base (then its reign numbers continue across objects). */
    private final boolean givenBase;
    /** One reign, then terminate ({@link Builder#callAsLeader}). */
    private final boolean oneShot;
    private final Transport.Connector connector;
    /** Quorum mode (several independent primaries, docs/quorum.md), or null for one. */
    private final QuorumTransport quorum;
    /** The loop's connections to the quorum nodes (elector thread only), or null. */
    private final QuorumTransport.Conns quorumConns;
    private final LeaderListener listener;
    private final long observeIntervalNanos;

    /** Completes on resign()/close(): wakes every wait of the loop. */
    private final CompletableFuture<Void> resignSignal = new CompletableFuture<>();
    /** Completes when the loop has ended (task stopped, lease released). */
    private final CompletableFuture<Void> terminated = new CompletableFuture<>();
    private final Object lifecycle = new Object();
    /** Notified when a reign starts or the elector terminates (for awaitLeadership). */
    private final Object reignChange = new Object();
    private Thread loopThread;
    private Thread observerThread;
    private boolean started;
    private volatile LeaderContext current;

    // Elector-thread state.
    private final Transport.Slot blockSlot;
    private final Transport.Slot cmdSlot;
    private Boolean redisUp;
    /** R17: the reign counter; advanced after every step-down (elector thread only). */
    private long reign = 1;
    /** The owner sent on the wire for the current reign, base#reign (written by the elector thread). */
    private volatile String owner;

    private LeaderElector(Builder b, LeaseTiming timing, String base, Candidate candidate, boolean oneShot) {
        this.key = b.key;
        this.base = base;
        this.givenBase = b.owner != null;
        this.oneShot = oneShot;
        this.reuseOwner = b.reuseOwner;
        if (givenBase && !reuseOwner) {
            this.reign = GIVEN_BASE_NEXT_REIGN.getOrDefault(base, 1L);
        }
        this.owner = Decide.reignOwner(base, reign);
        this.timing = timing;
        this.candidate = candidate;
        this.metrics = b.metrics;
        this.listener = b.listener;
        this.observeIntervalNanos = b.observeInterval != null ? b.observeInterval.toNanos() : timing.renewIntervalNanos();
        if (b.nodes != null) {
            QuorumTransport q = new QuorumTransport(b.nodes, key, timing,
                    b.nodeQuarantine != null ? b.nodeQuarantine.toNanos() : DEFAULT_NODE_QUARANTINE.toNanos(),
                    b.resources, b.settings());
            if (b.membershipId != null) {
                q.membershipOverride(b.membershipId);
            }
            this.quorum = q;
            this.quorumConns = q.conns();
            // In quorum mode the single-node slots below are never used; the connector only
            // shuts the nodes' clients down.
            this.connector = new Transport.Connector() {
                @Override
                public CompletableFuture<Transport.Link> connect() {
                    return CompletableFuture.failedFuture(new IllegalStateException("quorum mode"));
                }

                @Override
                public void shutdown() {
                    q.shutdown();
                }
            };
        } else {
            this.quorum = null;
            this.quorumConns = null;
            this.connector = b.seeds != null
                    ? Transport.cluster(b.seeds, key, b.resources, Transport.connectTimeoutNanos(timing), b.settings())
                    : Transport.standalone(b.uri, b.resources, Transport.connectTimeoutNanos(timing), b.settings());
        }
        // R5: the campaign's acquires (the BLOCKing one and its re-asks) get a connection of
        // their own; renewals, releases and GETs use the other one. Each is closed after an
        // abandoned call (R6).
        this.blockSlot = new Transport.Slot(connector, Transport.connectTimeoutNanos(timing));
        this.cmdSlot = new Transport.Slot(connector, Transport.connectTimeoutNanos(timing));
    }

    public static Builder builder() {
        return new Builder();
    }

    public String key() {
        return key;
    }

    /**
     * The configured owner id (the base). What the server sees is {@code base#reign}: a new
     * owner for every reign (R17); {@link LeaderContext#owner()} is that reign's.
     */
    public String owner() {
        return base;
    }

    public LeaseTiming timing() {
        return timing;
    }

    /** Start campaigning on the elector's own thread. Idempotent. */
    public LeaderElector start() {
        synchronized (lifecycle) {
            if (started) {
                return this;
            }
            started = true;
            loopThread = new Thread(this::runLoop, "lease-elector-" + key);
            loopThread.setDaemon(true);
            loopThread.start();
            if (listener != null) {
                observerThread = new Thread(this::observe, "lease-observer-" + key);
                observerThread.setDaemon(true);
                observerThread.start();
            }
        }
        return this;
    }

    /**
     * Graceful, final stop (R14): stop the task, wait for it (bounded by its deadline), then
     * LEASE.RELEASE so a waiting follower takes over at once; no more campaigning. Returns at
     * once; the future completes when all of that is done.
     */
    public CompletableFuture<Void> resign() {
        resignSignal.complete(null);
        synchronized (lifecycle) {
            if (!started) {
                started = true;
                connector.shutdown();
                terminated.complete(null);
                reignChanged();
            }
        }
        return terminated.copy();
    }

    /** Completes when the elector has stopped (after resign: task stopped, lease released). */
    public CompletableFuture<Void> terminated() {
        return terminated.copy();
    }

    /** {@link #resign()} and wait until it is done. */
    @Override
    public void close() {
        CompletableFuture<Void> done = resign();
        LeaderContext c = current;
        if (c != null && c.isTaskThread(Thread.currentThread())) {
            // Called from the leader task itself: the loop waits for this very thread to
            // return, so waiting here would only run into the deadline. Return; the caller's
            // onGranted returning completes the resign.
            return;
        }
        try {
            done.get();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (ExecutionException e) {
            log.warn("elector key={} owner={}: loop ended with {}", key, owner, e.getCause().toString());
        }
    }

    /**
     * The membership id of a quorum node list as the wire spells it (16 hex digits, protocol
     * Q9): every quorum elector sends it with each ACQUIRE, RENEW and RAISE, and it is what an
     * operator passes to {@code LEASE.MEMBERSHIP key old new} when the node set changes
     * (docs/quorum.md §4.1). The order of the list does not matter; the spelling of each
     * address does ({@code localhost} and {@code 127.0.0.1} differ).
     */
    public static String membershipId(List<RedisURI> nodes) {
        return QuorumTransport.membershipId(nodes);
    }

    /** Quorum mode's transport, null with one primary (tests in this package only). */
    QuorumTransport quorumTransport() {
        return quorum;
    }

    /** True while this instance leads and its stop point is ahead (reads the clock). */
    public boolean isLeader() {
        LeaderContext c = current;
        return c != null && c.isLeader();
    }

    /** The current reign's context, if leading (reads the clock, like {@link #isLeader()}). */
    public Optional<LeaderContext> leadership() {
        LeaderContext c = current;
        return c != null && !c.isCancelled() ? Optional.of(c) : Optional.empty();
    }

    /**
     * Wait until this elector leads, at most {@code timeout}: the reign's context, or empty on
     * timeout or once the elector terminated. Does not start the elector.
     *
     * @throws InterruptedException the calling thread was interrupted
     */
    public Optional<LeaderContext> awaitLeadership(Duration timeout) throws InterruptedException {
        long until = System.nanoTime() + Math.max(0L, timeout.toNanos());
        synchronized (reignChange) {
            while (true) {
                Optional<LeaderContext> l = leadership();
                if (l.isPresent() || terminated.isDone()) {
                    return l;
                }
                long left = until - System.nanoTime();
                if (left <= 0) {
                    return Optional.empty();
                }
                // Woken at every reign start and at termination; the bound covers a missed one.
                TimeUnit.NANOSECONDS.timedWait(reignChange, Math.min(left, Decide.SECOND));
            }
        }
    }

    /**
     * One {@code LEASE.GET} now: who leads the key (any elector), or empty if no live lease.
     * On a connection of its own, bounded by {@code max(op_timeout, 1 s)}; works before
     * {@link #start()} too. {@code pttl} is already old when it arrives: show it, never decide
     * on it (to lead, campaign).
     *
     * @throws RedisException Redis did not answer in time or answered an error
     * @throws IllegalStateException the elector has terminated (its client is shut down)
     */
    public Optional<LeaseInfo> currentLeader() {
        return currentLeader(Duration.ofNanos(Transport.connectTimeoutNanos(timing)));
    }

    /**
     * {@link #currentLeader()} bounded by {@code timeout} (connecting included). Why a longer
     * bound can be needed: the first connection of a cold JVM (class loading, Netty set-up,
     * TLS) can take over a second on a busy machine, and a one-shot query does not retry.
     */
    public Optional<LeaseInfo> currentLeader(Duration timeout) {
        if (terminated.isDone()) {
            throw new IllegalStateException("elector terminated");
        }
        long bound = Math.max(1L, timeout.toNanos());
        if (quorum != null) {
            QuorumTransport.Conns c = quorum.conns();
            try {
                return Optional.ofNullable(quorum.get(c, System.nanoTime() + bound));
            } catch (Transport.CommandFailed f) {
                throw new RedisException("LEASE.GET " + key + " failed: " + f.failure);
            } finally {
                c.close();
            }
        }
        Transport.Slot slot = new Transport.Slot(connector, bound);
        try {
            return Optional.ofNullable(get(slot, System.nanoTime() + bound));
        } catch (Transport.CommandFailed f) {
            throw new RedisException("LEASE.GET " + key + " failed: " + f.failure);
        } finally {
            slot.dropAndWait();
        }
    }

    private void reignChanged() {
        synchronized (reignChange) {
            reignChange.notifyAll();
        }
    }

    // ================================================================ the loop

    private void runLoop() {
        try {
            campaign();
        } catch (RuntimeException | Error e) {
            log.error("elector key={} owner={}: loop failed", key, owner, e);
        } finally {
            if (givenBase && !reuseOwner) {
                // This object's last reign number may be on the wire (a reign, or an ACQUIRE
                // abandoned on resign): the next object with this base starts after it.
                GIVEN_BASE_NEXT_REIGN.merge(base, reign + 1, Math::max);
            }
            blockSlot.dropAndWait();
            cmdSlot.dropAndWait();
            if (quorumConns != null) {
                quorumConns.close();
            }
            if (observerThread != null) {
                observerThread.interrupt();
                try {
                    observerThread.join(TimeUnit.NANOSECONDS.toMillis(timing.opTimeoutNanos()) + 1000);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            connector.shutdown();
            terminated.complete(null);
            reignChanged();
        }
    }

    private boolean resigned() {
        return resignSignal.isDone();
    }

    private void campaign() {
        long attempt = 0;
        // A grant the server gave us that we may not use (late, or not acked by replicas). We
        // hold it on the server, so we re-ask without BLOCK; same owner = refresh (R7, R11).
        Long unconfirmed = null;
        while (true) {
            if (resigned()) {
                releaseStray(unconfirmed != null);
                return;
            }
            // In quorum mode the rounds never BLOCK (Q2: no single node knows when a majority
            // frees up); the BLOCK budget is that of the wait on one node after a refusal (Q10); the not-granted pause is judged against it, so a fast refusal is followed by a
            // pause, never an immediate re-ask (QuorumFollowerPaceTest).
            Long block = unconfirmed != null ? null : timing.blockTimeoutNanos();
            if (quorum != null) {
                quorumConns.prepare(resignSignal); // first round only; before sent_at
            }
            long limit = Decide.opLimitNanos(timing, block);
            // R1: taken BEFORE sending; the server starts the TTL after this instant.
            long sentAt = System.nanoTime();
            Decide.AcquireResult res;
            try {
                res = acquire(block, sentAt + limit);
            } catch (Transport.Aborted a) {
                // R14: the abandoned ACQUIRE may have been granted after all.
                releaseStray(true);
                return;
            }
            long now = System.nanoTime();
            if (quorum != null) {
                // Q10: a quorum grant made by a round that started after a wait is measured from
                // that round's start (never earlier than our own sentAt).
                java.util.OptionalLong start = quorum.takeRoundStart();
                if (start.isPresent() && start.getAsLong() - sentAt > 0) {
                    sentAt = start.getAsLong();
                }
            }
            observe("acquire", res instanceof Decide.Failed f ? f.failure() : null);
            // Q4 + R17: a quorum round that released partial grants retired its owner; the next
            // round must not send it again (its RELEASE may still execute late and would free a
            // node the next round refreshed under the same owner).
            if (quorum != null && quorum.takeRetiredOwner() && !reuseOwner) {
                if (!advanceReign()) {
                    return;
                }
                // What the retired owner may still hold is not the new owner's to refresh; it
                // ends on its own expiry.
                unconfirmed = null;
                if (res instanceof Decide.Granted) {
                    res = new Decide.NotGranted();
                }
            }
            Decide.AcquireDecision d = Decide.onAcquire(timing, sentAt, now, res);
            if (d instanceof Decide.Lead lead) {
                attempt = 0;
                unconfirmed = null;
                metrics.acquire("granted");
                StepDownReason reason = lead(lead);
                if (reason == StepDownReason.RESIGNED) {
                    return;
                }
                if (oneShot) {
                    // callAsLeader: one reign per call, whatever ended it; the next reign
                    // number is recorded when the loop ends (runLoop).
                    return;
                }
                // R17: the reign is over, whatever the reason: the next campaign asks with a
                // new owner, so a RENEW or RELEASE of this reign that we abandoned and that
                // still executes later names an owner that holds nothing and answers 0.
                if (!advanceReign()) {
                    return;
                }
            } else if (d instanceof Decide.Unconfirmed u) {
                attempt = 0;
                unconfirmed = u.token();
                if (u.why() == Decide.UnconfirmedWhy.LATE_REPLY) {
                    // R7: the normal path after a BLOCK that waited longer than the stop window.
                    metrics.acquire("late");
                    log.debug("grant arrived after its stop point; re-asking without BLOCK key={} owner={} token={} reason={}",
                            key, owner, u.token(), u.why());
                } else {
                    metrics.acquire("unconfirmed");
                    log.warn("grant not confirmed; not leading on it key={} owner={} token={} reason={}",
                            key, owner, u.token(), u.why());
                }
                pause(u.retryInNanos());
            } else if (d instanceof Decide.NotGrantedAgain) {
                attempt = 0;
                unconfirmed = null;
                metrics.acquire("not_granted");
                long p = Decide.notGrantedPauseNanos(timing, block, sentAt, now, ThreadLocalRandom.current().nextDouble());
                if (p > 0) {
                    pause(p);
                }
            } else if (d instanceof Decide.Grace g) {
                metrics.acquire("grace");
                log.info("server in grace period; waiting key={} owner={} grace_ms={}", key, owner,
                        g.waitNanos() / Decide.MILLI);
                pause(g.waitNanos());
            } else if (d instanceof Decide.Backoff b) {
                metrics.acquire("error");
                long p = Decide.backoffNanos(timing, attempt, ThreadLocalRandom.current().nextDouble());
                attempt++;
                log.debug("acquire failed; backing off key={} kind={} backoff_ms={} attempt={}", key,
                        b.kind().label(), p / Decide.MILLI, attempt);
                pause(p);
            }
        }
    }

    /**
     * R17: step to the next reign's owner; false (and the loop ends) when the counter is
     * exhausted (2^53-1 reigns: never in practice, but never a reused owner either).
     */
    private boolean advanceReign() {
        if (reuseOwner) {
            return true;
        }
        long next = Decide.nextReign(reign, Decide.ReignEvent.STEPPED_DOWN);
        String o = Decide.reignOwner(base, next);
        if (o == null) {
            log.error("reign counter exhausted; not campaigning again key={} owner={} reign={}", key, owner, reign);
            return false;
        }
        reign = next;
        owner = o;
        return true;
    }

    /** Sleep, or until resign. */
    private void pause(long nanos) {
        if (nanos <= 0) {
            return;
        }
        try {
            resignSignal.get(nanos, TimeUnit.NANOSECONDS);
        } catch (TimeoutException | ExecutionException e) {
            // slept the full pause
        } catch (InterruptedException e) {
            resignSignal.complete(null);
        }
    }

    /** LEASE.ACQUIRE key owner ttl [BLOCK ms] (+ WAIT when granted), bounded by {@code until}. */
    private Decide.AcquireResult acquire(Long block, long until) throws Transport.Aborted {
        if (quorum != null) {
            return quorum.acquire(quorumConns, owner, until, block, resignSignal);
        }
        // Every campaign ask, the R7/R11 re-ask without BLOCK included, goes on the BLOCK's
        // connection. Why: a hand-over is a BLOCK granted after a wait longer than the stop
        // window, then at once a re-ask (R7). On cmdSlot, which a follower has never used,
        // that re-ask first had to open a connection (TCP + HELLO, ~30 ms on a loaded machine),
        // the bulk of Java's hand-over. R5 holds: the re-ask does not block, and nothing else
        // is ever queued on this connection; R6 holds: the BLOCK's reply was read (an
        // abandoned one dropped the connection), and WAIT follows its write on the same one.
        Transport.Slot slot = blockSlot;
        CommandArgs<String, String> a = Transport.args(key).add(owner).add(timing.ttlMillis());
        if (block != null) {
            a.add("BLOCK").add(Decide.wireMillis(block));
        }
        try {
            Transport.Link link = slot.get(until, resignSignal);
            Object reply = call(slot, link.dispatch(Transport.Cmd.ACQUIRE, a), until, resignSignal);
            Long token = Transport.parseToken(reply);
            if (token == null) {
                return new Decide.NotGranted();
            }
            Integer acked = null;
            Decide.WaitFor w = Decide.waitFor(timing);
            if (w != null) {
                acked = call(slot, link.waitFor(w), until, resignSignal).intValue();
            }
            return new Decide.Granted(token, acked);
        } catch (Transport.CommandFailed f) {
            if (Transport.dropsConnection(f.failure.kind())) {
                slot.drop();
            }
            return new Decide.Failed(f.failure);
        }
    }

    /**
     * Wait for one reply. Any wait we abandon (timeout, abort) closes the connection: its reply
     * is still in flight and must never be read as the reply to a later command (R6).
     */
    private static <T> T call(Transport.Slot slot, CompletableFuture<T> f, long until, CompletableFuture<?> abort)
            throws Transport.CommandFailed, Transport.Aborted {
        try {
            return Transport.await(f, until, abort);
        } catch (TimeoutException e) {
            slot.drop();
            throw new Transport.CommandFailed(Decide.Failure.of(ErrorKind.TIMEOUT, "no reply in time"));
        } catch (Transport.Aborted e) {
            slot.drop();
            throw e;
        } catch (ExecutionException e) {
            throw new Transport.CommandFailed(Transport.classify(e.getCause()));
        }
    }

    /** Count errors; log when Redis becomes unreachable and when it is back (once per change). */
    private void observe(String op, Decide.Failure failure) {
        boolean up;
        if (failure == null) {
            up = true;
        } else {
            metrics.redisError(op, failure.kind());
            if (failure.message().startsWith("MOVED ") || failure.message().startsWith("ASK ")) {
                // A Cluster slot migration or failover: expected, not an error worth a warning.
                // The connection is dropped and the next one loads the topology afresh.
                log.info("slot moved; reconnecting with a fresh topology key={} owner={} op={} reply={}", key, owner, op,
                        failure.message());
            } else if (failure.kind() == ErrorKind.REJECTED) {
                log.warn("redis rejected the request key={} owner={} op={} error={}", key, owner, op, failure);
            } else if (!failure.kind().unreachable() && failure.kind() != ErrorKind.GRACE) {
                log.warn("redis error key={} owner={} op={} error={}", key, owner, op, failure);
            }
            up = !failure.kind().unreachable();
        }
        if (redisUp == null || redisUp != up) {
            if (up && redisUp != null) {
                log.info("redis reachable again key={} owner={}", key, owner);
            } else if (!up) {
                log.warn("redis unreachable key={} owner={} op={} error={}", key, owner, op, failure);
            }
            redisUp = up;
            metrics.redisUp(up);
        }
    }

    // ================================================================ leading

    private StepDownReason lead(Decide.Lead grant) {
        long token = grant.token();
        long deadline = grant.deadline();
        long nextRenew = grant.nextRenew();
        LeaderContext ctx = new LeaderContext(token, key, owner, timing.stopBudgetNanos(), deadline);
        CompletableFuture<Throwable> taskDone = new CompletableFuture<>();
        Thread task = new Thread(() -> runTask(ctx, taskDone), "lease-leader-" + key + "-" + token);
        task.setDaemon(true);
        ctx.attach(task);
        current = ctx;
        reignChanged();
        metrics.leader(token, deadline);
        log.info("became leader key={} owner={} token={} reason=acquired lead_ms={}", key, owner, token,
                (deadline - System.nanoTime()) / Decide.MILLI);
        task.start();

        StepDownReason reason;
        while (true) {
            long stop = Decide.stopAt(timing, deadline);
            long wakeAt = nextRenew - stop < 0 ? nextRenew : stop;
            try {
                Transport.await(taskDone, wakeAt, resignSignal);
            } catch (TimeoutException | ExecutionException e) {
                // woke on time
            } catch (Transport.Aborted e) {
                // resign: checked below, after the clock
            }
            long now = System.nanoTime();
            // R3: past the stop point nothing else matters, not even a renewal that could
            // still succeed (the task would be running on an unbacked lease). This is also
            // the first check after a process pause (SIGSTOP, GC).
            if (Decide.mustStop(timing, deadline, now)) {
                reason = StepDownReason.DEADLINE;
                break;
            }
            if (resigned()) {
                reason = StepDownReason.RESIGNED;
                break;
            }
            if (taskDone.isDone()) {
                reason = StepDownReason.TASK_EXITED;
                break;
            }
            if (now - nextRenew < 0) {
                continue;
            }
            long sentAt = System.nanoTime();
            if (Decide.mustStop(timing, deadline, sentAt)) {
                reason = StepDownReason.DEADLINE;
                break;
            }
            // A renewal's own limit is capped at the stop point: waiting longer is pointless.
            long until = Math.min(sentAt + Decide.opLimitNanos(timing, null) - stop, 0) + stop;
            Decide.RenewResult res;
            try {
                res = renew(token, until);
            } catch (Transport.Aborted e) {
                reason = StepDownReason.RESIGNED;
                break;
            }
            now = System.nanoTime();
            if (res instanceof Decide.Failed f && f.failure().kind() == ErrorKind.TIMEOUT
                    && Decide.mustStop(timing, deadline, now)) {
                // The wait was cut at the stop point: that is the deadline, not a renew error.
                metrics.renew("error", now - sentAt);
                reason = StepDownReason.DEADLINE;
                break;
            }
            observe("renew", res instanceof Decide.Failed f ? f.failure() : null);
            Decide.RenewDecision d = Decide.onRenew(timing, deadline, sentAt, now, res);
            if (d instanceof Decide.Extend x) {
                metrics.renew("renewed", now - sentAt);
                if (!ctx.extend(x.deadline())) {
                    // A reader of the context saw the stop point pass while this thread was
                    // stalled (between the reply and here) and fired the signal: the task was
                    // told to stop, so the reign is over even though the renewal counted.
                    reason = StepDownReason.DEADLINE;
                    break;
                }
                deadline = x.deadline();
                nextRenew = x.nextRenew();
                metrics.deadline(deadline);
            } else if (d instanceof Decide.StepDown s) {
                metrics.renew(s.reason() == StepDownReason.RENEW_REJECTED ? "rejected" : "error", now - sentAt);
                reason = s.reason();
                break;
            } else if (d instanceof Decide.Retry r) {
                metrics.renew(r.why() == Decide.RetryWhy.REPLICAS_NOT_ACKED ? "unconfirmed" : "error", now - sentAt);
                log.debug("renewal did not count; retrying key={} token={} reason={}", key, token, r.why());
                nextRenew = r.at();
            }
        }

        // R13: step down. Fire the stop signal first (nobody, not even the task's own
        // isLeader(), may believe we lead past this point), then wait for the task.
        ctx.fire();
        current = null;
        metrics.follower(reason);
        if (reason == StepDownReason.RENEW_REJECTED || reason == StepDownReason.DEADLINE) {
            log.warn("lost leadership key={} owner={} token={} reason={}", key, owner, token, reason.label());
        } else {
            log.info("stepping down key={} owner={} token={} reason={}", key, owner, token, reason.label());
        }
        boolean overran = false;
        if (!taskDone.isDone()) {
            // The task was told at deadline - stop_budget; it has until the deadline.
            try {
                Transport.await(taskDone, deadline, null);
            } catch (TimeoutException e) {
                overran = true;
                metrics.taskOverrun();
                log.error("leader task still running at the local deadline (it ignores its stop signal and the "
                        + "interrupt); not releasing: the lease ends on the server's expiry key={} owner={} token={}",
                        key, owner, token);
            } catch (ExecutionException | Transport.Aborted e) {
                // ended
            }
        }
        Throwable failure = taskDone.getNow(null);
        if (failure != null) {
            log.error("leader task failed key={} owner={} token={}", key, owner, token, failure);
        }
        // R13: release only now, after the task stopped: the next leader must not start while
        // our task still works. Not after renew_rejected: the server said it is not ours.
        // R13: a Java thread cannot be stopped by force. If it still runs, do NOT release: the
        // lease then ends on the server's own expiry (a little after our deadline), which is as
        // long as the overrunning task can be kept from overlapping a successor.
        // After a rejected renewal a single server holds nothing for us any more; a quorum may
        // still hold a minority of nodes, freed now that the task has stopped (Q5).
        if ((Decide.releaseAfter(reason) || (quorum != null && quorum.holdsAfterRejection())) && !overran) {
            release(token);
        }
        try {
            candidate.onRevoked(reason);
        } catch (RuntimeException e) {
            log.warn("onRevoked threw key={} token={}", key, token, e);
        }
        return reason;
    }

    private void runTask(LeaderContext ctx, CompletableFuture<Throwable> done) {
        if (ctx.isCancelled()) {
            Thread.currentThread().interrupt();
        }
        Throwable failure = null;
        try {
            candidate.onGranted(ctx);
        } catch (InterruptedException e) {
            // the stop signal's interrupt: a normal way to stop
        } catch (Exception | Error e) {
            failure = e;
        } finally {
            done.complete(failure);
        }
    }

    /** LEASE.RENEW key owner token ttl (+ WAIT when renewed), bounded by {@code until}. */
    private Decide.RenewResult renew(long token, long until) throws Transport.Aborted {
        if (quorum != null) {
            return quorum.renew(quorumConns, owner, token, until);
        }
        CommandArgs<String, String> a = Transport.args(key).add(owner).add(token).add(timing.ttlMillis());
        try {
            Transport.Link link = cmdSlot.get(until, resignSignal);
            boolean renewed = Transport.parseFlag(Transport.Cmd.RENEW,
                    call(cmdSlot, link.dispatch(Transport.Cmd.RENEW, a), until, resignSignal));
            if (!renewed) {
                return new Decide.NotHeld();
            }
            Integer acked = null;
            Decide.WaitFor w = Decide.waitFor(timing);
            if (w != null) {
                acked = call(cmdSlot, link.waitFor(w), until, resignSignal).intValue();
            }
            return new Decide.Renewed(acked);
        } catch (Transport.CommandFailed f) {
            if (Transport.dropsConnection(f.failure.kind())) {
                cmdSlot.drop();
            }
            return new Decide.Failed(f.failure);
        }
    }

    /** Best-effort LEASE.RELEASE, bounded by op_timeout; if it fails the lease just expires. */
    private void release(long token) {
        long until = System.nanoTime() + timing.opTimeoutNanos();
        try {
            if (quorum != null) {
                boolean released = quorum.release(quorumConns, owner, token);
                observe("release", null);
                log.info("released lease key={} owner={} token={} released={}", key, owner, token, released);
                return;
            }
            Transport.Link link = cmdSlot.get(until, null);
            boolean released = Transport.parseFlag(Transport.Cmd.RELEASE, call(cmdSlot,
                    link.dispatch(Transport.Cmd.RELEASE, Transport.args(key).add(owner).add(token)), until, null));
            observe("release", null);
            log.info("released lease key={} owner={} token={} released={}", key, owner, token, released);
        } catch (Transport.CommandFailed f) {
            if (Transport.dropsConnection(f.failure.kind())) {
                cmdSlot.drop();
            }
            observe("release", f.failure);
            log.warn("release failed; the lease will expire on the server key={} owner={} token={} error={}", key,
                    owner, token, f.failure);
        } catch (Transport.Aborted e) {
            // no abort signal here
        }
    }

    /** R14: after resigning as a follower, a grant we never saw may exist: look, release if ours. */
    private void releaseStray(boolean maybeGranted) {
        if (!maybeGranted) {
            return;
        }
        try {
            LeaseInfo h = quorum != null ? quorum.get(quorumConns, System.nanoTime() + timing.opTimeoutNanos())
                    : get(cmdSlot, System.nanoTime() + timing.opTimeoutNanos());
            if (h != null && h.owner().equals(owner)) {
                release(h.token());
            }
        } catch (Transport.CommandFailed f) {
            log.debug("could not check for a stray grant key={} error={}", key, f.failure);
        }
    }

    private LeaseInfo get(Transport.Slot slot, long until) throws Transport.CommandFailed {
        try {
            Transport.Link link = slot.get(until, null);
            return Transport.parseHolder(call(slot, link.dispatch(Transport.Cmd.GET, Transport.args(key)), until, null));
        } catch (Transport.CommandFailed f) {
            if (Transport.dropsConnection(f.failure.kind())) {
                slot.drop();
            }
            throw f;
        } catch (Transport.Aborted e) {
            throw new Transport.CommandFailed(Decide.Failure.of(ErrorKind.TIMEOUT, "aborted"));
        }
    }

    // ================================================================ observing

    private void observe() {
        Transport.Slot slot = new Transport.Slot(connector, Transport.connectTimeoutNanos(timing));
        QuorumTransport.Conns qc = quorum != null ? quorum.conns() : null;
        Optional<LeaseInfo> last = null;
        try {
            while (!resigned() && !Thread.currentThread().isInterrupted()) {
                try {
                    long until = System.nanoTime() + timing.opTimeoutNanos();
                    LeaseInfo h = qc != null ? quorum.get(qc, until) : get(slot, until);
                    Optional<LeaseInfo> now = Optional.ofNullable(h);
                    if (last == null || !sameHolder(last, now)) {
                        last = now;
                        try {
                            listener.onLeaderChanged(now);
                        } catch (RuntimeException e) {
                            log.warn("leader listener threw key={}", key, e);
                        }
                    }
                } catch (Transport.CommandFailed f) {
                    log.debug("LEASE.GET failed key={} error={}", key, f.failure);
                }
                try {
                    resignSignal.get(observeIntervalNanos, TimeUnit.NANOSECONDS);
                } catch (TimeoutException | ExecutionException e) {
                    // next poll
                }
            }
        } catch (InterruptedException e) {
            // closing
        } finally {
            slot.dropAndWait();
            if (qc != null) {
                qc.close();
            }
        }
    }

    private static boolean sameHolder(Optional<LeaseInfo> a, Optional<LeaseInfo> b) {
        if (a.isEmpty() || b.isEmpty()) {
            return a.isEmpty() && b.isEmpty();
        }
        return a.get().owner().equals(b.get().owner()) && a.get().token() == b.get().token();
    }

    // ================================================================ builder

    /** host-pid-random: unique per process incarnation (a restart never inherits a lease). */
    public static String defaultOwner() {
        String host = null;
        try {
            host = Files.readString(Path.of("/proc/sys/kernel/hostname"), StandardCharsets.UTF_8).strip();
        } catch (Exception e) {
            // not Linux
        }
        if (host == null || host.isEmpty()) {
            host = System.getenv("HOSTNAME");
        }
        if (host == null || host.isEmpty()) {
            host = "unknown";
        }
        return host + "-" + ProcessHandle.current().pid() + "-"
                + String.format("%08x", new java.security.SecureRandom().nextInt());
    }

    /** Configuration of a {@link LeaderElector}; every timing defaults from the TTL. */
    public static final class Builder {
        private RedisURI uri;
        private List<RedisURI> seeds;
        private List<RedisURI> nodes;
        private Duration nodeQuarantine;
        private String membershipId;
        private ClientResources resources;
        private ProtocolVersion protocol;
        private ClientOptions clientOptions;
        private SslOptions sslOptions;
        private String key;
        private Duration ttl;
        private String owner;
        private Double drift;
        private Duration margin;
        private Duration stopBudget;
        private Duration renewInterval;
        private Duration opTimeout;
        private Duration blockTimeout;
        private Integer minReplicas;
        private Duration waitTimeout;
        private Duration backoffMin;
        private Duration backoffMax;
        private Candidate candidate;
        private ElectorMetrics metrics = ElectorMetrics.NOOP;
        private LeaderListener listener;
        private Duration observeInterval;
        private boolean reuseOwner;

        private Builder() {}

        /**
         * The negative control of the conformance harness (docs/conformance.md, mode
         * {@code reuse-owner}): keep one owner across reigns, the behaviour R17 forbids. Not
         * public API: only the conformance elector in this package calls it.
         */
        Builder reuseOwnerAcrossReigns() {
            this.reuseOwner = true;
            return this;
        }

        /**
         * A standalone primary ({@code redis://host:port}) or a Sentinel-monitored one
         * ({@code RedisURI.Builder.sentinel(host, port, masterId)}, or a
         * {@code redis-sentinel://} URI): the primary is resolved at every (re)connect.
         */
        public Builder redis(RedisURI uri) {
            this.uri = uri;
            this.seeds = null;
            this.nodes = null;
            return this;
        }

        /** A Redis Cluster, by its seed nodes; commands go to the primary of the key's slot. */
        public Builder cluster(List<RedisURI> seeds) {
            this.seeds = new ArrayList<>(seeds);
            this.uri = null;
            this.nodes = null;
            return this;
        }

        /**
         * Quorum mode (docs/quorum.md): one lease on a majority of these independent primaries
         * (3 or 5, each with the module, none a replica of another), one fencing token per
         * reign. Every elector of the key must list the same nodes (Q8). A list that names one
         * server twice (any spelling: localhost and 127.0.0.1, another db number) is refused;
         * the elector's ACL user needs {@code +info} (each new connection reads the run_id).
         */
        public Builder quorum(List<RedisURI> nodes) {
            this.nodes = new ArrayList<>(nodes);
            this.uri = null;
            this.seeds = null;
            return this;
        }

        /**
         * Quorum mode: the membership id to send (protocol Q9, 16 lower-case hex digits) instead
         * of the one computed from the node URIs. For electors that reach the same servers under
         * different addresses (proxies, NAT, a test harness): each would compute its own id and
         * the first to bind a key would shut the others out. Every elector of one membership
         * sets the same id.
         */
        public Builder membershipId(String id) {
            if (id == null || !id.matches("[0-9a-f]{16}") || id.matches("0+")) {
                throw new IllegalArgumentException("membershipId: expected 16 lower-case hex digits, not all zero");
            }
            this.membershipId = id;
            return this;
        }

        /**
         * Quorum mode: how long a node whose server identity (run_id) changed counts toward
         * nothing (Q7); default {@link LeaderElector#DEFAULT_NODE_QUARANTINE}, never less than the TTL. Set
         * it to the longest TTL any elector of the key uses.
         */
        public Builder nodeQuarantine(Duration d) {
            this.nodeQuarantine = d;
            return this;
        }

        /**
         * Share the event loops of an existing Lettuce client ({@code client.getResources()}).
         * The elector still creates its own client object, because it needs client options of
         * its own (no auto-reconnect, no command timeout: see the README).
         */
        public Builder clientResources(ClientResources resources) {
            this.resources = resources;
            return this;
        }

        /**
         * Your Lettuce client options as the base of the elector's (TLS via their
         * {@code SslOptions}, protocol, socket settings...; {@code ClusterClientOptions} for a
         * cluster). The elector overrides four of them on its own connections, never on yours:
         * {@code autoReconnect(false)}, {@code REJECT_COMMANDS} while disconnected, no Lettuce
         * command timeout, and its own connect timeout with TCP keep-alive (see the README).
         */
        public Builder clientOptions(ClientOptions options) {
            this.clientOptions = options;
            return this;
        }

        /**
         * TLS for {@code rediss://} URIs, e.g. a private CA:
         * {@code SslOptions.builder().trustManager(new File("ca.crt")).build()} (and
         * {@code keyManager(cert, key, null)} for client certificates), without JVM-wide
         * trust-store settings. Overrides the {@code SslOptions} of {@link #clientOptions}.
         */
        public Builder sslOptions(SslOptions ssl) {
            this.sslOptions = ssl;
            return this;
        }

        Transport.Settings settings() {
            return new Transport.Settings(clientOptions, sslOptions, protocol);
        }

        /** RESP2 or RESP3 (default: Lettuce's, RESP3 when the server speaks it). */
        public Builder protocolVersion(ProtocolVersion v) {
            this.protocol = v;
            return this;
        }

        public Builder key(String key) {
            this.key = key;
            return this;
        }

        public Builder ttl(Duration ttl) {
            this.ttl = ttl;
            return this;
        }

        /**
         * Owner id (the base of the per-reign owner {@code base#reign}, R17); default
         * {@link #defaultOwner()}. Must be unique per process incarnation; 1..=239 UTF-8 bytes so
         * that {@code #} and any reign number fit the server's 256-byte limit.
         */
        public Builder owner(String owner) {
            this.owner = owner;
            return this;
        }

        public Builder drift(double drift) {
            this.drift = drift;
            return this;
        }

        public Builder margin(Duration d) {
            this.margin = d;
            return this;
        }

        /** How long before the local deadline the task is told to stop (default ttl/5). */
        public Builder stopBudget(Duration d) {
            this.stopBudget = d;
            return this;
        }

        public Builder renewInterval(Duration d) {
            this.renewInterval = d;
            return this;
        }

        public Builder opTimeout(Duration d) {
            this.opTimeout = d;
            return this;
        }

        public Builder blockTimeout(Duration d) {
            this.blockTimeout = d;
            return this;
        }

        /** Grants and renewals count only once {@code n} replicas acknowledged them (WAIT). */
        public Builder minReplicas(int n, Duration waitTimeout) {
            this.minReplicas = n;
            this.waitTimeout = waitTimeout;
            return this;
        }

        public Builder backoff(Duration min, Duration max) {
            this.backoffMin = min;
            this.backoffMax = max;
            return this;
        }

        public Builder candidate(Candidate c) {
            this.candidate = c;
            return this;
        }

        /** Metrics sink, e.g. {@code new MicrometerElectorMetrics(registry, key)}. */
        public Builder metrics(ElectorMetrics m) {
            this.metrics = m;
            return this;
        }

        /** Observe the current leader with LEASE.GET every {@code interval} (default renew interval). */
        public Builder leaderListener(LeaderListener l) {
            this.listener = l;
            return this;
        }

        public Builder observeInterval(Duration d) {
            this.observeInterval = d;
            return this;
        }

        private void quorumProblem() {
            if (nodes.size() < 2) {
                throw new IllegalArgumentException("invalid configuration: nodes: quorum mode needs at least 2 nodes");
            }
            for (RedisURI n : nodes) {
                if (n == null || !n.getSentinels().isEmpty()) {
                    throw new IllegalArgumentException(
                            "invalid configuration: nodes: each node is one standalone primary (no Sentinel URI)");
                }
            }
            if (nodeQuarantine != null && nodeQuarantine.isNegative()) {
                throw new IllegalArgumentException("invalid configuration: node_quarantine: must not be negative");
            }
            if (minReplicas != null && minReplicas > 0) {
                throw new IllegalArgumentException(
                        "invalid configuration: min_replicas: not in quorum mode (a majority of primaries replaces WAIT)");
            }
            String dup = QuorumTransport.duplicateProblem(nodes);
            if (dup != null) {
                throw new IllegalArgumentException("invalid configuration: nodes: " + dup);
            }
        }

        /** The timing these settings give (validated by {@link #build()}). */
        public LeaseTiming timing() {
            if (ttl == null) {
                throw new IllegalArgumentException("invalid configuration: ttl: ttl is required");
            }
            LeaseTiming t = Decide.defaults(Math.max(0L, ttl.toMillis()));
            if (drift != null) {
                t = t.withDrift(drift);
            }
            if (margin != null) {
                t = t.withMarginNanos(margin.toNanos());
            }
            if (stopBudget != null) {
                t = t.withStopBudgetNanos(stopBudget.toNanos());
            }
            if (renewInterval != null) {
                t = t.withRenewIntervalNanos(renewInterval.toNanos());
            }
            if (opTimeout != null) {
                t = t.withOpTimeoutNanos(opTimeout.toNanos());
            }
            if (blockTimeout != null) {
                t = t.withBlockTimeoutNanos(blockTimeout.toNanos());
            }
            if (minReplicas != null) {
                t = t.withMinReplicas(minReplicas, waitTimeout == null ? t.waitTimeoutNanos() : waitTimeout.toNanos());
            }
            if (backoffMin != null || backoffMax != null) {
                t = t.withBackoffNanos(backoffMin == null ? t.backoffMinNanos() : backoffMin.toNanos(),
                        backoffMax == null ? t.backoffMaxNanos() : backoffMax.toNanos());
            }
            return t;
        }

        /**
         * Validate (before anything is sent) and create the elector; nothing connects until
         * {@link LeaderElector#start()}.
         *
         * @throws IllegalArgumentException {@code invalid configuration: <rule>: <why>}
         */
        public LeaderElector build() {
            if (candidate == null) {
                throw new IllegalArgumentException("invalid configuration: candidate: a candidate is required");
            }
            return create(candidate, false);
        }

        /**
         * One-shot (Curator's {@code LeaderSelector} without auto-requeue): build an elector
         * from this configuration (its {@link #candidate(Candidate)}, if any, is not used),
         * campaign until elected, run {@code task} once in that one reign while keeping the
         * lease renewed, release the lease after the task returned, and close; it never
         * campaigns a second time. Blocks the calling thread.
         *
         * <p>Returns the task's value when it returned while still leading; rethrows the task's
         * exception when it threw while still leading. Throws {@link LeadershipLostException}
         * when the reign ended first (renewal refused, stop point passed), after the task
         * stopped (a task still running at the local deadline is not waited for: a Java thread
         * cannot be stopped by force; the lease is then not released and ends on the server's
         * expiry). Interrupting the calling thread resigns (the task is stopped first, then the
         * lease released) and throws {@link InterruptedException}. Call it again for another
         * reign: with a given {@link #owner(String)} the reign numbers continue (R17).
         *
         * @throws IllegalArgumentException {@code invalid configuration: <rule>: <why>}
         */
        public <T> T callAsLeader(LeaderCallable<T> task) throws Exception {
            Objects.requireNonNull(task, "task");
            OneShot<T> one = new OneShot<>(task);
            LeaderElector e = create(one, true);
            e.start();
            try {
                e.terminated().get();
            } catch (InterruptedException ie) {
                // R14: resign (stop the task, then release) before telling the caller.
                e.close();
                throw ie;
            }
            return one.outcome();
        }

        private LeaderElector create(Candidate c, boolean oneShot) {
            if (uri == null && seeds == null && nodes == null) {
                throw new IllegalArgumentException(
                        "invalid configuration: redis: redis(uri), cluster(seeds) or quorum(nodes) is required");
            }
            if (nodes != null) {
                quorumProblem();
            } else if (nodeQuarantine != null) {
                throw new IllegalArgumentException("invalid configuration: node_quarantine: only with quorum(nodes)");
            }
            if (seeds != null && seeds.isEmpty()) {
                throw new IllegalArgumentException("invalid configuration: redis: cluster needs at least one seed");
            }
            if (metrics == null) {
                metrics = ElectorMetrics.NOOP;
            }
            // Not stored in the builder: every elector built without an owner gets its own.
            String base = owner != null ? owner : defaultOwner();
            LeaseTiming t = timing();
            Decide.Problem p = Decide.configProblem(t, key, base);
            if (p != null) {
                throw new IllegalArgumentException("invalid configuration: " + p);
            }
            if (observeInterval != null && observeInterval.toMillis() < 1) {
                throw new IllegalArgumentException("invalid configuration: observe_interval: at least 1 ms");
            }
            return new LeaderElector(this, t, base, c, oneShot);
        }
    }
}
