package lease

// The election loop's decisions as plain functions of (parameters, instants, reply). Nothing
// in this file does I/O or reads a clock: every instant is passed in, so every rule is checked
// by the shared decision vectors (conformance/vectors/*.json, loaded by vectors_test.go). The
// loop in elector.go only executes what these functions return.
//
// Instants are time.Time values. In the loop they come from the elector's clock (clock.go:
// CLOCK_BOOTTIME on Linux, else Go's monotonic reading), never from the wall clock, so a step
// of the wall clock cannot move a deadline. The vector tests use one fixed origin plus offsets.

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// params are a Config's numbers with every default filled in (see Config for their meaning).
// Validation and every decision work on these, exactly as the shared vectors describe them.
type params struct {
	// TTLMillis is the TTL exactly as sent with ACQUIRE/RENEW, in whole milliseconds. Why
	// not a Duration: the deadline must be computed from what the server is told, and the
	// vectors' 2^53 ms bound is beyond a Duration's range.
	TTLMillis     int64
	Drift         float64
	Margin        time.Duration
	StopBudget    time.Duration
	RenewInterval time.Duration
	OpTimeout     time.Duration
	BlockTimeout  time.Duration
	MinReplicas   int
	WaitTimeout   time.Duration
	BackoffMin    time.Duration
	BackoffMax    time.Duration
}

// floorUS floors a duration to whole microseconds: the shared vectors define every derived
// default that way, so each client derives exactly the same numbers.
func floorUS(d time.Duration) time.Duration { return d.Truncate(time.Microsecond) }

// defaultParams derives every setting from the TTL in ms (config_defaults.json).
func defaultParams(ttlMillis int64) params {
	ttl := time.Duration(ttlMillis) * time.Millisecond
	margin := floorUS(ttl / 100)
	if margin > 50*time.Millisecond {
		margin = 50 * time.Millisecond
	}
	op := floorUS(ttl / 5)
	if op < 50*time.Millisecond {
		op = 50 * time.Millisecond
	}
	return params{
		TTLMillis:     ttlMillis,
		Drift:         0.01,
		Margin:        margin,
		StopBudget:    floorUS(ttl / 5),
		RenewInterval: floorUS(ttl / 3),
		OpTimeout:     op,
		BlockTimeout:  5 * time.Second,
		MinReplicas:   0,
		WaitTimeout:   floorUS(ttl / 10),
		BackoffMin:    50 * time.Millisecond,
		BackoffMax:    5 * time.Second,
	}
}

// configProblem returns the first rule a configuration breaks as (rule, why), or ("", "") if
// it is usable. Rule names are shared with every client (config_validate.json).
func configProblem(p params, key, owner string) (rule, why string) {
	switch {
	case key == "":
		return "key", "key is empty"
	// Bytes, not characters: the module counts bytes. The owner is the base of base#reign
	// (R17): maxBaseBytes leaves room for '#' and a 16-digit reign within the module's
	// default lease.max-owner-len of 256.
	case owner == "" || len(owner) > maxBaseBytes:
		return "owner", fmt.Sprintf("owner must be 1..=%d bytes (it is sent as owner#reign)", maxBaseBytes)
	case p.TTLMillis < 1:
		return "ttl", "ttl must be at least 1 ms"
	// Why 2^53: every number on the wire must stay exact in JSON and JavaScript clients.
	// (Go: a time.Duration ends near 9.2e12 ms, so that bound is refused too.)
	case p.TTLMillis >= 1<<53 || p.TTLMillis > math.MaxInt64/int64(time.Millisecond):
		return "ttl", "ttl must be below 2^53 ms"
	// Why: a negative drift would push the local deadline past the server's expiry. The
	// negated form also refuses NaN.
	case !(p.Drift >= 0 && p.Drift < 0.5):
		return "drift", "drift must be in [0, 0.5)"
	// Go durations can be negative (Rust's cannot): a negative margin would lengthen the
	// deadline past what the server grants.
	case p.Margin < 0:
		return "margin", "margin must not be negative"
	case p.RenewInterval <= 0:
		return "renew_interval", "renew_interval must be positive"
	// Why 1 ms: it is sent in whole ms, and BLOCK 0 blocks forever.
	case p.BlockTimeout < time.Millisecond:
		return "block_timeout", "block_timeout must be at least 1 ms (BLOCK 0 blocks forever)"
	// Why: the task is told to stop at deadline - stop_budget; if that is not after the first
	// renewal, a leader would be cancelled before it ever renews.
	case p.StopBudget < 0 || p.StopBudget+p.RenewInterval >= leadTime(p):
		return "stop_window", "renew_interval + stop_budget must be below ttl*(1-drift)-margin"
	case p.OpTimeout <= 0:
		return "op_timeout", "op_timeout must be positive"
	case p.BackoffMin <= 0 || p.BackoffMax < p.BackoffMin:
		return "backoff", "backoff needs 0 < min <= max"
	case p.MinReplicas < 0:
		return "min_replicas", "min_replicas must not be negative"
	// Why: WAIT takes whole ms and WAIT n 0 waits forever.
	case p.MinReplicas > 0 && p.WaitTimeout < time.Millisecond:
		return "wait_timeout", "wait_timeout must be at least 1 ms when min_replicas > 0"
	}
	return "", ""
}

// leadTime is the usable leadership time per grant or renewal: ttl*(1-drift) - margin,
// never below 0.
//
// Why (1-drift): our clock may run slow relative to the server's by up to drift, so the
// server's ttl may end earlier than our clock says. Why - margin: time passes between checking
// the deadline and the work that relies on it.
func leadTime(p params) time.Duration {
	l := time.Duration(math.Round(float64(p.TTLMillis)*float64(time.Millisecond)*(1-p.Drift))) - p.Margin
	if l < 0 {
		return 0
	}
	return l
}

// localDeadline is the local deadline of a grant or renewal whose command was sent at sentAt.
//
// Why sentAt, taken BEFORE sending, and not the reply time: the server starts the TTL when it
// executes the command, which is after we sent it, so sentAt + ttl is never later than the
// server's expiry as long as the clock rates agree within drift.
func localDeadline(p params, sentAt time.Time) time.Time { return sentAt.Add(leadTime(p)) }

// stopAt is when the task is told to stop: stop_budget before the deadline, so that it HAS
// stopped by the deadline.
func stopAt(p params, deadline time.Time) time.Time { return deadline.Add(-p.StopBudget) }

// mustStop: stop leading on the clock alone. Checked whenever the loop or the task wakes up,
// in particular right after a process pause (SIGSTOP, GC, VM freeze).
func mustStop(p params, deadline, now time.Time) bool { return !now.Before(stopAt(p, deadline)) }

// opLimit is the loop's own time limit for one command (the server may never answer):
// block + op_timeout (+ wait_timeout with min_replicas). hasBlock false = no BLOCK.
func opLimit(p params, block time.Duration, hasBlock bool) time.Duration {
	l := p.OpTimeout
	if hasBlock {
		l += block
	}
	if p.MinReplicas > 0 {
		l += p.WaitTimeout
	}
	return l
}

// wireMS is a duration as the whole milliseconds the module and WAIT take: floored, at least
// 1. Why at least 1: BLOCK 0 and WAIT n 0 mean "forever", and the module refuses a ttl of 0.
func wireMS(d time.Duration) int64 {
	ms := d.Milliseconds()
	if ms < 1 {
		return 1
	}
	return ms
}

// waitFor is the WAIT to send on the same connection right after a grant or renewal that took
// effect; ok is false without min_replicas.
func waitFor(p params) (replicas int, timeoutMS int64, ok bool) {
	if p.MinReplicas <= 0 {
		return 0, 0, false
	}
	return p.MinReplicas, wireMS(p.WaitTimeout), true
}

// retryInterval is how soon a failed renewal or an unconfirmed grant is retried: a quarter of
// the renew interval, at least 10 ms so that a dead server is not hammered.
func retryInterval(p params) time.Duration {
	r := p.RenewInterval / 4
	if r < 10*time.Millisecond {
		return 10 * time.Millisecond
	}
	return r
}

// backoffCap is min(backoff_max, backoff_min * 2^min(attempt, 20)). The exponent is clamped
// first and the product saturates, so a long outage cannot overflow.
func backoffCap(p params, attempt uint32) time.Duration {
	shift := attempt
	if shift > 20 {
		shift = 20
	}
	if p.BackoffMin > math.MaxInt64>>shift {
		return p.BackoffMax
	}
	c := p.BackoffMin << shift
	if c > p.BackoffMax {
		return p.BackoffMax
	}
	return c
}

// backoff is capped exponential backoff with full jitter: cap * clamp(unit, 0, 1), unit a
// uniform draw in [0, 1) passed in so tests are deterministic. Why full jitter: after a Redis
// restart, 50 followers that lost their connection at the same moment must not reconnect in
// the same millisecond.
func backoff(p params, attempt uint32, unit float64) time.Duration {
	u := math.Max(0, math.Min(1, unit))
	if math.IsNaN(unit) {
		u = 0
	}
	return time.Duration(float64(backoffCap(p, attempt)) * u)
}

// notGrantedPause is the pause after a nil ACQUIRE reply. BLOCK answers nil only after its
// timeout, so a follower normally asks again at once; a BLOCKing ask that came back nil in
// less than half its timeout means something else is going on (a proxy, a server that does
// not block), and the follower must not spin on it.
func notGrantedPause(p params, block time.Duration, hasBlock bool, sentAt, now time.Time, unit float64) time.Duration {
	if hasBlock && now.Sub(sentAt) < block/2 {
		return backoff(p, 0, unit) + p.BackoffMin
	}
	return 0
}

// ErrorKind classifies a failed command; the loop decides on the kind alone. The values are
// also the kind label of the lease_redis_errors_total metric.
type ErrorKind string

const (
	KindConnection ErrorKind = "connection" // refused, reset, closed: the server may or may not have run it
	KindTimeout    ErrorKind = "timeout"    // no reply within the loop's limit: it may or may not have run
	KindGrace      ErrorKind = "grace"      // GRACE <ms> ...: start/promotion grace period
	KindReadOnly   ErrorKind = "readonly"   // READONLY: we talk to a replica
	KindNoReplicas ErrorKind = "noreplicas" // NOREPLICAS: min-replicas-to-write refused the write
	KindLoading    ErrorKind = "loading"    // LOADING: the server is loading its dataset
	KindFenced     ErrorKind = "fenced"     // FENCED: a stale token
	KindMembership ErrorKind = "membership" // MEMBERSHIP (quorum mode, Q9): the node's key is bound to another node list; a refusal, not an error
	KindRejected   ErrorKind = "rejected"   // ERR / WRONGTYPE: our request is wrong; retrying does not help
	KindServer     ErrorKind = "server"     // any other error code (MASTERDOWN, BUSY, NOPERM, ...)
	KindProtocol   ErrorKind = "protocol"   // a reply of an unexpected shape
)

// defaultGraceWait is waited when a GRACE error carries no parsable number: still grace, but
// a short wait rather than hammering the server.
const defaultGraceWait = 100 * time.Millisecond

// classifyErrorLine classifies a server error line by its first word (its code). grace is
// the stated wait for KindGrace, else 0.
func classifyErrorLine(line string) (kind ErrorKind, grace time.Duration) {
	fields := strings.Fields(line)
	code := ""
	if len(fields) > 0 {
		code = fields[0]
	}
	switch code {
	case "GRACE":
		// The module's contract: "GRACE <ms> ms left: ...".
		if len(fields) > 1 {
			if ms, err := strconv.ParseUint(fields[1], 10, 63); err == nil && ms <= uint64(math.MaxInt64/int64(time.Millisecond)) {
				return KindGrace, time.Duration(ms) * time.Millisecond
			}
		}
		return KindGrace, defaultGraceWait
	case "READONLY":
		return KindReadOnly, 0
	case "NOREPLICAS":
		return KindNoReplicas, 0
	case "LOADING":
		return KindLoading, 0
	case "FENCED":
		return KindFenced, 0
	case "MEMBERSHIP":
		return KindMembership, 0
	case "ERR", "WRONGTYPE":
		return KindRejected, 0
	}
	return KindServer, 0
}

// StepDownReason says why leadership ended; also the reason label of lease_transitions_total.
type StepDownReason string

const (
	// ReasonRenewRejected: LEASE.RENEW answered 0, the server says we do not hold the lease.
	ReasonRenewRejected StepDownReason = "renew_rejected"
	// ReasonDeadline: renewals kept failing until the stop point (deadline - stop budget).
	ReasonDeadline StepDownReason = "deadline"
	// ReasonResigned: Run's context was cancelled.
	ReasonResigned StepDownReason = "resigned"
	// ReasonTaskExited: OnStartedLeading returned (or panicked) by itself.
	ReasonTaskExited StepDownReason = "task_exited"
)

// releaseAfter says whether to send LEASE.RELEASE after the task stopped. Not after
// renew_rejected: the server already told us we do not hold it. After every other reason, so
// that a waiting follower takes over at once instead of after the TTL.
func releaseAfter(r StepDownReason) bool { return r != ReasonRenewRejected }

// cmdError is one failed command: its kind, the grace wait (KindGrace only), the message.
type cmdError struct {
	Kind  ErrorKind
	Grace time.Duration
	Msg   string
}

func (e *cmdError) Error() string { return string(e.Kind) + " (" + e.Msg + ")" }

// acquireResult is what LEASE.ACQUIRE (+ WAIT) gave: Err, or Token (0 = nil reply, not
// granted) with Acked = the WAIT reply (-1 when no WAIT was sent or it failed).
type acquireResult struct {
	Token int64
	Acked int
	Err   *cmdError
}

// renewResult is what LEASE.RENEW (+ WAIT) gave: Err, or Renewed (reply 1) with Acked as above.
type renewResult struct {
	Renewed bool
	Acked   int
	Err     *cmdError
}

type acquireAction int

const (
	// actLead: a confirmed grant; lead until Deadline, renew at NextRenew.
	actLead acquireAction = iota
	// actUnconfirmed: the server granted Token but it does not count (Why: replicas did not
	// acknowledge it, or the reply came too late to leave any leadership time). Do not run the
	// task; ask again without BLOCK after RetryIn (same owner: the server refreshes it and
	// returns the same token).
	actUnconfirmed
	// actNotGranted: nil (BLOCK timed out): ask again (after notGrantedPause).
	actNotGranted
	// actGrace: the server is in its grace period for Wait.
	actGrace
	// actBackoff: an error of Kind: back off exponentially with jitter, then retry.
	actBackoff
)

type acquireDecision struct {
	Action    acquireAction
	Token     int64
	Deadline  time.Time
	NextRenew time.Time
	RetryIn   time.Duration
	Why       unconfirmedWhy
	Wait      time.Duration
	Kind      ErrorKind
}

// unconfirmedWhy says why a grant does not count yet (the why of on_acquire.json's
// unconfirmed; also the text logged).
type unconfirmedWhy string

const (
	// whyLateReply: the reply came after its own stop point (R7).
	whyLateReply unconfirmedWhy = "late_reply"
	// whyReplicasNotAcked: fewer replicas acknowledged it than MinReplicas (R11).
	whyReplicasNotAcked unconfirmedWhy = "replicas_not_acked"
)

// retryWhy says why a renewal did not count (the why of on_renew.json's retry).
type retryWhy string

const (
	retryTimeout          retryWhy = "timeout"            // no reply within the op limit (R5)
	retryError            retryWhy = "error"              // any other failure
	retryReplicasNotAcked retryWhy = "replicas_not_acked" // fewer acks than MinReplicas (R11)
)

// onAcquire decides what a follower does with an ACQUIRE result sent at sentAt, received at now.
func onAcquire(p params, sentAt, now time.Time, r acquireResult) acquireDecision {
	if r.Err != nil {
		if r.Err.Kind == KindGrace {
			return acquireDecision{Action: actGrace, Wait: r.Err.Grace}
		}
		return acquireDecision{Action: actBackoff, Kind: r.Err.Kind}
	}
	if r.Token == 0 {
		return acquireDecision{Action: actNotGranted}
	}
	// Why: with min_replicas, a grant only the primary knows can vanish in a failover to a
	// replica that never saw it, and the new primary would grant it again. Never lead on it.
	if p.MinReplicas > 0 && r.Acked < p.MinReplicas {
		// Why not faster: each retry refreshes our (unused) grant on the primary; replicas
		// catching up take time, there is no point in hammering.
		return acquireDecision{Action: actUnconfirmed, Token: r.Token, RetryIn: retryInterval(p), Why: whyReplicasNotAcked}
	}
	deadline := localDeadline(p, sentAt)
	// Why: a reply that arrived at or after its own stop point (typically after a long BLOCK)
	// leaves no safe leadership time: starting the task would mean starting it to stop it.
	// The lease is ours on the server though, so re-ask at once without BLOCK: the refresh
	// gets a new deadline counted from the new send instant.
	if !now.Before(stopAt(p, deadline)) {
		return acquireDecision{Action: actUnconfirmed, Token: r.Token, RetryIn: 0, Why: whyLateReply}
	}
	return acquireDecision{Action: actLead, Token: r.Token, Deadline: deadline, NextRenew: sentAt.Add(p.RenewInterval)}
}

type renewAction int

const (
	// renRenewed: confirmed; new Deadline and NextRenew.
	renRenewed renewAction = iota
	// renStepDown: stop leading now, for Reason.
	renStepDown
	// renRetry: the renewal did not count; keep the OLD deadline and retry at At.
	renRetry
)

type renewDecision struct {
	Action    renewAction
	Deadline  time.Time
	NextRenew time.Time
	Reason    StepDownReason
	At        time.Time
	Why       retryWhy
}

// onRenew decides what a leader with the given deadline does with a RENEW result sent at
// sentAt, received at now.
func onRenew(p params, deadline, sentAt, now time.Time, r renewResult) renewDecision {
	stop := stopAt(p, deadline)
	retry := func(why retryWhy) renewDecision {
		// Why: errors and timeouts say nothing about the lease; the last confirmed deadline
		// still holds, so keep leading and retrying until the stop point, then step down.
		if !now.Before(stop) {
			return renewDecision{Action: renStepDown, Reason: ReasonDeadline}
		}
		at := now.Add(retryInterval(p))
		if at.After(stop) {
			at = stop
		}
		return renewDecision{Action: renRetry, At: at, Why: why}
	}
	if r.Err != nil {
		if r.Err.Kind == KindTimeout {
			return retry(retryTimeout)
		}
		return retry(retryError)
	}
	// Why: 0 is the server's word that we no longer hold the lease (it expired or someone else
	// has it). The local deadline may still be ahead, but nothing backs it: step down at once.
	if !r.Renewed {
		return renewDecision{Action: renStepDown, Reason: ReasonRenewRejected}
	}
	// Why: an unacknowledged renewal may be lost in a failover; the new primary then expires
	// the lease at the OLD expiry, so only the old deadline is backed.
	if p.MinReplicas > 0 && r.Acked < p.MinReplicas {
		return retry(retryReplicasNotAcked)
	}
	// Why max: a deadline never moves back (a slow renewal must not shorten a longer one).
	nd := localDeadline(p, sentAt)
	if nd.Before(deadline) {
		nd = deadline
	}
	if !now.Before(stopAt(p, nd)) {
		return renewDecision{Action: renStepDown, Reason: ReasonDeadline}
	}
	return renewDecision{Action: renRenewed, Deadline: nd, NextRenew: sentAt.Add(p.RenewInterval)}
}

// transportKind names the kind of a failure below the server's error replies: "timeout" (no
// reply within the loop's limit), "connection" (refused, reset, closed), "protocol" (a reply
// of an unexpected shape). "" for anything else.
func transportKind(failure string) ErrorKind {
	switch failure {
	case "timeout":
		return KindTimeout
	case "connection":
		return KindConnection
	case "protocol":
		return KindProtocol
	}
	return ""
}

// maxReign is the largest reign counter: 2^53-1, exact in every language's numbers.
const maxReign = 1<<53 - 1

// maxBaseBytes is the longest owner base (R17): base + "#" + up to 16 digits of a reign
// must fit the module's default lease.max-owner-len of 256 bytes.
const maxBaseBytes = maxOwnerBytes - 1 - 16

// maxOwnerBytes is the module's default lease.max-owner-len. Bytes, not characters: the
// module counts bytes.
const maxOwnerBytes = 256

// reignOwner is the owner sent on the wire for reign n: base#n (R17, reign_owner.json).
// ok is false for a base of 0 or more than 239 bytes, or a reign outside 1..=2^53-1: refused,
// never truncated.
//
// Why a new owner per reign: every command the loop abandons may still execute later (the
// kernel delivers bytes already written, even after the connection was closed). With one
// owner for every reign, a new reign's ACQUIRE could be an idempotent refresh of the old
// reign's lease (same token), and that reign's abandoned RELEASE, landing late, would free
// the NEW reign while it acts. Under base#n the stale RELEASE names base#(n-1): it answers 0.
func reignOwner(base string, reign int64) (string, bool) {
	if base == "" || len(base) > maxBaseBytes || reign < 1 || reign > maxReign {
		return "", false
	}
	return base + "#" + strconv.FormatInt(reign, 10), true
}

// reignEvent is an event of the election loop, as far as the reign counter cares.
type reignEvent int

const (
	evGranted     reignEvent = iota // a grant the loop leads on
	evUnconfirmed                   // a grant it may not use (late, replicas_not_acked)
	evNotGranted                    // nil: BLOCK timed out
	evError                         // an error or a timeout (the grant may have happened)
	evSteppedDown                   // leadership ended, for any reason
)

// nextReign is the reign counter after ev (next_reign.json). Only a step-down advances it.
//
// Why nothing else: within one campaign the R7/R11/R16 re-asks must reach the SAME owner, so
// that the server refreshes the campaign's own grant (possibly one we never saw the reply of)
// instead of waiting for it to expire.
func nextReign(reign int64, ev reignEvent) int64 {
	if ev == evSteppedDown && reign < math.MaxInt64 {
		return reign + 1
	}
	return reign
}
