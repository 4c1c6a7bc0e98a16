package lease

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// runningTasks are the OnStartedLeading calls that have not returned, with their term's
// context (which holds the term's deadline) and token.
type runningTasks struct {
	mu sync.Mutex
	m  map[*taskContext]int64
}

func (r *runningTasks) add(c *taskContext, token int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[*taskContext]int64{}
	}
	r.m[c] = token
}

func (r *runningTasks) remove(c *taskContext) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, c)
}

// overdue returns the token of a task still running more than grace past its term's local
// deadline, and by how much.
func (r *runningTasks) overdue(at time.Time, grace time.Duration) (int64, time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c, token := range r.m {
		c.mu.Lock()
		past := at.Sub(c.deadline)
		c.mu.Unlock()
		if past > grace {
			return token, past, true
		}
	}
	return 0, 0, false
}

// HealthzAdaptor is a health check in the shape of client-go's leaderelection.HealthzAdaptor:
// Name() and Check(*http.Request) error (the healthz.HealthChecker interface of
// k8s.io/apiserver), and an http.Handler (200 "ok", 500 with the reason).
//
// It fails while an OnStartedLeading call is still running more than Timeout past its term's
// local deadline: a task that ignores its context (a goroutine cannot be killed), or an
// election loop that is itself stuck and never stepped down. Both leave work running that no
// lease backs any more; restarting the process is the only way to stop it. (client-go's
// adaptor fails when the leader is overdue for a renewal; here the elector steps down by itself
// at its stop point, so the hazard left is work that did not stop.) A follower, and a leader
// within its deadline, are healthy.
type HealthzAdaptor struct {
	e       *Elector
	timeout time.Duration
}

// NewHealthzAdaptor returns the health check of e: unhealthy when a task is still running more
// than timeout past its term's local deadline.
func NewHealthzAdaptor(e *Elector, timeout time.Duration) *HealthzAdaptor {
	return &HealthzAdaptor{e: e, timeout: timeout}
}

// Name is the check's name, as client-go's adaptor names it.
func (h *HealthzAdaptor) Name() string { return "leaderElection" }

// Check returns nil when healthy, else why not. The request is not used.
func (h *HealthzAdaptor) Check(*http.Request) error {
	if token, past, ok := h.e.tasks.overdue(now(), h.timeout); ok {
		return fmt.Errorf("lease: the task of term %d is still running %v past its local deadline (timeout %v)", token, past.Round(time.Millisecond), h.timeout)
	}
	return nil
}

// ServeHTTP answers 200 "ok" when healthy, 500 with the reason otherwise.
func (h *HealthzAdaptor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h.Check(r); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write([]byte("ok"))
}
