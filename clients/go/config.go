// Package lease is leader election on the redis-lease Redis module (LEASE.* commands) for
// go-redis v9, in the shape of client-go's leaderelection: a Config with Callbacks,
// Elector.Run(ctx) campaigning until ctx is done, OnStartedLeading(ctx, token) whose ctx is
// cancelled before the local deadline, IsLeader(), and release on cancel.
//
// Expiry is judged by the Redis server; this process only uses its own monotonic clock to
// decide when to renew and when to stop. The decisions live in decide.go and are checked by
// the shared conformance vectors of the repository.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Callbacks are the election's hooks, as in client-go.
type Callbacks struct {
	// OnStartedLeading runs in its own goroutine when this instance becomes leader, with the
	// reign's fencing token (pass it to the resource you protect, e.g. via LEASE.FENCE).
	// ctx is cancelled at the stop point, StopBudget before the local deadline, or when Run's
	// context is cancelled. ctx.Deadline() is the current stop point and ctx.Err() reads the
	// clock, so both are right even after a pause, before Done() closed (see README). Return promptly once ctx is done: the lease is released (and a
	// follower takes over) only after this function has returned. If it returns by itself,
	// the elector steps down (reason task_exited), releases the lease and Run returns.
	// Required.
	OnStartedLeading func(ctx context.Context, token int64)
	// OnStoppedLeading is called once after every reign, however it ended (also after a
	// panic of the task): the task returned (or the local deadline passed) and, unless the
	// server already refused the renewal, the lease was released. Not called if Run returns
	// without having led (unlike client-go's). Optional.
	OnStoppedLeading func(reason StepDownReason)
	// OnNewLeader is called when the observed leader changes (our own owner when we win).
	// Followers observe with LEASE.GET every RenewInterval only when this is set. Called from
	// the elector's goroutines, one call at a time; must not block. Optional.
	OnNewLeader func(owner string)
}

// Config configures an Elector. Only Client (or, in quorum mode, Nodes), Key, TTL and
// Callbacks.OnStartedLeading are required; a zero value of any other field means the
// default derived from TTL (T):
//
//	RenewInterval T/3, Drift 0.01, Margin min(T/100, 50ms), StopBudget T/5,
//	OpTimeout max(T/5, 50ms), BlockTimeout 5s, MinReplicas 0, WaitTimeout T/10,
//	BackoffMin 50ms, BackoffMax 5s, NodeQuarantine 30s (quorum mode).
//
// (So Drift and Margin cannot be set to exactly 0 here; use a tiny value if you really
// assume identical clock rates.)
type Config struct {
	// Client: a *redis.Client (also Sentinel's NewFailoverClient) or *redis.ClusterClient
	// (any other redis.UniversalClient works without MinReplicas, see README). Leave it nil
	// in quorum mode (Nodes).
	Client redis.UniversalClient
	// Nodes switches on quorum mode (docs/quorum.md): one *redis.Client per independent
	// primary with the module (3 or 5; none a replica of another), the same list in the same
	// order for every elector of the key. A reign needs a majority of them. The elector
	// makes its own client per node from each one's Options (address, TLS, credentials,
	// dialer), so the application's pools are not used. Needs Client nil and MinReplicas 0.
	Nodes []*redis.Client
	// NodeQuarantine (quorum mode): a node whose server identity (run_id) changed counts
	// toward no grant and no renewal this long (at least TTL; default 30 s, the module's
	// default lease.max-ttl): the server now behind that address has none of the reign's
	// state (protocol Q7).
	NodeQuarantine time.Duration
	// MembershipID (quorum mode): the membership id to send (16 lower-case hex digits,
	// protocol Q9) instead of the one computed from Nodes' addresses. For electors that reach
	// the same servers under different addresses (proxies, NAT, a test harness): each would
	// compute its own id and the first to bind a key would shut the others out. Every elector
	// of one membership must then set the same id.
	MembershipID string
	// Key is the lease key.
	Key string
	// TTL is the lease's time to live on the server, sent in whole milliseconds (floored).
	TTL time.Duration
	// Owner identifies this process incarnation; default DefaultOwner() (host-pid-random),
	// 1 to 239 bytes. The server sees Owner#n in the elector's reign n (protocol R17). Never
	// reuse an owner across restarts: a restarted process would silently "refresh" the lease
	// of its previous life.
	Owner string
	// RenewInterval is the time between renewals.
	RenewInterval time.Duration
	// Drift is the maximum relative clock-rate difference between this host and the Redis
	// server (0.01 = 1%); the local deadline shrinks by TTL*Drift.
	Drift float64
	// Margin is extra safety subtracted from the local deadline.
	Margin time.Duration
	// StopBudget: OnStartedLeading's ctx is cancelled this long before the local deadline.
	// It must cover the task's own shutdown time.
	StopBudget time.Duration
	// MinReplicas > 0: every grant and renewal must be acknowledged by this many replicas
	// (WAIT MinReplicas WaitTimeout on the same connection) to count.
	MinReplicas int
	// WaitTimeout is WAIT's timeout.
	WaitTimeout time.Duration
	// BlockTimeout: followers wait with LEASE.ACQUIRE ... BLOCK BlockTimeout, then ask again.
	BlockTimeout time.Duration
	// OpTimeout is the loop's own time limit for one command (added to BlockTimeout for a
	// blocking ask, and WaitTimeout with MinReplicas).
	OpTimeout time.Duration
	// BackoffMin and BackoffMax bound the reconnect backoff (full jitter in
	// [0, min(BackoffMax, BackoffMin*2^attempt)]).
	BackoffMin time.Duration
	BackoffMax time.Duration

	Callbacks Callbacks
	// Logger receives the elector's logs (transitions with key, owner, token, reason);
	// default slog.Default().
	Logger *slog.Logger
	// Metrics receives counters and gauges; nil = none. The optional package
	// .../clients/go/leaseprom implements it for Prometheus.
	Metrics Metrics
}

// ConfigError says which shared validation rule (config_validate.json) a Config breaks.
type ConfigError struct {
	Rule string
	Why  string
}

func (e *ConfigError) Error() string { return "lease: invalid configuration: " + e.Rule + ": " + e.Why }

// params resolves the Config's zero fields to their defaults.
func (c *Config) params() params {
	ttlMillis := c.TTL.Milliseconds()
	p := defaultParams(ttlMillis)
	set := func(dst *time.Duration, v time.Duration) {
		if v != 0 {
			*dst = v
		}
	}
	set(&p.RenewInterval, c.RenewInterval)
	set(&p.Margin, c.Margin)
	set(&p.StopBudget, c.StopBudget)
	set(&p.OpTimeout, c.OpTimeout)
	set(&p.BlockTimeout, c.BlockTimeout)
	set(&p.WaitTimeout, c.WaitTimeout)
	set(&p.BackoffMin, c.BackoffMin)
	set(&p.BackoffMax, c.BackoffMax)
	if c.Drift != 0 {
		p.Drift = c.Drift
	}
	p.MinReplicas = c.MinReplicas
	return p
}

// Validate checks the configuration with the shared rules (after filling in defaults) plus
// what this client needs (a client, OnStartedLeading, a node client for MinReplicas).
func (c *Config) Validate() error {
	if err := c.validateNodes(); err != nil {
		return err
	}
	if c.MembershipID != "" && !validMembershipHex(c.MembershipID) {
		return &ConfigError{Rule: "membership_id", Why: "MembershipID must be 16 lower-case hex digits, not all zero"}
	}
	if c.Client == nil && len(c.Nodes) == 0 {
		return &ConfigError{Rule: "client", Why: "Client is nil"}
	}
	if c.Callbacks.OnStartedLeading == nil {
		return &ConfigError{Rule: "callbacks", Why: "Callbacks.OnStartedLeading is nil"}
	}
	owner := c.Owner
	if owner == "" {
		owner = "default-owner" // DefaultOwner() is always valid
	}
	if rule, why := configProblem(c.params(), c.Key, owner); rule != "" {
		return &ConfigError{Rule: rule, Why: why}
	}
	// R17: the owner is the base of base#reign, and every reign number must still fit the
	// server's 256 bytes; refused, never truncated (reign_owner.json).
	if _, ok := reignOwner(owner, 1); !ok {
		return &ConfigError{Rule: "owner", Why: fmt.Sprintf("owner must be 1..=%d bytes (it is sent as owner#reign, at most 256 bytes), not %d", maxBaseBytes, len(owner))}
	}
	// Why: WAIT counts the acknowledgements of the writes of ITS OWN connection, so it must
	// run on the connection that sent the grant/renewal. That needs a client that can hand
	// out a dedicated connection to the key's primary.
	if c.MinReplicas > 0 && !canPinNode(c.Client) {
		return &ConfigError{Rule: "min_replicas", Why: fmt.Sprintf("MinReplicas needs a *redis.Client or *redis.ClusterClient, not %T", c.Client)}
	}
	return nil
}

// DefaultNodeQuarantine is Config.NodeQuarantine's default: the module's default
// lease.max-ttl, the longest TTL any elector may have used on a node.
const DefaultNodeQuarantine = 30 * time.Second

// validateNodes checks quorum mode's settings (Nodes, NodeQuarantine).
func (c *Config) validateNodes() error {
	if c.NodeQuarantine < 0 {
		return &ConfigError{Rule: "node_quarantine", Why: "NodeQuarantine must not be negative"}
	}
	if len(c.Nodes) == 0 {
		return nil
	}
	if c.Client != nil {
		return &ConfigError{Rule: "nodes", Why: "set Client (one primary) or Nodes (quorum mode), not both"}
	}
	if len(c.Nodes) < 2 {
		return &ConfigError{Rule: "nodes", Why: "quorum mode needs at least 2 nodes (3 or 5 to tolerate 1 or 2 faulty); use Client for one primary"}
	}
	for i, n := range c.Nodes {
		if n == nil {
			return &ConfigError{Rule: "nodes", Why: fmt.Sprintf("node %d is nil", i+1)}
		}
		// go-redis marks a Sentinel failover client this way. Why refused: the elector
		// copies each node's options into a client of its own, and a node that fails over
		// to a replica may have lost the reign's grants; quorum nodes are plain primaries.
		if n.Options().Addr == "FailoverClient" {
			return &ConfigError{Rule: "nodes", Why: fmt.Sprintf("node %d is a Sentinel failover client; quorum mode takes independent primaries", i+1)}
		}
	}
	if c.MinReplicas > 0 {
		// Each node is its own primary; replicas of a node add nothing to the majority
		// argument, and WAIT per node would multiply round trips.
		return &ConfigError{Rule: "min_replicas", Why: "MinReplicas is not supported in quorum mode (the majority is the replication)"}
	}
	// Q6: one server listed twice (the same address, localhost and 127.0.0.1, db 0 and
	// db 1) would make a single server a majority.
	if err := distinctNodes(c.Nodes); err != nil {
		return &ConfigError{Rule: "nodes", Why: err.Error()}
	}
	// Q9: every node needs an identity for the membership id.
	if _, err := MembershipID(c.Nodes); err != nil {
		return &ConfigError{Rule: "nodes", Why: "no membership identity: " + err.Error()}
	}
	return nil
}

// DefaultOwner returns host-pid-random: unique per process incarnation.
func DefaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	// No spaces: the owner is one word on the wire and in logs.
	host = strings.ReplaceAll(host, " ", "_")
	if len(host) > 200 {
		host = host[:200]
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomHex(4))
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		// crypto/rand does not fail on Linux; fall back to the clock rather than panic.
		return fmt.Sprintf("%x", time.Now().UnixNano())
	}
	return hex.EncodeToString(b)
}

// ErrAlreadyRunning is returned by Run when the Elector is already running.
var ErrAlreadyRunning = errors.New("lease: Elector.Run is already running")

// TaskPanicError is returned by Run when OnStartedLeading panicked (after the elector stepped
// down and released the lease).
type TaskPanicError struct{ Value any }

func (e *TaskPanicError) Error() string {
	return fmt.Sprintf("lease: OnStartedLeading panicked: %v", e.Value)
}

// validMembershipHex: 16 lower-case hex digits, not all zero (the module refuses 0).
func validMembershipHex(s string) bool {
	if len(s) != 16 || s == "0000000000000000" {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
