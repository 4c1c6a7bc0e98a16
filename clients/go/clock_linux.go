package lease

import (
	"time"

	"golang.org/x/sys/unix"
)

// sysNow reads CLOCK_BOOTTIME (see clock.go), as a time.Time without a monotonic reading (so
// Sub/Before/After compare the readings themselves).
func sysNow() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// Unreachable once the probe below succeeded (the kernel either has the clock or
		// not; ts is ours). Still never mix bases: go on from the probe's pair on Go's clock.
		return bootBase.Add(time.Since(goBase))
	}
	return time.Unix(ts.Unix())
}

// bootBase is a CLOCK_BOOTTIME reading taken together with goBase (time.Now()).
var bootBase, goBase = probeBoottime()

func probeBoottime() (time.Time, time.Time) {
	var ts unix.Timespec
	g := time.Now()
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// Linux before 2.6.39: no CLOCK_BOOTTIME. The fallback in sysNow() then counts on Go's
		// clock from this pair, which is time.Now() on another base.
		return g, g
	}
	return time.Unix(ts.Unix()), g
}
