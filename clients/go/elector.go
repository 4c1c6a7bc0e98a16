package lease

// The election loop: executes what decide.go decides, talks to Redis through transport.go,
// runs OnStartedLeading, logs and counts.

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis-lease/redis-lease/clients/go/internal/hooks"
)

func init() {
	// The conformance elector's negative control only (see internal/hooks); not public API.
	hooks.ReuseOwner = func(x any) { x.(*Elector).reuseOwner = true }
	hooks.QuorumControl = func(x any, name string) error {
		q, ok := x.(*Elector).tr.(*quorumTransport)
		if !ok {
			return fmt.Errorf("not in quorum mode")
		}
		switch name {
		case "correct":
			q.control = quorumCorrect
		case "no-unify":
			q.control = quorumNoUnify
		case "minority":
			q.control = quorumMinority
		default:
			return fmt.Errorf("unknown quorum control %q (correct, no-unify, minority)", name)
		}
		return nil
	}
}

// Elector campaigns for one lease key. Create it with NewElector, then call Run.
type Elector struct {
	cfg  Config
	p    params
	base string // Config.Owner: unique per process incarnation
	tr   leaseTransport
	log  *slog.Logger
	m    Metrics

	// reign numbers this elector's reigns (R17): the owner on the wire is base#reign. Only
	// Run's goroutine touches it; it survives Run so that a second Run starts a new reign.
	reign int64
	// reuseOwner: never advance reign (the pre-R17 behaviour). Only the conformance elector's
	// negative control sets it, through internal/hooks.
	reuseOwner bool

	running atomic.Bool
	// oneShot: this Run is a RunOnce (once.go): a lost term ends it instead of a new
	// campaign. Set before campaign starts, read only by Run's goroutine.
	oneShot bool

	mu       sync.Mutex // guards leading, token, deadline
	leading  bool
	token    int64
	deadline time.Time

	leaderMu   sync.Mutex // serializes OnNewLeader calls; guards lastLeader
	lastLeader string

	redisUp int // -1 unknown, 0 unreachable, 1 reachable; only Run's goroutine touches it

	tasks runningTasks // OnStartedLeading calls that have not returned (health.go)
}

// StopError is the cause (context.Cause) of the cancellation of OnStartedLeading's context.
type StopError struct{ Reason StepDownReason }

func (e *StopError) Error() string { return "lease: leadership ended: " + string(e.Reason) }

// NewElector validates cfg (filling in defaults) and returns an Elector. It does not talk to
// Redis yet: Run does, with backoff, so it never fails because Redis is down.
func NewElector(cfg Config) (*Elector, error) {
	if cfg.Owner == "" {
		cfg.Owner = DefaultOwner()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := cfg.params()
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	m := cfg.Metrics
	if m == nil {
		m = noMetrics{}
	}
	var tr leaseTransport = &transport{client: cfg.Client, key: cfg.Key, ttlMillis: p.TTLMillis}
	if len(cfg.Nodes) > 0 {
		q := cfg.NodeQuarantine
		if q == 0 {
			q = DefaultNodeQuarantine
		}
		qt := newQuorumTransport(cfg.Nodes, cfg.Key, p, q, quorumCorrect)
		qt.log = log.With("key", cfg.Key, "owner", cfg.Owner)
		if cfg.MembershipID != "" {
			qt.membership = cfg.MembershipID
		}
		tr = qt
	}
	return &Elector{
		cfg:     cfg,
		p:       p,
		base:    cfg.Owner,
		reign:   1,
		tr:      tr,
		log:     log.With("key", cfg.Key, "owner", cfg.Owner),
		m:       m,
		redisUp: -1,
	}, nil
}

// Run builds an Elector from cfg and runs it until ctx is done (client-go's RunOrDie, with
// the error returned instead of a panic).
func Run(ctx context.Context, cfg Config) error {
	e, err := NewElector(cfg)
	if err != nil {
		return err
	}
	return e.Run(ctx)
}

// Owner is this elector's owner id (Config.Owner or the default): the base of the owner the
// server sees, which is Owner()+"#"+n for this elector's reign n (protocol R17: a new owner
// for every reign, so that a late command of an earlier reign cannot touch a later one).
// LEASE.GET, GetLeader and OnNewLeader report the owner as the server has it.
func (e *Elector) Owner() string { return e.base }

// IsLeader reports whether this instance leads right now: a reign is running, its task has
// not been told to stop, and the stop point (deadline - StopBudget) is still ahead on the
// monotonic clock. It reads the clock on every call, so it is right even as the first
// instruction after the process was paused, before any timer had a chance to fire. Call it
// between the steps of work that cannot be fenced. On Linux the clock is CLOCK_BOOTTIME, so
// it is right after a suspend of the host too (timers and contexts are not: they run on Go's
// clock, which stops during a suspend).
func (e *Elector) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leading && now().Before(stopAt(e.p, e.deadline))
}

// Deadline is the current reign's local deadline (a time.Time with a monotonic reading;
// compare it with time.Now(); converted from the elector's clock at each call), and the zero
// time and false when not leading.
func (e *Elector) Deadline() (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.leading {
		return time.Time{}, false
	}
	return toGo(e.deadline), true
}

// Token is the current reign's fencing token, 0 when not leading.
func (e *Elector) Token() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.leading {
		return 0
	}
	return e.token
}

// GetLeader is the last leader owner observed (ours while leading; followers observe only
// when Callbacks.OnNewLeader is set). "" when unknown.
func (e *Elector) GetLeader() string {
	e.leaderMu.Lock()
	defer e.leaderMu.Unlock()
	return e.lastLeader
}

// Run campaigns until ctx is done. Whenever elected, it runs Callbacks.OnStartedLeading in a
// goroutine and keeps the lease renewed; on losing it, the task's context is cancelled and
// the elector campaigns again. When ctx is done it stops the task, waits for it (at most
// until the local deadline), releases the lease so that a follower takes over at once, and
// returns nil. It also returns (nil) after OnStartedLeading returned by itself (the lease is
// released first; tell the cases apart with ctx.Err()), and a *TaskPanicError if it
// panicked. Errors talking to Redis are never returned: they are retried with backoff,
// logged and counted.
func (e *Elector) Run(ctx context.Context) error {
	return e.run(ctx, false)
}

func (e *Elector) run(ctx context.Context, oneShot bool) error {
	if !e.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer e.running.Store(false)
	e.oneShot = oneShot
	defer e.tr.open()()
	if e.cfg.Callbacks.OnNewLeader != nil {
		obsCtx, stopObs := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.watchLeader(obsCtx)
		}()
		defer func() {
			stopObs()
			wg.Wait()
		}()
	}
	return e.campaign(ctx)
}

func (e *Elector) campaign(ctx context.Context) error {
	// R17: one owner for this whole campaign (its re-asks must refresh its own grant), a new
	// one after every step-down.
	owner, ok := reignOwner(e.base, e.reign)
	if !ok {
		// Validate refused a bad base; only 2^53-1 reigns could get here.
		return fmt.Errorf("lease: reign %d of owner %q cannot be numbered (R17)", e.reign, e.base)
	}
	var attempt uint32
	// A grant the server gave us that we may not use (too late, or not acknowledged by
	// replicas). It is ours on the server, so we re-ask WITHOUT BLOCK: the same owner gets a
	// refresh and the same token, with a deadline counted from the new send instant.
	var unconfirmed int64
	for {
		if ctx.Err() != nil {
			if unconfirmed != 0 {
				e.releaseToken(owner, unconfirmed)
			}
			return nil
		}
		hasBlock := unconfirmed == 0
		limit := opLimit(e.p, e.p.BlockTimeout, hasBlock)
		var blockedID atomic.Int64
		ch := make(chan acquireResult, 1)
		opCtx, cancelOp := context.WithTimeout(context.Background(), limit)
		// Why the instant is taken before sending: the deadline must count from no later than
		// the moment the server starts the TTL.
		sentAt := now()
		go func() {
			defer cancelOp()
			ch <- e.tr.acquire(opCtx, owner, e.p, e.p.BlockTimeout, hasBlock, limit, blockedID.Store)
		}()
		var res acquireResult
		timer := time.NewTimer(limit)
		select {
		case res = <-ch:
		case <-timer.C:
			// Our own limit: the server may never answer (partition, paused server). Why
			// cancel: go-redis retries a command after a timeout or EOF while its context
			// allows; once we gave up, it must not re-send it (R6; we re-ask ourselves, with
			// a fresh send instant).
			cancelOp()
			res = acquireResult{Err: &cmdError{Kind: KindTimeout, Msg: "no reply within " + limit.String()}, Acked: -1}
		case <-ctx.Done():
			timer.Stop()
			e.abandonAcquire(owner, ch, blockedID.Load(), cancelOp)
			return nil
		}
		timer.Stop()
		recvAt := now()
		// Q10: a quorum grant made by a round that started after a wait is measured from that
		// round's start (never earlier than our own sentAt).
		if s, ok := e.tr.takeRoundStart(); ok && s.After(sentAt) {
			sentAt = s
		}
		e.observe("acquire", res.Err)
		// Q4 + R17: a quorum round that released partial grants retired its owner; the next
		// round must not send it again (its RELEASE may still execute late and would free a
		// node the next round refreshed under the same owner).
		if e.tr.takeRetiredOwner() && !e.reuseOwner {
			e.reign = nextReign(e.reign, evSteppedDown)
			if owner, ok = reignOwner(e.base, e.reign); !ok {
				return fmt.Errorf("lease: reign %d of owner %q cannot be numbered (R17)", e.reign, e.base)
			}
			// What the retired owner may still hold (a grant that was not confirmed) is not
			// the new owner's to refresh; it ends on its own expiry.
			unconfirmed = 0
		}
		d := onAcquire(e.p, sentAt, recvAt, res)
		switch d.Action {
		case actLead:
			attempt, unconfirmed = 0, 0
			e.m.Acquire("granted")
			reason, err := e.lead(ctx, owner, d.Token, d.Deadline, d.NextRenew)
			// R17: the reign is over, whatever the reason. Why before anything else: a RENEW
			// or RELEASE of this reign we gave up on may still execute; the next campaign
			// must not be a refresh of this reign's lease that such a command could end.
			if !e.reuseOwner {
				e.reign = nextReign(e.reign, evSteppedDown)
			}
			if err != nil {
				return err
			}
			if reason == ReasonResigned || reason == ReasonTaskExited {
				return nil
			}
			if e.oneShot {
				// RunOnce: one reign per call. lead returned only after the task stopped
				// (or its deadline passed), so the caller learns of the loss after the work
				// ended, never while it may still run.
				return &StopError{Reason: reason}
			}
			if owner, ok = reignOwner(e.base, e.reign); !ok {
				return fmt.Errorf("lease: reign %d of owner %q cannot be numbered (R17)", e.reign, e.base)
			}
		case actUnconfirmed:
			attempt, unconfirmed = 0, d.Token
			if d.Why == whyLateReply {
				// Expected after a BLOCK that waited longer than the stop window: debug only.
				e.m.Acquire("late")
				e.log.Debug("grant arrived after its stop point; re-asking without BLOCK", "token", d.Token, "reason", d.Why)
			} else {
				e.m.Acquire("unconfirmed")
				e.log.Warn("grant not acknowledged by enough replicas; not leading on it", "token", d.Token, "reason", d.Why)
			}
			e.pause(ctx, d.RetryIn)
		case actNotGranted:
			attempt, unconfirmed = 0, 0
			e.m.Acquire("not_granted")
			e.pause(ctx, notGrantedPause(e.p, e.p.BlockTimeout, hasBlock, sentAt, recvAt, rand.Float64()))
		case actGrace:
			e.m.Acquire("grace")
			e.log.Info("server in grace period; waiting", "grace_ms", d.Wait.Milliseconds())
			e.pause(ctx, d.Wait)
		case actBackoff:
			e.m.Acquire("error")
			delay := backoff(e.p, attempt, rand.Float64())
			if attempt < ^uint32(0) {
				attempt++
			}
			e.log.Debug("acquire failed; backing off", "kind", string(d.Kind), "backoff_ms", delay.Milliseconds(), "attempt", attempt)
			e.pause(ctx, delay)
		}
	}
}

// abandonAcquire runs when Run's context is cancelled while an ACQUIRE is in flight. Why:
// the abandoned ask may still be granted (a BLOCK woken right now), which would leave the
// lease held by an owner that no longer campaigns until its TTL runs out. So end the block
// (CLIENT UNBLOCK: the module answers nil), read the answer, and release whatever we got.
func (e *Elector) abandonAcquire(owner string, ch <-chan acquireResult, blockedID int64, cancelOp context.CancelFunc) {
	if blockedID != 0 {
		within(context.Background(), e.p.OpTimeout, func(c context.Context) bool {
			return e.tr.unblock(c, blockedID, e.p.OpTimeout)
		})
	}
	// No go-redis retry of this ACQUIRE from now on (the read in progress, if any, goes on
	// unless the client has ContextTimeoutEnabled; then we learn nothing and look below).
	cancelOp()
	t := time.NewTimer(e.p.OpTimeout)
	defer t.Stop()
	select {
	case r := <-ch:
		if r.Err == nil {
			if r.Token != 0 {
				e.releaseToken(owner, r.Token)
			}
			return
		}
	case <-t.C:
	}
	// No answer (or an error: it may have been granted anyway): look, release if ours.
	e.releaseStray(owner)
}

// taskEnd is how OnStartedLeading ended.
type taskEnd struct {
	panicked bool
	value    any
}

// lead runs one reign: starts the task, renews, steps down. Returns why it ended.
func (e *Elector) lead(ctx context.Context, owner string, token int64, deadline, nextRenew time.Time) (StepDownReason, error) {
	// Not derived from ctx's cancellation: on resign the loop first publishes "not leader",
	// then cancels the task, in that order (see the step-down below). Values are kept. Its
	// Err() and Deadline() read the clock (taskctx.go): right even before this loop runs.
	taskCtx, cancelTask := newTaskContext(context.WithoutCancel(ctx), e.p, deadline)
	defer cancelTask(nil)

	e.mu.Lock()
	e.leading, e.token, e.deadline = true, token, deadline
	e.mu.Unlock()
	e.m.Leader(token, toGo(deadline))
	e.log.Info("became leader", "token", token, "reason", "acquired", "reign", e.reign, "lead_ms", until(deadline).Milliseconds())
	e.newLeader(owner)

	done := make(chan taskEnd, 1)
	e.tasks.add(taskCtx, token)
	go func() {
		var end taskEnd
		defer func() {
			if r := recover(); r != nil {
				end = taskEnd{panicked: true, value: r}
			}
			e.tasks.remove(taskCtx)
			done <- end
		}()
		e.cfg.Callbacks.OnStartedLeading(taskCtx, token)
	}()

	var reason StepDownReason
	var end taskEnd
	taskFinished := false
	// Why not always task_exited: a task that checks IsLeader() returns when the stop point
	// passed, possibly before our stop timer fired (or select picked it); that is the end of
	// the reign (campaign again), not the task finishing its job (Run returns).
	taskReturned := func() StepDownReason {
		if ctx.Err() != nil {
			return ReasonResigned
		}
		if mustStop(e.p, deadline, now()) {
			return ReasonDeadline
		}
		return ReasonTaskExited
	}
	for reason == "" {
		stop := stopAt(e.p, deadline)
		stopT := time.NewTimer(until(stop))
		renewT := time.NewTimer(until(nextRenew))
		select {
		// Past the stop point nothing else matters, not even a renewal that could still
		// succeed: the task would be running on an unbacked lease.
		case <-stopT.C:
			reason = ReasonDeadline
		case <-ctx.Done():
			reason = ReasonResigned
		case end = <-done:
			reason, taskFinished = taskReturned(), true
		case <-renewT.C:
		}
		stopT.Stop()
		renewT.Stop()
		if reason != "" {
			break
		}
		sentAt := now()
		// Why: this may be the first instruction after a long pause (SIGSTOP, GC, VM freeze);
		// re-check the clock before trusting the leadership we think we have. (Two ready
		// timers are picked at random by select, so the stop timer may have lost the race.)
		if mustStop(e.p, deadline, sentAt) {
			reason = ReasonDeadline
			break
		}
		limit := opLimit(e.p, 0, false)
		ch := make(chan renewResult, 1)
		opCtx, cancelOp := context.WithTimeout(context.Background(), limit)
		go func() {
			defer cancelOp()
			ch <- e.tr.renew(opCtx, owner, e.p, token, limit)
		}()
		var res renewResult
		stopT = time.NewTimer(until(stop))
		limitT := time.NewTimer(limit)
		select {
		case <-stopT.C:
			reason = ReasonDeadline
		case <-ctx.Done():
			reason = ReasonResigned
		case end = <-done:
			reason, taskFinished = taskReturned(), true
		case res = <-ch:
		case <-limitT.C:
			res = renewResult{Err: &cmdError{Kind: KindTimeout, Msg: "no reply within " + limit.String()}, Acked: -1}
		}
		stopT.Stop()
		limitT.Stop()
		if reason != "" || res.Err != nil && res.Err.Kind == KindTimeout {
			// Given up on (or timed out): no go-redis retry of this RENEW after now (R6).
			cancelOp()
		}
		if reason != "" {
			break
		}
		recvAt := now()
		e.observe("renew", res.Err)
		d := onRenew(e.p, deadline, sentAt, recvAt, res)
		switch d.Action {
		case renRenewed:
			e.m.Renew("renewed", recvAt.Sub(sentAt))
			deadline, nextRenew = d.Deadline, d.NextRenew
			e.mu.Lock()
			e.deadline = deadline
			e.mu.Unlock()
			taskCtx.setDeadline(deadline)
			e.m.Deadline(toGo(deadline))
		case renStepDown:
			if d.Reason == ReasonRenewRejected {
				e.m.Renew("rejected", recvAt.Sub(sentAt))
			} else {
				e.m.Renew("error", recvAt.Sub(sentAt))
			}
			reason = d.Reason
		case renRetry:
			if d.Why == retryReplicasNotAcked {
				e.m.Renew("unconfirmed", recvAt.Sub(sentAt))
			} else {
				e.m.Renew("error", recvAt.Sub(sentAt))
			}
			e.log.Debug("renewal did not count; retrying", "token", token, "reason", d.Why)
			nextRenew = d.At
		}
	}

	// Step down. Why "not leader" is published before the task is cancelled: nobody
	// (observers, the task's own IsLeader checks) may believe we lead past this point.
	e.mu.Lock()
	e.leading = false
	e.mu.Unlock()
	cancelTask(&StopError{Reason: reason})
	e.m.Follower(reason)
	if reason == ReasonRenewRejected || reason == ReasonDeadline {
		e.log.Warn("lost leadership", "token", token, "reason", string(reason))
	} else {
		e.log.Info("stepping down", "token", token, "reason", string(reason))
	}
	if !taskFinished {
		// The task was told at the stop point; the lease is backed until the deadline, so
		// wait for it until then. Why release only after: the lease must stay ours until our
		// task has stopped, or the next leader could start while we still work.
		wait := until(deadline)
		if wait <= 0 {
			// We were paused past the deadline (SIGSTOP, GC, VM freeze): the task has had no
			// chance to see its context yet. Give it the stop budget it was promised before
			// calling it an overrun; nothing here extends the lease.
			wait = e.p.StopBudget
		}
		t := time.NewTimer(wait)
		select {
		case end = <-done:
			taskFinished = true
		case <-t.C:
			// A goroutine cannot be killed: it keeps running, unfenced work included.
			e.m.TaskOverrun()
			e.log.Error("OnStartedLeading still running at the local deadline; it ignores its context; not releasing", "token", token, "reason", string(reason))
		}
		t.Stop()
	}
	// Protocol R13: no RELEASE for a task that is still running (it cannot be stopped by
	// force); the lease then ends on the server's own expiry, a little after our deadline,
	// which keeps a successor out as long as anything can.
	// After a rejected renewal a single server holds nothing for us any more; a quorum
	// transport may still hold a minority of nodes, freed now that the task has stopped (Q5).
	if taskFinished && (releaseAfter(reason) || e.tr.holdsAfterRejection()) {
		e.releaseToken(owner, token)
	}
	if cb := e.cfg.Callbacks.OnStoppedLeading; cb != nil {
		cb(reason)
	}
	if end.panicked {
		return reason, &TaskPanicError{Value: end.value}
	}
	return reason, nil
}

// pause sleeps d or until ctx is done.
func (e *Elector) pause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// within runs f in its own goroutine with a context bounded by limit and returns its result,
// or ok=false once limit passed. A call given up on finishes on its own; go-redis then drops
// its connection if the read failed (see transport.go).
func within[T any](parent context.Context, limit time.Duration, f func(context.Context) T) (T, bool) {
	ch := make(chan T, 1)
	ctx, cancel := context.WithTimeout(parent, limit)
	go func() {
		defer cancel()
		ch <- f(ctx)
	}()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case v := <-ch:
		return v, true
	case <-t.C:
		var zero T
		return zero, false
	}
}

type releaseReply struct {
	released bool
	err      *cmdError
}

// releaseToken: best-effort LEASE.RELEASE, bounded by OpTimeout. If it fails the lease
// simply expires on the server.
func (e *Elector) releaseToken(owner string, token int64) {
	r, ok := within(context.Background(), e.p.OpTimeout, func(c context.Context) releaseReply {
		released, err := e.tr.release(c, owner, token, e.p.OpTimeout)
		return releaseReply{released, err}
	})
	if !ok {
		r.err = &cmdError{Kind: KindTimeout, Msg: "no reply within " + e.p.OpTimeout.String()}
	}
	e.observe("release", r.err)
	if r.err != nil {
		e.log.Warn("release failed; the lease will expire on the server", "token", token, "error", r.err.Error())
		return
	}
	e.log.Info("released lease", "token", token, "released", r.released)
}

type getReply struct {
	info *leaseInfo
	err  *cmdError
}

func (e *Elector) getLease() (*leaseInfo, *cmdError) {
	r, ok := within(context.Background(), e.p.OpTimeout, func(c context.Context) getReply {
		info, err := e.tr.get(c, e.p.OpTimeout)
		return getReply{info, err}
	})
	if !ok {
		return nil, &cmdError{Kind: KindTimeout, Msg: "no reply within " + e.p.OpTimeout.String()}
	}
	return r.info, r.err
}

// releaseStray: after leaving with an ACQUIRE of this campaign's owner whose outcome we do not
// know, look at the lease and release it if that owner holds it.
func (e *Elector) releaseStray(owner string) {
	info, err := e.getLease()
	if err == nil && info != nil && info.Owner == owner {
		e.releaseToken(owner, info.Token)
	}
}

// watchLeader observes the leader for OnNewLeader: LEASE.GET every RenewInterval while we
// do not lead.
func (e *Elector) watchLeader(ctx context.Context) {
	t := time.NewTicker(e.p.RenewInterval)
	defer t.Stop()
	for {
		e.mu.Lock()
		leading := e.leading
		e.mu.Unlock()
		if !leading {
			if info, err := e.getLease(); err == nil && info != nil && ctx.Err() == nil {
				e.newLeader(info.Owner)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// newLeader calls OnNewLeader when the observed leader changed.
func (e *Elector) newLeader(owner string) {
	e.leaderMu.Lock()
	defer e.leaderMu.Unlock()
	if owner == "" || owner == e.lastLeader {
		return
	}
	e.lastLeader = owner
	if cb := e.cfg.Callbacks.OnNewLeader; cb != nil {
		cb(owner)
	}
}

// observe counts errors and logs when Redis becomes unreachable and when it is back.
func (e *Elector) observe(op string, err *cmdError) {
	up := true
	if err != nil {
		e.m.RedisError(op, err.Kind)
		unreachable := err.Kind == KindConnection || err.Kind == KindTimeout
		// GRACE has its own log line; unreachability is logged on the transition.
		if !unreachable && err.Kind != KindGrace {
			e.log.Warn("redis error", "op", op, "error", err.Error())
		}
		up = !unreachable
	}
	state := 0
	if up {
		state = 1
	}
	if e.redisUp == state {
		return
	}
	if up && e.redisUp == 0 {
		e.log.Info("redis reachable again")
	} else if !up {
		e.log.Warn("redis unreachable", "op", op, "error", fmt.Sprint(err))
	}
	e.redisUp = state
	e.m.RedisUp(up)
}
