package lease

// Quorum mode (docs/client-protocol.md §9a, docs/quorum.md): one lease across N independent
// Redis primaries with the module, one fencing token per reign that rises across reigns.
//
// quorumTransport is a leaseTransport under the same election loop, so every timing rule of
// the single-node loop holds unchanged: the local deadline counts from the instant the loop
// takes before calling acquire/renew (which send to every node in parallel), the task stops
// at the stop point, a reply after the stop point does not start a reign (R7). What changes
// is what one "reply" means: a round. The decisions are quorum_decide.go's.
//
//   - acquire: LEASE.ACQUIRE key owner ttl on all nodes, never BLOCK (Q2); with a majority of
//     grants, LEASE.RAISE every granting node to the highest token granted; a reign only if a
//     majority confirmed the raise (Q3). Otherwise the partial grants are released at once
//     and the owner is retired (Q4). A plain refusal waits with BLOCK on the wait node alone,
//     then runs a fresh round (Q10).
//   - renew: LEASE.RENEW on all nodes; renewed only on a majority of 1s; lost once a majority
//     can no longer say 1; the nodes that still said 1 are released only after the task
//     stopped (Q5).
//   - release: on all nodes, the wait node's last (Q10).
//
// How go-redis is used: each node's *redis.Client (the application's) is copied into one of
// the elector's own (same options: address, TLS, credentials, dialer) with
// ContextTimeoutEnabled on, so every read is bounded by the round's step (op_timeout/2), no
// retries (a round is retried by the loop, with a fresh send instant), and an OnConnect hook
// that reads the server's run_id on every new connection (Q6, Q7).

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

type quorumTransport struct {
	key       string
	ttlMillis int64
	control   quorumControl
	// step bounds one step of a round: each node's reply is awaited at most this long, so
	// that the two steps of a campaign (acquire, raise) fit in op_timeout.
	step       time.Duration
	quarantine time.Duration
	opts       []*redis.Options // the application's, one per node
	clients    []atomic.Pointer[redis.Client]

	mu sync.Mutex // guards everything below
	// identities[i] is the server identity (run_id) last seen at node i, "" = none yet.
	identities []string
	// quarantinedUntil[i]: node i counts toward nothing before this instant (Q7).
	quarantinedUntil []time.Time
	// held[i] is the token node i holds for us in the current reign (all the reign's token,
	// except under the no-unify control), 0 = none.
	held []int64
	// gen counts acquire and release calls: a renewal round the loop gave up on that ends
	// after the next one began must not touch the new holding.
	gen uint64
	// owner is the owner of the last acquire round (what get looks for).
	owner string
	// retired: an acquire round released partial grants under owner (takeRetiredOwner).
	retired bool
	// roundStart: the instant before the sends of the round the last acquire's result rests
	// on, when that round ran after a wait (Q10, takeRoundStart); zero = none.
	roundStart time.Time

	// waitNode is the node followers wait on with BLOCK (Q10, waitNode in quorum_decide.go).
	waitNode int
	// opTimeout: the loop's per-command budget; the wait leaves room for two steps.
	opTimeout time.Duration
	// renewInterval: the longest wait on the wait node (Q10).
	renewInterval time.Duration

	// membership is MEMBERSHIP <id> of the node list, sent with every ACQUIRE, RENEW and
	// RAISE (Q9); "" only in the negative control. Why (issue 32): electors with different
	// node lists (a node replacement half done) can find disjoint majorities; binding each
	// key to one list's id keeps them apart.
	membership string
	// membershipReported: the last round's membership refusal was logged (once per change;
	// only the loop's goroutine runs acquire).
	membershipReported bool
	log                *slog.Logger
}

// newQuorumTransport: the nodes were validated by Config.Validate (at least 2, distinct).
func newQuorumTransport(nodes []*redis.Client, key string, p params, q time.Duration, control quorumControl) *quorumTransport {
	n := len(nodes)
	t := &quorumTransport{
		key:              key,
		ttlMillis:        p.TTLMillis,
		control:          control,
		step:             max(p.OpTimeout/2, time.Millisecond),
		quarantine:       quarantine(time.Duration(p.TTLMillis)*time.Millisecond, q, p.Drift),
		clients:          make([]atomic.Pointer[redis.Client], n),
		identities:       make([]string, n),
		quarantinedUntil: make([]time.Time, n),
		held:             make([]int64, n),
		opTimeout:        p.OpTimeout,
		renewInterval:    p.RenewInterval,
	}
	names := make([]string, n)
	for i, c := range nodes {
		t.opts = append(t.opts, c.Options())
		names[i] = nodeURL(c.Options())
	}
	t.waitNode = waitNode(names)
	// Config.Validate checked that every node has an identity.
	t.membership, _ = membershipOf(t.opts)
	t.log = slog.Default()
	return t
}

// nodeURL is the URL a node is known by for Q10's wait node (the smallest one), built from its
// options as redis://addr/db (rediss:// with TLS, unix://path): every elector of one
// membership must pick the same node, in any list order (only liveness depends on it).
func nodeURL(o *redis.Options) string {
	if o.Network == "unix" {
		return "unix://" + o.Addr
	}
	scheme := "redis"
	if o.TLSConfig != nil {
		scheme = "rediss"
	}
	return fmt.Sprintf("%s://%s/%d", scheme, o.Addr, o.DB)
}

// withMembership appends MEMBERSHIP <id> (Q9) to an ACQUIRE, RENEW or RAISE.
func (t *quorumTransport) withMembership(args ...any) []any {
	if t.membership == "" {
		return args
	}
	return append(args, "MEMBERSHIP", t.membership)
}

// reportMembership logs a round lost to membership refusals once, until a round ends
// otherwise: only an operator can fix it, and the loop polls every 50..100 ms.
func (t *quorumTransport) reportMembership(refused bool) {
	if refused && !t.membershipReported {
		t.log.Error("quorum: nodes refuse this elector's node list (their lease key is bound to another membership); electors use different node lists? see docs/quorum.md 4.1",
			"membership", t.membership, "reason", "membership_mismatch")
	}
	t.membershipReported = refused
}

// nodeIdentity is a node's identity in the membership id (Q9), from its options.
func nodeIdentity(o *redis.Options) (string, error) {
	if o.Network == "unix" {
		return unixIdentity(o.Addr), nil
	}
	host, port, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return "", fmt.Errorf("node address %q: %v", o.Addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p > 65535 {
		return "", fmt.Errorf("node address %q: bad port", o.Addr)
	}
	if host == "" {
		host = "localhost" // go-redis dials ":6379" as the local host
	}
	return tcpIdentity(host, p), nil
}

func membershipOf(opts []*redis.Options) (string, error) {
	ids := make([]string, len(opts))
	for i, o := range opts {
		id, err := nodeIdentity(o)
		if err != nil {
			return "", err
		}
		ids[i] = id
	}
	return membershipHex(membershipID(ids)), nil
}

// MembershipID is the membership id of a quorum node list as the wire spells it (16 hex
// digits, protocol Q9): every quorum elector sends it with each ACQUIRE, RENEW and RAISE,
// and it is what an operator passes to LEASE.MEMBERSHIP key old new when the node set
// changes (docs/quorum.md §4.1). The order of the list does not matter; the spelling of each
// address does (localhost and 127.0.0.1 differ).
func MembershipID(nodes []*redis.Client) (string, error) {
	opts := make([]*redis.Options, len(nodes))
	for i, c := range nodes {
		opts[i] = c.Options()
	}
	return membershipOf(opts)
}

// open makes the elector's own client for every node (see the file comment).
func (t *quorumTransport) open() func() {
	var own []*redis.Client
	for i := range t.opts {
		opt := t.ownOptions(i)
		c := redis.NewClient(&opt)
		t.clients[i].Store(c)
		own = append(own, c)
	}
	return func() {
		for i, c := range own {
			t.clients[i].CompareAndSwap(c, nil)
			_ = c.Close()
		}
	}
}

// ownOptions are node i's options for a client of the elector's own (see the file comment).
func (t *quorumTransport) ownOptions(i int) redis.Options {
	o := t.opts[i]
	opt := *o
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1
	// A dead node must fail the step at once, not after go-redis's 5 dial attempts.
	opt.DialerRetries = 1
	// Server-side maintenance hand-offs (Redis Enterprise) would move a node's connections
	// to another endpoint behind our back; a node is one server here. (Also: the
	// application's client already registered its handlers on these options.)
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	userHook := o.OnConnect
	opt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		if userHook != nil {
			if err := userHook(ctx, cn); err != nil {
				return err
			}
		}
		return t.checkNew(ctx, i, cn)
	}
	return opt
}

// blockingAcquire sends Q10's LEASE.ACQUIRE ... BLOCK to node i on a client of its own (one
// connection, identity-checked like every other), closed afterwards. Why not the node's
// shared client: a blocked connection holds back every later command on it, so the next
// round would find this node silent; and if the wait is abandoned (resign, the loop's limit:
// ctx), closing the connection is what tells the server to stop waiting for us (a grant it
// made just before is found and released by the loop's stray release, as for any abandoned
// acquire). Returns the token (0 = nil: timed out) or the error, and the function that
// closes the wait's client: when the wait was answered, the caller closes it after the fresh
// round (nothing is pending on it then); otherwise it is closed already, which is what
// withdraws the wait.
func (t *quorumTransport) blockingAcquire(ctx context.Context, i int, owner string, wait time.Duration) (int64, func(), *cmdError) {
	if _, cerr := t.usable(i); cerr != nil {
		return 0, func() {}, cerr
	}
	opt := t.ownOptions(i)
	opt.PoolSize = 1
	opt.MaxIdleConns = 0
	// The reply comes at the end of the BLOCK: the read must outlast it.
	opt.ReadTimeout = wait + t.step + time.Second
	c := redis.NewClient(&opt)
	closeWait := func() { _ = c.Close() }
	wctx, cancel := context.WithTimeout(ctx, wait+t.step)
	defer cancel()
	ch := make(chan acquireResult, 1)
	go func() {
		ch <- parseToken(c.Do(wctx, "LEASE.ACQUIRE", t.key, owner, t.ttlMillis, "BLOCK", wireMS(wait)).Result())
	}()
	select {
	case r := <-ch:
		if r.Err != nil || r.Token <= 0 {
			closeWait()
			return r.Token, func() {}, r.Err
		}
		return r.Token, closeWait, nil
	case <-wctx.Done():
		// A blocked read may not notice the context: closing the client ends it.
		closeWait()
		return 0, func() {}, &cmdError{Kind: KindTimeout, Msg: fmt.Sprintf("quorum: node %d: wait abandoned", i+1)}
	}
}

// takeRoundStart: see the leaseTransport interface (Q10).
func (t *quorumTransport) takeRoundStart() (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.roundStart
	t.roundStart = time.Time{}
	return s, !s.IsZero()
}

// runIDOf returns run_id from an INFO server reply, "" if absent.
func runIDOf(info string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "run_id:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// checkNew checks a new connection's server identity (Q6, Q7) and says whether it may be
// used: an error closes it, and the command that opened it fails as a connection error.
func (t *quorumTransport) checkNew(ctx context.Context, i int, cn *redis.Conn) error {
	info, err := cn.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("quorum: node %d: INFO server failed (%v); quorum mode needs each node's run_id (grant +info to the elector's ACL user, docs/security.md §3)", i+1, err)
	}
	id := runIDOf(info)
	if id == "" {
		return fmt.Errorf("quorum: node %d: INFO server has no run_id", i+1)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch c := checkIdentity(i, id, t.identities); c.Kind {
	case identityFirst, identitySame:
		t.identities[i] = id
		return nil
	case identityChanged:
		t.identities[i] = id
		t.quarantinedUntil[i] = time.Now().Add(t.quarantine)
		return fmt.Errorf("quorum: node %d: server identity changed (run_id %s); it counts toward no grant or renewal for %v", i+1, id, t.quarantine)
	default:
		return fmt.Errorf("quorum: node %d is the same server as node %d (same run_id); it counts toward nothing", i+1, c.Of+1)
	}
}

// usable says whether node i may be sent a command now. Why before anything is sent: a
// quarantined node's reply must not count, and a grant it made would only block others.
func (t *quorumTransport) usable(i int) (*redis.Client, *cmdError) {
	t.mu.Lock()
	until := t.quarantinedUntil[i]
	t.mu.Unlock()
	if time.Now().Before(until) {
		return nil, &cmdError{Kind: KindConnection, Msg: fmt.Sprintf("quorum: node %d: quarantined (its server identity changed)", i+1)}
	}
	c := t.clients[i].Load()
	if c == nil {
		return nil, &cmdError{Kind: KindConnection, Msg: "quorum: elector not running"}
	}
	return c, nil
}

// quorumRound sends send(i) to every node in targets in parallel; collects replies until done
// says the round is decided, every target answered, or the step timeout. Nodes that did not
// answer in time (or timed out) are "no reply". Calls still running when the round ends
// finish on their own, bounded by the step: their replies no longer matter.
func quorumRound[T any](ctx context.Context, t *quorumTransport, targets []int,
	send func(ctx context.Context, c *redis.Client, i int) (T, *cmdError),
	done func([]nodeReply[T]) bool) []nodeReply[T] {
	replies := make([]nodeReply[T], len(t.opts))
	type one struct {
		i int
		r nodeReply[T]
	}
	ch := make(chan one, len(targets))
	for _, i := range targets {
		go func() {
			c, cerr := t.usable(i)
			if cerr != nil {
				ch <- one{i, nodeReply[T]{Replied: true, Err: cerr}}
				return
			}
			sctx, cancel := context.WithTimeout(ctx, t.step)
			defer cancel()
			v, err := send(sctx, c, i)
			if err != nil && err.Kind == KindTimeout {
				ch <- one{i, nodeReply[T]{}} // may or may not have run
				return
			}
			ch <- one{i, nodeReply[T]{Replied: true, Value: v, Err: err}}
		}()
	}
	timer := time.NewTimer(t.step)
	defer timer.Stop()
	for range targets {
		select {
		case o := <-ch:
			replies[o.i] = o.r
			if done != nil && done(replies) {
				return replies
			}
		case <-timer.C:
			return replies
		}
	}
	return replies
}

func (t *quorumTransport) all() []int {
	a := make([]int, len(t.opts))
	for i := range a {
		a[i] = i
	}
	return a
}

// releaseOn sends LEASE.RELEASE for every (node, token) in parallel, best effort; returns how
// many released. Not cancelled with ctx: a partial grant left behind blocks everyone for a TTL.
func (t *quorumTransport) releaseOn(ctx context.Context, owner string, pairs []nodeToken) (int, *cmdError) {
	if len(pairs) == 0 {
		return 0, nil
	}
	tok := make(map[int]int64, len(pairs))
	var targets []int
	for _, p := range pairs {
		tok[p.Node] = p.Token
		targets = append(targets, p.Node)
	}
	replies := quorumRound(context.WithoutCancel(ctx), t, targets, func(c context.Context, cl *redis.Client, i int) (bool, *cmdError) {
		v, err := cl.Do(c, "LEASE.RELEASE", t.key, owner, tok[i]).Result()
		return parse01("LEASE.RELEASE", v, err)
	}, nil)
	released := 0
	var first *cmdError
	for _, i := range targets {
		r := replies[i]
		switch {
		case r.ok() && r.Value:
			released++
		case r.ok():
		case r.Err != nil && first == nil:
			first = r.Err
		case !r.Replied && first == nil:
			first = &cmdError{Kind: KindTimeout, Msg: fmt.Sprintf("quorum: node %d: no reply", i+1)}
		}
	}
	if released == 0 && first != nil {
		return 0, first
	}
	return released, nil
}

// acquire is a campaign round (Q2-Q4); after a plain refusal it waits on the wait node and
// runs a fresh round when woken (Q10).
func (t *quorumTransport) acquire(ctx context.Context, owner string, _ params, block time.Duration, hasBlock bool, _ time.Duration, _ func(int64)) acquireResult {
	t.mu.Lock()
	t.roundStart = time.Time{}
	t.mu.Unlock()
	res, refused := t.acquireRound(ctx, owner)
	if refused == nil {
		return res
	}
	wait, ok := waitAfterRefusal(refused, t.waitNode, false, block, hasBlock, t.opTimeout, t.renewInterval)
	if !ok {
		return res
	}
	// Q10: wait on the wait node until it is released or expires (it then grants us that one
	// node, which is no reign), and go straight into a fresh round. Why this is safe: the
	// wait node's grant counts for nothing by itself; what counts is the fresh round, whose
	// every counted node set its expiry after start, the instant taken before that round's
	// sends, which the loop then measures the deadline from.
	tok, closeWait, err := t.blockingAcquire(ctx, t.waitNode, owner, wait)
	// Answered: its connection is closed only after the fresh round. Why: closing it (FIN
	// through every hop, the server freeing the client) competed for the CPU with that
	// round, on the wake's critical path (measured: docs/quorum.md, hand-over).
	defer closeWait()
	if err != nil || tok <= 0 {
		if ctx.Err() != nil {
			// Abandoned (resign): a grant made just before the connection closed may exist;
			// an error makes the loop's abandonAcquire look for it and release it.
			return acquireResult{Acked: -1, Err: &cmdError{Kind: KindTimeout, Msg: "quorum: wait abandoned"}}
		}
		return acquireResult{Acked: -1} // timed out (nil) or failed: the loop asks again
	}
	start := now()
	res, refused = t.acquireRound(ctx, owner)
	if refused != nil {
		// Every node refused, the wait node included (it lost our grant meanwhile, e.g. it
		// restarted): the loop asks again.
		return acquireResult{Acked: -1}
	}
	t.mu.Lock()
	t.roundStart = start
	t.mu.Unlock()
	return res
}

// acquireRound is one campaign round (ACQUIRE on all, RAISE on the granting majority). A
// plain refusal (no reign, nothing released, not an error) also returns its replies, for Q10.
func (t *quorumTransport) acquireRound(ctx context.Context, owner string) (acquireResult, []nodeReply[int64]) {
	n := len(t.opts)
	need := t.control.need(n)
	t.mu.Lock()
	t.owner = owner
	t.gen++
	// What an earlier round left here is not this round's: a round only holds what it
	// confirms below.
	clear(t.held)
	t.mu.Unlock()
	replies := quorumRound(ctx, t, t.all(), func(c context.Context, cl *redis.Client, _ int) (int64, *cmdError) {
		// Never BLOCK (Q2): no single node knows when a majority frees up; a refused
		// follower waits on one node instead (Q10, acquire).
		r := parseToken(cl.Do(c, t.withMembership("LEASE.ACQUIRE", t.key, owner, t.ttlMillis)...).Result())
		return r.Token, r.Err
	}, func(r []nodeReply[int64]) bool {
		// Decided early only when a majority can no longer grant. Otherwise every node gets
		// the step's time to answer, even after a majority granted: a reign on all N nodes
		// survives more later faults than one on a bare majority, and its token is the
		// maximum over more nodes. A refused connection fails at once.
		other := 0
		for _, x := range r {
			if x.Replied && (x.Err != nil || x.Value <= 0) {
				other++
			}
		}
		// And not before the wait node answered: whether a refused follower waits (Q10)
		// depends on that node's reply; deciding on the others' refusals first would make it
		// poll instead.
		waited := t.waitNode >= 0 && t.waitNode < len(r) && r[t.waitNode].Replied
		return other > n-need && waited
	})
	d := decideAfterAcquire(t.control, replies, rand.Int())
	switch d.Kind {
	case acqRaise:
		confirmed := quorumRound(ctx, t, d.Nodes, func(c context.Context, cl *redis.Client, i int) (bool, *cmdError) {
			v, err := cl.Do(c, t.withMembership("LEASE.RAISE", t.key, owner, replies[i].Value, d.Target)...).Result()
			return parse01("LEASE.RAISE", v, err)
		}, nil)
		if raiseConfirmed(t.control, confirmed, n) {
			t.mu.Lock()
			for i := range t.held {
				t.held[i] = 0
				if confirmed[i].ok() && confirmed[i].Value {
					t.held[i] = d.Target
				}
			}
			t.mu.Unlock()
			return acquireResult{Token: d.Target, Acked: -1}, nil
		}
		// Not confirmed: the grants (raised or not) must not block anyone for a TTL (Q4).
		// A node that did not answer the raise may hold either token: release with the
		// granted one only if it did not confirm (a RELEASE with the wrong token is a no-op,
		// and the grant then expires on its own).
		var pairs []nodeToken
		for _, i := range d.Nodes {
			tok := replies[i].Value
			if confirmed[i].ok() && confirmed[i].Value {
				tok = d.Target
			}
			pairs = append(pairs, nodeToken{i, tok})
		}
		t.retire()
		_, _ = t.releaseOn(ctx, owner, pairs)
		// Not leading either way; but a node that refused the raise with a server error
		// (NOPERM: an ACL without +lease.raise) is a fault the operator must see, not a
		// contender: report it so the loop logs and counts it and backs off, instead of
		// polling in silence forever.
		return acquireResult{Acked: -1, Err: raiseRefusal(confirmed, d.Nodes)}, nil
	case acqActUnified:
		t.mu.Lock()
		copy(t.held, d.PerNode)
		t.mu.Unlock()
		return acquireResult{Token: d.Token, Acked: -1}, nil
	}
	if len(d.Release) > 0 {
		t.retire()
		_, _ = t.releaseOn(ctx, owner, d.Release)
	}
	t.reportMembership(d.Mismatch)
	if d.Err != nil {
		return acquireResult{Acked: -1, Err: &cmdError{Kind: d.Err.Kind, Grace: d.Err.Grace,
			Msg: fmt.Sprintf("quorum: fewer than %d of %d nodes could grant (%s)", need, n, d.Err.Msg)}}, nil
	}
	// A membership mismatch (Q9) is no refusal Q10 could wait out.
	if len(d.Release) > 0 || d.Mismatch {
		return acquireResult{Acked: -1}, nil
	}
	return acquireResult{Acked: -1}, replies
}

// retire marks the current owner retired (Q4). Why before the RELEASE is sent: the RELEASE
// may be abandoned and execute late, after a next round under the same owner refreshed that
// node (same token), and free it inside the new reign; with a new owner it matches nothing.
func (t *quorumTransport) retire() {
	t.mu.Lock()
	t.retired = true
	t.mu.Unlock()
}

func (t *quorumTransport) takeRetiredOwner() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.retired
	t.retired = false
	return r
}

func (t *quorumTransport) holdsAfterRejection() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, h := range t.held {
		if h != 0 {
			return true
		}
	}
	return false
}

func (t *quorumTransport) renew(ctx context.Context, owner string, _ params, token int64, _ time.Duration) renewResult {
	n := len(t.opts)
	need := t.control.need(n)
	t.mu.Lock()
	held := append([]int64(nil), t.held...)
	gen := t.gen
	t.mu.Unlock()
	replies := quorumRound(ctx, t, t.all(), func(c context.Context, cl *redis.Client, i int) (bool, *cmdError) {
		tok := held[i]
		if tok == 0 {
			tok = token
		}
		v, err := cl.Do(c, t.withMembership("LEASE.RENEW", t.key, owner, tok, t.ttlMillis)...).Result()
		return parse01("LEASE.RENEW", v, err)
	}, func(r []nodeReply[bool]) bool {
		ones, zeros := 0, 0
		for _, x := range r {
			if x.ok() && x.Value {
				ones++
			} else if renewRefused(x) {
				zeros++
			}
		}
		return ones >= need || zeros > n-need
	})
	switch decideAfterRenew(t.control, replies) {
	case renewQuorumRenewed:
		return renewResult{Renewed: true, Acked: -1}
	case renewQuorumLost:
		for _, r := range replies {
			if r.Replied && isMembership(r.Err) {
				// The operator rebound nodes to another list (docs/quorum.md §4.1): this
				// reign ends here, by design.
				t.log.Warn("quorum: renewal refused: nodes are bound to another membership now", "reason", "membership_mismatch")
				break
			}
		}
		// Stepping down. The nodes that still said 1 are NOT released here: our task has not
		// stopped yet, and such a node can complete another elector's majority with nodes
		// that said 0 (one wiped, one holding that elector's partial grant): a successor
		// would reign while we still act (Q5; the model check found it). The loop releases
		// them once the task has stopped (holdsAfterRejection, R13).
		// Every node that did not say 0 may still hold our lease: the ones that said 1, and
		// the ones whose reply the round did not wait for (it ends once a majority said 0)
		// or that failed. Released later, with the task stopped, that is harmless.
		t.mu.Lock()
		for i := range t.held {
			if t.gen != gen {
				break // the loop gave up on this round and moved on
			}
			if replies[i].ok() && !replies[i].Value {
				t.held[i] = 0
			} else if t.held[i] == 0 {
				t.held[i] = token
			}
		}
		t.mu.Unlock()
		return renewResult{Renewed: false, Acked: -1}
	}
	var first *cmdError
	for _, r := range replies {
		if r.Replied && r.Err != nil {
			first = r.Err
			break
		}
	}
	kind := KindTimeout
	if first != nil {
		kind = first.Kind
	}
	return renewResult{Acked: -1, Err: &cmdError{Kind: kind, Msg: fmt.Sprintf("quorum: renewal not confirmed by %d of %d nodes", need, n)}}
}

func (t *quorumTransport) release(ctx context.Context, owner string, token int64, _ time.Duration) (bool, *cmdError) {
	t.mu.Lock()
	pairs := make([]nodeToken, len(t.held))
	for i, h := range t.held {
		if h == 0 {
			h = token
		}
		pairs[i] = nodeToken{i, h}
		t.held[i] = 0
	}
	t.gen++
	t.mu.Unlock()
	// Q10: the wait node's RELEASE is sent last (all are sent at once, without waiting for
	// replies). Its release wakes the one follower waiting there, whose next round should
	// find the other nodes already free: their RELEASEs left before it, and the wake plus
	// that round take at least a round trip more. A round that still overtakes one on
	// another node is refused there and falls back to polling. Order only affects liveness:
	// a release frees, it never grants.
	sort.SliceStable(pairs, func(a, b int) bool { return pairs[a].Node != t.waitNode && pairs[b].Node == t.waitNode })
	released, err := t.releaseOn(ctx, owner, pairs)
	return released > 0, err
}

// unblock: quorum rounds never BLOCK, so there is nothing to unblock.
func (t *quorumTransport) unblock(context.Context, int64, time.Duration) bool { return false }

// get reads LEASE.GET on every node. If the owner of the last round holds any node, that
// holding is returned (and each node's token remembered, so that release frees strays with
// the token each one carries: used after a resign with a round in flight). Otherwise the
// owner holding a majority of nodes, if any (what OnNewLeader observes); nil if none.
func (t *quorumTransport) get(ctx context.Context, _ time.Duration) (*leaseInfo, *cmdError) {
	n := len(t.opts)
	replies := quorumRound(ctx, t, t.all(), func(c context.Context, cl *redis.Client, _ int) (*leaseInfo, *cmdError) {
		return parseLeaseInfo(cl.Do(c, "LEASE.GET", t.key).Result())
	}, nil)
	t.mu.Lock()
	defer t.mu.Unlock()
	var mine *leaseInfo
	count := map[string]int{}
	var byOwner = map[string]*leaseInfo{}
	answered := 0
	var first *cmdError
	for i, r := range replies {
		if !r.Replied {
			continue
		}
		if r.Err != nil {
			if first == nil {
				first = r.Err
			}
			continue
		}
		answered++
		if r.Value == nil {
			continue
		}
		if r.Value.Owner == t.owner && t.owner != "" {
			t.held[i] = r.Value.Token
			mine = r.Value
		}
		count[r.Value.Owner]++
		byOwner[r.Value.Owner] = r.Value
	}
	if mine != nil {
		return mine, nil
	}
	for o, c := range count {
		if c >= majority(n) {
			return byOwner[o], nil
		}
	}
	if answered == 0 {
		if first == nil {
			first = &cmdError{Kind: KindTimeout, Msg: "quorum: no node answered LEASE.GET"}
		}
		return nil, first
	}
	return nil, nil
}

// serverAddresses are the addresses a node's options name, for the start-time duplicate
// check (Q6): every address its host resolves to (so localhost and 127.0.0.1 meet), or the
// canonical path of a unix socket. The db number is left out on purpose: db 0 and db 1 are
// one server.
func serverAddresses(o *redis.Options) []string {
	if o.Network == "unix" {
		p, err := filepath.Abs(o.Addr)
		if err == nil {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				p = r
			}
			return []string{"unix:" + p}
		}
		return []string{"unix:" + o.Addr}
	}
	host, port, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return []string{o.Addr}
	}
	if host == "" {
		host = "localhost" // go-redis dials ":6379" as the local host
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil || len(ips) == 0 {
		// A name that does not resolve yet cannot be compared here; the run_id check on
		// connect still catches a duplicate.
		return []string{strings.ToLower(host) + ":" + port}
	}
	var out []string
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip); err == nil {
			ip = a.Unmap().WithZone("").String()
		}
		out = append(out, net.JoinHostPort(ip, port))
	}
	return out
}

// distinctNodes refuses a node list that names one server twice under any spelling (Q6).
func distinctNodes(nodes []*redis.Client) error {
	addrs := make([][]string, len(nodes))
	for i, c := range nodes {
		addrs[i] = serverAddresses(c.Options())
	}
	for i := range nodes {
		for j := i + 1; j < len(nodes); j++ {
			for _, a := range addrs[i] {
				for _, b := range addrs[j] {
					if a == b {
						return fmt.Errorf("nodes %d and %d are the same server (%s): one server would count twice toward a majority", i+1, j+1, a)
					}
				}
			}
		}
	}
	return nil
}

// raiseRefusal is the first server error (not a connection failure or timeout: those are
// faults of the moment, and an unanswered node is not an error report) among the RAISE
// replies of nodes, with the node named; nil when there is none. A MEMBERSHIP refusal is no
// fault either: it counts as no confirmation (Q9).
func raiseRefusal(confirmed []nodeReply[bool], nodes []int) *cmdError {
	for _, i := range nodes {
		r := confirmed[i]
		if r.Replied && r.Err != nil && r.Err.Kind != KindConnection && r.Err.Kind != KindTimeout && !isMembership(r.Err) {
			return &cmdError{Kind: r.Err.Kind, Msg: fmt.Sprintf("quorum: node %d refused LEASE.RAISE: %s", i+1, r.Err.Msg)}
		}
	}
	return nil
}
