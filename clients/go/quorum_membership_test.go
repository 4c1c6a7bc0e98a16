package lease

// Quorum mode's membership id (protocol Q9, issue 32 item 1): electors with different node
// lists during a rolling node replacement must never lead together.
//
// The reproduction (as client/tests/quorum_membership.rs): some electors use {A, B, C},
// others already {A, B, D}. X (old list) reigns on the bare majority {A, C} because B was
// frozen during its campaign (a bare majority stays bare for the whole reign); B is free. Y
// (new list) then finds B and D free: without the membership id Y reigns on {B, D} while X
// still leads on {A, C}. With it, B is bound to the old list since the reign before and
// refuses Y, so Y has only D.

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func membershipRefusal() *cmdError {
	kind, _ := classifyErrorLine("MEMBERSHIP this key is bound to membership 1111222233334444, not 5555666677778888: x")
	return &cmdError{Kind: kind, Msg: "MEMBERSHIP ..."}
}

func TestMembershipRefusalIsARefusalNotAnError(t *testing.T) {
	mm := nodeReply[int64]{Replied: true, Err: membershipRefusal()}
	if mm.Err.Kind != KindMembership {
		t.Fatalf("MEMBERSHIP classified as %q", mm.Err.Kind)
	}
	// Like "held by someone else": not granted (poll again), flagged so it is reported.
	d := decideAfterAcquire(quorumCorrect, []nodeReply[int64]{mm, busy, g(4)}, 0)
	if d.Kind != acqAbort || d.Err != nil || !d.Mismatch || len(d.Release) != 1 {
		t.Fatalf("one refusal, one busy, one grant: %+v", d)
	}
	// Two refusals and a node down: still a refusal, never a backoff.
	d = decideAfterAcquire(quorumCorrect, []nodeReply[int64]{mm, mm, down}, 0)
	if d.Kind != acqAbort || d.Err != nil || !d.Mismatch {
		t.Fatalf("two refusals, one down: %+v", d)
	}
	// A plain split vote is not reported as a mismatch.
	if d = decideAfterAcquire(quorumCorrect, []nodeReply[int64]{busy, busy, g(4)}, 0); d.Mismatch {
		t.Fatalf("busy nodes flagged as a mismatch: %+v", d)
	}
	if d = decideAfterAcquire(quorumCorrect, []nodeReply[int64]{mm, g(8), g(4)}, 0); d.Kind != acqRaise || d.Target != 8 {
		t.Fatalf("a majority without the refusing node: %+v", d)
	}
	// In a renewal round like a 0.
	y := nodeReply[bool]{Replied: true, Value: true}
	rm := nodeReply[bool]{Replied: true, Err: membershipRefusal()}
	for _, c := range []struct {
		r    []nodeReply[bool]
		want afterRenewKind
	}{
		{[]nodeReply[bool]{y, rm, rm}, renewQuorumLost},
		{[]nodeReply[bool]{y, y, rm}, renewQuorumRenewed},
		{[]nodeReply[bool]{y, rm, {}}, renewQuorumUnknown},
	} {
		if got := decideAfterRenew(quorumCorrect, c.r); got != c.want {
			t.Fatalf("renew %+v: %v, want %v", c.r, got, c.want)
		}
	}
	// In a raise round: no confirmation, and not the reported fault of the refused-RAISE
	// rule, which a NOPERM still is.
	if raiseConfirmed(quorumCorrect, []nodeReply[bool]{y, rm, {}}, 3) {
		t.Fatal("a MEMBERSHIP refusal confirmed the raise")
	}
	if e := raiseRefusal([]nodeReply[bool]{y, rm, {}}, []int{0, 1}); e != nil {
		t.Fatalf("a MEMBERSHIP refusal of the raise reported as a fault: %v", e)
	}
	noperm := nodeReply[bool]{Replied: true, Err: &cmdError{Kind: KindServer, Msg: "NOPERM"}}
	if e := raiseRefusal([]nodeReply[bool]{y, noperm, {}}, []int{0, 1}); e == nil {
		t.Fatal("a NOPERM refusal of the raise is no longer reported")
	}
}

func TestMembershipIDOfClients(t *testing.T) {
	mk := func(addr string) *redis.Client { return redis.NewClient(&redis.Options{Addr: addr}) }
	a, b, c := mk("Node-A.Example.:7000"), mk("node-b.example:7000"), mk("node-c.example:6379")
	u := redis.NewClient(&redis.Options{Network: "unix", Addr: "/run/r.sock"})
	defer func() { _ = a.Close(); _ = b.Close(); _ = c.Close(); _ = u.Close() }()
	got, err := MembershipID([]*redis.Client{c, a, b})
	if err != nil || got != "93db45cf361ecc72" {
		t.Fatalf("MembershipID = %q, %v; want the vector's 93db45cf361ecc72", got, err)
	}
	if id, _ := nodeIdentity(u.Options()); id != "unix:/run/r.sock" {
		t.Fatalf("unix identity %q", id)
	}
	tr := newQuorumTransport([]*redis.Client{a, b, c}, "k", params{TTLMillis: 1000}, time.Second, quorumCorrect)
	want := []any{"LEASE.RENEW", "k", "o#1", int64(3), int64(1000), "MEMBERSHIP", got}
	if args := tr.withMembership("LEASE.RENEW", "k", "o#1", int64(3), int64(1000)); len(args) != len(want) || args[5] != want[5] || args[6] != want[6] {
		t.Fatalf("RENEW args %v, want %v", args, want)
	}
}

// logCount counts log records whose text contains a word (any goroutine).
type logCount struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	word string
}

func (l *logCount) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logCount) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), l.word)
}

// mixedLists runs the scenario; returns the longest time X and Y both led (0: never
// together). withID false is the negative control: the protocol before Q9.
func mixedLists(t *testing.T, withID bool, logs *logCount) time.Duration {
	ss := quorumServers(t, 4)
	cs := nodeClients(t, ss)
	old := []*redis.Client{cs[0], cs[1], cs[2]}
	nw := []*redis.Client{cs[0], cs[1], cs[3]}
	key := "q:members"
	prep := func(e *Elector) {
		q := e.tr.(*quorumTransport)
		if !withID {
			q.membership = ""
		}
		if logs != nil {
			q.log = slog.New(slog.NewTextHandler(logs, nil))
		}
	}
	// Before the replacement: a reign of the old list on all three nodes, then a hand-over.
	w := startElectorWith(t, "w", quorumCfg(old, key, time.Second), prep)
	waitTerm(t, w.started, 5*time.Second, "w leads")
	w.stop(5 * time.Second)
	// X campaigns with B frozen: it reigns on the bare majority {A, C}.
	ss[1].signal(syscall.SIGSTOP)
	x := startElectorWith(t, "x", quorumCfg(old, key, time.Second), prep)
	select {
	case <-x.started:
	case <-time.After(5 * time.Second):
		ss[1].signal(syscall.SIGCONT)
		t.Fatal("x does not lead")
	}
	ss[1].signal(syscall.SIGCONT)
	// Y, already moved to the new list, campaigns while X leads.
	y := startElectorWith(t, "y", quorumCfg(nw, key, time.Second), prep)
	var since time.Time
	var longest time.Duration
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		if x.e.IsLeader() && y.e.IsLeader() {
			if since.IsZero() {
				since = time.Now()
			}
			longest = max(longest, time.Since(since))
		} else {
			since = time.Time{}
		}
	}
	x.stop(5 * time.Second)
	y.stop(5 * time.Second)
	return longest
}

// Would catch: two electors with different node lists leading at once (issue 32 item 1).
func TestQuorumElectorsWithDifferentNodeListsNeverLeadTogether(t *testing.T) {
	logs := &logCount{word: "reason=membership_mismatch"}
	if overlap := mixedLists(t, true, logs); overlap != 0 {
		t.Fatalf("X (old list) and Y (new list) led together for %v", overlap)
	}
	// Y's rounds were refused for membership every 50..100 ms for 3 s: reported once.
	if n := logs.count(); n != 1 {
		t.Fatalf("the membership refusal was logged %d times, want once:\n%s", n, logs.buf.String())
	}
}

// The negative control: the same scenario without the membership id must overlap, or the
// test above proves nothing.
func TestQuorumWithoutTheMembershipIDTheyDoLeadTogether(t *testing.T) {
	overlap := mixedLists(t, false, nil)
	measured(t, "quorum without MEMBERSHIP: X and Y led together for %v", overlap)
	if overlap < 500*time.Millisecond {
		t.Fatalf("the scenario no longer reproduces issue 32 (%v together)", overlap)
	}
}
