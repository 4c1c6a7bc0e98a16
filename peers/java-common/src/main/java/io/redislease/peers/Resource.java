package io.redislease.peers;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;

/**
 * The fencing resource's line protocol (docs/conformance.md): {@code W token writer seq} ->
 * {@code OK | FENCED n | ERR why}, one request at a time on one connection, reconnecting on the
 * next write after an error.
 */
public final class Resource implements AutoCloseable {
    private final String host;
    private final int port;
    private Socket socket;
    private BufferedReader in;

    public Resource(String hostPort) {
        int colon = hostPort.lastIndexOf(':');
        if (colon <= 0) {
            ElectorArgs.fail("--resource must be HOST:PORT, got " + hostPort);
        }
        this.host = hostPort.substring(0, colon);
        int p = 0;
        try {
            p = Integer.parseInt(hostPort.substring(colon + 1));
        } catch (NumberFormatException e) {
            ElectorArgs.fail("--resource must be HOST:PORT, got " + hostPort);
        }
        this.port = p;
    }

    /** True for OK; false for FENCED, ERR, or a connection that failed (closed for the next try). */
    public boolean write(long token, String writer, long seq) {
        try {
            if (socket == null) {
                Socket s = new Socket();
                s.connect(new InetSocketAddress(host, port), 2000);
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
        } catch (IOException e) {
            close();
            return false;
        }
    }

    @Override
    public void close() {
        if (socket != null) {
            try {
                socket.close();
            } catch (IOException e) {
                // already gone
            }
            socket = null;
            in = null;
        }
    }
}
