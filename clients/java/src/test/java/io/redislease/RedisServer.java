package io.redislease;

import static org.junit.jupiter.api.Assertions.fail;

import io.lettuce.core.RedisURI;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;

/**
 * A real redis-server process with the lease module loaded, on a free loopback port, with
 * lease.grace-ms 0 (otherwise the server refuses new grants for 30 s after it starts). No
 * mocks: every integration test talks to one of these.
 */
final class RedisServer implements AutoCloseable {
    final int port;
    private final Process process;
    private final Path dir;

    private RedisServer(int port, Process process, Path dir) {
        this.port = port;
        this.process = process;
        this.dir = dir;
    }

    static Path repoRoot() {
        String base = System.getProperty("basedir", System.getProperty("user.dir"));
        return Path.of(base).resolve("../..").normalize().toAbsolutePath();
    }

    /** LEASE_MODULE, else target/debug, else target/release; null if none. */
    static Path module() {
        String env = System.getenv("LEASE_MODULE");
        if (env != null && !env.isEmpty()) {
            return Files.isRegularFile(Path.of(env)) ? Path.of(env) : null;
        }
        for (String p : new String[] {"target/debug/libredis_lease.so", "target/release/libredis_lease.so"}) {
            Path m = repoRoot().resolve(p);
            if (Files.isRegularFile(m)) {
                return m;
            }
        }
        return null;
    }

    static String serverBinary() {
        String env = System.getenv("REDIS_SERVER");
        if (env != null && !env.isEmpty()) {
            return env;
        }
        for (String d : System.getenv().getOrDefault("PATH", "/usr/bin").split(":")) {
            if (Files.isExecutable(Path.of(d, "redis-server"))) {
                return Path.of(d, "redis-server").toString();
            }
        }
        return null;
    }

    /** Skip when the module or the server is missing, except under CI=true, where that fails. */
    static void requireAvailable() {
        if (module() != null && serverBinary() != null) {
            return;
        }
        String why = "redis-server or the module .so is missing (build it: cargo build -p redis-lease; or set LEASE_MODULE)";
        if ("true".equals(System.getenv("CI"))) {
            fail(why);
        }
        Assumptions.assumeTrue(false, why);
    }

    static RedisServer start() throws Exception {
        return start(freePort());
    }

    static RedisServer start(int port) throws Exception {
        return start(port, 0);
    }

    /** With the module's grace period after start set to {@code graceMs} (0 = none). */
    static RedisServer start(int port, long graceMs, String... extra) throws Exception {
        requireAvailable();
        Path dir = Files.createTempDirectory("lease-java-redis-");
        List<String> cmd = new ArrayList<>(List.of(serverBinary(), "--port", String.valueOf(port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", dir.toString(), "--loadmodule", module().toString(),
                "lease.grace-ms", Long.toString(graceMs)));
        cmd.addAll(List.of(extra));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true)
                .redirectOutput(dir.resolve("redis.log").toFile()).start();
        RedisServer s = new RedisServer(port, p, dir);
        long until = System.nanoTime() + 10_000_000_000L;
        while (System.nanoTime() < until) {
            if (!p.isAlive()) {
                fail("redis-server exited: " + Files.readString(dir.resolve("redis.log")));
            }
            if (s.ping()) {
                return s;
            }
            Thread.sleep(20);
        }
        s.close();
        fail("redis-server did not answer PING on port " + port);
        return s;
    }

    static int freePort() throws IOException {
        try (ServerSocket ss = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            return ss.getLocalPort();
        }
    }

    RedisURI uri() {
        return RedisURI.create("redis://127.0.0.1:" + port);
    }

    /**
     * One raw RESP command: a simple/integer/error reply's line, a bulk string's content (read as
     * characters: ASCII replies only), an array's elements joined by spaces (LEASE.GET).
     */
    String command(String... args) throws IOException {
        return command(port, args);
    }

    /** Connections the server accepted so far (this query's own included). */
    long connectionsReceived() throws IOException {
        for (String line : command("INFO", "stats").split("\r?\n")) {
            if (line.startsWith("total_connections_received:")) {
                return Long.parseLong(line.substring(line.indexOf(':') + 1).trim());
            }
        }
        throw new AssertionError("INFO stats has no total_connections_received");
    }

    /** {@link #command(String...)} against any loopback port (a Sentinel...). */
    static String command(int port, String... args) throws IOException {
        try (Socket s = new Socket("127.0.0.1", port)) {
            s.setSoTimeout(2000);
            StringBuilder b = new StringBuilder("*" + args.length + "\r\n");
            for (String a : args) {
                b.append('$').append(a.getBytes(StandardCharsets.UTF_8).length).append("\r\n").append(a).append("\r\n");
            }
            OutputStream out = s.getOutputStream();
            out.write(b.toString().getBytes(StandardCharsets.UTF_8));
            out.flush();
            BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
            String first = in.readLine();
            if (first != null && first.startsWith("*") && !first.equals("*-1")) {
                // LEASE.GET: [owner, token, pttl]
                StringBuilder all = new StringBuilder();
                int n = Integer.parseInt(first.substring(1));
                for (int i = 0; i < n; i++) {
                    String line = in.readLine();
                    if (line.startsWith("$")) {
                        line = in.readLine();
                    } else if (line.startsWith(":")) {
                        line = line.substring(1);
                    }
                    all.append(i == 0 ? "" : " ").append(line);
                }
                return all.toString();
            }
            if (first != null && first.startsWith("$") && !first.equals("$-1")) {
                // A bulk string (CLUSTER INFO...): its content, up to its length.
                int n = Integer.parseInt(first.substring(1));
                char[] buf = new char[n];
                int got = 0;
                while (got < n) {
                    int r = in.read(buf, got, n - got);
                    if (r < 0) {
                        break;
                    }
                    got += r;
                }
                return new String(buf, 0, got);
            }
            return first;
        }
    }

    boolean ping() {
        try {
            return "+PONG".equals(command("PING"));
        } catch (IOException e) {
            return false;
        }
    }

    Path dir() {
        return dir;
    }

    /** Sends a signal by name ("STOP" freezes the server, "CONT" resumes it). */
    void signal(String sig) throws IOException, InterruptedException {
        Process k = new ProcessBuilder("kill", "-" + sig, Long.toString(process.pid())).inheritIO().start();
        if (k.waitFor() != 0) {
            throw new IOException("kill -" + sig + " " + process.pid() + " failed");
        }
    }

    /** SIGKILL: the server vanishes without a word. */
    void kill() throws InterruptedException {
        process.destroyForcibly();
        process.waitFor();
    }

    @Override
    public void close() throws IOException {
        if (process.isAlive()) {
            process.destroyForcibly();
            try {
                process.waitFor();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        try (Stream<Path> s = Files.walk(dir)) {
            s.sorted(Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
        }
    }
}
