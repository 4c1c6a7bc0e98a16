package lease

import (
	"context"
	"errors"
	"sync"
	"time"
)

// taskContext is OnStartedLeading's context for one reign. Why not a plain cancelable context:
// it is cancelled by the elector's goroutine, which after a pause of the process (SIGSTOP, a
// GC pause, a suspend of the host) may run only after the task did: until then a plain
// context still says "go on" past the stop point. So Err() and Deadline() read the clock:
//
//   - Deadline() is the reign's current stop point (deadline - StopBudget) on Go's clock. It
//     moves later with every confirmed renewal, a deliberate exception to context's rule that
//     successive calls return the same result: a fixed deadline would have to be the first
//     grant's stop point and end every reign after one lead time. Libraries that honour
//     Deadline() (go-redis with ContextTimeoutEnabled, net/http, database/sql drivers) take
//     the stop point current when they ask, and fail at once past it.
//   - Err() is context.DeadlineExceeded from the stop point on (read on the elector's clock,
//     so right as the first instruction after a pause), and once the loop ended the reign at
//     its stop point; context.Canceled for the other reasons (cause: a *StopError).
//   - Done() closes when the elector's goroutine ends the reign: after a pause, that may be a
//     moment after Err() already says so. Contexts derived from this one (WithTimeout,
//     WithCancel) see the stop point in their Deadline() but their Err() only once Done()
//     closed: check this context's Err() or Elector.IsLeader() before each unfenced step.
type taskContext struct {
	context.Context // cancelled, with a *StopError cause, when the reign ends
	p               params

	mu       sync.Mutex
	deadline time.Time // the reign's local deadline, on the elector's clock
}

func newTaskContext(parent context.Context, p params, deadline time.Time) (*taskContext, context.CancelCauseFunc) {
	inner, cancel := context.WithCancelCause(parent)
	return &taskContext{Context: inner, p: p, deadline: deadline}, cancel
}

// setDeadline moves the reign's deadline (a confirmed renewal).
func (c *taskContext) setDeadline(d time.Time) {
	c.mu.Lock()
	c.deadline = d
	c.mu.Unlock()
}

func (c *taskContext) stopPoint() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return stopAt(c.p, c.deadline)
}

func (c *taskContext) Deadline() (time.Time, bool) { return toGo(c.stopPoint()), true }

func (c *taskContext) Err() error {
	if err := c.Context.Err(); err != nil {
		var se *StopError
		if errors.As(context.Cause(c.Context), &se) && se.Reason == ReasonDeadline {
			return context.DeadlineExceeded
		}
		return err
	}
	if !now().Before(c.stopPoint()) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *taskContext) String() string { return "lease.taskContext" }
