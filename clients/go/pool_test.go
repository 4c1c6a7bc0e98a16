package lease

// Issue 25 item 9: the elector shares the application's go-redis client, so a call it gave up
// on must not keep a connection of that pool busy until go-redis' ReadTimeout (3 s by
// default; ContextTimeoutEnabled is false by default, so go-redis does not end the read at
// the context's deadline). Under a blackholed server at TTL 1 s the loop gives up on a RENEW
// every ~280 ms; if each held its connection for 3 s, the application's pool would run dry.

import (
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestBlackholeDoesNotExhaustTheSharedPool(t *testing.T) {
	s := startServer(t)
	const poolSize = 10
	// The application's client, with go-redis defaults except a known pool size.
	c := redis.NewClient(&redis.Options{Addr: s.addr(), PoolSize: poolSize})
	t.Cleanup(func() { c.Close() })
	a := startElector(t, "a", Config{Client: c, Key: "k:pool", TTL: time.Second})
	waitTerm(t, a.started, 5*time.Second, "a leading")
	before := c.PoolStats().Timeouts

	// A paused server is a blackhole: the kernel accepts connections and bytes, nothing answers.
	s.signal(syscall.SIGSTOP)
	t.Cleanup(func() { s.signal(syscall.SIGCONT) })
	// The loop gives up on its last RENEW at the stop point (~0.8 s) and on its RELEASE 0.2 s
	// later; from then on it waits in one BLOCKing ask on its dedicated connection.
	start := time.Now()
	maxBusy, lateBusy := uint32(0), uint32(0)
	for time.Since(start) < 3*time.Second {
		st := c.PoolStats()
		busy := st.TotalConns - st.IdleConns
		maxBusy = max(maxBusy, busy)
		if time.Since(start) > 1500*time.Millisecond {
			lateBusy = max(lateBusy, busy)
		}
		time.Sleep(10 * time.Millisecond)
	}
	timeouts := c.PoolStats().Timeouts - before
	measured(t, "blackholed server, TTL 1 s: at most %d of the application's %d pooled connections busy, %d from 1.5 s to 3 s (the blocking ask), %d pool timeouts",
		maxBusy, poolSize, lateBusy, timeouts)
	// At most one command in flight plus one just given up on (which ends within its op
	// limit); once the loop waits in its BLOCK, that connection alone. (At the old code: 4
	// busy, and 4 still busy 1.5 s in: the abandoned RENEWs and RELEASE held theirs for 3 s.)
	if maxBusy > 2 || lateBusy > 1 || timeouts != 0 {
		t.Fatalf("under a blackhole the elector kept up to %d of the application's %d pooled connections busy, %d after it gave up on them (pool timeouts: %d)",
			maxBusy, poolSize, lateBusy, timeouts)
	}
}
