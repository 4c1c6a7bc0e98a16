package lease

import "context"

// RunOnce is the one-shot form of Run: it campaigns until elected, runs
// Callbacks.OnStartedLeading for that one term and returns when the term is over; it never
// campaigns a second time (client-go's Run also returns once the lease is lost; this
// elector's Run campaigns again instead). However the term ends, the task has returned (or
// its local deadline passed) before RunOnce returns, and the lease is released only after
// the task returned (protocol R13), as with Run.
//
// It returns nil when the task returned by itself while leading, or ctx was done (before
// the election, or during the term: the task was stopped and the lease released; tell the
// cases apart with ctx.Err()); a *StopError whose Reason says why the term was lost
// (renewal refused, stop point reached) when leadership ended first: the task's work may
// not have been done under the lease; a *TaskPanicError if the task panicked.
// OnStoppedLeading fires once, after the term, as with Run. Call RunOnce again (on the
// same Elector) for another term: each call is a new reign with a new owner on the wire
// (R17).
func (e *Elector) RunOnce(ctx context.Context) error {
	return e.run(ctx, true)
}
