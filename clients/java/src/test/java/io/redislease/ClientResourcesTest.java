package io.redislease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lettuce.core.RedisClient;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.event.connection.ConnectedEvent;
import io.lettuce.core.resource.ClientResources;
import io.lettuce.core.resource.DefaultClientResources;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import reactor.core.Disposable;

/**
 * {@code Builder.clientResources(...)}: the elector's connections are made on the application's
 * Lettuce {@link ClientResources} (their connect events appear on its event bus), and closing
 * the elector leaves those resources running for the application (Lettuce's rule: whoever
 * created shared resources shuts them down).
 */
class ClientResourcesTest {
    private static final Duration TTL = Duration.ofMillis(2000);

    @Test
    @Timeout(60)
    void connectsOnTheApplicationsResourcesAndLeavesThemRunning() throws Exception {
        ClientResources app = DefaultClientResources.create();
        List<InetSocketAddress> connected = new CopyOnWriteArrayList<>();
        Disposable sub = app.eventBus().get().subscribe(ev -> {
            if (ev instanceof ConnectedEvent c && c.remoteAddress() instanceof InetSocketAddress a) {
                connected.add(a);
            }
        });
        try (RedisServer r = RedisServer.start()) {
            ElectorTest.Recorder a = new ElectorTest.Recorder();
            try (LeaderElector e = LeaderElector.builder().redis(r.uri()).clientResources(app).key("resources")
                    .ttl(TTL).candidate(a).build().start()) {
                LeaderContext ctx = a.granted.get(15, TimeUnit.SECONDS);
                assertTrue(e.isLeader());
                assertTrue(r.command("LEASE.GET", "resources").startsWith(ctx.owner() + " " + ctx.token()));
                assertTrue(connected.stream().anyMatch(x -> x.getPort() == r.port),
                        "no connect to the server on the application's event bus: " + connected);
            }
            // The elector is closed; the application's resources still serve a new client.
            RedisClient client = RedisClient.create(app, r.uri());
            try (StatefulRedisConnection<String, String> conn = client.connect()) {
                assertEquals("PONG", conn.sync().ping());
            } finally {
                client.shutdown();
            }
        } finally {
            sub.dispose();
            app.shutdown(0, 2, TimeUnit.SECONDS).get(5, TimeUnit.SECONDS);
        }
    }
}
