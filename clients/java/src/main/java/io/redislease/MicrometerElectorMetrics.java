package io.redislease;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.Timer;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The elector's metrics in a Micrometer {@link MeterRegistry}, every meter tagged
 * {@code key=<lease key>}.
 *
 * <p>Names: Micrometer names are dot-separated and each registry renders them in its own
 * convention. They are chosen so that the Prometheus registry renders exactly the Rust
 * client's names (dots become underscores, counters get {@code _total}, a base unit of seconds
 * becomes a {@code _seconds} suffix):
 *
 * <table>
 * <caption>Micrometer name to Prometheus name</caption>
 * <tr><th>Micrometer</th><th>Prometheus</th></tr>
 * <tr><td>gauge lease.is.leader</td><td>lease_is_leader</td></tr>
 * <tr><td>gauge lease.token</td><td>lease_token</td></tr>
 * <tr><td>counter lease.transitions {to, reason}</td><td>lease_transitions_total</td></tr>
 * <tr><td>counter lease.acquire.attempts {result}</td><td>lease_acquire_attempts_total</td></tr>
 * <tr><td>counter lease.renew {result}</td><td>lease_renew_total</td></tr>
 * <tr><td>timer lease.renew.latency (histogram buckets = the Rust client's)</td>
 *     <td>lease_renew_latency_seconds (+ Micrometer's own _max gauge)</td></tr>
 * <tr><td>gauge lease.deadline, base unit seconds</td><td>lease_deadline_seconds</td></tr>
 * <tr><td>counter lease.redis.errors {op, kind}</td><td>lease_redis_errors_total</td></tr>
 * <tr><td>gauge lease.redis.up</td><td>lease_redis_up</td></tr>
 * <tr><td>counter lease.task.overrun</td><td>lease_task_overrun_total</td></tr>
 * </table>
 */
public final class MicrometerElectorMetrics implements ElectorMetrics {
    /** The Rust client's histogram buckets (seconds). */
    private static final double[] BUCKETS = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5};

    private final MeterRegistry registry;
    private final Tags tags;
    private final AtomicLong isLeader = new AtomicLong();
    private final AtomicLong token = new AtomicLong();
    private final AtomicLong redisUp = new AtomicLong();
    /** Current local deadline (nanoTime base) while leading; lease_deadline_seconds is computed at scrape time. */
    private final AtomicLong deadline = new AtomicLong();
    private final AtomicLong leading = new AtomicLong();
    private final Timer renewLatency;
    private final Counter overrun;

    public MicrometerElectorMetrics(MeterRegistry registry, String key) {
        this.registry = registry;
        this.tags = Tags.of("key", key);
        Gauge.builder("lease.is.leader", isLeader, AtomicLong::doubleValue)
                .description("1 while this instance leads").tags(tags).register(registry);
        Gauge.builder("lease.token", token, AtomicLong::doubleValue)
                .description("Current fencing token (0 when not leading)").tags(tags).register(registry);
        Gauge.builder("lease.redis.up", redisUp, AtomicLong::doubleValue)
                .description("1 if the last command reached Redis").tags(tags).register(registry);
        Gauge.builder("lease.deadline", this, MicrometerElectorMetrics::secondsLeft)
                .description("Seconds to the local leadership deadline").baseUnit("seconds").tags(tags)
                .register(registry);
        Duration[] slo = new Duration[BUCKETS.length];
        for (int i = 0; i < BUCKETS.length; i++) {
            slo[i] = Duration.ofNanos(Math.round(BUCKETS[i] * 1e9));
        }
        renewLatency = Timer.builder("lease.renew.latency").description("LEASE.RENEW round trip (incl. WAIT)")
                .serviceLevelObjectives(slo).tags(tags).register(registry);
        overrun = Counter.builder("lease.task.overrun")
                .description("Leader task still running at the local deadline").tags(tags).register(registry);
    }

    private double secondsLeft() {
        if (leading.get() == 0) {
            return 0.0;
        }
        return Math.max(0.0, (deadline.get() - System.nanoTime()) / 1e9);
    }

    private Counter counter(String name, String description, String... kv) {
        return Counter.builder(name).description(description).tags(tags).tags(kv).register(registry);
    }

    @Override
    public void leader(long tok, long deadlineNanos) {
        isLeader.set(1);
        token.set(tok);
        deadline(deadlineNanos);
        counter("lease.transitions", "Leadership transitions", "to", "leader", "reason", "acquired").increment();
    }

    @Override
    public void follower(StepDownReason reason) {
        isLeader.set(0);
        token.set(0);
        leading.set(0);
        counter("lease.transitions", "Leadership transitions", "to", "follower", "reason", reason.label()).increment();
    }

    @Override
    public void deadline(long deadlineNanos) {
        deadline.set(deadlineNanos);
        leading.set(1);
    }

    @Override
    public void acquire(String result) {
        counter("lease.acquire.attempts", "LEASE.ACQUIRE attempts by result", "result", result).increment();
    }

    @Override
    public void renew(String result, long latencyNanos) {
        counter("lease.renew", "LEASE.RENEW attempts by result", "result", result).increment();
        renewLatency.record(latencyNanos, TimeUnit.NANOSECONDS);
    }

    @Override
    public void redisError(String op, ErrorKind kind) {
        counter("lease.redis.errors", "Failed Redis commands", "op", op, "kind", kind.label()).increment();
    }

    @Override
    public void redisUp(boolean up) {
        redisUp.set(up ? 1 : 0);
    }

    @Override
    public void taskOverrun() {
        overrun.increment();
    }
}
