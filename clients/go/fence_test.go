package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fence: the live term's token writes; a stale token (the previous term's) is refused with a
// *FencedError and its write is not applied.
func TestFenceRefusesAStaleToken(t *testing.T) {
	s := startServer(t)
	c := s.client(t)
	ctx := context.Background()
	const key = "{f}:leader"
	a := startElector(t, "a", Config{Client: c, Key: key, TTL: time.Second})
	ta := waitTerm(t, a.started, 5*time.Second, "a leading")
	if v, err := a.e.Fence(ctx, ta.token, "SET", "{f}:data", "from-a").Result(); err != nil || v != "OK" {
		t.Fatalf("Fence with the live token: %v %v", v, err)
	}
	if ms, err := a.e.Fence(ctx, ta.token).Int64(); err != nil || ms <= 0 || ms > 1000 {
		t.Fatalf("Fence without a command: %d ms, %v; want the remaining ms", ms, err)
	}
	b := startElector(t, "b", Config{Client: c, Key: key, TTL: time.Second})
	a.stop(5 * time.Second)
	tb := waitTerm(t, b.started, 5*time.Second, "b leading")

	_, err := a.e.Fence(ctx, ta.token, "SET", "{f}:data", "stale").Result()
	var fe *FencedError
	if !errors.As(err, &fe) || fe.Token != ta.token {
		t.Fatalf("Fence with a's stale token %d: %v, want a *FencedError", ta.token, err)
	}
	if v, err := c.Get(ctx, "{f}:data").Result(); err != nil || v != "from-a" {
		t.Fatalf("after the refused write the value is %q (%v), want from-a (not applied)", v, err)
	}
	if v, err := b.e.Fence(ctx, tb.token, "SET", "{f}:data", "from-b").Result(); err != nil || v != "OK" {
		t.Fatalf("Fence with b's live token: %v %v", v, err)
	}
	// Errors that are not FENCED stay go-redis' (here: the inner command's WRONGTYPE).
	_, err = b.e.Fence(ctx, tb.token, "LPUSH", "{f}:data", "x").Result()
	var re redis.Error
	if errors.As(err, &fe) || !errors.As(err, &re) {
		t.Fatalf("inner command error: %v (%T), want a redis.Error, not a FencedError", err, err)
	}
}
