package lease

import "time"

// Metrics receives what an Elector counts. The optional package
// github.com/redis-lease/redis-lease/clients/go/leaseprom implements it with
// prometheus/client_golang under the metric names of every redis-lease client:
//
//	lease_is_leader, lease_token, lease_transitions_total{to,reason},
//	lease_acquire_attempts_total{result}, lease_renew_total{result},
//	lease_renew_latency_seconds, lease_deadline_seconds,
//	lease_redis_errors_total{op,kind}, lease_redis_up, lease_task_overrun_total
//
// Methods are called from the elector's goroutines and must not block.
type Metrics interface {
	// Leader: became leader with token (the transition's reason label is "acquired"), local
	// deadline.
	Leader(token int64, deadline time.Time)
	// Follower: stepped down for reason (the reason label of lease_transitions_total).
	Follower(reason StepDownReason)
	// Deadline: the local deadline moved (confirmed renewal).
	Deadline(deadline time.Time)
	// Acquire: one LEASE.ACQUIRE outcome: granted, not_granted, unconfirmed, late, grace, error.
	Acquire(result string)
	// Renew: one LEASE.RENEW outcome (renewed, rejected, unconfirmed, error) and its round
	// trip including WAIT.
	Renew(result string, latency time.Duration)
	// RedisError: a failed command; op is acquire, renew, release or get, kind an ErrorKind.
	RedisError(op string, kind ErrorKind)
	// RedisUp: whether the last command reached the server.
	RedisUp(up bool)
	// TaskOverrun: OnStartedLeading had not returned by the local deadline.
	TaskOverrun()
}

type noMetrics struct{}

func (noMetrics) Leader(int64, time.Time)      {}
func (noMetrics) Follower(StepDownReason)      {}
func (noMetrics) Deadline(time.Time)           {}
func (noMetrics) Acquire(string)               {}
func (noMetrics) Renew(string, time.Duration)  {}
func (noMetrics) RedisError(string, ErrorKind) {}
func (noMetrics) RedisUp(bool)                 {}
func (noMetrics) TaskOverrun()                 {}
