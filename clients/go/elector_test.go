package lease

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// testLogger sends the elector's logs to the test log (shown with -v or on failure).
func testLogger(t testing.TB, name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})).With("elector", name)
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// countingMetrics records Metrics calls for assertions.
type countingMetrics struct {
	mu     sync.Mutex
	counts map[string]int
}

func newCountingMetrics() *countingMetrics { return &countingMetrics{counts: map[string]int{}} }
func (m *countingMetrics) add(k string) {
	m.mu.Lock()
	m.counts[k]++
	m.mu.Unlock()
}
func (m *countingMetrics) get(k string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[k]
}
func (m *countingMetrics) Leader(int64, time.Time, string) { m.add("leader") }
func (m *countingMetrics) Follower(r string)               { m.add("follower:" + r) }
func (m *countingMetrics) Deadline(time.Time)              { m.add("deadline") }
func (m *countingMetrics) Acquire(r string)                { m.add("acquire:" + r) }
func (m *countingMetrics) Renew(r string, _ time.Duration) { m.add("renew:" + r) }
func (m *countingMetrics) RedisError(op, k string)         { m.add("error:" + op + ":" + k) }
func (m *countingMetrics) RedisUp(bool)                    {}
func (m *countingMetrics) TaskOverrun()                    { m.add("overrun") }

// term is one reign seen by a test elector's task.
type term struct {
	token     int64
	startedAt time.Time
	deadline  time.Time // the elector's deadline right after the start
	stoppedAt time.Time // when the task saw its ctx done
	cause     error
}

// runner runs one Elector in the background for a test.
type runner struct {
	t       testing.TB
	e       *Elector
	cancel  context.CancelFunc
	done    chan error
	started chan term
	ended   chan term
	stopped chan StopReason
	metrics *countingMetrics
}

func startElector(t testing.TB, name string, cfg Config) *runner {
	t.Helper()
	r := &runner{t: t, done: make(chan error, 1), started: make(chan term, 16), ended: make(chan term, 16),
		stopped: make(chan StopReason, 16), metrics: newCountingMetrics()}
	cfg.Logger = testLogger(t, name)
	cfg.Metrics = r.metrics
	if cfg.Owner == "" {
		cfg.Owner = name + "-" + DefaultOwner()
	}
	cfg.Callbacks.OnStartedLeading = func(ctx context.Context, token int64) {
		d, _ := r.e.Deadline()
		tm := term{token: token, startedAt: time.Now(), deadline: d}
		r.started <- tm
		<-ctx.Done()
		tm.stoppedAt = time.Now()
		tm.cause = context.Cause(ctx)
		r.ended <- tm
	}
	cfg.Callbacks.OnStoppedLeading = func(reason StopReason) { r.stopped <- reason }
	e, err := NewElector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.e = e
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- e.Run(ctx) }()
	t.Cleanup(func() { r.stop(10 * time.Second) })
	return r
}

// stop cancels Run and waits for it to return.
func (r *runner) stop(limit time.Duration) time.Duration {
	r.t.Helper()
	start := time.Now()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			r.t.Errorf("Run returned %v", err)
		}
		r.done <- nil // later stops return at once
	case <-time.After(limit):
		r.t.Fatalf("Run did not return within %v of cancel", limit)
	}
	return time.Since(start)
}

func waitTerm(t testing.TB, ch <-chan term, limit time.Duration, what string) term {
	t.Helper()
	select {
	case tm := <-ch:
		return tm
	case <-time.After(limit):
		t.Fatalf("timed out after %v waiting for %s", limit, what)
	}
	return term{}
}

func waitReason(t testing.TB, ch <-chan StopReason, limit time.Duration) StopReason {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(limit):
		t.Fatalf("timed out after %v waiting for OnStoppedLeading", limit)
	}
	return ""
}

func leaseOwner(t testing.TB, c *redis.Client, key string) string {
	t.Helper()
	tr := &transport{client: c, key: key}
	info, err := tr.get(context.Background())
	if err != nil {
		t.Fatalf("LEASE.GET: %v", err)
	}
	if info == nil {
		return ""
	}
	return info.Owner
}

func TestLeadRenewAndReleaseOnCancel(t *testing.T) {
	s := startServer(t)
	c := s.client(t)
	r := startElector(t, "a", Config{Client: c, Key: "k:smoke", TTL: time.Second})
	tm := waitTerm(t, r.started, 5*time.Second, "leadership")
	if tm.token <= 0 || tm.token >= 1<<53 {
		t.Fatalf("token %d out of range", tm.token)
	}
	if !r.e.IsLeader() || r.e.Token() != tm.token {
		t.Fatalf("IsLeader %v Token %d, want true %d", r.e.IsLeader(), r.e.Token(), tm.token)
	}
	if got := leaseOwner(t, c, "k:smoke"); got != r.e.Owner() {
		t.Fatalf("server says owner %q, want %q", got, r.e.Owner())
	}
	// Three renew intervals: the deadline must have moved forward on renewals.
	time.Sleep(1100 * time.Millisecond)
	d, ok := r.e.Deadline()
	if !ok || !d.After(tm.deadline) {
		t.Fatalf("deadline did not move forward: %v -> %v (leading %v)", tm.deadline, d, ok)
	}
	if n := r.metrics.get("renew:renewed"); n < 2 {
		t.Fatalf("%d renewals in 1.1 s with a 333 ms interval", n)
	}
	r.stop(5 * time.Second)
	end := waitTerm(t, r.ended, time.Second, "task end")
	var se *StopError
	if !errors.As(end.cause, &se) || se.Reason != ReasonResigned {
		t.Fatalf("task context cause %v, want resigned", end.cause)
	}
	if reason := waitReason(t, r.stopped, time.Second); reason != ReasonResigned {
		t.Fatalf("OnStoppedLeading(%s), want resigned", reason)
	}
	if r.e.IsLeader() {
		t.Fatal("IsLeader after Run returned")
	}
	if got := leaseOwner(t, c, "k:smoke"); got != "" {
		t.Fatalf("lease still held by %q after resign: not released", got)
	}
}
