package io.redislease;

import io.lettuce.core.RedisURI;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;

/**
 * Child JVM of {@link PauseTest}: one elector whose task "writes" (appends a line to a file)
 * after checking {@code ctx.isLeader()}, recording the check instant. Lines:
 * {@code GRANT token deadline t}, {@code WRITE token seq t_check deadline},
 * {@code STOP token why t}, {@code REVOKED reason t},
 * {@code SAMPLE token t capturedDone isCancelled isLeader} (what the stop objects report, read by
 * a sampler thread every millisecond, written on a change or after a gap of over 100 ms, i.e.
 * right after a pause); times are System.nanoTime().
 */
public final class PausedLeaderChild {
    private static OutputStream out;

    static synchronized void line(String s) {
        try {
            out.write((s + "\n").getBytes(StandardCharsets.UTF_8));
            out.flush();
        } catch (IOException e) {
            System.err.println("cannot record " + s + ": " + e);
        }
    }

    /** Until the reign is seen over: the first reader after a pause reads the clock itself. */
    private static void sample(LeaderContext ctx, CompletableFuture<Void> captured) {
        String last = "";
        long lastAt = System.nanoTime();
        while (true) {
            long t = System.nanoTime();
            // The captured future first: it is the object a task hands down to its own I/O.
            boolean done = captured.isDone();
            boolean cancelled = ctx.isCancelled();
            boolean leader = ctx.isLeader();
            String state = done + " " + cancelled + " " + leader;
            if (!state.equals(last) || t - lastAt > 100_000_000L) {
                line("SAMPLE " + ctx.token() + " " + t + " " + state);
                last = state;
            }
            lastAt = t;
            if (done && cancelled && !leader) {
                return;
            }
            try {
                Thread.sleep(1);
            } catch (InterruptedException e) {
                // not this thread's signal: keep sampling until the objects say stop
            }
        }
    }

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        String key = args[1];
        long ttlMs = Long.parseLong(args[2]);
        out = new FileOutputStream(args[3], true);
        Candidate c = new Candidate() {
            @Override
            public void onGranted(LeaderContext ctx) {
                long token = ctx.token();
                line("GRANT " + token + " " + ctx.deadlineNanos().orElse(0) + " " + System.nanoTime());
                CompletableFuture<Void> captured = ctx.cancelled();
                Thread sampler = new Thread(() -> sample(ctx, captured), "sampler-" + token);
                sampler.setDaemon(true);
                sampler.start();
                long seq = 0;
                String why;
                while (true) {
                    long deadline = ctx.deadlineNanos().orElse(0);
                    if (!ctx.isLeader()) {
                        why = "not_leader";
                        break;
                    }
                    long checkedAt = System.nanoTime();
                    line("WRITE " + token + " " + (++seq) + " " + checkedAt + " " + deadline);
                    try {
                        Thread.sleep(10);
                    } catch (InterruptedException e) {
                        why = "interrupted";
                        break;
                    }
                }
                line("STOP " + token + " " + why + " " + System.nanoTime());
            }

            @Override
            public void onRevoked(StepDownReason reason) {
                line("REVOKED " + reason.label() + " " + System.nanoTime());
            }
        };
        LeaderElector e = LeaderElector.builder().redis(RedisURI.create("redis://127.0.0.1:" + port)).key(key)
                .ttl(Duration.ofMillis(ttlMs)).candidate(c).build();
        line("START " + e.owner() + " " + System.nanoTime());
        e.start();
        e.terminated().join();
    }
}
