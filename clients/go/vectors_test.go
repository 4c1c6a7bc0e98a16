package lease

// Runs the shared decision vectors (conformance/vectors/*.json, the single source of truth of
// every client) against decide.go. The files are loaded from the repository, never copied.
// Strict on purpose: an unknown decision, an unknown key in a case or in its `expect`, or a
// key missing from `expect` fails the test, so a new rule cannot be skipped silently.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const vectorsDir = "../../conformance/vectors"

type vectorFile struct {
	Decision    string `json:"decision"`
	Description string `json:"description"`
	Defaults    *struct {
		Config map[string]json.Number `json:"config"`
	} `json:"defaults"`
	Cases []vectorCase `json:"cases"`
}

type vectorCase struct {
	Name   string                     `json:"name"`
	Why    string                     `json:"why"`
	Config map[string]json.Number     `json:"config"`
	Input  map[string]json.RawMessage `json:"input"`
	Expect map[string]json.RawMessage `json:"expect"`
}

// origin of the vectors' time line; instants are origin + N µs.
var origin = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func at(us int64) time.Time         { return origin.Add(time.Duration(us) * time.Microsecond) }
func sinceOrigin(t time.Time) int64 { return usRound(t.Sub(origin)) }
func usRound(d time.Duration) int64 { return int64(math.Round(float64(d) / float64(time.Microsecond))) }
func us(n int64) time.Duration      { return time.Duration(n) * time.Microsecond }

// vt is the part of *testing.T the runner uses (a fake in TestVectorLoaderIsStrict).
type vt interface {
	Helper()
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
}

func TestVectors(t *testing.T) { runVectors(t, vectorsDir) }

func runVectors(t vt, dir string) {
	t.Helper()
	found, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatalf("%v", err)
	}
	// quorum/: quorum mode's vectors (the membership id, Q9).
	sub, err := filepath.Glob(filepath.Join(dir, "quorum", "*.json"))
	if err != nil {
		t.Fatalf("%v", err)
	}
	paths := append(found, sub...)
	if len(paths) == 0 {
		t.Fatalf("no vector files in %s (run from clients/go; the files are never copied)", dir)
	}
	total := 0
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v", err)
		}
		var f vectorFile
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			t.Fatalf("%s: %v", filepath.Base(path), err)
		}
		run, ok := deciders[f.Decision]
		if !ok {
			t.Fatalf("%s: unknown decision %q", filepath.Base(path), f.Decision)
		}
		if len(f.Cases) == 0 {
			t.Fatalf("%s: no cases", filepath.Base(path))
		}
		for _, c := range f.Cases {
			total++
			where := fmt.Sprintf("%s / %q", filepath.Base(path), c.Name)
			cfg := map[string]json.Number{}
			if f.Defaults != nil {
				for k, v := range f.Defaults.Config {
					cfg[k] = v
				}
			}
			for k, v := range c.Config {
				cfg[k] = v
			}
			in := newInput(t, where, c.Input)
			var p params
			if len(cfg) > 0 {
				p = paramsFrom(t, where, cfg)
			}
			got := run(t, where, p, in)
			in.done()
			compare(t, where, c.Expect, got)
		}
	}
	t.Logf("%d vector files, %d cases", len(paths), total)
}

// input gives typed access to a case's input and fails on keys the decision did not read.
type input struct {
	t     vt
	where string
	m     map[string]json.RawMessage
	used  map[string]bool
}

func newInput(t vt, where string, m map[string]json.RawMessage) *input {
	return &input{t: t, where: where, m: m, used: map[string]bool{}}
}

func (in *input) raw(k string) json.RawMessage {
	v, ok := in.m[k]
	if !ok {
		in.t.Fatalf("%s: input has no %q", in.where, k)
	}
	in.used[k] = true
	return v
}

func (in *input) isNull(k string) bool { return string(bytes.TrimSpace(in.raw(k))) == "null" }

func (in *input) int(k string) int64 {
	var n json.Number
	if err := json.Unmarshal(in.raw(k), &n); err != nil {
		in.t.Fatalf("%s: input %q: %v", in.where, k, err)
	}
	v, err := n.Int64()
	if err != nil {
		in.t.Fatalf("%s: input %q: %v", in.where, k, err)
	}
	return v
}

func (in *input) float(k string) float64 {
	var v float64
	if err := json.Unmarshal(in.raw(k), &v); err != nil {
		in.t.Fatalf("%s: input %q: %v", in.where, k, err)
	}
	return v
}

func (in *input) str(k string) string {
	var v string
	if err := json.Unmarshal(in.raw(k), &v); err != nil {
		in.t.Fatalf("%s: input %q: %v", in.where, k, err)
	}
	return v
}

func (in *input) has(k string) bool { _, ok := in.m[k]; return ok }

func (in *input) done() {
	for k := range in.m {
		if !in.used[k] {
			in.t.Errorf("%s: unknown input key %q", in.where, k)
		}
	}
}

func paramsFrom(t vt, where string, cfg map[string]json.Number) params {
	var p params
	seen := map[string]bool{}
	get := func(k string) json.Number {
		v, ok := cfg[k]
		if !ok {
			t.Fatalf("%s: config has no %q", where, k)
		}
		seen[k] = true
		return v
	}
	i64 := func(k string) int64 {
		v, err := get(k).Int64()
		if err != nil {
			t.Fatalf("%s: config %q: %v", where, k, err)
		}
		return v
	}
	p.TTLMillis = i64("ttl_ms")
	d, err := get("drift").Float64()
	if err != nil {
		t.Fatalf("%s: drift: %v", where, err)
	}
	p.Drift = d
	p.Margin = us(i64("margin_us"))
	p.StopBudget = us(i64("stop_budget_us"))
	p.RenewInterval = us(i64("renew_interval_us"))
	p.OpTimeout = us(i64("op_timeout_us"))
	p.BlockTimeout = us(i64("block_timeout_us"))
	p.MinReplicas = int(i64("min_replicas"))
	p.WaitTimeout = us(i64("wait_timeout_us"))
	p.BackoffMin = us(i64("backoff_min_us"))
	p.BackoffMax = us(i64("backoff_max_us"))
	for k := range cfg {
		if !seen[k] {
			t.Fatalf("%s: unknown config key %q", where, k)
		}
	}
	return p
}

func paramsMap(p params) map[string]any {
	return map[string]any{
		"ttl_ms":            p.TTLMillis,
		"drift":             p.Drift,
		"margin_us":         usRound(p.Margin),
		"stop_budget_us":    usRound(p.StopBudget),
		"renew_interval_us": usRound(p.RenewInterval),
		"op_timeout_us":     usRound(p.OpTimeout),
		"block_timeout_us":  usRound(p.BlockTimeout),
		"min_replicas":      int64(p.MinReplicas),
		"wait_timeout_us":   usRound(p.WaitTimeout),
		"backoff_min_us":    usRound(p.BackoffMin),
		"backoff_max_us":    usRound(p.BackoffMax),
	}
}

// result reads the `result` object of on_acquire / on_renew.
func parseError(t vt, where string, m map[string]any) *cmdError {
	kind, _ := m["kind"].(string)
	e := &cmdError{Kind: ErrorKind(kind), Msg: "vector"}
	switch e.Kind {
	case KindConnection, KindTimeout, KindGrace, KindReadOnly, KindNoReplicas, KindLoading,
		KindFenced, KindMembership, KindRejected, KindServer, KindProtocol:
	default:
		t.Fatalf("%s: unknown error kind %q", where, kind)
	}
	if g, ok := m["grace_us"]; ok && g != nil {
		n, err := g.(json.Number).Int64()
		if err != nil {
			t.Fatalf("%s: grace_us: %v", where, err)
		}
		e.Grace = us(n)
	}
	return e
}

func resultObject(t vt, where string, in *input) map[string]any {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(in.raw("result")))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("%s: result: %v", where, err)
	}
	return m
}

func acked(t vt, where string, m map[string]any) int {
	v, ok := m["acked"]
	if !ok {
		t.Fatalf("%s: result has no acked", where)
	}
	if v == nil {
		return -1
	}
	n, err := v.(json.Number).Int64()
	if err != nil {
		t.Fatalf("%s: acked: %v", where, err)
	}
	return int(n)
}

type decider func(t vt, where string, p params, in *input) map[string]any

var deciders = map[string]decider{
	"config_defaults": func(t vt, where string, _ params, in *input) map[string]any {
		return paramsMap(defaultParams(in.int("ttl_ms")))
	},
	"config_validate": func(t vt, where string, p params, in *input) map[string]any {
		rule, _ := configProblem(p, in.str("key"), in.str("owner"))
		if rule == "" {
			return map[string]any{"valid": true, "rule": nil}
		}
		return map[string]any{"valid": false, "rule": rule}
	},
	"deadline": func(t vt, where string, p params, in *input) map[string]any {
		d := localDeadline(p, at(in.int("sent_at_us")))
		return map[string]any{
			"lead_time_us": usRound(leadTime(p)),
			"deadline_us":  sinceOrigin(d),
			"stop_at_us":   sinceOrigin(stopAt(p, d)),
		}
	},
	"op_limit": func(t vt, where string, p params, in *input) map[string]any {
		if in.isNull("block_us") {
			return map[string]any{"limit_us": usRound(opLimit(p, 0, false))}
		}
		return map[string]any{"limit_us": usRound(opLimit(p, us(in.int("block_us")), true))}
	},
	"wait_for": func(t vt, where string, p params, in *input) map[string]any {
		n, ms, ok := waitFor(p)
		if !ok {
			return map[string]any{"wait": nil}
		}
		return map[string]any{"wait": map[string]any{"replicas": int64(n), "timeout_ms": ms}}
	},
	"retry_interval": func(t vt, where string, p params, in *input) map[string]any {
		return map[string]any{"retry_us": usRound(retryInterval(p))}
	},
	"backoff": func(t vt, where string, p params, in *input) map[string]any {
		a := in.int("attempt")
		if a < 0 || a > math.MaxUint32 {
			t.Fatalf("%s: attempt %d out of range", where, a)
		}
		u := in.float("unit")
		return map[string]any{
			"cap_us":   usRound(backoffCap(p, uint32(a))),
			"delay_us": usRound(backoff(p, uint32(a), u)),
		}
	},
	"membership_id": func(t vt, where string, _ params, in *input) map[string]any {
		var urls []string
		if err := json.Unmarshal(in.raw("nodes"), &urls); err != nil {
			t.Fatalf("%s: input nodes: %v", where, err)
		}
		// Through go-redis's URL parsing, as an application's clients are made.
		var opts []*redis.Options
		var ids []string
		for _, u := range urls {
			o, err := redis.ParseURL(u)
			if err != nil {
				t.Fatalf("%s: %s: %v", where, u, err)
			}
			id, err := nodeIdentity(o)
			if err != nil {
				t.Fatalf("%s: %s: %v", where, u, err)
			}
			opts = append(opts, o)
			ids = append(ids, id)
		}
		sort.Strings(ids)
		m, err := membershipOf(opts)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		list := make([]any, len(ids))
		for i, id := range ids {
			list[i] = id
		}
		return map[string]any{"identities": list, "membership_id": m}
	},
	"classify_error": func(t vt, where string, _ params, in *input) map[string]any {
		var kind ErrorKind
		var grace time.Duration
		switch {
		case in.has("error"):
			kind, grace = classifyErrorLine(in.str("error"))
		case in.has("transport"):
			kind = transportKind(in.str("transport"))
			if kind == "" {
				t.Fatalf("%s: unknown transport failure", where)
			}
		default:
			t.Fatalf("%s: neither error nor transport", where)
		}
		out := map[string]any{"kind": string(kind), "grace_us": nil}
		if kind == KindGrace {
			out["grace_us"] = usRound(grace)
		}
		return out
	},
	"on_acquire": func(t vt, where string, p params, in *input) map[string]any {
		m := resultObject(t, where, in)
		var r acquireResult
		switch m["reply"] {
		case "granted":
			tok, err := m["token"].(json.Number).Int64()
			if err != nil {
				t.Fatalf("%s: token: %v", where, err)
			}
			r = acquireResult{Token: tok, Acked: acked(t, where, m)}
		case "nil":
			r = acquireResult{Token: 0, Acked: -1}
		case "error":
			r = acquireResult{Err: parseError(t, where, m)}
		default:
			t.Fatalf("%s: unknown acquire reply %v", where, m["reply"])
		}
		d := onAcquire(p, at(in.int("sent_at_us")), at(in.int("now_us")), r)
		switch d.Action {
		case actLead:
			return map[string]any{"action": "lead", "token": d.Token, "deadline_us": sinceOrigin(d.Deadline), "next_renew_us": sinceOrigin(d.NextRenew)}
		case actUnconfirmed:
			return map[string]any{"action": "unconfirmed", "token": d.Token, "retry_in_us": usRound(d.RetryIn), "why": string(d.Why)}
		case actNotGranted:
			return map[string]any{"action": "not_granted"}
		case actGrace:
			return map[string]any{"action": "grace", "wait_us": usRound(d.Wait)}
		case actBackoff:
			return map[string]any{"action": "backoff", "kind": string(d.Kind)}
		}
		t.Fatalf("%s: unknown action %v", where, d.Action)
		return nil
	},
	"not_granted_pause": func(t vt, where string, p params, in *input) map[string]any {
		var block time.Duration
		has := !in.isNull("block_us")
		if has {
			block = us(in.int("block_us"))
		}
		d := notGrantedPause(p, block, has, at(in.int("sent_at_us")), at(in.int("now_us")), in.float("unit"))
		return map[string]any{"pause_us": usRound(d)}
	},
	"on_renew": func(t vt, where string, p params, in *input) map[string]any {
		m := resultObject(t, where, in)
		var r renewResult
		switch m["reply"] {
		case "renewed":
			r = renewResult{Renewed: true, Acked: acked(t, where, m)}
		case "not_held":
			r = renewResult{Renewed: false, Acked: -1}
		case "error":
			r = renewResult{Err: parseError(t, where, m)}
		default:
			t.Fatalf("%s: unknown renew reply %v", where, m["reply"])
		}
		d := onRenew(p, at(in.int("deadline_us")), at(in.int("sent_at_us")), at(in.int("now_us")), r)
		switch d.Action {
		case renRenewed:
			return map[string]any{"action": "renewed", "deadline_us": sinceOrigin(d.Deadline), "next_renew_us": sinceOrigin(d.NextRenew)}
		case renStepDown:
			return map[string]any{"action": "step_down", "reason": string(d.Reason)}
		case renRetry:
			return map[string]any{"action": "retry", "at_us": sinceOrigin(d.At), "why": string(d.Why)}
		}
		t.Fatalf("%s: unknown action %v", where, d.Action)
		return nil
	},
	"must_stop": func(t vt, where string, p params, in *input) map[string]any {
		return map[string]any{"stop": mustStop(p, at(in.int("deadline_us")), at(in.int("now_us")))}
	},
	"step_down": func(t vt, where string, _ params, in *input) map[string]any {
		r := StepDownReason(in.str("reason"))
		switch r {
		case ReasonRenewRejected, ReasonDeadline, ReasonResigned, ReasonTaskExited:
		default:
			t.Fatalf("%s: unknown reason %q", where, r)
		}
		return map[string]any{"release": releaseAfter(r)}
	},
	"reign_owner": func(t vt, where string, _ params, in *input) map[string]any {
		// Read as an exact int64 (never a float): 2^53 itself must reach the function.
		o, ok := reignOwner(in.str("owner"), in.int("reign"))
		if !ok {
			return map[string]any{"reign_owner": nil}
		}
		return map[string]any{"reign_owner": o}
	},
	"next_reign": func(t vt, where string, _ params, in *input) map[string]any {
		events := map[string]reignEvent{"granted": evGranted, "unconfirmed": evUnconfirmed,
			"not_granted": evNotGranted, "error": evError, "stepped_down": evSteppedDown}
		ev, ok := events[in.str("event")]
		if !ok {
			t.Fatalf("%s: unknown event %q", where, in.str("event"))
		}
		return map[string]any{"reign": nextReign(in.int("reign"), ev)}
	},
}

// nodeReplies reads a round's `replies` (one per node in node order; null = no reply in
// time) with one(reply object) for each reply.
func nodeReplies[T any](t vt, where string, in *input, one func(m map[string]any) nodeReply[T]) []nodeReply[T] {
	var raw []map[string]any
	dec := json.NewDecoder(bytes.NewReader(in.raw("replies")))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		t.Fatalf("%s: replies: %v", where, err)
	}
	out := make([]nodeReply[T], len(raw))
	for i, m := range raw {
		if m != nil {
			out[i] = one(m)
		}
	}
	return out
}

func acquireReplies(t vt, where string, in *input) []nodeReply[int64] {
	return nodeReplies(t, where, in, func(m map[string]any) nodeReply[int64] {
		switch m["reply"] {
		case "granted":
			tok, err := m["token"].(json.Number).Int64()
			if err != nil {
				t.Fatalf("%s: token: %v", where, err)
			}
			acked(t, where, m)
			return nodeReply[int64]{Replied: true, Value: tok}
		case "nil":
			return nodeReply[int64]{Replied: true}
		case "error":
			return nodeReply[int64]{Replied: true, Err: parseError(t, where, m)}
		}
		t.Fatalf("%s: unknown acquire reply %v", where, m["reply"])
		return nodeReply[int64]{}
	})
}

func renewReplies(t vt, where string, in *input) []nodeReply[bool] {
	return nodeReplies(t, where, in, func(m map[string]any) nodeReply[bool] {
		switch m["reply"] {
		case "renewed":
			acked(t, where, m)
			return nodeReply[bool]{Replied: true, Value: true}
		case "not_held":
			return nodeReply[bool]{Replied: true}
		case "error":
			return nodeReply[bool]{Replied: true, Err: parseError(t, where, m)}
		}
		t.Fatalf("%s: unknown renew reply %v", where, m["reply"])
		return nodeReply[bool]{}
	})
}

func init() {
	deciders["quorum_after_acquire"] = func(t vt, where string, _ params, in *input) map[string]any {
		a := decideAfterAcquire(quorumCorrect, acquireReplies(t, where, in), 0)
		switch a.Kind {
		case acqRaise:
			nodes := make([]any, len(a.Nodes))
			for i, n := range a.Nodes {
				nodes[i] = int64(n)
			}
			return map[string]any{"action": "raise", "target": a.Target, "nodes": nodes}
		case acqAbort:
			partial := make([]any, len(a.Release))
			for i, r := range a.Release {
				partial[i] = []any{int64(r.Node), r.Token}
			}
			out := map[string]any{"action": "abort", "partial": partial, "outcome": "not_granted", "error_kind": nil, "grace_us": nil}
			if a.Mismatch {
				out["outcome"] = "membership_mismatch"
			}
			if a.Err != nil {
				out["outcome"], out["error_kind"] = "error", string(a.Err.Kind)
				if a.Err.Kind == KindGrace {
					out["grace_us"] = usRound(a.Err.Grace)
				}
			}
			return out
		}
		t.Fatalf("%s: kind %v is a negative control's", where, a.Kind)
		return nil
	}
	deciders["quorum_after_renew"] = func(t vt, where string, _ params, in *input) map[string]any {
		r := renewReplies(t, where, in)
		action := map[afterRenewKind]string{renewQuorumRenewed: "renewed", renewQuorumLost: "lost", renewQuorumUnknown: "unknown"}[decideAfterRenew(quorumCorrect, r)]
		return map[string]any{"action": action, "confirmed": raiseConfirmed(quorumCorrect, r, len(r))}
	}
	deciders["quorum_wait"] = func(t vt, where string, p params, in *input) map[string]any {
		var urls []string
		if err := json.Unmarshal(in.raw("urls"), &urls); err != nil {
			t.Fatalf("%s: urls: %v", where, err)
		}
		var released bool
		if err := json.Unmarshal(in.raw("released_any"), &released); err != nil {
			t.Fatalf("%s: released_any: %v", where, err)
		}
		var block time.Duration
		has := !in.isNull("block_us")
		if has {
			block = us(in.int("block_us"))
		}
		node := waitNode(urls)
		out := map[string]any{"wait_node": int64(node), "wait_us": nil}
		if w, ok := waitAfterRefusal(acquireReplies(t, where, in), node, released, block, has, p.OpTimeout, p.RenewInterval); ok {
			out["wait_us"] = usRound(w)
		}
		return out
	}
	deciders["quorum_identity"] = func(t vt, where string, _ params, in *input) map[string]any {
		var known []*string
		if err := json.Unmarshal(in.raw("known"), &known); err != nil {
			t.Fatalf("%s: known: %v", where, err)
		}
		ks := make([]string, len(known))
		for i, k := range known {
			if k != nil {
				ks[i] = *k
			}
		}
		c := checkIdentity(int(in.int("me")), in.str("seen"), ks)
		kinds := map[identityKind]string{identityFirst: "first", identitySame: "same", identityChanged: "changed", identityDuplicate: "duplicate"}
		out := map[string]any{"check": kinds[c.Kind], "of": nil}
		if c.Kind == identityDuplicate {
			out["of"] = int64(c.Of)
		}
		return out
	}
	deciders["quorum_quarantine"] = func(t vt, where string, p params, in *input) map[string]any {
		q := quarantine(time.Duration(p.TTLMillis)*time.Millisecond, us(in.int("node_quarantine_us")), p.Drift)
		return map[string]any{"quarantine_us": usRound(q)}
	}
}

// compare checks every key of expect against got (and that got has no key expect lacks).
// Keys ending in _us allow a difference of 1 µs (floating point products, rounding).
func compare(t vt, where string, expect map[string]json.RawMessage, got map[string]any) {
	t.Helper()
	keys := make([]string, 0, len(expect))
	for k := range expect {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: unknown key %q in expect (this runner does not produce it)", where, k)
			continue
		}
		var e any
		dec := json.NewDecoder(bytes.NewReader(expect[k]))
		dec.UseNumber()
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("%s: expect %q: %v", where, k, err)
		}
		if msg := equal(k, e, g); msg != "" {
			t.Errorf("%s: %s: %s", where, k, msg)
		}
	}
	for k := range got {
		if _, ok := expect[k]; !ok {
			t.Errorf("%s: expect lacks key %q (got %v)", where, k, got[k])
		}
	}
}

func equal(key string, e, g any) string {
	switch ev := e.(type) {
	case nil:
		if g != nil {
			return fmt.Sprintf("want null, got %v", g)
		}
	case bool, string:
		if ev != g {
			return fmt.Sprintf("want %v, got %v", ev, g)
		}
	case json.Number:
		switch gv := g.(type) {
		case int64:
			want, err := ev.Int64()
			if err != nil {
				return fmt.Sprintf("want %v (not an integer), got %d", ev, gv)
			}
			tol := int64(0)
			if strings.HasSuffix(key, "_us") {
				tol = 1
			}
			if d := want - gv; d > tol || d < -tol {
				return fmt.Sprintf("want %d, got %d", want, gv)
			}
		case float64:
			want, _ := ev.Float64()
			if want != gv {
				return fmt.Sprintf("want %v, got %v", want, gv)
			}
		default:
			return fmt.Sprintf("want %v, got %v (%T)", ev, g, g)
		}
	case []any:
		gs, ok := g.([]any)
		if !ok || len(gs) != len(ev) {
			return fmt.Sprintf("want %v, got %v", ev, g)
		}
		for i := range ev {
			if msg := equal(key, ev[i], gs[i]); msg != "" {
				return fmt.Sprintf("[%d]: %s", i, msg)
			}
		}
	case map[string]any:
		gm, ok := g.(map[string]any)
		if !ok {
			return fmt.Sprintf("want %v, got %v", ev, g)
		}
		for k, v := range ev {
			gv, ok := gm[k]
			if !ok {
				return fmt.Sprintf("unknown key %q in expect", k)
			}
			if msg := equal(k, v, gv); msg != "" {
				return k + ": " + msg
			}
		}
		for k := range gm {
			if _, ok := ev[k]; !ok {
				return fmt.Sprintf("expect lacks key %q", k)
			}
		}
	default:
		return fmt.Sprintf("unsupported expected value %v", e)
	}
	return ""
}

// fakeT records what the runner reports; Fatalf stops the run like testing.T's does.
type fakeT struct{ msgs []string }

type fatal struct{}

func (f *fakeT) Helper()                        {}
func (f *fakeT) Logf(string, ...any)            {}
func (f *fakeT) Errorf(format string, a ...any) { f.msgs = append(f.msgs, fmt.Sprintf(format, a...)) }
func (f *fakeT) Fatalf(format string, a ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, a...))
	panic(fatal{})
}

func (f *fakeT) run(dir string) (failed bool, msgs string) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(fatal); !ok {
				panic(r)
			}
		}
		failed, msgs = len(f.msgs) > 0, strings.Join(f.msgs, "\n")
	}()
	runVectors(f, dir)
	return
}

// The loader itself must refuse what would let a rule be skipped silently.
func TestVectorLoaderIsStrict(t *testing.T) {
	one := func(body string) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "x.json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	cases := []struct{ name, dir, want string }{
		{"empty folder", t.TempDir(), "no vector files"},
		{"unknown decision", one(`{"decision":"telepathy","description":"","cases":[{"name":"c","why":"","input":{},"expect":{}}]}`), "unknown decision"},
		{"unknown expect key", one(`{"decision":"step_down","description":"","cases":[{"name":"c1","why":"","input":{"reason":"resigned"},"expect":{"release":true,"extra":1}}]}`), `x.json / "c1": unknown key "extra" in expect`},
		{"missing expect key", one(`{"decision":"must_stop","description":"","defaults":{"config":{"ttl_ms":1000,"drift":0.01,"margin_us":10000,"stop_budget_us":200000,"renew_interval_us":333333,"op_timeout_us":200000,"block_timeout_us":5000000,"min_replicas":0,"wait_timeout_us":100000,"backoff_min_us":50000,"backoff_max_us":5000000}},"cases":[{"name":"c2","why":"","input":{"deadline_us":1,"now_us":0},"expect":{}}]}`), `expect lacks key "stop"`},
		{"mismatch names file and case", one(`{"decision":"step_down","description":"","cases":[{"name":"wrong one","why":"","input":{"reason":"renew_rejected"},"expect":{"release":true}}]}`), `x.json / "wrong one": release: want true, got false`},
		{"off by 2 us", one(`{"decision":"retry_interval","description":"","defaults":{"config":{"ttl_ms":1000,"drift":0.01,"margin_us":10000,"stop_budget_us":200000,"renew_interval_us":333333,"op_timeout_us":200000,"block_timeout_us":5000000,"min_replicas":0,"wait_timeout_us":100000,"backoff_min_us":50000,"backoff_max_us":5000000}},"cases":[{"name":"c3","why":"","input":{},"expect":{"retry_us":83335}}]}`), "want 83335, got 83333"},
		{"unknown top-level field", one(`{"decision":"step_down","description":"","surprise":1,"cases":[]}`), "unknown field"},
	}
	for _, tc := range cases {
		f := &fakeT{}
		failed, msgs := f.run(tc.dir)
		if !failed || !strings.Contains(msgs, tc.want) {
			t.Errorf("%s: failed=%v, messages %q; want a failure mentioning %q", tc.name, failed, msgs, tc.want)
		}
	}
	// And 1 µs of difference is tolerated.
	f := &fakeT{}
	if failed, msgs := f.run(one(`{"decision":"retry_interval","description":"","defaults":{"config":{"ttl_ms":1000,"drift":0.01,"margin_us":10000,"stop_budget_us":200000,"renew_interval_us":333333,"op_timeout_us":200000,"block_timeout_us":5000000,"min_replicas":0,"wait_timeout_us":100000,"backoff_min_us":50000,"backoff_max_us":5000000}},"cases":[{"name":"c4","why":"","input":{},"expect":{"retry_us":83334}}]}`)); failed {
		t.Errorf("1 µs off failed: %s", msgs)
	}
}
