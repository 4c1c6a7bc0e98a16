package lease

// The Redis layer: one function per module command the loop needs, on go-redis v9.
//
// How go-redis is used, and why:
//   - Every call gets a context whose deadline is the loop's op limit, and the loop itself
//     stops waiting at that limit (elector.go runs each call in a goroutine). A call the loop
//     gave up on keeps its pooled connection until its read ends: go-redis's pool gives a
//     connection to one command at a time and takes it back only after that command's reply
//     was read, and it closes (never reuses) a connection whose read failed or timed out
//     (isBadConn(err, allowTimeout=false)). So a late reply, say a grant from a BLOCK we gave
//     up on, is never read as the reply to a later command.
//   - Every read and write is bounded by the op limit, never by the client's ReadTimeout
//     (3 s by default): go-redis ends a read at the context's deadline only with
//     ContextTimeoutEnabled, which is off by default. Why: a call the loop gave up on would
//     otherwise keep one of the application's pooled connections busy for the ReadTimeout,
//     several per lost reign (issue 25 item 9). A *redis.Client (also Sentinel's) is used
//     through WithTimeout(limit), a clone sharing the pool whose read/write timeouts are the
//     limit; a *redis.ClusterClient through the elector's own ClusterClient (same options,
//     ContextTimeoutEnabled on; made by Run, closed when Run returns), so the application's
//     node pools are not used at all. Other UniversalClients are used as given.
//   - A BLOCKing LEASE.ACQUIRE must not hit the client's ReadTimeout (default 3 s, below the
//     default 5 s BLOCK; go-redis extends the read deadline only for the blocking commands it
//     knows, BLPOP and friends, not for a module command sent with Do). So blocking asks go
//     to the key's primary through client.WithTimeout(opLimit), a clone that shares the
//     user's pool with ReadTimeout = the op limit, and on a dedicated connection (Conn()):
//     a BLOCKing call occupies its connection anyway, and WAIT must follow the write on the
//     same connection (it counts the acknowledgements of this connection's writes).
//   - Plain asks go through the user's client (Cluster: with its MOVED/ASK handling).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// leaseTransport is what the election loop needs from Redis: one node (transport, below) or
// several independent primaries (quorumTransport, quorum.go). Every call may be given up on
// by the loop (it runs each in a goroutine, see elector.go), so implementations must be safe
// for a call still running while the next one starts.
type leaseTransport interface {
	// open prepares what Run needs (connections of its own); the returned function closes it.
	open() (closeFn func())
	acquire(ctx context.Context, owner string, p params, block time.Duration, hasBlock bool, limit time.Duration, onClientID func(int64)) acquireResult
	renew(ctx context.Context, owner string, p params, token int64, limit time.Duration) renewResult
	release(ctx context.Context, owner string, token int64, limit time.Duration) (bool, *cmdError)
	unblock(ctx context.Context, id int64, limit time.Duration) bool
	get(ctx context.Context, limit time.Duration) (*leaseInfo, *cmdError)
	// holdsAfterRejection: after a renewal answered "not held", does this transport still
	// hold the lease somewhere? One server said it does not, so no. A quorum transport can:
	// the nodes that confirmed while a majority did not. The loop releases those once its
	// task has stopped (R13, Q5), never before.
	holdsAfterRejection() bool
	// takeRetiredOwner is true (once) when the last acquire sent a RELEASE under its owner:
	// a quorum round that did not make a reign releases its partial grants. The loop then
	// advances the reign (Q4, R17), so that RELEASE is the last command ever sent under that
	// owner.
	takeRetiredOwner() bool
	// takeRoundStart is the instant before the sends of the commands the last acquire's
	// grant rests on, when it is later than the instant the loop took before calling acquire
	// (once; false otherwise). Quorum mode waits on one node and then runs a fresh round
	// (Q10): every node counted in that round set its expiry after this instant, so the loop
	// may measure the deadline from it instead of from before the wait.
	takeRoundStart() (time.Time, bool)
}

type transport struct {
	client    redis.UniversalClient               // the application's
	own       atomic.Pointer[redis.ClusterClient] // Cluster: the elector's own (see above)
	key       string
	ttlMillis int64
	// noClientID: CLIENT ID was refused (NOPERM: docs/security.md's least-privilege user
	// does not have it); do not ask again on every blocking ask.
	noClientID atomic.Bool
}

func (t *transport) holdsAfterRejection() bool         { return false }
func (t *transport) takeRetiredOwner() bool            { return false }
func (t *transport) takeRoundStart() (time.Time, bool) { return time.Time{}, false }

// open makes the elector's own ClusterClient when the application's is one; the returned
// function closes it. Calls still running on it when it is closed fail, which is fine: the
// loop has given up on them.
func (t *transport) open() (closeOwn func()) {
	cc, ok := t.client.(*redis.ClusterClient)
	if !ok {
		return func() {}
	}
	opt := *cc.Options()
	opt.ContextTimeoutEnabled = true
	own := redis.NewClusterClient(&opt)
	t.own.Store(own)
	return func() {
		t.own.CompareAndSwap(own, nil)
		_ = own.Close()
	}
}

// plain returns the client for a command that needs no dedicated connection, with every read
// and write bounded by limit.
func (t *transport) plain(limit time.Duration) redis.UniversalClient {
	switch c := t.client.(type) {
	case *redis.Client:
		return c.WithTimeout(limit)
	case *redis.ClusterClient:
		if own := t.own.Load(); own != nil {
			return own
		}
	}
	return t.client
}

// canPinNode: whether the client can hand out a connection to the key's primary.
func canPinNode(c redis.UniversalClient) bool {
	switch c.(type) {
	case *redis.Client, *redis.ClusterClient:
		return true
	}
	return false
}

// node returns a client for the key's primary whose read and write timeouts are limit,
// sharing the user's connection pool; nil for client types that cannot do that.
func (t *transport) node(ctx context.Context, limit time.Duration) (*redis.Client, error) {
	switch c := t.client.(type) {
	case *redis.Client: // plain, and Sentinel's FailoverClient (its dialer follows the master)
		return c.WithTimeout(limit), nil
	case *redis.ClusterClient:
		if own := t.own.Load(); own != nil {
			c = own
		}
		n, err := c.MasterForKey(ctx, t.key)
		if err != nil {
			return nil, err
		}
		return n.WithTimeout(limit), nil
	}
	return nil, nil
}

// redirected: a node answered MOVED/ASK (only possible on the pinned path); refresh the
// cluster's slot map so that the next ask goes to the right primary.
func (t *transport) redirected(e *cmdError) {
	if e == nil {
		return
	}
	if cc, ok := t.client.(*redis.ClusterClient); ok && (strings.HasPrefix(e.Msg, "MOVED ") || strings.HasPrefix(e.Msg, "ASK ")) {
		if own := t.own.Load(); own != nil {
			cc = own
		}
		cc.ReloadState(context.Background())
	}
}

// classify turns a go-redis error into the loop's kinds (classify_error.json).
func classify(err error) *cmdError {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, os.ErrDeadlineExceeded) {
		return &cmdError{Kind: KindTimeout, Msg: msg}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &cmdError{Kind: KindTimeout, Msg: msg}
	}
	var re redis.Error
	if errors.As(err, &re) {
		kind, grace := classifyErrorLine(re.Error())
		return &cmdError{Kind: kind, Grace: grace, Msg: msg}
	}
	// Refused, reset, EOF, pool closed or exhausted, a reply go-redis could not parse: the
	// server may or may not have run the command.
	return &cmdError{Kind: KindConnection, Msg: msg}
}

func protocolError(what string) *cmdError { return &cmdError{Kind: KindProtocol, Msg: what} }

func parseToken(v any, err error) acquireResult {
	if errors.Is(err, redis.Nil) {
		return acquireResult{Token: 0, Acked: -1}
	}
	if err != nil {
		return acquireResult{Err: classify(err), Acked: -1}
	}
	if n, ok := v.(int64); ok && n > 0 {
		return acquireResult{Token: n, Acked: -1}
	}
	return acquireResult{Err: protocolError("LEASE.ACQUIRE replied " + describe(v)), Acked: -1}
}

func parse01(cmd string, v any, err error) (bool, *cmdError) {
	if err != nil {
		return false, classify(err)
	}
	switch v {
	case int64(1):
		return true, nil
	case int64(0):
		return false, nil
	}
	return false, protocolError(cmd + " replied " + describe(v))
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "nil"
	case string:
		return "string " + x
	case int64:
		return "integer"
	}
	return "an unexpected type"
}

// wait sends WAIT n ms on conn and returns the acknowledgements.
func wait(ctx context.Context, conn *redis.Conn, n int, ms int64) (int, *cmdError) {
	v, err := conn.Do(ctx, "WAIT", n, ms).Result()
	if err != nil {
		return -1, classify(err)
	}
	if a, ok := v.(int64); ok && a >= 0 {
		return int(a), nil
	}
	return -1, protocolError("WAIT replied " + describe(v))
}

// acquire sends LEASE.ACQUIRE key owner ttl [BLOCK ms] (+ WAIT when granted and p asks for
// it). onClientID receives the server's id of the connection of a blocking ask before it is
// sent (so that Run can CLIENT UNBLOCK it when its context is cancelled).
func (t *transport) acquire(ctx context.Context, owner string, p params, block time.Duration, hasBlock bool, limit time.Duration, onClientID func(int64)) acquireResult {
	args := []any{"LEASE.ACQUIRE", t.key, owner, t.ttlMillis}
	if hasBlock {
		args = append(args, "BLOCK", wireMS(block))
	}
	n, waitMS, wantWait := waitFor(p)
	if !hasBlock && !wantWait {
		return parseToken(t.plain(limit).Do(ctx, args...).Result())
	}
	nc, err := t.node(ctx, limit)
	if err != nil {
		return acquireResult{Err: classify(err), Acked: -1}
	}
	if nc == nil {
		// Another UniversalClient: the BLOCK must fit in its ReadTimeout (README). No WAIT
		// here: Validate refuses MinReplicas for such clients.
		return parseToken(t.client.Do(ctx, args...).Result())
	}
	conn := nc.Conn()
	// Close gives the connection back to the pool, or drops it if a read failed.
	defer conn.Close()
	if hasBlock && onClientID != nil && !t.noClientID.Load() {
		// Best effort (ACLs may forbid CLIENT ID): without it a cancelled Run just stops
		// waiting for the blocked reply instead of unblocking it (and releases what it may
		// have been granted after OpTimeout, see abandonAcquire). Refused once, never asked
		// again by this elector: a permission granted later is used after a restart.
		id, err := conn.ClientID(ctx).Result()
		var re redis.Error
		switch {
		case err == nil:
			onClientID(id)
		case errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOPERM"):
			t.noClientID.Store(true)
		}
	}
	r := parseToken(conn.Do(ctx, args...).Result())
	t.redirected(r.Err)
	if r.Err == nil && r.Token != 0 && wantWait {
		acked, werr := wait(ctx, conn, n, waitMS)
		if werr != nil {
			return acquireResult{Err: werr, Acked: -1}
		}
		r.Acked = acked
	}
	return r
}

// renew sends LEASE.RENEW key owner token ttl (+ WAIT when renewed and p asks for it).
func (t *transport) renew(ctx context.Context, owner string, p params, token int64, limit time.Duration) renewResult {
	args := []any{"LEASE.RENEW", t.key, owner, token, t.ttlMillis}
	n, waitMS, wantWait := waitFor(p)
	if !wantWait {
		v, err := t.plain(limit).Do(ctx, args...).Result()
		ok, cerr := parse01("LEASE.RENEW", v, err)
		return renewResult{Renewed: ok, Acked: -1, Err: cerr}
	}
	nc, err := t.node(ctx, limit)
	if err != nil {
		return renewResult{Err: classify(err), Acked: -1}
	}
	if nc == nil { // unreachable: Validate refuses MinReplicas for such clients
		return renewResult{Err: protocolError("MinReplicas needs a *redis.Client or *redis.ClusterClient"), Acked: -1}
	}
	conn := nc.Conn()
	defer conn.Close()
	v, err := conn.Do(ctx, args...).Result()
	ok, cerr := parse01("LEASE.RENEW", v, err)
	t.redirected(cerr)
	r := renewResult{Renewed: ok, Acked: -1, Err: cerr}
	if cerr == nil && ok {
		acked, werr := wait(ctx, conn, n, waitMS)
		if werr != nil {
			return renewResult{Err: werr, Acked: -1}
		}
		r.Acked = acked
	}
	return r
}

// release sends LEASE.RELEASE key owner token: true if it was held and is now free.
func (t *transport) release(ctx context.Context, owner string, token int64, limit time.Duration) (bool, *cmdError) {
	v, err := t.plain(limit).Do(ctx, "LEASE.RELEASE", t.key, owner, token).Result()
	return parse01("LEASE.RELEASE", v, err)
}

// unblock ends a blocked LEASE.ACQUIRE of connection id (the module answers nil, as on its
// timeout). Reports whether the server found such a blocked client.
func (t *transport) unblock(ctx context.Context, id int64, limit time.Duration) bool {
	nc, err := t.node(ctx, limit)
	if err != nil || nc == nil {
		return false
	}
	n, err := nc.ClientUnblock(ctx, id).Result()
	return err == nil && n == 1
}

// leaseInfo is LEASE.GET's reply.
type leaseInfo struct {
	Owner string
	Token int64
	PTTL  time.Duration
}

// get sends LEASE.GET key: nil when no live lease. RESP2 replies [owner, token, pttl], RESP3
// a map with keys owner, token, pttl (go-redis speaks RESP3 by default).
func (t *transport) get(ctx context.Context, limit time.Duration) (*leaseInfo, *cmdError) {
	return parseLeaseInfo(t.plain(limit).Do(ctx, "LEASE.GET", t.key).Result())
}

// parseLeaseInfo reads a LEASE.GET reply.
func parseLeaseInfo(v any, err error) (*leaseInfo, *cmdError) {
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, classify(err)
	}
	var owner, token, pttl any
	switch x := v.(type) {
	case []any:
		if len(x) != 3 {
			return nil, protocolError(fmt.Sprintf("LEASE.GET replied an array of %d items", len(x)))
		}
		owner, token, pttl = x[0], x[1], x[2]
	case map[any]any:
		owner, token, pttl = x["owner"], x["token"], x["pttl"]
	case map[string]any:
		owner, token, pttl = x["owner"], x["token"], x["pttl"]
	default:
		return nil, protocolError("LEASE.GET replied " + describe(v))
	}
	o, ok1 := owner.(string)
	tk, ok2 := token.(int64)
	pt, ok3 := pttl.(int64)
	if !ok1 || !ok2 || !ok3 || tk <= 0 || pt < 0 {
		return nil, protocolError("LEASE.GET replied unexpected fields")
	}
	return &leaseInfo{Owner: o, Token: tk, PTTL: time.Duration(pt) * time.Millisecond}, nil
}
