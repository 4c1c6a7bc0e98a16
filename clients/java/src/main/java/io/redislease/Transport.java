package io.redislease;

import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisCommandTimeoutException;
import io.lettuce.core.RedisURI;
import io.lettuce.core.SocketOptions;
import io.lettuce.core.SslOptions;
import io.lettuce.core.TimeoutOptions;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.cluster.ClusterClientOptions;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.cluster.SlotHash;
import io.lettuce.core.cluster.api.StatefulRedisClusterConnection;
import io.lettuce.core.cluster.models.partitions.RedisClusterNode;
import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.protocol.CommandArgs;
import io.lettuce.core.protocol.ConnectionIntent;
import io.lettuce.core.protocol.ProtocolKeyword;
import io.lettuce.core.protocol.ProtocolVersion;
import io.lettuce.core.resource.ClientResources;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The Redis layer on Lettuce: opening connections (standalone, Sentinel, Cluster), the module
 * commands, reply parsing and error classification. Used only by {@link LeaderElector}.
 */
final class Transport {
    private Transport() {}

    /**
     * The module commands, dispatched as custom commands. (A class, not an enum: an enum's
     * name() would override ProtocolKeyword's deprecated name().)
     */
    static final class Cmd implements ProtocolKeyword {
        static final Cmd ACQUIRE = new Cmd("LEASE.ACQUIRE");
        static final Cmd RENEW = new Cmd("LEASE.RENEW");
        static final Cmd RELEASE = new Cmd("LEASE.RELEASE");
        static final Cmd GET = new Cmd("LEASE.GET");
        static final Cmd FENCE = new Cmd("LEASE.FENCE");
        static final Cmd RAISE = new Cmd("LEASE.RAISE");

        private final byte[] bytes;
        private final String text;

        private Cmd(String text) {
            this.text = text;
            this.bytes = text.getBytes(StandardCharsets.US_ASCII);
        }

        @Override
        public byte[] getBytes() {
            return bytes.clone();
        }

        @Override
        public String toString() {
            return text;
        }
    }

    /** A failure already classified; thrown by the calls below. */
    static final class CommandFailed extends Exception {
        private static final long serialVersionUID = 1L;
        final transient Decide.Failure failure;

        CommandFailed(Decide.Failure failure) {
            super(failure.toString(), null, false, false);
            this.failure = failure;
        }
    }

    /** The wait was abandoned because the abort signal (resign) fired. */
    static final class Aborted extends Exception {
        private static final long serialVersionUID = 1L;

        Aborted() {
            super("aborted", null, false, false);
        }
    }

    /**
     * Client options of every connection the elector opens.
     *
     * <p>WHY autoReconnect(false) and REJECT_COMMANDS: Lettuce's default auto-reconnect keeps
     * commands issued while disconnected, and re-sends commands that were in flight when the
     * connection broke, once it reconnects ("at least once"). That could send a LEASE.ACQUIRE or
     * LEASE.RENEW after the loop gave up on it (R6): a grant nobody reads, holding the lease
     * for a TTL, or a renewal after we stepped down. The loop retries itself, with a fresh
     * sent_at, on a connection it opens itself (with its own backoff, rediscovering the primary
     * through Sentinel / the cluster topology each time).
     *
     * <p>WHY timeoutCommands(false): Lettuce's own command timeout must never cut a BLOCKing
     * ACQUIRE (R5). The loop bounds every call itself (op_limit) and closes the connection of
     * an abandoned call, so a late reply is never read as the reply to a later command.
     */
    /**
     * Time limit of opening a connection: op_timeout, but at least 1 s. Why the floor: a cold
     * JVM's first Lettuce connection (class loading, Netty set-up, the HELLO handshake) can take
     * several hundred ms on a busy machine. It costs no safety: a connect is part of the
     * operation, whose deadline counts from the instant taken before it.
     */
    static long connectTimeoutNanos(LeaseTiming t) {
        return Math.max(t.opTimeoutNanos(), Decide.SECOND);
    }

    /**
     * What the user configured for the elector's connections: their ClientOptions (or null),
     * TLS options (or null, then the base's), protocol (or null, then the base's).
     */
    record Settings(ClientOptions base, SslOptions ssl, ProtocolVersion protocol) {
        static final Settings DEFAULT = new Settings(null, null, null);
    }

    /**
     * The user's options with the elector's four overrides on top (everything else, TLS, the
     * protocol, socket settings such as keep-alive intervals, stays theirs). The overrides are
     * not negotiable: each is a safety rule above.
     */
    static ClientOptions.Builder safeOptions(ClientOptions.Builder b, ClientOptions base, long connectTimeoutNanos,
            Settings settings) {
        SocketOptions.Builder socket = base == null ? SocketOptions.builder() : base.getSocketOptions().mutate();
        b.autoReconnect(false)
                .disconnectedBehavior(ClientOptions.DisconnectedBehavior.REJECT_COMMANDS)
                .timeoutOptions(TimeoutOptions.builder().timeoutCommands(false).build())
                .socketOptions(socket.connectTimeout(Duration.ofNanos(connectTimeoutNanos)).keepAlive(true).build());
        if (settings.ssl() != null) {
            b.sslOptions(settings.ssl());
        }
        if (settings.protocol() != null) {
            b.protocolVersion(settings.protocol());
        }
        return b;
    }

    /** One connection to the node that holds the key; {@code owner} is what closing it closes. */
    static final class Link {
        final StatefulRedisConnection<String, String> conn;
        private final AutoCloseable owner;

        Link(StatefulRedisConnection<String, String> conn, AutoCloseable owner) {
            this.conn = conn;
            this.owner = owner;
        }

        CompletableFuture<Object> dispatch(Cmd cmd, CommandArgs<String, String> args) {
            return conn.async().dispatch(cmd, new ReplyOutput(), args).toCompletableFuture();
        }

        CompletableFuture<Long> waitFor(Decide.WaitFor w) {
            return conn.async().waitForReplication(w.replicas(), w.timeoutMillis()).toCompletableFuture();
        }

        /** Close without waiting (an abandoned call: its reply must never be read). */
        CompletableFuture<Void> close() {
            try {
                if (owner instanceof StatefulRedisConnection<?, ?> c) {
                    return c.closeAsync();
                } else if (owner instanceof StatefulRedisClusterConnection<?, ?> c) {
                    return c.closeAsync();
                }
                owner.close();
            } catch (Exception ignored) {
                // Closing a broken connection may fail; it is gone either way.
            }
            return CompletableFuture.completedFuture(null);
        }
    }

    /** Opens links; one per topology kind. */
    interface Connector {
        CompletableFuture<Link> connect();

        /** Shuts down what the connector created (never the user's shared ClientResources). */
        void shutdown();
    }

    /** Standalone or Sentinel (a RedisURI with sentinels resolves the primary at each connect). */
    static Connector standalone(RedisURI uri, ClientResources resources, long connectTimeoutNanos, Settings settings) {
        RedisClient client = resources == null ? RedisClient.create() : RedisClient.create(resources);
        ClientOptions base = settings.base();
        client.setOptions(safeOptions(base == null ? ClientOptions.builder() : base.mutate(), base, connectTimeoutNanos,
                settings).build());
        return new Connector() {
            @Override
            public CompletableFuture<Link> connect() {
                return client.connectAsync(StringCodec.UTF8, uri).toCompletableFuture().thenApply(c -> new Link(c, c));
            }

            @Override
            public void shutdown() {
                client.shutdownAsync(0, 2, TimeUnit.SECONDS);
            }
        };
    }

    /**
     * Cluster: a fresh cluster connection (topology refreshed after the first), then the
     * connection to the primary of the key's slot. Every command of one operation, WAIT
     * included, runs on that one node connection (WAIT counts this connection's writes).
     */
    static Connector cluster(List<RedisURI> seeds, String key, ClientResources resources, long connectTimeoutNanos,
            Settings settings) {
        RedisClusterClient client = resources == null ? RedisClusterClient.create(seeds)
                : RedisClusterClient.create(resources, seeds);
        ClientOptions base = settings.base();
        ClusterClientOptions.Builder b = base == null ? ClusterClientOptions.builder()
                : base instanceof ClusterClientOptions c ? c.mutate() : ClusterClientOptions.builder(base);
        safeOptions(b, base, connectTimeoutNanos, settings);
        client.setOptions(b.build());
        int slot = SlotHash.getSlot(key);
        return new Connector() {
            @Override
            public CompletableFuture<Link> connect() {
                // Load the topology before every connect, the first one included: Lettuce's
                // connectAsync does not load it by itself ("Partitions not initialized"), which
                // made the first connect fail and log a spurious "redis unreachable"; later
                // ones must see a slot that moved (MOVED, failover) at once.
                CompletableFuture<Void> refresh = client.refreshPartitionsAsync().toCompletableFuture();
                return refresh.thenCompose(v -> client.connectAsync(StringCodec.UTF8)).thenCompose(cc -> {
                    RedisClusterNode node = cc.getPartitions().getMasterBySlot(slot);
                    if (node == null) {
                        cc.closeAsync();
                        return CompletableFuture.failedFuture(
                                new IllegalStateException("no primary serves slot " + slot));
                    }
                    RedisURI u = node.getUri();
                    return cc.getConnectionAsync(u.getHost(), u.getPort(), ConnectionIntent.WRITE)
                            .<Link>thenApply(n -> new Link(n, cc))
                            .whenComplete((l, e) -> {
                                if (e != null) {
                                    cc.closeAsync();
                                }
                            });
                });
            }

            @Override
            public void shutdown() {
                client.shutdownAsync(0, 2, TimeUnit.SECONDS);
            }
        };
    }

    /**
     * One connection slot of the loop: opened lazily, closed after any abandoned call or
     * connection-level failure. The in-flight rule (R6): a connection with an abandoned reply
     * in flight is never reused.
     */
    static final class Slot {
        private final Connector connector;
        private final long connectTimeoutNanos;
        private Link link;

        Slot(Connector connector, long connectTimeoutNanos) {
            this.connector = connector;
            this.connectTimeoutNanos = connectTimeoutNanos;
        }

        Link get(long until, CompletableFuture<?> abort) throws CommandFailed, Aborted {
            if (link != null) {
                return link;
            }
            CompletableFuture<Link> f = connector.connect();
            // WHY its own bound: connecting (TCP + HELLO handshake) must not use up a BLOCK's
            // whole op_limit when the server is down or a proxy accepts but never answers, or a
            // follower would notice a restarted Redis only seconds later.
            long connectUntil = System.nanoTime() + connectTimeoutNanos;
            try {
                link = await(f, connectUntil - until < 0 ? connectUntil : until, abort);
                return link;
            } catch (TimeoutException e) {
                abandon(f);
                throw new CommandFailed(Decide.Failure.of(ErrorKind.TIMEOUT, "connect timed out"));
            } catch (Aborted e) {
                abandon(f);
                throw e;
            } catch (ExecutionException e) {
                throw new CommandFailed(Decide.Failure.of(ErrorKind.CONNECTION, "connect: " + message(e.getCause())));
            }
        }

        /** A connect we stopped waiting for may still succeed: close it then. */
        private static void abandon(CompletableFuture<Link> f) {
            f.whenComplete((l, e) -> {
                if (l != null) {
                    l.close();
                }
            });
        }

        void drop() {
            if (link != null) {
                link.close();
                link = null;
            }
        }

        /** Close and wait a little for it (before the client shuts down, to close once). */
        void dropAndWait() {
            if (link != null) {
                try {
                    link.close().get(1, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                } catch (ExecutionException | TimeoutException e) {
                    // closed or broken either way
                }
                link = null;
            }
        }
    }

    /**
     * Wait for {@code f} until the monotonic instant {@code until}, or until {@code abort}
     * completes (checked first: after resign nothing else matters).
     */
    static <T> T await(CompletableFuture<T> f, long until, CompletableFuture<?> abort)
            throws TimeoutException, Aborted, ExecutionException {
        if (abort != null && abort.isDone()) {
            throw new Aborted();
        }
        if (!f.isDone()) {
            long left = until - System.nanoTime();
            if (left <= 0) {
                throw new TimeoutException();
            }
            try {
                if (abort == null) {
                    f.get(left, TimeUnit.NANOSECONDS);
                } else {
                    CompletableFuture.anyOf(f, abort).get(left, TimeUnit.NANOSECONDS);
                }
            } catch (ExecutionException | CancellationException ignored) {
                // f (or abort) failed: handled below from f itself.
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new Aborted();
            }
        }
        if (abort != null && abort.isDone()) {
            throw new Aborted();
        }
        try {
            return f.get();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new Aborted();
        } catch (CancellationException e) {
            throw new ExecutionException(e);
        }
    }

    private static String message(Throwable t) {
        Throwable c = t;
        while ((c instanceof CompletionException || c instanceof ExecutionException) && c.getCause() != null) {
            c = c.getCause();
        }
        return c == null ? "unknown" : c.getClass().getSimpleName() + ": " + c.getMessage();
    }

    /** Classify the cause of a failed command future. */
    static Decide.Failure classify(Throwable t) {
        Throwable c = t;
        while ((c instanceof CompletionException || c instanceof ExecutionException) && c.getCause() != null) {
            c = c.getCause();
        }
        if (c instanceof RedisCommandTimeoutException) {
            return Decide.Failure.of(ErrorKind.TIMEOUT, String.valueOf(c.getMessage()));
        }
        // An error reply: the server's line, classified by its first word. (Lettuce's
        // subclasses, e.g. for BUSY, LOADING, NOSCRIPT, keep the line as the message.)
        if (c instanceof RedisCommandExecutionException) {
            return Decide.classifyError(String.valueOf(c.getMessage()));
        }
        // Anything else (closed channel, refused, reset, rejected while disconnected):
        // the server may or may not have run the command.
        return Decide.Failure.of(ErrorKind.CONNECTION, message(c));
    }

    /** Whether a failure means the connection must not be reused. */
    static boolean dropsConnection(ErrorKind k) {
        switch (k) {
            case GRACE:
            case REJECTED:
            case NOREPLICAS:
            case LOADING:
            case FENCED:
                return false;
            default:
                // connection, timeout, protocol; READONLY / other server codes: we may talk to
                // the wrong node (failover): reconnect, rediscovering the primary.
                return true;
        }
    }

    // ---------------------------------------------------------------- commands

    static CommandArgs<String, String> args(String key) {
        return new CommandArgs<>(StringCodec.UTF8).addKey(key);
    }

    /** Token of an ACQUIRE reply: a positive integer below 2^53, or null for nil. */
    static Long parseToken(Object v) throws CommandFailed {
        if (v == null) {
            return null;
        }
        if (v instanceof Long n && n > 0 && n < (1L << 53)) {
            return n;
        }
        throw new CommandFailed(Decide.Failure.of(ErrorKind.PROTOCOL, "LEASE.ACQUIRE replied " + v));
    }

    /** 1 / 0 of RENEW and RELEASE. */
    static boolean parseFlag(Cmd cmd, Object v) throws CommandFailed {
        if (v instanceof Long n && (n == 0L || n == 1L)) {
            return n == 1L;
        }
        throw new CommandFailed(Decide.Failure.of(ErrorKind.PROTOCOL, cmd + " replied " + v));
    }

    /** LEASE.GET: nil, RESP2 [owner, token, pttl] or RESP3 {owner, token, pttl}. */
    static LeaseInfo parseHolder(Object v) throws CommandFailed {
        if (v == null) {
            return null;
        }
        Object owner;
        Object token;
        Object pttl;
        if (v instanceof List<?> l && !(v instanceof ReplyOutput.MapReply) && l.size() == 3) {
            owner = l.get(0);
            token = l.get(1);
            pttl = l.get(2);
        } else if (v instanceof ReplyOutput.MapReply m) {
            owner = m.get("owner");
            token = m.get("token");
            pttl = m.get("pttl");
        } else {
            throw new CommandFailed(Decide.Failure.of(ErrorKind.PROTOCOL, "LEASE.GET replied " + v));
        }
        if (owner instanceof String o && token instanceof Long t && t > 0 && pttl instanceof Long p && p >= 0) {
            return new LeaseInfo(o, t, Duration.ofMillis(p));
        }
        throw new CommandFailed(Decide.Failure.of(ErrorKind.PROTOCOL, "LEASE.GET replied " + v));
    }
}
