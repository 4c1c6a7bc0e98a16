package lease

// Protocol R17: a new reign never starts by refreshing a lease an earlier reign held.
//
// The scenario of issue 23, with the server's side of it played by the test: leader A's
// RENEWs (here: refused to A by an ACL) are executed late by someone else (here: a side
// client renewing with A's owner and token), so the lease stays alive while A reaches its
// stop point, steps down, and its RELEASE is abandoned (refused too: it stays "in flight").
// A campaigns again. Then the abandoned RELEASE executes. With one owner for every reign,
// A's new ACQUIRE was an idempotent refresh (same token) and the stale RELEASE frees A's new
// reign while A leads: a follower would be granted at once. With base#reign it answers 0.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis-lease/redis-lease/clients/go/internal/hooks"
	"github.com/redis/go-redis/v9"
)

func TestStaleReleaseCannotEndTheNextReign(t *testing.T) {
	if n, holder := staleReleaseScenario(t, false); n != 0 || holder == "" {
		t.Fatalf("reign 1's stale RELEASE answered %d and the lease holder is now %q while a leads: two leaders possible", n, holder)
	}
}

// The negative control the conformance elector's --mode reuse-owner uses (internal/hooks):
// with one owner for every reign, the same scenario frees the leader's new reign.
func TestReuseOwnerHookBringsTheBugBack(t *testing.T) {
	if n, holder := staleReleaseScenario(t, true); n != 1 || holder != "" {
		t.Fatalf("with the owner reused, the stale RELEASE answered %d and the holder is %q; want 1 and none (the old bug)", n, holder)
	}
}

// staleReleaseScenario plays the scenario and returns the stale RELEASE's answer and the
// lease holder right after it, while a leads its second reign.
func staleReleaseScenario(t *testing.T, reuseOwner bool) (int, string) {
	s := startServer(t)
	admin := s.client(t)
	ctx := context.Background()
	const key = "k:reign"
	// User a may do everything; the test takes RENEW and RELEASE away from it below.
	if err := admin.Do(ctx, "ACL", "SETUSER", "a", "on", ">pw", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	ac := redis.NewClient(&redis.Options{Addr: s.addr(), Username: "a", Password: "pw"})
	t.Cleanup(func() { ac.Close() })
	var prepare func(*Elector)
	if reuseOwner {
		prepare = func(e *Elector) { hooks.ReuseOwner(e) }
	}
	a := startElectorWith(t, "a", Config{Client: ac, Key: key, TTL: time.Second}, prepare)
	t1 := waitTerm(t, a.started, 5*time.Second, "a's first reign")
	info, cerr := (&transport{client: admin, key: key}).get(ctx, time.Second)
	if cerr != nil || info == nil || info.Token != t1.token {
		t.Fatalf("LEASE.GET in reign 1: %+v %v", info, cerr)
	}
	owner1 := info.Owner

	// The late RENEWs of reign 1 keep its lease alive on the server.
	stopSide := make(chan struct{})
	var sideWG sync.WaitGroup
	sideWG.Add(1)
	go func() {
		defer sideWG.Done()
		tk := time.NewTicker(150 * time.Millisecond)
		defer tk.Stop()
		for {
			admin.Do(ctx, "LEASE.RENEW", key, owner1, t1.token, 1000)
			select {
			case <-stopSide:
				return
			case <-tk.C:
			}
		}
	}()
	stopSideOnce := sync.OnceFunc(func() { close(stopSide); sideWG.Wait() })
	t.Cleanup(stopSideOnce)
	// A's own RENEW and RELEASE do not get through (NOPERM): it keeps retrying until its stop
	// point, steps down, and its RELEASE is "abandoned".
	if err := admin.Do(ctx, "ACL", "SETUSER", "a", "-lease.renew", "-lease.release").Err(); err != nil {
		t.Fatal(err)
	}
	if r := waitReason(t, a.stopped, 5*time.Second); r != ReasonDeadline {
		t.Fatalf("reign 1 ended with %s, want deadline", r)
	}
	if got := leaseOwner(t, admin, key); got != owner1 {
		t.Fatalf("after the step-down the lease is held by %q, want reign 1's %q (kept alive)", got, owner1)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "a", "+lease.renew", "+lease.release").Err(); err != nil {
		t.Fatal(err)
	}
	// A campaigns again while reign 1's lease is alive. Give an idempotent refresh time to
	// happen (a few ms), then let reign 1's lease expire so a new grant can happen.
	select {
	case <-a.started:
		t.Log("a led again while reign 1's lease was alive (refresh of the old reign)")
	case <-time.After(300 * time.Millisecond):
	}
	stopSideOnce()
	waitUntil(t, 5*time.Second, "a leading again", a.e.IsLeader)
	tok2 := a.e.Token()

	// Now the abandoned RELEASE of reign 1 executes.
	n, err := admin.Do(ctx, "LEASE.RELEASE", key, owner1, t1.token).Int()
	if err != nil {
		t.Fatal(err)
	}
	got := leaseOwner(t, admin, key)
	if !a.e.IsLeader() {
		t.Fatal("a no longer leads right after the stale RELEASE")
	}
	if reuseOwner || n != 0 {
		return n, got
	}
	if tok2 <= t1.token || got != a.e.Owner()+"#2" || owner1 != a.e.Owner()+"#1" {
		t.Fatalf("reign 1 owner %q, reign 2 token %d owner %q; want %s#1, then a new grant (token above %d) for %s#2",
			owner1, tok2, got, a.e.Owner(), t1.token, a.e.Owner())
	}
	return n, got
}

// What the README documents for a lost term: the task's context is cancelled,
// OnStoppedLeading fires with the reason, and Run campaigns again (unlike client-go, whose Run
// returns): a second term under the next reign's owner, with a higher token.
func TestLostTermCampaignsAgain(t *testing.T) {
	s := startServer(t)
	c := s.client(t)
	const key = "k:lost"
	r := startElector(t, "a", Config{Client: c, Key: key, TTL: time.Second})
	t1 := waitTerm(t, r.started, 5*time.Second, "first term")
	if err := c.Del(context.Background(), key).Err(); err != nil { // the lease is gone
		t.Fatal(err)
	}
	if reason := waitReason(t, r.stopped, 2*time.Second); reason != ReasonRenewRejected {
		t.Fatalf("first term ended with %s, want renew_rejected", reason)
	}
	end := waitTerm(t, r.ended, time.Second, "first task's end")
	t2 := waitTerm(t, r.started, 5*time.Second, "second term")
	select {
	case err := <-r.done:
		t.Fatalf("Run returned (%v) after a lost term", err)
	default:
	}
	if !end.stoppedAt.Before(t2.startedAt) || t2.token <= t1.token {
		t.Fatalf("second term (token %d, started %v) must follow the first (token %d, stopped %v)", t2.token, t2.startedAt, t1.token, end.stoppedAt)
	}
	if got := leaseOwner(t, c, key); got != r.e.Owner()+"#2" {
		t.Fatalf("second term held by %q, want %s#2", got, r.e.Owner())
	}
}
