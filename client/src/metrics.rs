//! Prometheus metrics of one elector, in its own registry (several electors can live in one
//! process, e.g. in tests). Every series carries the const label `key`.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `lease_is_leader` | gauge 0/1 | |
//! | `lease_token` | gauge (current token, 0 when not leading) | |
//! | `lease_transitions_total` | counter | `to` (leader/follower), `reason` |
//! | `lease_acquire_attempts_total` | counter | `result` (granted, not_granted, unconfirmed, grace, error) |
//! | `lease_renew_total` | counter | `result` (renewed, rejected, unconfirmed, error) |
//! | `lease_renew_latency_seconds` | histogram | |
//! | `lease_deadline_seconds` | gauge: seconds to the local deadline (0 when not leading) | |
//! | `lease_redis_errors_total` | counter | `op`, `kind` ([`crate::ErrorKind::label`]) |
//! | `lease_redis_up` | gauge 0/1: last command reached the server | |
//! | `lease_task_overrun_total` | counter: the task had not stopped by the deadline | |

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};
use tokio::time::Instant;

#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    is_leader: IntGauge,
    token: Gauge,
    transitions: IntCounterVec,
    acquire: IntCounterVec,
    renew: IntCounterVec,
    renew_latency: Histogram,
    deadline_seconds: Gauge,
    redis_errors: IntCounterVec,
    redis_up: IntGauge,
    task_overrun: IntCounter,
    /// Current local deadline; `lease_deadline_seconds` is computed from it at scrape time.
    deadline: Mutex<Option<Instant>>,
}

impl Metrics {
    /// A fresh registry with every metric registered, labelled `key`.
    pub fn new(key: &str) -> Metrics {
        let mut labels = HashMap::new();
        labels.insert("key".to_string(), key.to_string());
        let registry = Registry::new_custom(None, Some(labels)).expect("static registry config");
        // The names/labels below are static and valid; registration of distinct names in a
        // fresh registry cannot fail, so `expect` documents an invariant, not an input check.
        let reg =
            |c: Box<dyn prometheus::core::Collector>| registry.register(c).expect("unique metric");
        let is_leader =
            IntGauge::new("lease_is_leader", "1 while this instance leads").expect("metric");
        let token = Gauge::new("lease_token", "Current fencing token (0 when not leading)")
            .expect("metric");
        let transitions = IntCounterVec::new(
            Opts::new("lease_transitions_total", "Leadership transitions"),
            &["to", "reason"],
        )
        .expect("metric");
        let acquire = IntCounterVec::new(
            Opts::new(
                "lease_acquire_attempts_total",
                "LEASE.ACQUIRE attempts by result",
            ),
            &["result"],
        )
        .expect("metric");
        let renew = IntCounterVec::new(
            Opts::new("lease_renew_total", "LEASE.RENEW attempts by result"),
            &["result"],
        )
        .expect("metric");
        let renew_latency = Histogram::with_opts(
            HistogramOpts::new(
                "lease_renew_latency_seconds",
                "LEASE.RENEW round trip (incl. WAIT)",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
            ]),
        )
        .expect("metric");
        let deadline_seconds = Gauge::new(
            "lease_deadline_seconds",
            "Seconds to the local leadership deadline",
        )
        .expect("metric");
        let redis_errors = IntCounterVec::new(
            Opts::new("lease_redis_errors_total", "Failed Redis commands"),
            &["op", "kind"],
        )
        .expect("metric");
        let redis_up =
            IntGauge::new("lease_redis_up", "1 if the last command reached Redis").expect("metric");
        let task_overrun = IntCounter::new(
            "lease_task_overrun_total",
            "Leader task still running at the local deadline (aborted)",
        )
        .expect("metric");
        reg(Box::new(is_leader.clone()));
        reg(Box::new(token.clone()));
        reg(Box::new(transitions.clone()));
        reg(Box::new(acquire.clone()));
        reg(Box::new(renew.clone()));
        reg(Box::new(renew_latency.clone()));
        reg(Box::new(deadline_seconds.clone()));
        reg(Box::new(redis_errors.clone()));
        reg(Box::new(redis_up.clone()));
        reg(Box::new(task_overrun.clone()));
        Metrics {
            inner: Arc::new(Inner {
                registry,
                is_leader,
                token,
                transitions,
                acquire,
                renew,
                renew_latency,
                deadline_seconds,
                redis_errors,
                redis_up,
                task_overrun,
                deadline: Mutex::new(None),
            }),
        }
    }

    /// The registry (to merge into an application's own exporter).
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// Prometheus text exposition of every metric, with `lease_deadline_seconds` fresh.
    pub fn render(&self) -> String {
        let i = &self.inner;
        let left = match *i.deadline.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(d) => d.saturating_duration_since(Instant::now()).as_secs_f64(),
            None => 0.0,
        };
        i.deadline_seconds.set(left);
        let mut buf = Vec::new();
        // Encoding into a Vec only fails on invalid metric families, which we never build.
        let _ = TextEncoder::new().encode(&i.registry.gather(), &mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    }

    pub(crate) fn leader(&self, token: u64, deadline: Instant, reason: &str) {
        let i = &self.inner;
        i.is_leader.set(1);
        i.token.set(token as f64);
        i.transitions.with_label_values(&["leader", reason]).inc();
        self.deadline(Some(deadline));
    }

    pub(crate) fn follower(&self, reason: &str) {
        let i = &self.inner;
        i.is_leader.set(0);
        i.token.set(0.0);
        i.transitions.with_label_values(&["follower", reason]).inc();
        self.deadline(None);
    }

    pub(crate) fn deadline(&self, d: Option<Instant>) {
        *self
            .inner
            .deadline
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = d;
        let left = d
            .map(|d| d.saturating_duration_since(Instant::now()).as_secs_f64())
            .unwrap_or(0.0);
        self.inner.deadline_seconds.set(left);
    }

    pub(crate) fn acquire(&self, result: &str) {
        self.inner.acquire.with_label_values(&[result]).inc();
    }

    pub(crate) fn renew(&self, result: &str, latency: std::time::Duration) {
        self.inner.renew.with_label_values(&[result]).inc();
        self.inner.renew_latency.observe(latency.as_secs_f64());
    }

    pub(crate) fn redis_error(&self, op: &str, kind: &str) {
        self.inner.redis_errors.with_label_values(&[op, kind]).inc();
    }

    pub(crate) fn redis_up(&self, up: bool) {
        self.inner.redis_up.set(up as i64);
    }

    pub(crate) fn task_overrun(&self) {
        self.inner.task_overrun.inc();
    }

    /// Current value of a counter/gauge by name and label values (tests, debugging).
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        for fam in self.inner.registry.gather() {
            if fam.name() != name {
                continue;
            }
            for m in fam.get_metric() {
                let ok = labels.iter().all(|(k, v)| {
                    m.get_label()
                        .iter()
                        .any(|l| l.name() == *k && l.value() == *v)
                });
                if ok {
                    return match fam.get_field_type() {
                        prometheus::proto::MetricType::COUNTER => m.get_counter().get_value(),
                        _ => m.get_gauge().get_value(),
                    };
                }
            }
        }
        0.0
    }
}
