package io.redislease.peers.redisson;

import io.redislease.peers.ElectorArgs;
import io.redislease.peers.History;
import io.redislease.peers.StopSignal;
import io.redislease.peers.SyntheticToken;
import io.redislease.peers.WorkLoop;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import org.redisson.Redisson;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * Conformance elector (docs/conformance.md) for Redisson 3.45.1, written the way Redisson's
 * documentation shows a lock: {@code lock()} / work / {@code unlock()} with the watchdog
 * renewing the lock (no leaseTime given), {@code lockWatchdogTimeout} = the campaign's TTL.
 * Leader = holds the lock; the work loop's check is {@code isHeldByCurrentThread()}.
 *
 * <p>{@code --lock rlock}: {@code RLock}; it has no token, so each reign records a synthetic
 * rising one (run the campaign with {@code --no-fence}). {@code --lock fenced}:
 * {@code RFencedLock.lockAndGetToken()}; its token goes to the resource, which fences with it.
 */
public final class RedissonElector {
    private static final String USAGE = "[--lock rlock|fenced] --id ID --redis URL --resource HOST:PORT --out PATH --ttl-ms N [--key K] [--mode safe|ignore-deadline]";

    private final ElectorArgs args;
    private final History history;
    private final WorkLoop work;
    private final boolean fenced;
    private volatile boolean resigning;
    /** The reign in progress (null between reigns); SIGTERM fires it. */
    private volatile StopSignal current;
    /** Set while the campaign thread waits in lock(): SIGTERM interrupts only that wait. */
    private volatile boolean waiting;

    private RedissonElector(ElectorArgs args, History history, boolean fenced) {
        this.args = args;
        this.history = history;
        this.work = new WorkLoop(history, args);
        this.fenced = fenced;
    }

    public static void main(String[] argv) throws Exception {
        ElectorArgs a = ElectorArgs.parse(argv, Map.of("--lock", "rlock"), USAGE);
        String kind = a.opt("--lock");
        if (!kind.equals("rlock") && !kind.equals("fenced")) {
            ElectorArgs.fail("--lock must be rlock or fenced, got " + kind);
        }
        // Redisson wants redis://host:port without the harness's trailing slash.
        String url = a.singleRedis().replaceAll("/+$", "");
        History h = new History(a.out);
        RedissonElector e = new RedissonElector(a, h, kind.equals("fenced"));

        Config config = new Config();
        // The one lease setting Redisson documents for a lock without leaseTime: the watchdog
        // sets the key's expiry to this and renews it every third of it. Scaled from the
        // default 30 s to the campaign's TTL. Everything else stays Redisson's default.
        config.setLockWatchdogTimeout(a.ttlMs);
        config.useSingleServer().setAddress(url);
        RedissonClient client = e.connect(config);
        long pid = ProcessHandle.current().pid();
        // Redisson names the holder "<client id>:<thread id>" on the wire and offers no way to
        // change it; the owner recorded here starts with our id as the protocol asks.
        String owner = a.id + "-" + pid + "-" + client.getId() + "-" + String.format("%08x", ThreadLocalRandom.current().nextInt());
        h.start(a.id, pid, owner, a.mode);

        Thread campaign = new Thread(() -> e.campaign(client), "campaign");
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            // SIGTERM: record resign, stop the task, unlock (on the campaign thread: an RLock
            // belongs to the thread that locked it), record exit, exit 0.
            e.resigning = true;
            h.resign();
            StopSignal s = e.current;
            if (s != null) {
                s.fire("resign");
            }
            if (e.waiting) {
                campaign.interrupt();
            }
            try {
                campaign.join(5000);
            } catch (InterruptedException ie) {
                Thread.currentThread().interrupt();
            }
            client.shutdown();
            h.exit("resigned");
            Runtime.getRuntime().halt(0);
        }, "sigterm"));
        campaign.start();
        campaign.join();
    }

    /** Redisson.create fails while Redis is down (a restart fault): retry, as a supervisor would. */
    private RedissonClient connect(Config config) {
        while (true) {
            try {
                return Redisson.create(config);
            } catch (RuntimeException ex) {
                System.err.println("elector: Redisson.create: " + ex);
                WorkLoop.sleepUninterruptibly(Math.min(args.ttlMs, 1000));
            }
        }
    }

    private void campaign(RedissonClient client) {
        RLock lock = fenced ? client.getFencedLock(args.key) : client.getLock(args.key);
        WorkLoop.Leadership leadership = new WorkLoop.Leadership() {
            @Override
            public boolean isLeader() {
                try {
                    return lock.isHeldByCurrentThread();
                } catch (RuntimeException ex) {
                    // Redis unreachable (after Redisson's own timeout and retries): the library
                    // cannot say we hold the lock, so we do not act.
                    System.err.println("elector: isHeldByCurrentThread: " + ex);
                    return false;
                }
            }

            @Override
            public long deadlineNs() {
                return 0; // Redisson keeps no local deadline for a watchdog lock
            }
        };
        while (!resigning) {
            long token;
            waiting = true;
            try {
                if (fenced) {
                    Long t = ((RFencedLock) lock).lockAndGetToken();
                    if (t == null) {
                        continue;
                    }
                    token = t;
                } else {
                    lock.lockInterruptibly();
                    token = SyntheticToken.at(System.nanoTime(), args.slot());
                }
            } catch (InterruptedException ex) {
                break;
            } catch (RuntimeException ex) {
                // Redis unreachable or the wait interrupted: as a user's retry loop would.
                System.err.println("elector: lock: " + ex);
                if (resigning) {
                    break;
                }
                WorkLoop.sleepUninterruptibly(100);
                continue;
            } finally {
                waiting = false;
            }
            StopSignal stop = new StopSignal();
            current = stop;
            if (resigning) {
                stop.fire("resign");
            }
            work.reign(token, leadership, stop);
            current = null;
            try {
                lock.unlock();
            } catch (RuntimeException ex) {
                // IllegalMonitorStateException once the lock expired or passed on; Redis errors.
                System.err.println("elector: unlock: " + ex);
            }
        }
    }
}
