package lease

// Issue 25 item 10: deadlines on CLOCK_BOOTTIME, which counts a suspend of the host (Go's
// clock, CLOCK_MONOTONIC, does not; the Redis server on another host counts it anyway).

import (
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
