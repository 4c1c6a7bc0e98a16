package lease

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// oneShot runs RunOnce in the background; starts counts OnStartedLeading calls.
type oneShot struct {
	e       *Elector
	starts  atomic.Int32
	started chan int64
	done    chan error
	cancel  context.CancelFunc
}

func startOnce(t *testing.T, cfg Config, task func(ctx context.Context)) *oneShot {
	t.Helper()
	o := &oneShot{started: make(chan int64, 4), done: make(chan error, 1)}
	cfg.Logger = testLogger(t, "once")
	cfg.Owner = "once-" + DefaultOwner()
	cfg.Callbacks.OnStartedLeading = func(ctx context.Context, token int64) {
		o.starts.Add(1)
		o.started <- token
		task(ctx)
	}
	e, err := NewElector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	o.e = e
	ctx, cancel := context.WithCancel(context.Background())
	o.cancel = cancel
	go func() { o.done <- e.RunOnce(ctx) }()
	t.Cleanup(cancel)
	return o
}

func (o *oneShot) wait(t *testing.T, limit time.Duration) error {
	t.Helper()
	select {
	case err := <-o.done:
		return err
	case <-time.After(limit):
		t.Fatalf("RunOnce did not return within %v", limit)
	}
	return nil
}

// A lost term ends RunOnce with the reason, after the task returned, and the task ran once:
// no second campaign (Run, in TestLostTermCampaignsAgain, starts a second term here).
func TestRunOnceEndsWithTheLostTerm(t *testing.T) {
	s := startServer(t)
	c := s.client(t)
	const key = "k:once-lost"
	var taskDone atomic.Bool
	o := startOnce(t, Config{Client: c, Key: key, TTL: time.Second}, func(ctx context.Context) {
		<-ctx.Done()
		// A task that takes a moment to stop: RunOnce must not return before it did.
		time.Sleep(50 * time.Millisecond)
		taskDone.Store(true)
	})
	select {
	case <-o.started:
	case <-time.After(5 * time.Second):
		t.Fatal("not elected")
	}
	if err := c.Del(context.Background(), key).Err(); err != nil { // the lease is gone
		t.Fatal(err)
	}
	err := o.wait(t, 5*time.Second)
	var se *StopError
	if !errors.As(err, &se) || se.Reason != ReasonRenewRejected {
		t.Fatalf("RunOnce returned %v, want a *StopError renew_rejected", err)
	}
	if !taskDone.Load() {
		t.Fatal("RunOnce returned before the task had stopped")
	}
	if n := o.starts.Load(); n != 1 {
		t.Fatalf("OnStartedLeading ran %d times in one RunOnce", n)
	}
	// Nobody holds the key and RunOnce is over: the elector must not have campaigned again.
	if got := leaseOwner(t, c, key); got != "" {
		t.Fatalf("lease held by %q after RunOnce returned", got)
	}
	// Another call is a new reign (R17: a new owner).
	o2 := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { o2 <- o.e.RunOnce(ctx) }()
	select {
	case <-o.started:
	case <-time.After(5 * time.Second):
		t.Fatal("second RunOnce not elected")
	}
	if got := leaseOwner(t, c, key); got != o.e.Owner()+"#2" {
		t.Fatalf("second call holds as %q, want %s#2", got, o.e.Owner())
	}
	cancel()
	select {
	case err := <-o2:
		if err != nil {
			t.Fatalf("RunOnce after cancel returned %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second RunOnce did not return after cancel")
	}
	if got := leaseOwner(t, c, key); got != "" {
		t.Fatalf("lease held by %q after a cancelled RunOnce (not released)", got)
	}
}

// A task that returns by itself while leading: RunOnce returns nil after the release.
func TestRunOnceReturnsAfterTheTaskAndReleases(t *testing.T) {
	s := startServer(t)
	c := s.client(t)
	const key = "k:once-done"
	o := startOnce(t, Config{Client: c, Key: key, TTL: 2 * time.Second}, func(ctx context.Context) {})
	if err := o.wait(t, 5*time.Second); err != nil {
		t.Fatalf("RunOnce returned %v, want nil", err)
	}
	if n := o.starts.Load(); n != 1 {
		t.Fatalf("OnStartedLeading ran %d times", n)
	}
	if got := leaseOwner(t, c, key); got != "" {
		t.Fatalf("lease held by %q after the task finished (not released)", got)
	}
}
