package io.redislease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisURI;
import io.lettuce.core.SslOptions;
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A {@code rediss://} server with a private CA that requires client certificates (mutual TLS):
 * the elector leads with the CA and the client certificate passed as Lettuce
 * {@code SslOptions} (directly, or inside the application's {@code ClientOptions}), with no
 * JVM-wide trust-store setting; without them it cannot connect (the control that shows the
 * options are what made it work). Certificates are generated with the openssl CLI.
 */
class TlsTest {
    private static final Duration TTL = Duration.ofMillis(2000);
    private static Path pki;
    private static RedisServer server;
    private static int tlsPort;

    private static void openssl(String... args) throws Exception {
        List<String> cmd = new ArrayList<>(List.of("openssl"));
        cmd.addAll(List.of(args));
        Process p = new ProcessBuilder(cmd).directory(pki.toFile()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        assertEquals(0, p.waitFor(), "openssl " + cmd + ": " + out);
    }

    private static void leaf(String name, String usage) throws Exception {
        Files.writeString(pki.resolve(name + ".ext"), "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                + "extendedKeyUsage=" + usage + "\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n");
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", name + ".key",
                "-out", name + ".csr", "-subj", "/CN=" + name);
        openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out",
                name + ".crt", "-days", "2", "-extfile", name + ".ext");
    }

    @BeforeAll
    static void startTlsServer() throws Exception {
        RedisServer.requireAvailable();
        boolean haveOpenssl;
        try {
            haveOpenssl = new ProcessBuilder("openssl", "version").start().waitFor() == 0;
        } catch (java.io.IOException e) {
            haveOpenssl = false;
        }
        if (!haveOpenssl) {
            if ("true".equals(System.getenv("CI"))) {
                fail("openssl CLI missing in CI");
            }
            Assumptions.assumeTrue(false, "openssl CLI missing");
        }
        pki = Files.createTempDirectory("lease-java-tls-");
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "ca.key",
                "-out", "ca.crt", "-days", "2", "-subj", "/CN=lease-test-ca", "-addext",
                "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign");
        leaf("server", "serverAuth");
        leaf("client", "clientAuth");
        tlsPort = RedisServer.freePort();
        // The plain port stays open on loopback for the test's own checks (LEASE.GET).
        server = RedisServer.start(RedisServer.freePort(), 0, "--tls-port", Integer.toString(tlsPort), "--tls-cert-file",
                pki.resolve("server.crt").toString(), "--tls-key-file", pki.resolve("server.key").toString(),
                "--tls-ca-cert-file", pki.resolve("ca.crt").toString(), "--tls-auth-clients", "yes");
    }

    @AfterAll
    static void stop() throws Exception {
        if (server != null) {
            server.close();
        }
        if (pki != null) {
            try (java.util.stream.Stream<Path> files = Files.walk(pki)) {
                files.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
            }
        }
    }

    private static RedisURI tlsUri() {
        return RedisURI.create("rediss://127.0.0.1:" + tlsPort);
    }

    private static SslOptions privateCa() {
        return SslOptions.builder().jdkSslProvider().trustManager(new File(pki.resolve("ca.crt").toString()))
                .keyManager(new File(pki.resolve("client.crt").toString()), new File(pki.resolve("client.key").toString()),
                        null)
                .build();
    }

    private static void leadsWith(String key, LeaderElector.Builder b) throws Exception {
        ElectorTest.Recorder a = new ElectorTest.Recorder();
        try (LeaderElector e = b.key(key).ttl(TTL).candidate(a).build().start()) {
            LeaderContext ctx = a.granted.get(15, TimeUnit.SECONDS);
            assertTrue(e.isLeader());
            assertTrue(server.command("LEASE.GET", key).startsWith(ctx.owner() + " " + ctx.token()));
        }
    }

    @Test
    @Timeout(60)
    void leadsOverMutualTlsWithSslOptions() throws Exception {
        leadsWith("tls-ssl-options", LeaderElector.builder().redis(tlsUri()).sslOptions(privateCa()));
    }

    @Test
    @Timeout(60)
    void leadsOverMutualTlsWithTheApplicationsClientOptions() throws Exception {
        ClientOptions app = ClientOptions.builder().sslOptions(privateCa()).build();
        leadsWith("tls-client-options", LeaderElector.builder().redis(tlsUri()).clientOptions(app));
    }

    @Test
    @Timeout(60)
    void withoutTheCaTheElectorCannotConnect() throws Exception {
        ElectorTest.Recorder a = new ElectorTest.Recorder();
        RecordingMetrics m = new RecordingMetrics();
        try (LeaderElector e = LeaderElector.builder().redis(tlsUri()).key("tls-none").ttl(TTL).candidate(a).metrics(m)
                .build().start()) {
            try {
                a.granted.get(3, TimeUnit.SECONDS);
                fail("led over TLS without the private CA");
            } catch (TimeoutException expected) {
                // the JVM's default trust store does not know the test CA
            }
            assertFalse(e.isLeader());
            assertTrue(m.count("error:acquire:connection") + m.count("error:acquire:timeout") >= 1, m.counts.toString());
        }
    }
}
