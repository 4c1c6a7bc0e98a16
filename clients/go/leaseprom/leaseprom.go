// Package leaseprom exports an Elector's metrics to Prometheus (client_golang), under the
// metric names and labels every redis-lease client uses, each series carrying the const
// label key=<lease key>:
//
//	lease_is_leader                         gauge 0/1
//	lease_token                             gauge: current fencing token, 0 when not leading
//	lease_transitions_total{to,reason}      counter: to = leader|follower
//	lease_acquire_attempts_total{result}    counter: granted, not_granted, unconfirmed, late, grace, error
//	lease_renew_total{result}               counter: renewed, rejected, unconfirmed, error
//	lease_renew_latency_seconds             histogram: RENEW round trip incl. WAIT
//	lease_deadline_seconds                  gauge: seconds to the local deadline (0 when not leading), computed at scrape time
//	lease_redis_errors_total{op,kind}       counter: op = acquire|renew|release|get, kind = an ErrorKind
//	lease_redis_up                          gauge 0/1: the last command reached Redis
//	lease_task_overrun_total                counter: the task had not returned by the local deadline
//
// It is a package of the client's module (no second go.mod, no second replace): a program
// that does not import it does not build client_golang.
//
//	m, err := leaseprom.New(prometheus.DefaultRegisterer, "jobs/report")
//	cfg.Metrics = m
package leaseprom

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	lease "github.com/redis-lease/redis-lease/clients/go"
)

// Metrics implements lease.Metrics.
type Metrics struct {
	isLeader     prometheus.Gauge
	token        prometheus.Gauge
	transitions  *prometheus.CounterVec
	acquire      *prometheus.CounterVec
	renew        *prometheus.CounterVec
	renewLatency prometheus.Histogram
	deadline     prometheus.GaugeFunc
	redisErrors  *prometheus.CounterVec
	redisUp      prometheus.Gauge
	taskOverrun  prometheus.Counter

	mu sync.Mutex
	dl time.Time // current local deadline; zero when not leading
}

var _ lease.Metrics = (*Metrics)(nil)

// Buckets of lease_renew_latency_seconds (the Rust client's).
var Buckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5}

// New creates the metrics of the elector of lease key and registers them with reg.
// Electors of different keys can share one registry.
func New(reg prometheus.Registerer, key string) (*Metrics, error) {
	cl := prometheus.Labels{"key": key}
	m := &Metrics{
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "lease_is_leader", Help: "1 while this instance leads", ConstLabels: cl}),
		token:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "lease_token", Help: "Current fencing token (0 when not leading)", ConstLabels: cl}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lease_transitions_total", Help: "Leadership transitions", ConstLabels: cl},
			[]string{"to", "reason"}),
		acquire: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lease_acquire_attempts_total", Help: "LEASE.ACQUIRE attempts by result", ConstLabels: cl},
			[]string{"result"}),
		renew: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lease_renew_total", Help: "LEASE.RENEW attempts by result", ConstLabels: cl},
			[]string{"result"}),
		renewLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lease_renew_latency_seconds", Help: "LEASE.RENEW round trip (incl. WAIT)",
			ConstLabels: cl, Buckets: Buckets}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lease_redis_errors_total", Help: "Failed Redis commands", ConstLabels: cl},
			[]string{"op", "kind"}),
		redisUp:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "lease_redis_up", Help: "1 if the last command reached Redis", ConstLabels: cl}),
		taskOverrun: prometheus.NewCounter(prometheus.CounterOpts{Name: "lease_task_overrun_total", Help: "Leader task still running at the local deadline", ConstLabels: cl}),
	}
	m.deadline = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lease_deadline_seconds", Help: "Seconds to the local leadership deadline", ConstLabels: cl},
		m.secondsLeft)
	for _, c := range []prometheus.Collector{m.isLeader, m.token, m.transitions, m.acquire, m.renew, m.renewLatency,
		m.deadline, m.redisErrors, m.redisUp, m.taskOverrun} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) secondsLeft() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dl.IsZero() {
		return 0
	}
	if left := time.Until(m.dl); left > 0 {
		return left.Seconds()
	}
	return 0
}

func (m *Metrics) Leader(token int64, deadline time.Time) {
	m.isLeader.Set(1)
	m.token.Set(float64(token))
	m.transitions.WithLabelValues("leader", "acquired").Inc()
	m.Deadline(deadline)
}

func (m *Metrics) Follower(reason lease.StepDownReason) {
	m.isLeader.Set(0)
	m.token.Set(0)
	m.transitions.WithLabelValues("follower", string(reason)).Inc()
	m.mu.Lock()
	m.dl = time.Time{}
	m.mu.Unlock()
}

func (m *Metrics) Deadline(deadline time.Time) {
	m.mu.Lock()
	m.dl = deadline
	m.mu.Unlock()
}

func (m *Metrics) Acquire(result string) { m.acquire.WithLabelValues(result).Inc() }

func (m *Metrics) Renew(result string, latency time.Duration) {
	m.renew.WithLabelValues(result).Inc()
	m.renewLatency.Observe(latency.Seconds())
}

func (m *Metrics) RedisError(op string, kind lease.ErrorKind) {
	m.redisErrors.WithLabelValues(op, string(kind)).Inc()
}

func (m *Metrics) RedisUp(up bool) {
	if up {
		m.redisUp.Set(1)
	} else {
		m.redisUp.Set(0)
	}
}

func (m *Metrics) TaskOverrun() { m.taskOverrun.Inc() }
