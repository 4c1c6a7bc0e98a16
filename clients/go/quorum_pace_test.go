package lease

import (
	"testing"
	"time"
)

// Protocol Q2: a quorum round never BLOCKs, so a follower polls "with the loop's jittered
// pause" between rounds (at least BackoffMin, 50 ms by default), not back to back (the Python
// and Java ports re-asked at once: about a thousand rounds a second on loopback).
func TestQuorumFollowerPausesBetweenRounds(t *testing.T) {
	cs := nodeClients(t, quorumServers(t, 3))
	const key = "q:pace"
	cfg := Config{Nodes: cs, Key: key, TTL: 2 * time.Second}
	a := startElector(t, "a", cfg)
	waitTerm(t, a.started, 10*time.Second, "a leading")
	b := startElector(t, "b", cfg)
	waitUntil(t, 10*time.Second, "b's first round", func() bool { return b.metrics.get("acquire:not_granted") >= 1 })
	n0, t0 := b.metrics.get("acquire:not_granted"), time.Now()
	time.Sleep(time.Second) // the window in which rounds are counted (not a wait for a state)
	n, secs := b.metrics.get("acquire:not_granted")-n0, time.Since(t0).Seconds()
	// A pause of at least BackoffMin (50 ms): at most 20 rounds a second; 40 leaves room.
	if n < 1 || float64(n) > 40*secs {
		t.Fatalf("the follower made %d rounds in %.2f s", n, secs)
	}
	select {
	case tm := <-b.started:
		t.Fatalf("b led (token %d) while a leads", tm.token)
	default:
	}
}
