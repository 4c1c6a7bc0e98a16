package lease

import (
	"reflect"
	"testing"
	"time"
)

// The same tables as client/src/quorum_decide.rs's tests.

func g(t int64) nodeReply[int64] { return nodeReply[int64]{Replied: true, Value: t} }

var (
	busy  = nodeReply[int64]{Replied: true}
	down  = nodeReply[int64]{Replied: true, Err: &cmdError{Kind: KindConnection}}
	grace = nodeReply[int64]{Replied: true, Err: &cmdError{Kind: KindGrace, Grace: 700 * time.Millisecond}}
	quiet = nodeReply[int64]{}
)

func TestMajorityOfN(t *testing.T) {
	var got []int
	for n := 1; n <= 7; n++ {
		got = append(got, majority(n))
	}
	if want := []int{1, 2, 2, 3, 3, 4, 4}; !reflect.DeepEqual(got, want) {
		t.Fatalf("majority: %v, want %v", got, want)
	}
	if quorumMinority.need(5) != 1 || quorumNoUnify.need(5) != 3 || quorumCorrect.need(5) != 3 {
		t.Fatal("need")
	}
}

func TestQuorumAfterAcquire(t *testing.T) {
	type tc struct {
		name    string
		control quorumControl
		replies []nodeReply[int64]
		want    afterAcquire
	}
	cases := []tc{
		{"all grant: raise all to the maximum", quorumCorrect, []nodeReply[int64]{g(10), g(30), g(20)},
			afterAcquire{Kind: acqRaise, Target: 30, Nodes: []int{0, 1, 2}}},
		{"bare majority, one silent", quorumCorrect, []nodeReply[int64]{g(10), quiet, g(20)},
			afterAcquire{Kind: acqRaise, Target: 20, Nodes: []int{0, 2}}},
		{"split vote: one grant, one busy, one down -> release, poll again", quorumCorrect, []nodeReply[int64]{g(10), busy, down},
			afterAcquire{Kind: acqAbort, Release: []nodeToken{{0, 10}}}},
		{"held elsewhere on a majority", quorumCorrect, []nodeReply[int64]{busy, busy, g(5)},
			afterAcquire{Kind: acqAbort, Release: []nodeToken{{2, 5}}}},
		{"majority unreachable: error, back off", quorumCorrect, []nodeReply[int64]{g(10), down, quiet},
			afterAcquire{Kind: acqAbort, Release: []nodeToken{{0, 10}}, Err: down.Err}},
		{"grace in the way: the loop learns how long", quorumCorrect, []nodeReply[int64]{down, grace, g(3)},
			afterAcquire{Kind: acqAbort, Release: []nodeToken{{2, 3}}, Err: grace.Err}},
		{"all silent: a timeout", quorumCorrect, []nodeReply[int64]{quiet, quiet, quiet},
			afterAcquire{Kind: acqAbort, Err: &cmdError{Kind: KindTimeout, Msg: "quorum: no reply from enough nodes"}}},
		{"5 nodes, 3 grants", quorumCorrect, []nodeReply[int64]{g(1), busy, g(9), down, g(4)},
			afterAcquire{Kind: acqRaise, Target: 9, Nodes: []int{0, 2, 4}}},
		{"5 nodes, 2 grants is not enough", quorumCorrect, []nodeReply[int64]{g(1), busy, g(9), busy, busy},
			afterAcquire{Kind: acqAbort, Release: []nodeToken{{0, 1}, {2, 9}}}},
		{"control minority: one grant leads", quorumMinority, []nodeReply[int64]{busy, g(7), busy},
			afterAcquire{Kind: acqRaise, Target: 7, Nodes: []int{1}}},
		{"control no-unify: the picked granter's token (pick 7 % 2 = the second), no raise", quorumNoUnify, []nodeReply[int64]{quiet, g(50), g(20)},
			afterAcquire{Kind: acqActUnified, Token: 20, PerNode: []int64{0, 50, 20}}},
	}
	for _, c := range cases {
		got := decideAfterAcquire(c.control, c.replies, 7)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestQuorumRaiseAndRenew(t *testing.T) {
	y := nodeReply[bool]{Replied: true, Value: true}
	n0 := nodeReply[bool]{Replied: true}
	e := nodeReply[bool]{Replied: true, Err: &cmdError{Kind: KindTimeout}}
	q := nodeReply[bool]{}
	if !raiseConfirmed(quorumCorrect, []nodeReply[bool]{y, y, n0}, 3) {
		t.Error("two of three confirmed")
	}
	if raiseConfirmed(quorumCorrect, []nodeReply[bool]{y, q, n0}, 3) {
		t.Error("one of three confirmed")
	}
	if raiseConfirmed(quorumCorrect, []nodeReply[bool]{y, e, e}, 3) {
		t.Error("errors confirm nothing")
	}
	if !raiseConfirmed(quorumMinority, []nodeReply[bool]{y, q, q}, 3) {
		t.Error("control minority")
	}
	cases := []struct {
		name    string
		replies []nodeReply[bool]
		want    afterRenewKind
	}{
		{"all renew", []nodeReply[bool]{y, y, y}, renewQuorumRenewed},
		{"majority renews", []nodeReply[bool]{y, n0, y}, renewQuorumRenewed},
		{"majority says 0", []nodeReply[bool]{y, n0, n0}, renewQuorumLost},
		{"one 1, one 0, one silent", []nodeReply[bool]{y, n0, q}, renewQuorumUnknown},
		{"errors", []nodeReply[bool]{e, e, y}, renewQuorumUnknown},
		{"5 nodes: two 1s and three 0s", []nodeReply[bool]{y, y, n0, n0, n0}, renewQuorumLost},
		{"5 nodes: two 1s, two 0s, one silent", []nodeReply[bool]{y, y, n0, n0, q}, renewQuorumUnknown},
	}
	for _, c := range cases {
		if got := decideAfterRenew(quorumCorrect, c.replies); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestQuorumIdentities(t *testing.T) {
	known := []string{"a", "", "c"}
	for _, c := range []struct {
		me   int
		seen string
		want identityCheck
	}{
		{1, "b", identityCheck{Kind: identityFirst}},
		{0, "a", identityCheck{Kind: identitySame}},
		{2, "s", identityCheck{Kind: identityChanged}},
		// Node 1 turns out to be node 0's server: it must not count a second time.
		{1, "a", identityCheck{Kind: identityDuplicate, Of: 0}},
		// A swapped node that lands on another node's server is a duplicate, not a change.
		{2, "a", identityCheck{Kind: identityDuplicate, Of: 0}},
	} {
		if got := checkIdentity(c.me, c.seen, known); got != c.want {
			t.Errorf("checkIdentity(%d, %q): %+v, want %+v", c.me, c.seen, got, c.want)
		}
	}
	if quarantine(time.Second, 30*time.Second, 0) != 30*time.Second || quarantine(45*time.Second, 30*time.Second, 0) != 45*time.Second {
		t.Error("quarantine is at least the TTL")
	}
	// Q7: a duration of the server's clock, stretched by the drift bound (rounded up).
	if got := quarantine(time.Second, 30*time.Second, 0.01); got < 30303030*time.Microsecond || got > 30303031*time.Microsecond {
		t.Errorf("quarantine with 1%% drift: %v", got)
	}
}

// Q10: one wait node for every order of a node set; wait only on a held wait node, after a
// round that released nothing, with a BLOCK budget left after two steps.
func TestWaitNodeAndWhenToWait(t *testing.T) {
	a := []string{"redis://c:1", "redis://a:1", "redis://b:1"}
	b := []string{"redis://b:1", "redis://a:1", "redis://c:1"}
	if a[waitNode(a)] != "redis://a:1" || b[waitNode(b)] != "redis://a:1" || waitNode(nil) != 0 {
		t.Fatal("the wait node is the smallest URL")
	}
	busy := nodeReply[int64]{Replied: true}
	down := nodeReply[int64]{Replied: true, Err: &cmdError{Kind: KindConnection}}
	held := []nodeReply[int64]{busy, busy, {}}
	op := 200 * time.Millisecond
	for _, c := range []struct {
		name     string
		replies  []nodeReply[int64]
		node     int
		released bool
		block    time.Duration
		has      bool
		want     time.Duration
		ok       bool
	}{
		{"held, nothing released", held, 0, false, 5 * time.Second, true, 4800 * time.Millisecond, true},
		{"the wait node silent", held, 2, false, 5 * time.Second, true, 0, false},
		{"the wait node failed", []nodeReply[int64]{down, busy, busy}, 0, false, 5 * time.Second, true, 0, false},
		{"partial grants released: owner retired (Q4)", held, 0, true, 5 * time.Second, true, 0, false},
		{"the wait node granted", []nodeReply[int64]{{Replied: true, Value: 7}, busy, busy}, 0, false, 5 * time.Second, true, 0, false},
		{"no BLOCK budget", held, 0, false, 0, false, 0, false},
		{"too little BLOCK budget", held, 0, false, op, true, 0, false},
	} {
		got, ok := waitAfterRefusal(c.replies, c.node, c.released, c.block, c.has, op, 9*time.Second)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: %v %v, want %v %v", c.name, got, ok, c.want, c.ok)
		}
	}
	// At most the cap: a wait node that stops answering must not hold us for the BLOCK.
	if got, ok := waitAfterRefusal(held, 0, false, 5*time.Second, true, op, 333*time.Millisecond); !ok || got != 333*time.Millisecond {
		t.Errorf("capped: %v %v", got, ok)
	}
}
