package io.redislease;

import io.lettuce.core.RedisURI;
import java.io.BufferedReader;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The conformance elector process of docs/conformance.md, driven by {@code lease-harness run
 * --elector-cmd}: this client's election loop plus the "work" a leader does (writes to the
 * fencing resource with its token), recorded as a JSON-lines history whose {@code t} is
 * {@link System#nanoTime()} (CLOCK_MONOTONIC on Linux HotSpot, the clock of every process).
 *
 * <p>Mode {@code safe}: check {@code ctx.isLeader()} -> record check -> prepare 15 ms -> write ->
 * sleep 25 ms or stop on the stop signal. Mode {@code ignore-deadline} (the negative control):
 * a detached worker writes without checking and keeps going 3 TTLs after the stop signal.
 * Mode {@code reuse-owner} (the negative control of R17): the safe loop, with one owner for
 * every reign instead of {@code base#reign}.
 *
 * <p>{@code --api oneshot}: each reign through the one-shot API,
 * {@link LeaderElector.Builder#callAsLeader(LeaderCallable)}, called again after each reign (one
 * reign per call), instead of a started elector's loop; every grant records its call's number
 * ({@code call}; the checker's {@code reigns_per_call} allows one reign per call). {@code --api
 * oneshot-twice} is that rule's negative control: the elector's loop (which campaigns again after
 * a lost term) with every reign recorded as call 1.
 *
 * <p>{@code --redis redis+sentinel://h:p,h:p/name} ({@code --topology sentinel}): the client's
 * Sentinel connection, from {@link ConformanceSentinelUrl}; any other URL through
 * {@link RedisURI#create(String)}.
 */
public final class ConformanceElector {
    private static final long PREP_MS = 15;
    private static final long PERIOD_MS = 25;
    private static final int LINGER_TTLS = 3;

    private final String id;
    private final String resource;
    private final long ttlMs;
    private final boolean unsafeLinger;
    private final OutputStream out;
    /** The one-shot call in progress ({@code --api oneshot}), 0 = none (recorded on grants). */
    private volatile long call;

    private ConformanceElector(String id, String resource, long ttlMs, boolean unsafeLinger, OutputStream out) {
        this.id = id;
        this.resource = resource;
        this.ttlMs = ttlMs;
        this.unsafeLinger = unsafeLinger;
        this.out = out;
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        // --redis is given once per node in quorum topologies (docs/conformance.md, "Quorum
        // topologies"), in node order; every other option at most once.
        java.util.List<String> redisUrls = new java.util.ArrayList<>();
        for (int i = 0; i < argv.length; i++) {
            String k = argv[i];
            if (!k.startsWith("--") || i + 1 >= argv.length) {
                System.err.println("usage: --id ID --redis URL [--redis URL ...] --resource HOST:PORT --out PATH --ttl-ms N [--key K] [--mode safe|ignore-deadline|reuse-owner] [--api run|oneshot|oneshot-twice]");
                System.exit(2);
            }
            if (k.equals("--redis")) {
                redisUrls.add(argv[i + 1]);
            }
            if (a.put(k, argv[++i]) != null && !k.equals("--redis")) {
                System.err.println("option given twice: " + k);
                System.exit(2);
            }
        }
        for (String k : a.keySet()) {
            if (!java.util.Set.of("--id", "--redis", "--resource", "--out", "--ttl-ms", "--key", "--mode", "--api").contains(k)) {
                System.err.println("unknown option " + k);
                System.exit(2);
            }
        }
        String id = required(a, "--id");
        String redis = required(a, "--redis");
        String resource = required(a, "--resource");
        String outPath = required(a, "--out");
        long ttlMs = Long.parseLong(a.getOrDefault("--ttl-ms", "1000"));
        String key = a.getOrDefault("--key", "chaos:leader");
        String mode = a.getOrDefault("--mode", "safe");
        boolean unsafe;
        boolean reuseOwner = false;
        if (mode.equals("safe")) {
            unsafe = false;
        } else if (mode.equals("ignore-deadline")) {
            unsafe = true;
        } else if (mode.equals("reuse-owner")) {
            // The negative control of R17: the safe work loop, but one owner for every reign
            // (the library's package-private hook), so a late RELEASE can end a later reign.
            unsafe = false;
            reuseOwner = true;
        } else {
            System.err.println("unknown --mode " + mode);
            System.exit(2);
            return;
        }
        String api = a.getOrDefault("--api", "run");
        if (!java.util.Set.of("run", "oneshot", "oneshot-twice").contains(api)) {
            System.err.println("unknown --api " + api);
            System.exit(2);
            return;
        }
        // A redis+sentinel:// URL (--topology sentinel) becomes a Lettuce Sentinel URI; any
        // other as before. Parsed before the history opens: a malformed one is a usage error.
        RedisURI single = null;
        if (redisUrls.size() == 1) {
            try {
                single = ConformanceSentinelUrl.parse(redis);
            } catch (IllegalArgumentException e) {
                System.err.println("conformance elector: " + e.getMessage());
                System.exit(2);
                return;
            }
        }
        long pid = ProcessHandle.current().pid();
        // The owner starts with our id: the orchestrator maps LEASE.GET's owner to our slot.
        String owner = id + "-" + pid + "-" + String.format("%08x", ThreadLocalRandom.current().nextInt());
        ConformanceElector w = new ConformanceElector(id, resource, ttlMs, unsafe, new FileOutputStream(outPath, true));
        w.record("{\"ev\":\"start\",\"t\":" + System.nanoTime() + ",\"elector\":" + str(id) + ",\"pid\":" + pid
                + ",\"owner\":" + str(owner) + ",\"mode\":" + str(mode) + "}");

        LeaderElector.Builder builder = LeaderElector.builder();
        if (redisUrls.size() > 1) {
            // Quorum mode over the N proxies; the node quarantine (Q7) is one TTL, as the
            // built-in elector's: every elector uses that TTL, so that is the longest lease a
            // restarted or wiped node can have lost.
            builder.quorum(redisUrls.stream().map(RedisURI::create).toList()).nodeQuarantine(Duration.ofMillis(ttlMs));
            // Quorum campaigns: the id of the real node list (our URIs name our own proxies;
            // docs/conformance.md).
            String mid = System.getenv("LEASE_HARNESS_MEMBERSHIP_ID");
            if (mid != null && !mid.isEmpty()) {
                builder.membershipId(mid);
            }
        } else {
            builder.redis(single != null ? single : RedisURI.create(redis));
        }
        builder.key(key)
                .ttl(Duration.ofMillis(ttlMs))
                .owner(owner)
                // Reconnect backoff capped at one TTL (library default 5 s): the harness measures
                // "Redis back -> next grant", which the cap bounds.
                .backoff(Duration.ofMillis(50), Duration.ofMillis(Math.max(50, ttlMs)))
                .candidate(w::reign);
        if (reuseOwner) {
            builder.reuseOwnerAcrossReigns();
        }
        if (api.equals("oneshot")) {
            oneShots(w, builder);
            return;
        }
        if (api.equals("oneshot-twice")) {
            w.call = 1;
        }
        LeaderElector elector = builder.build();

        CompletableFuture<Void> exited = new CompletableFuture<>();
        java.util.concurrent.atomic.AtomicBoolean resigning = new java.util.concurrent.atomic.AtomicBoolean();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            // SIGTERM: record resign, resign through the library (stop the task, then RELEASE),
            // record exit, exit 0 (halt: a JVM ended by a signal would otherwise exit 143).
            if (exited.isDone()) {
                return;
            }
            resigning.set(true);
            w.record("{\"ev\":\"resign\",\"t\":" + System.nanoTime() + "}");
            elector.close();
            w.record("{\"ev\":\"exit\",\"t\":" + System.nanoTime() + ",\"why\":\"resigned\"}");
            Runtime.getRuntime().halt(0);
        }, "sigterm"));
        elector.start();
        // The loop runs until resign; it never ends by itself (Redis errors are retried).
        elector.terminated().join();
        if (resigning.get()) {
            // The SIGTERM hook records the exit and halts the JVM.
            Thread.sleep(Long.MAX_VALUE);
        }
        exited.complete(null);
        w.record("{\"ev\":\"exit\",\"t\":" + System.nanoTime() + ",\"why\":\"elector ended\"}");
    }

    /**
     * {@code --api oneshot}: one callAsLeader call per reign until SIGTERM. The SIGTERM hook
     * interrupts the calling thread, which is how a one-shot call resigns (task stopped, then
     * RELEASE); the hook waits for that, records the exit and halts.
     */
    private static void oneShots(ConformanceElector w, LeaderElector.Builder builder) throws Exception {
        Thread main = Thread.currentThread();
        CompletableFuture<Void> loopDone = new CompletableFuture<>();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            w.record("{\"ev\":\"resign\",\"t\":" + System.nanoTime() + "}");
            main.interrupt();
            try {
                loopDone.get(10, TimeUnit.SECONDS);
            } catch (InterruptedException | ExecutionException | TimeoutException e) {
                System.err.println("elector: one-shot call did not end after the interrupt: " + e);
            }
            w.record("{\"ev\":\"exit\",\"t\":" + System.nanoTime() + ",\"why\":\"resigned\"}");
            Runtime.getRuntime().halt(0);
        }, "sigterm"));
        try {
            for (long c = 1; !Thread.currentThread().isInterrupted(); c++) {
                w.call = c;
                try {
                    builder.callAsLeader(ctx -> {
                        w.reign(ctx);
                        return null;
                    });
                } catch (LeadershipLostException e) {
                    // A lost reign ends the call; the next call campaigns.
                }
            }
        } catch (InterruptedException e) {
            // SIGTERM: the call resigned.
        } catch (Exception e) {
            // Not a lost reign: the call failed (e.g. the elector ended before it was elected).
            w.record("{\"ev\":\"exit\",\"t\":" + System.nanoTime() + ",\"why\":" + str("error: " + e) + "}");
            Runtime.getRuntime().halt(1);
        } finally {
            loopDone.complete(null);
        }
        // The SIGTERM hook records the exit and halts the JVM.
        while (true) {
            try {
                Thread.sleep(Long.MAX_VALUE);
            } catch (InterruptedException e) {
                // waiting for the hook's halt
            }
        }
    }

    private static String required(Map<String, String> a, String k) {
        String v = a.get(k);
        if (v == null) {
            System.err.println("missing " + k);
            System.exit(2);
        }
        return v;
    }

    static String str(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    /** One JSON line, appended and flushed at once (a kill loses at most that line). */
    synchronized void record(String line) {
        try {
            out.write((line + "\n").getBytes(StandardCharsets.UTF_8));
            out.flush();
        } catch (IOException e) {
            System.err.println("elector: cannot record " + line + ": " + e);
        }
    }

    private static long deadlineNs(LeaderContext ctx) {
        return ctx.deadlineNanos().orElse(0L);
    }

    // ---------------------------------------------------------------- the reign

    void reign(LeaderContext ctx) {
        long token = ctx.token();
        long c = call;
        record("{\"ev\":\"grant\",\"t\":" + System.nanoTime() + ",\"token\":" + token + ",\"deadline\":" + ctx.reignDeadlineNanos()
                + (c != 0 ? ",\"call\":" + c : "") + "}");
        if (unsafeLinger) {
            // The bug under test: work detached from the lease's lifetime.
            Thread t = new Thread(() -> unsafeLoop(ctx), "unsafe-worker-" + token);
            t.setDaemon(true);
            t.start();
            try {
                ctx.cancelled().get();
            } catch (InterruptedException | ExecutionException e) {
                // stop signal
            }
            return;
        }
        Resource res = new Resource();
        long seq = 0;
        String why;
        while (true) {
            // The check: decided here, on the monotonic clock, right before acting.
            if (!ctx.isLeader()) {
                why = "not leader at check";
                break;
            }
            seq++;
            record("{\"ev\":\"check\",\"t\":" + System.nanoTime() + ",\"token\":" + token + ",\"seq\":" + seq
                    + ",\"deadline\":" + deadlineNs(ctx) + "}");
            // Prepare: deliberately NOT cut by the stop signal (the window where a pause lands).
            sleepUninterruptibly(PREP_MS);
            write(res, token, seq);
            try {
                ctx.cancelled().get(PERIOD_MS, TimeUnit.MILLISECONDS);
                why = "cancelled";
                break;
            } catch (TimeoutException e) {
                // next step
            } catch (InterruptedException | ExecutionException e) {
                why = "cancelled";
                break;
            }
        }
        res.close();
        // A StringBuilder, not `+`: each `+` expression is an invokedynamic call site linked the
        // first time it runs, after its operands (the clock read included) were evaluated. The
        // stop line runs once per reign, i.e. once per process here, so that linking (ms on a
        // cold C1-only JVM) fell between the recorded stop and the task's return, i.e. the RELEASE,
        // and counted in the measured hand-over.
        long stopAt = System.nanoTime();
        record(new StringBuilder("{\"ev\":\"stop\",\"t\":").append(stopAt).append(",\"token\":").append(token)
                .append(",\"why\":").append(str(why)).append('}').toString());
    }

    private void unsafeLoop(LeaderContext ctx) {
        long token = ctx.token();
        Resource res = new Resource();
        long seq = 0;
        long stopAfter = 0;
        boolean stopping = false;
        // Bounded: stops LINGER_TTLS after the cancellation it ignores, and after 10 min anyway.
        long hardStop = System.nanoTime() + TimeUnit.MINUTES.toNanos(10);
        while (System.nanoTime() - hardStop < 0) {
            if (ctx.isCancelled() && !stopping) {
                stopping = true;
                stopAfter = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ttlMs * LINGER_TTLS);
            }
            if (stopping && System.nanoTime() - stopAfter >= 0) {
                break;
            }
            seq++;
            record("{\"ev\":\"check\",\"t\":" + System.nanoTime() + ",\"token\":" + token + ",\"seq\":" + seq
                    + ",\"deadline\":" + deadlineNs(ctx) + "}");
            sleepUninterruptibly(PREP_MS);
            write(res, token, seq);
            sleepUninterruptibly(PERIOD_MS);
        }
        res.close();
        record("{\"ev\":\"stop\",\"t\":" + System.nanoTime() + ",\"token\":" + token + ",\"why\":\"unsafe linger over\"}");
    }

    private static void sleepUninterruptibly(long ms) {
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
        boolean interrupted = false;
        long left;
        while ((left = until - System.nanoTime()) > 0) {
            try {
                TimeUnit.NANOSECONDS.sleep(left);
            } catch (InterruptedException e) {
                interrupted = true;
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    /** One write; records the resource's answer (not ok for FENCED, ERR or a broken connection). */
    private void write(Resource res, long token, long seq) {
        boolean ok;
        try {
            ok = res.write(token, id, seq);
        } catch (IOException e) {
            res.close();
            ok = false;
        }
        record("{\"ev\":\"ack\",\"t\":" + System.nanoTime() + ",\"token\":" + token + ",\"seq\":" + seq + ",\"ok\":" + ok + "}");
    }

    /** The fencing resource's line protocol: W token writer seq -> OK | FENCED n | ERR why. */
    private final class Resource {
        private Socket socket;
        private BufferedReader in;

        boolean write(long token, String writer, long seq) throws IOException {
            if (socket == null) {
                int colon = resource.lastIndexOf(':');
                Socket s = new Socket();
                s.connect(new InetSocketAddress(resource.substring(0, colon), Integer.parseInt(resource.substring(colon + 1))), 2000);
                s.setSoTimeout(5000);
                s.setTcpNoDelay(true);
                socket = s;
                in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
            }
            socket.getOutputStream().write(("W " + token + " " + writer + " " + seq + "\n").getBytes(StandardCharsets.UTF_8));
            String line = in.readLine();
            if (line == null) {
                throw new IOException("resource closed the connection");
            }
            return line.equals("OK");
        }

        void close() {
            if (socket != null) {
                try {
                    socket.close();
                } catch (IOException e) {
                    // gone
                }
                socket = null;
                in = null;
            }
        }
    }
}
