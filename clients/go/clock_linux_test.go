package lease

// Issue 25 item 10: deadlines on CLOCK_BOOTTIME, which counts a suspend of the host (Go's
// clock, CLOCK_MONOTONIC, does not; the Redis server on another host counts it anyway).

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

func rawClock(id uintptr) time.Time {
	var ts syscall.Timespec
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, id, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic(errno)
	}
	return time.Unix(ts.Unix())
}

// The elector's clock is CLOCK_BOOTTIME (7), read between two raw readings of it.
func TestClockIsBoottime(t *testing.T) {
	before := rawClock(7)
	got := now()
	after := rawClock(7)
	if got.Before(before) || got.After(after) {
		t.Fatalf("now() = %v, not between CLOCK_BOOTTIME readings %v and %v", got, before, after)
	}
}

// A suspend: the elector's clock jumps 2 s (CLOCK_BOOTTIME counted it), Go's timers did not
// move. IsLeader() must say no at once, and the loop steps down with reason deadline on its
// next wake-up (a renewal timer), without leading on.
func TestSuspendCountsOnTheElectorsClock(t *testing.T) {
	var suspended atomic.Int64
	now = func() time.Time { return sysNow().Add(time.Duration(suspended.Load())) }
	t.Cleanup(func() { now = sysNow })
	s := startServer(t)
	r := startElector(t, "a", Config{Client: s.client(t), Key: "k:suspend", TTL: time.Second})
	waitTerm(t, r.started, 5*time.Second, "a leading")
	if !r.e.IsLeader() {
		t.Fatal("not leader right after the grant")
	}
	suspended.Store(int64(2 * time.Second))
	if r.e.IsLeader() {
		t.Fatal("IsLeader() true right after a 2 s suspend of a leader with TTL 1 s")
	}
	if reason := waitReason(t, r.stopped, 2*time.Second); reason != ReasonDeadline {
		t.Fatalf("stepped down with %s after the suspend, want deadline", reason)
	}
	r.stop(5 * time.Second)
}

// Issue 33: after a stall, before the elector's goroutine had a chance to run, the task's own
// context already says the stop point passed: Err() is DeadlineExceeded and Deadline() is in
// the past. (The clock jumps as after a suspend; Go's timers, and so the elector's loop, do
// not wake for it, so this is exactly the moment before the loop runs.)
func TestTaskContextIsRightBeforeTheLoopRuns(t *testing.T) {
	var stalled atomic.Int64
	now = func() time.Time { return sysNow().Add(time.Duration(stalled.Load())) }
	t.Cleanup(func() { now = sysNow })
	s := startServer(t)
	ctxs := make(chan context.Context, 4)
	cfg := Config{Client: s.client(t), Key: "k:taskctx", TTL: time.Second, Owner: "tc-" + DefaultOwner(), Logger: testLogger(t, "tc")}
	cfg.Callbacks.OnStartedLeading = func(ctx context.Context, _ int64) {
		ctxs <- ctx
		<-ctx.Done()
	}
	e, err := NewElector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	var ctx context.Context
	select {
	case ctx = <-ctxs:
	case <-time.After(5 * time.Second):
		t.Fatal("never led")
	}
	dl, ok := ctx.Deadline()
	ed, _ := e.Deadline()
	if !ok || dl.Sub(ed.Add(-e.p.StopBudget)).Abs() > time.Millisecond {
		t.Fatalf("ctx.Deadline() = %v, %v; want the stop point %v", dl, ok, ed.Add(-e.p.StopBudget))
	}
	if ctx.Err() != nil {
		t.Fatalf("ctx.Err() = %v while leading", ctx.Err())
	}
	stalled.Store(int64(2 * time.Second))
	err = ctx.Err()
	dl, _ = ctx.Deadline()
	left := time.Until(dl)
	select {
	case <-ctx.Done():
		t.Log("Done() closed already (the loop ran first)")
	default:
	}
	t.Logf("right after a 2 s stall: ctx.Err() = %v, ctx.Deadline() %v from now, IsLeader() %v", err, left, e.IsLeader())
	if !errors.Is(err, context.DeadlineExceeded) || left > 0 || e.IsLeader() {
		t.Fatalf("right after a 2 s stall: ctx.Err() = %v, Deadline() %v ahead, IsLeader() %v; want DeadlineExceeded, in the past, false", err, left, e.IsLeader())
	}
	// And once the loop ran, it stays so (the term ended at its stop point).
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("after the step-down ctx.Err() = %v, want DeadlineExceeded", ctx.Err())
	}
}
