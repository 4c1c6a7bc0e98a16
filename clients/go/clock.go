package lease

import "time"

// The elector's clock. Every instant the loop compares with a deadline comes from now(), never
// from time.Now(): on Linux it is CLOCK_BOOTTIME (clock_linux.go, via golang.org/x/sys/unix), which keeps counting while
// the system is suspended; Go's own monotonic clock (CLOCK_MONOTONIC) stops then. Why it
// matters: the Redis server, on another host, keeps counting through our suspend, so a
// deadline on a clock that stopped would outlive the server's expiry by the length of the
// suspend. Elsewhere now() is time.Now() (its monotonic reading). The conformance elector's
// history clock stays CLOCK_MONOTONIC, as docs/conformance.md defines it.
//
// The instants are time.Time values on an arbitrary base: compare them only with each other.
// What the public API hands out (Deadline(), Metrics, the task's context deadline) is
// converted to a time.Now()-based time.Time by toGo.

// now is the elector's clock: sysNow (per platform). A variable only so that a test can
// simulate a suspend (the clock jumps, Go's timers do not); set before any elector runs.
var now = sysNow

// toGo converts an instant of now() to Go's clock (a time.Time with a monotonic reading that
// compares with time.Now()): the same distance from the present on both clocks.
func toGo(t time.Time) time.Time {
	return time.Now().Add(t.Sub(now()))
}

// until is t - now() on the elector's clock.
func until(t time.Time) time.Duration { return t.Sub(now()) }
