package leaseprom

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestNamesLabelsAndValues(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, "jobs/report")
	if err != nil {
		t.Fatal(err)
	}
	// A second key in the same registry is fine.
	if _, err := New(reg, "jobs/other"); err != nil {
		t.Fatalf("second key: %v", err)
	}
	m.Acquire("not_granted")
	m.Acquire("granted")
	m.Leader(1796104329285000, time.Now().Add(800*time.Millisecond))
	m.Renew("renewed", 2*time.Millisecond)
	m.RedisError("renew", "timeout")
	m.RedisUp(true)
	m.TaskOverrun()

	if v := testutil.ToFloat64(m.isLeader); v != 1 {
		t.Fatalf("lease_is_leader %v", v)
	}
	if v := testutil.ToFloat64(m.token); v != 1796104329285000 {
		t.Fatalf("lease_token %v", v)
	}
	if v := testutil.ToFloat64(m.deadline); v <= 0.5 || v > 0.8 {
		t.Fatalf("lease_deadline_seconds %v, want ~0.8", v)
	}
	want := `
# HELP lease_transitions_total Leadership transitions
# TYPE lease_transitions_total counter
lease_transitions_total{key="jobs/report",reason="acquired",to="leader"} 1
`
	if err := testutil.CollectAndCompare(m.transitions, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	m.Follower("renew_rejected")
	if v := testutil.ToFloat64(m.deadline); v != 0 {
		t.Fatalf("lease_deadline_seconds %v after stepping down", v)
	}
	if v := testutil.ToFloat64(m.transitions.WithLabelValues("follower", "renew_rejected")); v != 1 {
		t.Fatalf("follower transition %v", v)
	}
	if v := testutil.ToFloat64(m.redisErrors.WithLabelValues("renew", "timeout")); v != 1 {
		t.Fatalf("redis errors %v", v)
	}

	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range fams {
		got[f.GetName()] = true
		for _, s := range f.GetMetric() {
			found := false
			for _, l := range s.GetLabel() {
				found = found || l.GetName() == "key"
			}
			if !found {
				t.Errorf("%s has a series without the key label", f.GetName())
			}
		}
	}
	for _, n := range []string{"lease_is_leader", "lease_token", "lease_transitions_total", "lease_acquire_attempts_total",
		"lease_renew_total", "lease_renew_latency_seconds", "lease_deadline_seconds", "lease_redis_errors_total",
		"lease_redis_up", "lease_task_overrun_total"} {
		if !got[n] {
			t.Errorf("metric %s missing", n)
		}
	}
}
