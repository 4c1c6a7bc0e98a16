package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
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
func (m *countingMetrics) Leader(int64, time.Time)         { m.add("leader") }
func (m *countingMetrics) Follower(r StepDownReason)       { m.add("follower:" + string(r)) }
func (m *countingMetrics) Deadline(time.Time)              { m.add("deadline") }
func (m *countingMetrics) Acquire(r string)                { m.add("acquire:" + r) }
func (m *countingMetrics) Renew(r string, _ time.Duration) { m.add("renew:" + r) }
func (m *countingMetrics) RedisError(op string, k ErrorKind) {
	m.add("error:" + op + ":" + string(k))
}
func (m *countingMetrics) RedisUp(bool) {}
func (m *countingMetrics) TaskOverrun() { m.add("overrun") }

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
	stopped chan StepDownReason
	metrics *countingMetrics
}

func startElector(t testing.TB, name string, cfg Config) *runner {
	t.Helper()
	return startElectorWith(t, name, cfg, nil)
}

// startElectorWith calls prepare (if not nil) on the Elector before Run.
func startElectorWith(t testing.TB, name string, cfg Config, prepare func(*Elector)) *runner {
	t.Helper()
	r := &runner{t: t, done: make(chan error, 1), started: make(chan term, 16), ended: make(chan term, 16),
		stopped: make(chan StepDownReason, 16), metrics: newCountingMetrics()}
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
	cfg.Callbacks.OnStoppedLeading = func(reason StepDownReason) { r.stopped <- reason }
	e, err := NewElector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.e = e
	if prepare != nil {
		prepare(e)
	}
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

func waitReason(t testing.TB, ch <-chan StepDownReason, limit time.Duration) StepDownReason {
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
	info, err := tr.get(context.Background(), time.Second)
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
	if got := leaseOwner(t, c, "k:smoke"); got != r.e.Owner()+"#1" {
		t.Fatalf("server says owner %q, want %q#1", got, r.e.Owner())
	}
	// Three renew intervals: the deadline must have moved forward on renewals.
	time.Sleep(1100 * time.Millisecond)
	d, ok := r.e.Deadline()
	if !ok || !d.After(tm.deadline) {
		t.Fatalf("deadline did not move forward: %v -> %v (leading %v)", tm.deadline, d, ok)
	}
	// At least one (typically three; generous for a loaded CI machine).
	if n := r.metrics.get("renew:renewed"); n < 1 {
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

// handOver cancels from's Run and measures until to's task starts.
func TestHandOverOnCancel(t *testing.T) {
	s := startServer(t)
	c := s.client(t)
	a := startElector(t, "a", Config{Client: c, Key: "k:handover", TTL: 2 * time.Second})
	ta := waitTerm(t, a.started, 5*time.Second, "a leading")
	b := startElector(t, "b", Config{Client: c, Key: "k:handover", TTL: 2 * time.Second})
	time.Sleep(300 * time.Millisecond) // b is now waiting in LEASE.ACQUIRE ... BLOCK
	if b.e.IsLeader() {
		t.Fatal("b leads while a holds the lease")
	}
	t0 := time.Now()
	a.cancel()
	tb := waitTerm(t, b.started, 5*time.Second, "b leading")
	handover := tb.startedAt.Sub(t0)
	t.Logf("hand-over on cancel: %.1f ms (cancel of a's Run -> b's OnStartedLeading)", float64(handover.Microseconds())/1000)
	measured(t, "hand-over on cancel %.1f ms (cancel of the leader's Run -> the follower's OnStartedLeading)", float64(handover.Microseconds())/1000)
	endA := waitTerm(t, a.ended, time.Second, "a's task end")
	// Safety, by order: a's task had stopped before b's started (a releases only after).
	if !endA.stoppedAt.Before(tb.startedAt) {
		t.Fatalf("b started at %v, before a's task stopped at %v", tb.startedAt, endA.stoppedAt)
	}
	if tb.token <= ta.token {
		t.Fatalf("b's token %d not above a's %d", tb.token, ta.token)
	}
	// Generous on a shared 2-core CI machine; typically a few ms.
	if handover > time.Second {
		t.Fatalf("hand-over took %v", handover)
	}
	if n := b.metrics.get("acquire:late"); n != 0 {
		t.Fatalf("a prompt hand-over counted %d late grants", n)
	}
}

// A follower whose Run is cancelled while it waits in a 5 s BLOCK returns at once (CLIENT
// UNBLOCK) and leaves no stray lease behind.
func TestCancelWhileBlocked(t *testing.T) {
	s := startServer(t)
	c := s.client(t)
	a := startElector(t, "a", Config{Client: c, Key: "k:unblock", TTL: time.Second})
	waitTerm(t, a.started, 5*time.Second, "a leading")
	b := startElector(t, "b", Config{Client: c, Key: "k:unblock", TTL: time.Second})
	time.Sleep(300 * time.Millisecond)
	took := b.stop(3 * time.Second)
	measured(t, "cancelled follower's Run returned %.1f ms after cancel (BLOCK 5 s; CLIENT UNBLOCK)", float64(took.Microseconds())/1000)
	if took > time.Second {
		t.Fatalf("cancelled follower took %v to return", took)
	}
	if !a.e.IsLeader() {
		t.Fatal("a lost leadership")
	}
	a.stop(5 * time.Second)
	if got := leaseOwner(t, c, "k:unblock"); got != "" {
		t.Fatalf("lease held by %q after both stopped", got)
	}
}

// A grant that comes back after its own stop point (a BLOCK that waited longer than the stop
// window) is not led on: the follower re-asks without BLOCK and leads on the refresh.
func TestLateGrantIsReasked(t *testing.T) {
	s := startServer(t)
	c := s.client(t)
	a := startElector(t, "a", Config{Client: c, Key: "k:late", TTL: time.Second})
	waitTerm(t, a.started, 5*time.Second, "a leading")
	b := startElector(t, "b", Config{Client: c, Key: "k:late", TTL: time.Second})
	time.Sleep(1500 * time.Millisecond) // b's BLOCK (5 s) is now older than its stop window (780 ms)
	a.cancel()
	tb := waitTerm(t, b.started, 5*time.Second, "b leading")
	if n := b.metrics.get("acquire:late"); n != 1 {
		t.Fatalf("acquire:late = %d, want 1", n)
	}
	// The lead time counts from the re-ask's send instant: nearly a full lead time is left.
	if left := tb.deadline.Sub(tb.startedAt); left < 700*time.Millisecond {
		t.Fatalf("only %v of leadership left after the re-ask", left)
	}
	if got := leaseOwner(t, c, "k:late"); got != b.e.Owner()+"#1" {
		t.Fatalf("server owner %q, want b", got)
	}
}

// Redis dies under a leader: the task's context is cancelled at the stop point, before the
// local deadline, and the elector steps down with reason deadline.
func TestRedisKilledStepsDownBeforeDeadline(t *testing.T) {
	s := startServer(t)
	c := s.client(t)
	var mu sync.Mutex
	var lastDeadline time.Time
	r := startElector(t, "a", Config{Client: c, Key: "k:killed", TTL: time.Second})
	tm := waitTerm(t, r.started, 5*time.Second, "leading")
	time.Sleep(500 * time.Millisecond) // at least one renewal
	s.kill()
	killedAt := time.Now()
	// No renewal can be confirmed after the kill: the deadline now is the last one.
	d, ok := r.e.Deadline()
	mu.Lock()
	lastDeadline = d
	mu.Unlock()
	if !ok {
		t.Fatal("not leading right after the kill")
	}
	end := waitTerm(t, r.ended, 3*time.Second, "task cancelled")
	var se *StopError
	if !errors.As(end.cause, &se) || se.Reason != ReasonDeadline {
		t.Fatalf("cause %v, want deadline", end.cause)
	}
	if !end.stoppedAt.Before(lastDeadline) {
		t.Fatalf("task told to stop at %v, not before the deadline %v", end.stoppedAt, lastDeadline)
	}
	stopPoint := lastDeadline.Add(-r.e.p.StopBudget)
	if end.stoppedAt.Before(stopPoint.Add(-5 * time.Millisecond)) {
		t.Fatalf("task stopped %v before the stop point: too early", stopPoint.Sub(end.stoppedAt))
	}
	if r.e.IsLeader() {
		t.Fatal("IsLeader after the stop point")
	}
	t.Logf("redis killed: task cancelled %.0f ms after the kill, %.0f ms before the local deadline (term token %d)",
		float64(end.stoppedAt.Sub(killedAt).Microseconds())/1000, float64(lastDeadline.Sub(end.stoppedAt).Microseconds())/1000, tm.token)
	measured(t, "redis killed -> task cancelled %.0f ms before the local deadline (stop budget %v)", float64(lastDeadline.Sub(end.stoppedAt).Microseconds())/1000, r.e.p.StopBudget)
	if reason := waitReason(t, r.stopped, 3*time.Second); reason != ReasonDeadline {
		t.Fatalf("OnStoppedLeading(%s), want deadline", reason)
	}
	if r.metrics.get("error:renew:connection")+r.metrics.get("error:renew:timeout") == 0 {
		t.Fatal("no renew error counted")
	}
}

func TestConfigValidation(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	task := func(context.Context, int64) {}
	cases := []struct {
		name string
		cfg  Config
		rule string
	}{
		{"valid", Config{Client: c, Key: "k", TTL: time.Second, Callbacks: Callbacks{OnStartedLeading: task}}, ""},
		{"no client", Config{Key: "k", TTL: time.Second, Callbacks: Callbacks{OnStartedLeading: task}}, "client"},
		{"no task", Config{Client: c, Key: "k", TTL: time.Second}, "callbacks"},
		{"no key", Config{Client: c, TTL: time.Second, Callbacks: Callbacks{OnStartedLeading: task}}, "key"},
		{"sub-ms ttl", Config{Client: c, Key: "k", TTL: 999 * time.Microsecond, Callbacks: Callbacks{OnStartedLeading: task}}, "ttl"},
		{"stop window", Config{Client: c, Key: "k", TTL: time.Second, StopBudget: 700 * time.Millisecond, Callbacks: Callbacks{OnStartedLeading: task}}, "stop_window"},
		{"negative margin", Config{Client: c, Key: "k", TTL: time.Second, Margin: -time.Millisecond, Callbacks: Callbacks{OnStartedLeading: task}}, "margin"},
		{"min replicas on a ring", Config{Client: redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}), Key: "k", TTL: time.Second, MinReplicas: 1, Callbacks: Callbacks{OnStartedLeading: task}}, "min_replicas"},
	}
	for _, tc := range cases {
		_, err := NewElector(tc.cfg)
		var ce *ConfigError
		switch {
		case tc.rule == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.rule != "" && (!errors.As(err, &ce) || ce.Rule != tc.rule):
			t.Errorf("%s: got %v, want rule %s", tc.name, err, tc.rule)
		}
	}
	// Defaults are the shared ones (config_defaults.json) for zero fields.
	p := (&Config{TTL: 10 * time.Second}).params()
	if p != defaultParams(10000) {
		t.Fatalf("zero Config fields: %+v, want %+v", p, defaultParams(10000))
	}
}

func TestDefaultOwner(t *testing.T) {
	a, b := DefaultOwner(), DefaultOwner()
	if a == b || len(a) > maxOwnerBytes || !strings.Contains(a, fmt.Sprintf("-%d-", os.Getpid())) {
		t.Fatalf("owners %q %q: want host-pid-random, unique per call", a, b)
	}
}

// measured records a figure: in the test log, and appended to $LEASE_MEASURE_FILE (test.sh
// prints that file after the run, since go test hides the output of passing tests).
func measured(t testing.TB, format string, a ...any) {
	t.Helper()
	line := t.Name() + ": " + fmt.Sprintf(format, a...)
	t.Log("measured: " + line)
	if p := os.Getenv("LEASE_MEASURE_FILE"); p != "" {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Errorf("measure file: %v", err)
			return
		}
		defer f.Close()
		fmt.Fprintln(f, line)
	}
}

// Protocol R13: a task that ignores its context past the deadline cannot be stopped by force,
// so the lease is not released; it ends on the server's own expiry. Fails if the elector
// releases after an overrun (the lease would be gone right after Run returns).
func TestOverrunningTaskIsNotReleasedFor(t *testing.T) {
	s := startServer(t)
	c := s.client(t)
	m := newCountingMetrics()
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{}, 1)
	// Drift 0.3: the local deadline comes ~300 ms before the server's expiry, room to look.
	cfg := Config{Client: c, Key: "k:overrun", TTL: time.Second, Drift: 0.3, Owner: "ov-" + DefaultOwner(),
		Logger: testLogger(t, "ov"), Metrics: m}
	cfg.Callbacks.OnStartedLeading = func(context.Context, int64) {
		started <- struct{}{}
		<-release // ignores its context on purpose
	}
	e, err := NewElector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("never led")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the deadline")
	}
	owner := leaseOwner(t, c, "k:overrun")
	if n := m.get("overrun"); n != 1 {
		t.Fatalf("overrun counted %d times, want 1", n)
	}
	if owner != cfg.Owner+"#1" {
		t.Fatalf("right after the deadline the lease is held by %q, want %q#1 (not released)", owner, cfg.Owner)
	}
}

// R17: the owner is the base of base#reign, whose every reign must fit 256 bytes: a base of
// 240 bytes is refused (the shared config_validate rule alone allows 256), 239 is accepted.
func TestConfigRefusesABaseThatCannotCarryAReign(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	task := func(context.Context, int64) {}
	for _, n := range []int{239, 240, 256} {
		_, err := NewElector(Config{Client: c, Key: "k", TTL: time.Second, Owner: strings.Repeat("x", n), Callbacks: Callbacks{OnStartedLeading: task}})
		var ce *ConfigError
		refused := errors.As(err, &ce) && ce.Rule == "owner"
		if refused != (n > 239) {
			t.Errorf("owner of %d bytes: %v", n, err)
		}
	}
}
