package lease

// Quorum mode's decisions (docs/client-protocol.md §9a, rules Q1–Q8; docs/quorum.md) as plain
// functions of the replies of one round: no I/O, no clock. quorum.go sends the commands and
// executes what these return. They mirror client/src/quorum_decide.rs. The single-node rules
// (deadline from the instant before the first send, stop point, backoff) stay those of
// decide.go, because the quorum transport sits under the same election loop.

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// majority is the smallest number of nodes that is more than half of n (Q1): any two sets of
// this size share a node, which is what both safety arguments rest on (docs/quorum.md §3).
func majority(n int) int { return n/2 + 1 }

// quorumControl selects a deliberately broken variant for negative controls. Never use
// outside a test: each one breaks a step of the safety argument, and a check must catch it.
type quorumControl int

const (
	// quorumCorrect is the protocol as documented.
	quorumCorrect quorumControl = iota
	// quorumNoUnify skips the raise: act on the token of any one granting node (pick), as a
	// client that fences with "the grant it saw first" would; each node is renewed with its
	// own token (breaks "one token per reign, above every earlier one").
	quorumNoUnify
	// quorumMinority leads on a single grant (breaks "any two majorities intersect").
	quorumMinority
)

// need is how many grants (and raise confirmations) a round needs on n nodes.
func (c quorumControl) need(n int) int {
	if c == quorumMinority {
		return 1
	}
	return majority(n)
}

// identityKind is what the server identity (run_id of INFO server) reported by a node's new
// connection means (Q6, Q7).
type identityKind int

const (
	// identityFirst: the first identity seen at this node: remember it.
	identityFirst identityKind = iota
	// identitySame: the same server as before (a reconnect).
	identitySame
	// identityChanged: another server answers at this node's address now (a restart, or a
	// VIP, DNS name or proxy moved to a spare). It has none of the old one's leases, and if
	// it has been up longer than its grace it grants at once: it counts toward no grant and
	// no renewal for at least one max TTL, like a node that lost its state (Q7).
	identityChanged
	// identityDuplicate: the same server as node Of (one URL twice under another spelling, a
	// unix socket and a TCP port of one server, db 0 and db 1): one server must never count
	// twice (Q6).
	identityDuplicate
)

type identityCheck struct {
	Kind identityKind
	Of   int // identityDuplicate: the other node
}

// checkIdentity: node me's new connection reports seen; known[i] is the identity last seen
// at node i ("" = none yet). A duplicate is checked first: a swapped node that lands on
// another node's server is a duplicate, not a change.
func checkIdentity(me int, seen string, known []string) identityCheck {
	for i, k := range known {
		if i != me && k != "" && k == seen {
			return identityCheck{Kind: identityDuplicate, Of: i}
		}
	}
	switch {
	case me >= len(known) || known[me] == "":
		return identityCheck{Kind: identityFirst}
	case known[me] == seen:
		return identityCheck{Kind: identitySame}
	}
	return identityCheck{Kind: identityChanged}
}

// quarantine is how long a node whose identity changed counts toward nothing, on this
// elector's clock: at least the longest TTL any elector may have used on it (configured,
// default the module's default lease.max-ttl, 30 s; never less than this elector's own TTL)
// of the *server's* clock, so stretched by the drift bound: a server duration d lasts at most
// d / (1 - drift) on an elector clock within it (Q7). Rounded up: longer is the safe side.
func quarantine(ttl, configured time.Duration, drift float64) time.Duration {
	d := max(ttl, configured)
	if drift > 0 && drift < 1 {
		return time.Duration(math.Ceil(float64(d) / (1 - drift)))
	}
	return d
}

// tcpIdentity is a TCP node's identity in the membership id (Q9,
// conformance/vectors/quorum/membership_id.json): tcp:<host>:<port>, the host in lower case,
// an IPv6 address without its brackets, a trailing dot removed. The scheme (TLS or not),
// credentials, db number and query are left out: they do not change which server it is.
func tcpIdentity(host string, port int) string {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	host = strings.TrimSuffix(host, ".")
	return "tcp:" + strings.ToLower(host) + ":" + strconv.Itoa(port)
}

// unixIdentity is a unix socket node's identity (Q9): unix:<path>, the path as written.
func unixIdentity(path string) string { return "unix:" + path }

// membershipID is the membership id of a node list (Q9): SHA-256 of the identities sorted by
// their bytes and joined by "\n", the first 8 bytes read big endian; 0 (never seen) becomes 1,
// because the module reserves 0 for "bound to nothing". Sorted, so the list's order does not
// matter; every identity counts, so any change of the set changes the id: electors with
// different node lists (a node replacement half done) are refused by each other's nodes
// instead of forming disjoint majorities (issue 32).
func membershipID(identities []string) uint64 {
	ids := append([]string(nil), identities...)
	sort.Strings(ids) // Go compares strings by their bytes
	sum := sha256.Sum256([]byte(strings.Join(ids, "\n")))
	return max(binary.BigEndian.Uint64(sum[:8]), 1)
}

// membershipHex is a membership id as the wire spells it: 16 lower-case hex digits.
func membershipHex(id uint64) string { return fmt.Sprintf("%016x", id) }

// isMembership: a node's MEMBERSHIP refusal (Q9): its key is bound to another node list.
func isMembership(e *cmdError) bool { return e != nil && e.Kind == KindMembership }

// nodeReply is one node's reply in a round. Replied false = no reply before the round's
// limit (the node may or may not have run the command); otherwise Err or Value.
type nodeReply[T any] struct {
	Replied bool
	Value   T
	Err     *cmdError
}

func (r nodeReply[T]) ok() bool { return r.Replied && r.Err == nil }

// nodeToken is a (node, token) pair: a grant to release.
type nodeToken struct {
	Node  int
	Token int64
}

type afterAcquireKind int

const (
	// acqRaise: enough grants: raise the lease on Nodes to Target (the highest token
	// granted), then lead on Target if enough confirm (Q3).
	acqRaise afterAcquireKind = iota
	// acqActUnified: negative control quorumNoUnify: lead at once on Token, each node
	// keeping its own token (PerNode, 0 = none).
	acqActUnified
	// acqAbort: not enough grants: release the partial grants in Release, then tell the loop
	// "not granted" (Err nil) or the error Err (Q4).
	acqAbort
)

type afterAcquire struct {
	Kind    afterAcquireKind
	Target  int64
	Nodes   []int
	Token   int64
	PerNode []int64
	Release []nodeToken
	Err     *cmdError // acqAbort: nil = not granted (poll again), else back off (R12)
	// Mismatch (acqAbort, Err nil): not granted, and at least one node refused because its
	// key is bound to another membership (Q9): to the loop "not granted" (polling again is
	// harmless, the other list's reign may end), but reported (membership_mismatch), because
	// only an operator can resolve it (docs/quorum.md §4.1).
	Mismatch bool
}

// decideAfterAcquire is step 1 of a campaign round: replies[i] is node i's LEASE.ACQUIRE
// reply (Value > 0 = granted, 0 = nil: held by another). Why the maximum: every node of the
// previous reign's raise-majority has that reign's token as its watermark, any majority
// contains one of them, and that node only grants above it; the maximum over our majority is
// therefore above every earlier reign's token. pick only matters for quorumNoUnify.
func decideAfterAcquire(c quorumControl, replies []nodeReply[int64], pick int) afterAcquire {
	n := len(replies)
	need := c.need(n)
	var granted []nodeToken
	for i, r := range replies {
		if r.ok() && r.Value > 0 {
			granted = append(granted, nodeToken{i, r.Value})
		}
	}
	if n > 0 && len(granted) >= need {
		if c == quorumNoUnify {
			per := make([]int64, n)
			for _, g := range granted {
				per[g.Node] = g.Token
			}
			if pick < 0 {
				pick = -pick
			}
			return afterAcquire{Kind: acqActUnified, Token: granted[pick%len(granted)].Token, PerNode: per}
		}
		var target int64
		nodes := make([]int, 0, len(granted))
		for _, g := range granted {
			target = max(target, g.Token)
			nodes = append(nodes, g.Node)
		}
		return afterAcquire{Kind: acqRaise, Target: target, Nodes: nodes}
	}
	refused, silent, mismatch := 0, 0, 0
	var failed []*cmdError
	for _, r := range replies {
		switch {
		case !r.Replied:
			silent++
		case isMembership(r.Err):
			// A refusal like "held by someone else", not an error (Q9): that node will
			// not grant us, whatever we retry.
			refused++
			mismatch++
		case r.Err != nil:
			failed = append(failed, r.Err)
		case r.Value <= 0:
			refused++
		}
	}
	out := afterAcquire{Kind: acqAbort, Release: granted}
	// Why an error only when refusals alone cannot explain it: if enough nodes answered
	// "held by someone else", polling again soon is right; if a majority was out of reach
	// because of errors and silence, backing off is (and GRACE tells the loop how long).
	if refused+need > n || len(failed)+silent <= n-need {
		out.Mismatch = mismatch > 0
		return out
	}
	for _, e := range failed {
		if e.Kind == KindGrace {
			out.Err = e
			return out
		}
	}
	if len(failed) > 0 {
		out.Err = failed[0]
	} else {
		out.Err = &cmdError{Kind: KindTimeout, Msg: "quorum: no reply from enough nodes"}
	}
	return out
}

// raiseConfirmed is step 2: did enough nodes confirm the raise (reply 1) to lead on the
// target token? Why the raise must reach a majority before we act: the next reign's token is
// above ours only because its majority meets a node that knows ours (docs/quorum.md §3).
func raiseConfirmed(c quorumControl, replies []nodeReply[bool], n int) bool {
	yes := 0
	for _, r := range replies {
		if r.ok() && r.Value {
			yes++
		}
	}
	return yes >= c.need(n)
}

type afterRenewKind int

const (
	// renewQuorumRenewed: a majority extended the lease: the new local deadline counts from
	// this round's send instant.
	renewQuorumRenewed afterRenewKind = iota
	// renewQuorumLost: so many nodes said "not held" (0) that a majority can no longer
	// confirm: the lease is lost, step down now (Q5, R9).
	renewQuorumLost
	// renewQuorumUnknown: neither yet (errors, silence): keep the old deadline and retry
	// until the stop point.
	renewQuorumUnknown
)

// renewRefused: a renewal reply that means "this node does not renew us": 0, or (Q9) a
// refusal because the node's key is now bound to another membership (the operator moved it).
func renewRefused(r nodeReply[bool]) bool {
	return (r.ok() && !r.Value) || (r.Replied && isMembership(r.Err))
}

// decideAfterRenew decides a renewal round (Q5; a MEMBERSHIP refusal counts as a 0, Q9).
func decideAfterRenew(c quorumControl, replies []nodeReply[bool]) afterRenewKind {
	n := len(replies)
	need := c.need(n)
	ones, zeros := 0, 0
	for _, r := range replies {
		if r.ok() && r.Value {
			ones++
		} else if renewRefused(r) {
			zeros++
		}
	}
	switch {
	case n > 0 && ones >= need:
		return renewQuorumRenewed
	case zeros > n-need:
		return renewQuorumLost
	}
	return renewQuorumUnknown
}

// waitNode is the node every follower waits on (Q10): the one with the smallest URL, so that
// every elector of one membership (the same node set, in any order) picks the same node.
// Why one node and not all: waiting with BLOCK on every node would let a release wake a
// *different* follower on each node (each node wakes its own first waiter), a split vote
// every time; on one node exactly one follower wakes, holding that node, and its next round
// meets the other nodes just freed by the same release round.
func waitNode(urls []string) int {
	best := 0
	for i := range urls {
		if urls[i] < urls[best] {
			best = i
		}
	}
	return best
}

// waitAfterRefusal is how long to wait on the wait node after a round that made no reign
// (Q10); ok false = report "not granted" at once (the loop then pauses and polls, as before
// Q10). hasBlock false = the loop gave no BLOCK budget (an unconfirmed grant's re-ask).
//
// Wait only when the round released nothing (a round that released partial grants retired
// its owner: the loop must take the next one first, Q4) and the wait node itself answered
// "held" (someone holds it: its release or expiry is what wakes us; a node that was silent or
// failed would only make us wait for nothing). The wait is the loop's BLOCK budget minus two
// steps: the round before and the round after the wake must fit in the loop's limit for one
// blocking acquire (block + op_timeout), and at most capWait (the renew interval): only the
// wait node can wake us, so if it stops answering while the other nodes free up (frozen, cut
// off), the next round comes after at most capWait instead of the whole BLOCK.
func waitAfterRefusal(replies []nodeReply[int64], node int, releasedAny bool, block time.Duration, hasBlock bool, opTimeout, capWait time.Duration) (time.Duration, bool) {
	if !hasBlock {
		return 0, false
	}
	b := min(block-opTimeout, capWait)
	held := node >= 0 && node < len(replies) && replies[node].ok() && replies[node].Value <= 0
	if held && !releasedAny && b >= time.Millisecond {
		return b, true
	}
	return 0, false
}
