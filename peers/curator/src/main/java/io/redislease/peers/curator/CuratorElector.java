package io.redislease.peers.curator;

import io.redislease.peers.ElectorArgs;
import io.redislease.peers.History;
import io.redislease.peers.StopSignal;
import io.redislease.peers.WorkLoop;
import java.net.URI;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.retry.ExponentialBackoffRetry;

/**
 * Conformance elector (docs/conformance.md) for Apache Curator 5.9.0 {@code LeaderLatch} on
 * ZooKeeper, written the way Curator's recipe page shows it: a started {@code CuratorFramework},
 * {@code new LeaderLatch(client, path, id)}, {@code start()}, {@code await()} to become leader,
 * {@code hasLeadership()} while leading, {@code close()} to give it up. Session timeout = the
 * campaign's TTL. Leader = the latch says so; the work loop's check is {@code hasLeadership()},
 * and the latch's {@code notLeader()} callback is the stop signal.
 *
 * <p>Token: the sequence number ZooKeeper gave our latch node ({@code .../latch-0000000042}),
 * times 10^6, plus this process's reign count (see {@link #tokenOf}); the resource fences with it.
 */
public final class CuratorElector {
    private static final String USAGE = "[--zk HOST:PORT[,HOST:PORT...]] --id ID --redis URL --resource HOST:PORT --out PATH --ttl-ms N [--key K] [--mode safe|ignore-deadline]";
    /** Reigns per node the token can tell apart (a regained leadership on the same node). */
    static final long REIGNS_PER_NODE = 1_000_000L;

    private final ElectorArgs args;
    private final History history;
    private final WorkLoop work;
    private volatile boolean resigning;
    private volatile StopSignal current;
    private long reigns;

    private CuratorElector(ElectorArgs args, History history) {
        this.args = args;
        this.history = history;
        this.work = new WorkLoop(history, args);
    }

    public static void main(String[] argv) throws Exception {
        ElectorArgs a = ElectorArgs.parse(argv, Map.of("--zk", ""), USAGE);
        String connect = connectString(a);
        History h = new History(a.out);
        CuratorElector e = new CuratorElector(a, h);
        long pid = ProcessHandle.current().pid();
        String owner = a.id + "-" + pid + "-" + String.format("%08x", ThreadLocalRandom.current().nextInt());
        h.start(a.id, pid, owner, a.mode);

        int ttl = (int) Math.min(Integer.MAX_VALUE, a.ttlMs);
        // Curator's defaults scaled to the TTL: session 60 s -> TTL (the lease: the server
        // deletes our ephemeral node that long after it last heard from us), connection
        // 15 s -> TTL/4. The retry policy is the one Curator's docs show,
        // ExponentialBackoffRetry(1000, 3), its sleeps capped at one TTL (docs/conformance.md).
        CuratorFramework client = CuratorFrameworkFactory.newClient(connect, ttl, Math.max(1, ttl / 4),
                new ExponentialBackoffRetry(1000, 3, ttl));
        client.start();
        // The latch path from --key (ZooKeeper paths may not hold ':'); the latch id is our owner.
        LeaderLatch latch = new LeaderLatch(client, "/" + a.key.replace(':', '_'), owner);
        latch.addListener(new LeaderLatchListener() {
            @Override
            public void isLeader() {
                // await() below returns; the reign starts there.
            }

            @Override
            public void notLeader() {
                StopSignal s = e.current;
                if (s != null) {
                    s.fire("notLeader");
                }
            }
        });
        latch.start();

        Thread campaign = new Thread(() -> e.campaign(latch), "campaign");
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            // SIGTERM: record resign, stop the task, close the latch (deletes our node: the
            // next in line is told at once), record exit, exit 0.
            e.resigning = true;
            h.resign();
            StopSignal s = e.current;
            if (s != null) {
                s.fire("resign");
            } else {
                campaign.interrupt();
            }
            try {
                campaign.join(5000);
                latch.close();
            } catch (Exception ex) {
                System.err.println("elector: close: " + ex);
            }
            client.close();
            h.exit("resigned");
            Runtime.getRuntime().halt(0);
        }, "sigterm"));
        campaign.start();
        campaign.join();
    }

    /**
     * {@code --zk}, or else the host:port of every {@code --redis} URL: a harness backend that
     * hands each elector its proxies to the nodes as {@code --redis} needs no other option.
     */
    static String connectString(ElectorArgs a) {
        String zk = a.opt("--zk");
        if (!zk.isEmpty()) {
            return zk;
        }
        List<String> hosts = new ArrayList<>();
        for (String u : a.redis) {
            URI uri = URI.create(u);
            if (uri.getHost() == null || uri.getPort() < 0) {
                ElectorArgs.fail("cannot read HOST:PORT from --redis " + u);
            }
            hosts.add(uri.getHost() + ":" + uri.getPort());
        }
        if (hosts.isEmpty()) {
            ElectorArgs.fail("give --zk HOST:PORT (or --redis URLs of the ZooKeeper nodes)");
        }
        return String.join(",", hosts);
    }

    /**
     * The fencing token of a reign on latch node {@code path}: the node's sequence number (the
     * parent's counter: every later node has a higher one, and the leader is always the lowest
     * node left, so the leader's sequence only rises), times 10^6, plus this process's reign
     * count. The count orders a second reign on the same node (leadership lost on SUSPENDED,
     * regained on RECONNECTED while the session and node lived, nobody led in between) after
     * the first; it is per process, so it never lifts a token above a later node's.
     */
    static long tokenOf(String path, long reign) {
        int dash = path.lastIndexOf('-');
        long seq = Long.parseLong(path.substring(dash + 1));
        return seq * REIGNS_PER_NODE + (reign % REIGNS_PER_NODE);
    }

    private void campaign(LeaderLatch latch) {
        WorkLoop.Leadership leadership = new WorkLoop.Leadership() {
            @Override
            public boolean isLeader() {
                return latch.hasLeadership();
            }

            @Override
            public long deadlineNs() {
                return 0; // LeaderLatch keeps no local deadline
            }
        };
        while (!resigning) {
            try {
                latch.await();
            } catch (InterruptedException ex) {
                break;
            } catch (java.io.EOFException ex) {
                // The latch was closed.
                break;
            }
            // The node we lead with (set by the latch right before it reported leadership).
            String path = latch.getLastPathIsLeader();
            if (path == null) {
                continue;
            }
            StopSignal stop = new StopSignal();
            current = stop;
            if (resigning) {
                stop.fire("resign");
            }
            reigns++;
            work.reign(tokenOf(path, reigns), leadership, stop);
            current = null;
            // Loop: await() returns at once if the latch made us leader again meanwhile.
        }
    }
}
