//go:build !linux

package lease

import "time"

// sysNow is Go's monotonic clock where this client has no CLOCK_BOOTTIME (see clock.go): a
// suspend of the host is then not counted, and only fencing protects against it.
func sysNow() time.Time { return time.Now() }
