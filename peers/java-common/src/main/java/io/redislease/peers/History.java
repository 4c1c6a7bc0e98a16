package io.redislease.peers;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;

/**
 * The JSON-lines history of docs/conformance.md ("History format"): one object per line,
 * appended and flushed line by line, so a process killed mid-line loses only that line.
 * {@code t} is {@link System#nanoTime()}: CLOCK_MONOTONIC on Linux HotSpot, the clock every
 * process of the campaign stamps its lines with.
 */
public final class History {
    private final OutputStream out;

    public History(String path) throws IOException {
        this.out = new FileOutputStream(path, true);
    }

    public static long now() {
        return System.nanoTime();
    }

    public void start(String elector, long pid, String owner, String mode) {
        record("{\"ev\":\"start\",\"t\":" + now() + ",\"elector\":" + str(elector) + ",\"pid\":" + pid
                + ",\"owner\":" + str(owner) + ",\"mode\":" + str(mode) + "}");
    }

    public void grant(long token, long deadline) {
        record("{\"ev\":\"grant\",\"t\":" + now() + ",\"token\":" + token + ",\"deadline\":" + deadline + "}");
    }

    public void check(long token, long seq, long deadline) {
        record("{\"ev\":\"check\",\"t\":" + now() + ",\"token\":" + token + ",\"seq\":" + seq + ",\"deadline\":"
                + deadline + "}");
    }

    public void ack(long token, long seq, boolean ok) {
        record("{\"ev\":\"ack\",\"t\":" + now() + ",\"token\":" + token + ",\"seq\":" + seq + ",\"ok\":" + ok + "}");
    }

    public void stop(long token, String why) {
        record("{\"ev\":\"stop\",\"t\":" + now() + ",\"token\":" + token + ",\"why\":" + str(why) + "}");
    }

    public void resign() {
        record("{\"ev\":\"resign\",\"t\":" + now() + "}");
    }

    public void exit(String why) {
        record("{\"ev\":\"exit\",\"t\":" + now() + ",\"why\":" + str(why) + "}");
    }

    private synchronized void record(String line) {
        try {
            out.write((line + "\n").getBytes(StandardCharsets.UTF_8));
            out.flush();
        } catch (IOException e) {
            System.err.println("elector: cannot record " + line + ": " + e);
        }
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
}
