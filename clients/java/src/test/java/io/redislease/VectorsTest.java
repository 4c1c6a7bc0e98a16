package io.redislease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * Runs every shared decision vector (conformance/vectors/*.json, loaded from the repository,
 * never copied) against {@link Decide} and {@link QuorumDecide}. Fails on an empty folder, an unknown decision, an
 * unknown configuration key or an unknown key in {@code expect}; every mismatch names its file
 * and case. Times are compared in whole microseconds with a tolerance of 1 µs.
 */
class VectorsTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Set<String> DECISIONS = Set.of("config_defaults", "config_validate", "deadline",
            "op_limit", "wait_for", "retry_interval", "backoff", "classify_error", "on_acquire",
            "not_granted_pause", "on_renew", "must_stop", "step_down", "reign_owner", "next_reign",
            "quorum_after_acquire", "quorum_after_renew", "quorum_wait", "quorum_identity", "quorum_quarantine",
            "membership_id");

    static Path vectorDir() {
        String base = System.getProperty("basedir", System.getProperty("user.dir"));
        return Path.of(base).resolve("../../conformance/vectors").normalize().toAbsolutePath();
    }

    static List<Path> vectorFiles() throws IOException {
        Path dir = vectorDir();
        List<Path> files = new ArrayList<>();
        // quorum/: quorum mode's vectors (the membership id, Q9).
        for (Path d : List.of(dir, dir.resolve("quorum"))) {
            if (Files.isDirectory(d)) {
                try (Stream<Path> s = Files.list(d)) {
                    s.filter(p -> p.getFileName().toString().endsWith(".json"))
                            .sorted().forEach(files::add);
                }
            }
        }
        return files;
    }

    @Test
    void vectorFolderIsNotEmpty() throws IOException {
        // Why a separate test: a loader that silently finds nothing would pass vacuously.
        List<Path> files = vectorFiles();
        assertFalse(files.isEmpty(), "no vector files in " + vectorDir());
        Set<String> seen = new java.util.HashSet<>();
        for (Path f : files) {
            seen.add(JSON.readTree(f.toFile()).path("decision").asText());
        }
        assertEquals(DECISIONS, seen, "every known decision has a vector file");
    }

    @TestFactory
    Stream<DynamicTest> vectors() throws IOException {
        List<Path> files = vectorFiles();
        if (files.isEmpty()) {
            fail("no vector files in " + vectorDir());
        }
        List<DynamicTest> tests = new ArrayList<>();
        for (Path f : files) {
            JsonNode doc = JSON.readTree(f.toFile());
            String decision = doc.path("decision").asText();
            String file = f.getFileName().toString();
            if (!DECISIONS.contains(decision)) {
                fail(file + ": unknown decision '" + decision + "'");
            }
            JsonNode defaults = doc.path("defaults").path("config");
            JsonNode cases = doc.path("cases");
            assertTrue(cases.isArray() && cases.size() > 0, file + ": no cases");
            for (JsonNode c : cases) {
                String name = file + " / " + c.path("name").asText();
                tests.add(DynamicTest.dynamicTest(name, () -> runCase(name, decision, defaults, c)));
            }
        }
        return tests.stream();
    }

    private static void runCase(String name, String decision, JsonNode defaults, JsonNode c) {
        Map<String, JsonNode> cfg = new LinkedHashMap<>();
        defaults.properties().forEach(e -> cfg.put(e.getKey(), e.getValue()));
        c.path("config").properties().forEach(e -> cfg.put(e.getKey(), e.getValue()));
        LeaseTiming t = cfg.isEmpty() ? null : timing(name, cfg);
        JsonNode in = c.path("input");
        JsonNode expect = c.path("expect");
        Map<String, Object> actual = evaluate(name, decision, t, in);
        Iterator<Map.Entry<String, JsonNode>> it = expect.properties().iterator();
        assertTrue(it.hasNext(), name + ": empty expect");
        while (it.hasNext()) {
            Map.Entry<String, JsonNode> e = it.next();
            if (!actual.containsKey(e.getKey())) {
                fail(name + ": unknown key '" + e.getKey() + "' in expect (decision gave " + actual.keySet() + ")");
            }
            compare(name, e.getKey(), e.getValue(), actual.get(e.getKey()));
        }
    }

    private static LeaseTiming timing(String name, Map<String, JsonNode> cfg) {
        Set<String> known = Set.of("ttl_ms", "drift", "margin_us", "stop_budget_us", "renew_interval_us",
                "op_timeout_us", "block_timeout_us", "min_replicas", "wait_timeout_us", "backoff_min_us",
                "backoff_max_us");
        for (String k : cfg.keySet()) {
            if (!known.contains(k)) {
                fail(name + ": unknown config key '" + k + "'");
            }
        }
        return new LeaseTiming(cfg.get("ttl_ms").asLong(), cfg.get("drift").asDouble(), us(cfg, "margin_us"),
                us(cfg, "stop_budget_us"), us(cfg, "renew_interval_us"), us(cfg, "op_timeout_us"),
                us(cfg, "block_timeout_us"), cfg.get("min_replicas").asInt(), us(cfg, "wait_timeout_us"),
                us(cfg, "backoff_min_us"), us(cfg, "backoff_max_us"));
    }

    private static long us(Map<String, JsonNode> cfg, String k) {
        return cfg.get(k).asLong() * 1_000L;
    }

    private static long nanos(JsonNode n) {
        return n.asLong() * 1_000L;
    }

    /** Nanoseconds as microseconds, rounded to the nearest (the vectors' unit). */
    private static long toUs(long nanos) {
        return Math.round(nanos / 1_000.0);
    }

    private static Long nullableNanos(JsonNode n) {
        return n == null || n.isNull() || n.isMissingNode() ? null : nanos(n);
    }

    private static Decide.Failure failure(String name, JsonNode r) {
        String kind = r.path("kind").asText();
        for (ErrorKind k : ErrorKind.values()) {
            if (k.label().equals(kind)) {
                long grace = r.has("grace_us") && !r.get("grace_us").isNull() ? nanos(r.get("grace_us")) : -1L;
                return new Decide.Failure(k, grace, kind);
            }
        }
        throw new AssertionError(name + ": unknown error kind " + kind);
    }

    private static Integer acked(JsonNode r) {
        JsonNode a = r.get("acked");
        return a == null || a.isNull() ? null : a.asInt();
    }

    private static Decide.AcquireResult acquireResult(String name, JsonNode r) {
        switch (r.path("reply").asText()) {
            case "granted":
                return new Decide.Granted(r.get("token").asLong(), acked(r));
            case "nil":
                return new Decide.NotGranted();
            case "error":
                return new Decide.Failed(failure(name, r));
            default:
                throw new AssertionError(name + ": unknown acquire reply " + r);
        }
    }

    private static Decide.RenewResult renewResult(String name, JsonNode r) {
        switch (r.path("reply").asText()) {
            case "renewed":
                return new Decide.Renewed(acked(r));
            case "not_held":
                return new Decide.NotHeld();
            case "error":
                return new Decide.Failed(failure(name, r));
            default:
                throw new AssertionError(name + ": unknown renew reply " + r);
        }
    }

    /** A round's ACQUIRE replies, one per node in node order (null = no reply in time). */
    private static List<QuorumDecide.Reply<Long>> acquireReplies(String name, JsonNode in) {
        List<QuorumDecide.Reply<Long>> out = new ArrayList<>();
        for (JsonNode r : in.get("replies")) {
            if (r.isNull()) {
                out.add(QuorumDecide.Reply.silent());
                continue;
            }
            Decide.AcquireResult a = acquireResult(name, r);
            if (a instanceof Decide.Granted g) {
                out.add(QuorumDecide.Reply.of(g.token()));
            } else if (a instanceof Decide.Failed f) {
                out.add(QuorumDecide.Reply.failed(f.failure()));
            } else {
                out.add(QuorumDecide.Reply.of(null));
            }
        }
        return out;
    }

    private static List<QuorumDecide.Reply<Boolean>> renewReplies(String name, JsonNode in) {
        List<QuorumDecide.Reply<Boolean>> out = new ArrayList<>();
        for (JsonNode r : in.get("replies")) {
            if (r.isNull()) {
                out.add(QuorumDecide.Reply.silent());
                continue;
            }
            Decide.RenewResult a = renewResult(name, r);
            if (a instanceof Decide.Failed f) {
                out.add(QuorumDecide.Reply.failed(f.failure()));
            } else {
                out.add(QuorumDecide.Reply.of(a instanceof Decide.Renewed));
            }
        }
        return out;
    }

    private static Map<String, Object> evaluate(String name, String decision, LeaseTiming t, JsonNode in) {
        Map<String, Object> a = new LinkedHashMap<>();
        switch (decision) {
            case "config_defaults": {
                LeaseTiming d = Decide.defaults(in.get("ttl_ms").asLong());
                a.put("ttl_ms", d.ttlMillis());
                a.put("drift", d.drift());
                a.put("margin_us", toUs(d.marginNanos()));
                a.put("stop_budget_us", toUs(d.stopBudgetNanos()));
                a.put("renew_interval_us", toUs(d.renewIntervalNanos()));
                a.put("op_timeout_us", toUs(d.opTimeoutNanos()));
                a.put("block_timeout_us", toUs(d.blockTimeoutNanos()));
                a.put("min_replicas", (long) d.minReplicas());
                a.put("wait_timeout_us", toUs(d.waitTimeoutNanos()));
                a.put("backoff_min_us", toUs(d.backoffMinNanos()));
                a.put("backoff_max_us", toUs(d.backoffMaxNanos()));
                break;
            }
            case "config_validate": {
                Decide.Problem p = Decide.configProblem(t, in.get("key").asText(), in.get("owner").asText());
                a.put("valid", p == null);
                a.put("rule", p == null ? null : p.rule());
                break;
            }
            case "deadline": {
                long sent = nanos(in.get("sent_at_us"));
                long deadline = Decide.localDeadline(t, sent);
                a.put("lead_time_us", toUs(Decide.leadTimeNanos(t)));
                a.put("deadline_us", toUs(deadline));
                a.put("stop_at_us", toUs(Decide.stopAt(t, deadline)));
                break;
            }
            case "op_limit":
                a.put("limit_us", toUs(Decide.opLimitNanos(t, nullableNanos(in.get("block_us")))));
                break;
            case "wait_for": {
                Decide.WaitFor w = Decide.waitFor(t);
                if (w == null) {
                    a.put("wait", null);
                } else {
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("replicas", (long) w.replicas());
                    m.put("timeout_ms", w.timeoutMillis());
                    a.put("wait", m);
                }
                break;
            }
            case "retry_interval":
                a.put("retry_us", toUs(Decide.retryIntervalNanos(t)));
                break;
            case "backoff": {
                long attempt = in.get("attempt").asLong();
                double unit = in.get("unit").asDouble();
                a.put("cap_us", toUs(Decide.backoffCapNanos(t, attempt)));
                a.put("delay_us", toUs(Decide.backoffNanos(t, attempt, unit)));
                break;
            }
            case "classify_error": {
                Decide.Failure f;
                if (in.has("error")) {
                    f = Decide.classifyError(in.get("error").asText());
                } else {
                    String tr = in.get("transport").asText();
                    ErrorKind k = switch (tr) {
                        case "timeout" -> ErrorKind.TIMEOUT;
                        case "connection" -> ErrorKind.CONNECTION;
                        case "protocol" -> ErrorKind.PROTOCOL;
                        default -> throw new AssertionError(name + ": unknown transport failure " + tr);
                    };
                    f = Decide.Failure.of(k, tr);
                }
                a.put("kind", f.kind().label());
                a.put("grace_us", f.kind() == ErrorKind.GRACE ? toUs(f.graceNanos()) : null);
                break;
            }
            case "on_acquire": {
                Decide.AcquireDecision d = Decide.onAcquire(t, nanos(in.get("sent_at_us")),
                        nanos(in.get("now_us")), acquireResult(name, in.get("result")));
                if (d instanceof Decide.Lead l) {
                    a.put("action", "lead");
                    a.put("token", l.token());
                    a.put("deadline_us", toUs(l.deadline()));
                    a.put("next_renew_us", toUs(l.nextRenew()));
                } else if (d instanceof Decide.Unconfirmed u) {
                    a.put("action", "unconfirmed");
                    a.put("token", u.token());
                    a.put("retry_in_us", toUs(u.retryInNanos()));
                    a.put("why", u.why().label());
                } else if (d instanceof Decide.NotGrantedAgain) {
                    a.put("action", "not_granted");
                } else if (d instanceof Decide.Grace g) {
                    a.put("action", "grace");
                    a.put("wait_us", toUs(g.waitNanos()));
                } else if (d instanceof Decide.Backoff b) {
                    a.put("action", "backoff");
                    a.put("kind", b.kind().label());
                }
                break;
            }
            case "not_granted_pause":
                a.put("pause_us", toUs(Decide.notGrantedPauseNanos(t, nullableNanos(in.get("block_us")),
                        nanos(in.get("sent_at_us")), nanos(in.get("now_us")), in.get("unit").asDouble())));
                break;
            case "on_renew": {
                Decide.RenewDecision d = Decide.onRenew(t, nanos(in.get("deadline_us")),
                        nanos(in.get("sent_at_us")), nanos(in.get("now_us")), renewResult(name, in.get("result")));
                if (d instanceof Decide.Extend x) {
                    a.put("action", "renewed");
                    a.put("deadline_us", toUs(x.deadline()));
                    a.put("next_renew_us", toUs(x.nextRenew()));
                } else if (d instanceof Decide.StepDown s) {
                    a.put("action", "step_down");
                    a.put("reason", s.reason().label());
                } else if (d instanceof Decide.Retry r) {
                    a.put("action", "retry");
                    a.put("at_us", toUs(r.at()));
                    a.put("why", r.why().label());
                }
                break;
            }
            case "must_stop":
                a.put("stop", Decide.mustStop(t, nanos(in.get("deadline_us")), nanos(in.get("now_us"))));
                break;
            case "step_down": {
                StepDownReason r = StepDownReason.fromLabel(in.get("reason").asText());
                if (r == null) {
                    fail(name + ": unknown reason " + in.get("reason"));
                }
                a.put("release", Decide.releaseAfter(r));
                break;
            }
            case "reign_owner":
                a.put("reign_owner", Decide.reignOwner(in.get("owner").asText(), in.get("reign").asLong()));
                break;
            case "membership_id": {
                List<io.lettuce.core.RedisURI> uris = new ArrayList<>();
                List<String> ids = new ArrayList<>();
                for (JsonNode u : in.get("nodes")) {
                    // Lettuce spells a unix socket redis-socket://path; the vectors' unix:// is
                    // the same socket path.
                    String s = u.asText().replaceFirst("^unix://", "redis-socket://");
                    io.lettuce.core.RedisURI uri = io.lettuce.core.RedisURI.create(s);
                    uris.add(uri);
                    ids.add(QuorumTransport.nodeIdentity(uri));
                }
                ids.sort((x, y) -> java.util.Arrays.compareUnsigned(x.getBytes(java.nio.charset.StandardCharsets.UTF_8),
                        y.getBytes(java.nio.charset.StandardCharsets.UTF_8)));
                a.put("identities", ids);
                a.put("membership_id", QuorumTransport.membershipId(uris));
                break;
            }
            case "next_reign": {
                Decide.ReignEvent ev = Decide.ReignEvent.fromLabel(in.get("event").asText());
                if (ev == null) {
                    fail(name + ": unknown event " + in.get("event"));
                }
                a.put("reign", Decide.nextReign(in.get("reign").asLong(), ev));
                break;
            }
            case "quorum_after_acquire": {
                QuorumDecide.AfterAcquire d = QuorumDecide.afterAcquire(acquireReplies(name, in));
                if (d instanceof QuorumDecide.Raise r) {
                    a.put("action", "raise");
                    a.put("target", r.target());
                    a.put("nodes", r.nodes().stream().map(Integer::longValue).toList());
                } else if (d instanceof QuorumDecide.Abort ab) {
                    a.put("action", "abort");
                    a.put("partial", ab.release().stream().map(p -> List.of((long) p.node(), p.token())).toList());
                    Decide.Failure f = ab.error();
                    a.put("outcome", f != null ? "error" : ab.mismatch() ? "membership_mismatch" : "not_granted");
                    a.put("error_kind", f == null ? null : f.kind().label());
                    a.put("grace_us", f != null && f.kind() == ErrorKind.GRACE ? toUs(f.graceNanos()) : null);
                }
                break;
            }
            case "quorum_after_renew": {
                List<QuorumDecide.Reply<Boolean>> r = renewReplies(name, in);
                a.put("action", QuorumDecide.afterRenew(r).name().toLowerCase(java.util.Locale.ROOT));
                a.put("confirmed", QuorumDecide.raiseConfirmed(r, r.size()));
                break;
            }
            case "quorum_wait": {
                List<String> urls = new ArrayList<>();
                in.get("urls").forEach(u -> urls.add(u.asText()));
                int node = QuorumDecide.waitNode(urls);
                java.util.OptionalLong w = QuorumDecide.waitAfterRefusal(acquireReplies(name, in), node,
                        in.get("released_any").asBoolean(), nullableNanos(in.get("block_us")), t.opTimeoutNanos(),
                        t.renewIntervalNanos());
                a.put("wait_node", (long) node);
                a.put("wait_us", w.isPresent() ? toUs(w.getAsLong()) : null);
                break;
            }
            case "quorum_identity": {
                JsonNode k = in.get("known");
                String[] known = new String[k.size()];
                for (int i = 0; i < known.length; i++) {
                    known[i] = k.get(i).isNull() ? null : k.get(i).asText();
                }
                QuorumDecide.IdentityCheck c = QuorumDecide.checkIdentity(in.get("me").asInt(), in.get("seen").asText(), known);
                a.put("check", c.kind().name().toLowerCase(java.util.Locale.ROOT));
                a.put("of", c.kind() == QuorumDecide.IdentityKind.DUPLICATE ? (Object) (long) c.of() : null);
                break;
            }
            case "quorum_quarantine":
                a.put("quarantine_us", toUs(QuorumDecide.quarantineNanos(t.ttlMillis() * 1_000_000L,
                        nanos(in.get("node_quarantine_us")), t.drift())));
                break;
            default:
                fail(name + ": unknown decision '" + decision + "'");
        }
        return a;
    }

    @SuppressWarnings("unchecked")
    private static void compare(String name, String key, JsonNode want, Object got) {
        String where = name + ": key '" + key + "'";
        if (want.isNull()) {
            assertEquals(null, got, where);
        } else if (want.isObject()) {
            if (!(got instanceof Map)) {
                fail(where + ": expected " + want + ", got " + got);
            }
            Map<String, Object> m = (Map<String, Object>) got;
            want.properties().forEach(e -> {
                if (!m.containsKey(e.getKey())) {
                    fail(where + ": unknown key '" + e.getKey() + "'");
                }
                compare(name, key + "." + e.getKey(), e.getValue(), m.get(e.getKey()));
            });
        } else if (want.isArray()) {
            if (!(got instanceof List<?> l) || l.size() != want.size()) {
                fail(where + ": expected " + want + ", got " + got);
                return;
            }
            for (int i = 0; i < want.size(); i++) {
                compare(name, key + "[" + i + "]", want.get(i), l.get(i));
            }
        } else if (want.isBoolean()) {
            assertEquals(want.asBoolean(), got, where);
        } else if (want.isTextual()) {
            assertEquals(want.asText(), got, where);
        } else if (want.isIntegralNumber()) {
            if (!(got instanceof Long l)) {
                fail(where + ": expected " + want + ", got " + got);
                return;
            }
            long diff = Math.abs(l - want.asLong());
            long tolerance = key.endsWith("_us") ? 1 : 0;
            assertTrue(diff <= tolerance, where + ": expected " + want.asLong() + ", got " + l);
        } else if (want.isNumber()) {
            if (!(got instanceof Double d)) {
                fail(where + ": expected " + want + ", got " + got);
                return;
            }
            assertEquals(want.asDouble(), d, 1e-12, where);
        } else {
            fail(where + ": cannot compare " + want);
        }
    }
}
