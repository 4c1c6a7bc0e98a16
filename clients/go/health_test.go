package lease

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The health check: healthy while following and while leading; unhealthy once a task that
// ignores its context runs more than the timeout past its term's deadline; healthy again
// when it returned.
func TestHealthzAdaptorFlagsAnOverrunningTask(t *testing.T) {
	s := startServer(t)
	c := s.client(t)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	cfg := Config{Client: c, Key: "k:health", TTL: time.Second, Owner: "h-" + DefaultOwner(), Logger: testLogger(t, "h")}
	cfg.Callbacks.OnStartedLeading = func(context.Context, int64) {
		started <- struct{}{}
		<-release // ignores its context on purpose
	}
	e, err := NewElector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHealthzAdaptor(e, 200*time.Millisecond)
	if err := h.Check(nil); err != nil || h.Name() != "leaderElection" {
		t.Fatalf("before Run: %v (%s)", err, h.Name())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("never led")
	}
	if err := h.Check(nil); err != nil {
		t.Fatalf("leading: %v", err)
	}
	d, _ := e.Deadline()
	cancel()
	// Healthy until the timeout past the deadline, unhealthy after it.
	waitUntil(t, 3*time.Second, "the check failing", func() bool { return h.Check(nil) != nil })
	if late := time.Since(d); late < 200*time.Millisecond {
		t.Fatalf("unhealthy %v after the deadline, before the 200 ms timeout", late)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), "still running") {
		t.Fatalf("ServeHTTP: %d %q", rec.Code, rec.Body.String())
	}
	close(release)
	waitUntil(t, 3*time.Second, "the check passing once the task returned", func() bool { return h.Check(nil) == nil })
	<-done
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != 200 || rec.Body.String() != "ok" {
		t.Fatalf("ServeHTTP after the task returned: %d %q", rec.Code, rec.Body.String())
	}
}

// OnStoppedLeading fires once for every term, however it ended: here a panicking task
// (Run returns a *TaskPanicError, the lease is released first).
func TestOnStoppedLeadingFiresAfterAPanic(t *testing.T) {
	s := startServer(t)
	c := s.client(t)
	stopped := make(chan StepDownReason, 4)
	cfg := Config{Client: c, Key: "k:panic", TTL: time.Second, Owner: "p-" + DefaultOwner(), Logger: testLogger(t, "p")}
	cfg.Callbacks.OnStartedLeading = func(context.Context, int64) { panic("boom") }
	cfg.Callbacks.OnStoppedLeading = func(r StepDownReason) { stopped <- r }
	e, err := NewElector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = e.Run(context.Background())
	var pe *TaskPanicError
	if !errors.As(err, &pe) || pe.Value != "boom" {
		t.Fatalf("Run returned %v, want a *TaskPanicError", err)
	}
	if len(stopped) != 1 || <-stopped != ReasonTaskExited {
		t.Fatal("OnStoppedLeading did not fire exactly once with task_exited")
	}
	if got := leaseOwner(t, c, "k:panic"); got != "" {
		t.Fatalf("lease held by %q after the panicking task: not released", got)
	}
}
