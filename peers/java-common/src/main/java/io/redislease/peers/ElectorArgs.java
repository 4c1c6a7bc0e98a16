package io.redislease.peers;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The command line of docs/conformance.md ("Starting external electors"): the harness appends
 * {@code --id --redis --resource --out --ttl-ms --key --mode} to the peer's own options. A peer
 * names its own options in {@code extra}; anything else is refused with a one-line error and
 * exit status 2, so a typo in an elector command line fails at once instead of campaigning with
 * a default.
 */
public final class ElectorArgs {
    public final String id;
    /** Every {@code --redis} in order (the harness passes one per node in quorum topologies). */
    public final List<String> redis;
    public final String resource;
    public final String out;
    public final long ttlMs;
    public final String key;
    public final String mode;
    private final Map<String, String> extra;

    private ElectorArgs(Map<String, String> a, List<String> redis, Map<String, String> extra) {
        this.id = required(a, "--id");
        this.redis = redis;
        this.resource = required(a, "--resource");
        this.out = required(a, "--out");
        this.ttlMs = parseTtl(a.getOrDefault("--ttl-ms", "2000"));
        this.key = a.getOrDefault("--key", "chaos:leader");
        this.mode = a.getOrDefault("--mode", "safe");
        this.extra = extra;
    }

    /** Parses argv; {@code extra} maps the peer's own options to their defaults (null: required). */
    public static ElectorArgs parse(String[] argv, Map<String, String> extra, String usage) {
        Set<String> common = Set.of("--id", "--redis", "--resource", "--out", "--ttl-ms", "--key", "--mode");
        Map<String, String> a = new HashMap<>();
        Map<String, String> own = new HashMap<>(extra);
        List<String> redis = new ArrayList<>();
        for (int i = 0; i < argv.length; i++) {
            String k = argv[i];
            if (!k.startsWith("--") || i + 1 >= argv.length) {
                fail("usage: " + usage);
            }
            String v = argv[++i];
            if (k.equals("--redis")) {
                redis.add(v);
            } else if (common.contains(k)) {
                if (a.put(k, v) != null) {
                    fail("option given twice: " + k);
                }
            } else if (extra.containsKey(k)) {
                own.put(k, v);
            } else {
                fail("unknown option " + k + " (usage: " + usage + ")");
            }
        }
        for (Map.Entry<String, String> e : own.entrySet()) {
            if (e.getValue() == null) {
                fail("missing " + e.getKey());
            }
        }
        return new ElectorArgs(a, redis, own);
    }

    /** The value of one of the peer's own options (its default when not given). */
    public String opt(String name) {
        String v = extra.get(name);
        if (v == null) {
            throw new IllegalArgumentException("not a declared option: " + name);
        }
        return v;
    }

    /** The one {@code --redis} URL; a peer without quorum mode refuses several. */
    public String singleRedis() {
        if (redis.size() != 1) {
            fail("this peer takes exactly one --redis (got " + redis.size() + ")");
        }
        return redis.get(0);
    }

    /** The slot number of {@code --id} {@code eS.I} (S), or 0 for an id of another shape. */
    public int slot() {
        int dot = id.indexOf('.');
        String s = id.startsWith("e") && dot > 1 ? id.substring(1, dot) : "";
        try {
            return Integer.parseInt(s);
        } catch (NumberFormatException e) {
            return 0;
        }
    }

    private static long parseTtl(String s) {
        try {
            long v = Long.parseLong(s);
            if (v > 0) {
                return v;
            }
        } catch (NumberFormatException e) {
            // below
        }
        fail("--ttl-ms must be a positive integer, got " + s);
        return 0;
    }

    private static String required(Map<String, String> a, String k) {
        String v = a.get(k);
        if (v == null) {
            fail("missing " + k);
        }
        return v;
    }

    /** A clear one-line error and exit status 2. */
    public static void fail(String msg) {
        System.err.println("elector: " + msg);
        System.exit(2);
    }
}
