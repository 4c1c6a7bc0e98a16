package lease

import (
	"bufio"
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// quorumRecipe is docs/security.md §3's quorum-mode elector rules, read from the file (so the
// test runs what the page prints).
func quorumRecipe(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(l, "ACL SETUSER elector on >... "); ok && strings.Contains(rest, "+lease.raise") {
			return strings.Fields(rest)
		}
	}
	t.Fatal("docs/security.md has no quorum-mode `ACL SETUSER elector on >... ... +lease.raise` line")
	return nil
}

// warnings records the elector's WARN and ERROR logs (and passes every record to the test log).
type warnings struct {
	slog.Handler
	mu   *sync.Mutex
	msgs *[]string
}

func (w warnings) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		m := r.Message
		r.Attrs(func(a slog.Attr) bool {
			m += " " + a.String()
			return true
		})
		w.mu.Lock()
		*w.msgs = append(*w.msgs, m)
		w.mu.Unlock()
	}
	return w.Handler.Handle(ctx, r)
}

func (w warnings) WithAttrs(as []slog.Attr) slog.Handler {
	return warnings{w.Handler.WithAttrs(as), w.mu, w.msgs}
}

func (w warnings) WithGroup(g string) slog.Handler {
	return warnings{w.Handler.WithGroup(g), w.mu, w.msgs}
}

// aclQuorumElector runs a quorum elector on three fresh servers as user elector under rules.
func aclQuorumElector(t *testing.T, rules []string, key string) (ss []*server, started chan int64, warned func() []string, stop func()) {
	t.Helper()
	ss = quorumServers(t, 3)
	var users []*redis.Client
	for _, s := range ss {
		args := append([]any{"ACL", "SETUSER", "elector", "on", ">elector-pw"}, toAny(rules)...)
		do(t, s.client(t), args...)
		u := redis.NewClient(&redis.Options{Addr: s.addr(), Username: "elector", Password: "elector-pw"})
		t.Cleanup(func() { u.Close() })
		users = append(users, u)
	}
	var mu sync.Mutex
	var msgs []string
	h := warnings{slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}), &mu, &msgs}
	started = make(chan int64, 4)
	cfg := quorumCfg(users, key, 2*time.Second)
	cfg.Logger = slog.New(h)
	cfg.Callbacks.OnStartedLeading = func(ctx context.Context, token int64) {
		started <- token
		<-ctx.Done()
	}
	e, err := NewElector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return within 10 s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	warned = func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), msgs...)
	}
	return ss, started, warned, stop
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Quorum mode as docs/security.md's quorum-mode elector user: it leads with one token on every
// node, logs no warning (no command refused: INFO for the run_id check, RAISE, RELEASE), and
// releases everywhere. Negative control: the same rules without +lease.raise never lead.
//
// Would catch: the recipe missing a command the Go quorum transport sends (it could not lead,
// release, or check node identities), or the client leading where it may not RAISE.
func TestQuorumAsTheACLRecipesUser(t *testing.T) {
	rules := quorumRecipe(t)
	const key = "leases:go-quorum-acl"
	ss, started, warned, stop := aclQuorumElector(t, rules, key)
	var token int64
	select {
	case token = <-started:
	case <-time.After(10 * time.Second):
		t.Fatalf("no quorum reign as the recipe's user; warnings: %q", warned())
	}
	for i, s := range ss {
		if info := nodeLease(t, s.client(t), key); info == nil || info.Token != token {
			t.Fatalf("node %d holds %+v, want the reign's token %d", i+1, info, token)
		}
	}
	// Renewed as that user on every node: a node's pttl only falls between renewals, so a rise
	// is a RENEW that ran there.
	prev := make([]time.Duration, len(ss))
	renewed := make([]bool, len(ss))
	waitUntil(t, 5*time.Second, "a renewal on every node", func() bool {
		all := true
		for i, s := range ss {
			info := nodeLease(t, s.client(t), key)
			if info == nil || info.Token != token {
				t.Fatalf("node %d lost the reign: %+v", i+1, info)
			}
			if prev[i] != 0 && info.PTTL > prev[i]+50*time.Millisecond {
				renewed[i] = true
			}
			prev[i] = info.PTTL
			all = all && renewed[i]
		}
		return all
	})
	stop()
	for i, s := range ss {
		if info := nodeLease(t, s.client(t), key); info != nil {
			t.Fatalf("node %d still holds %+v: the recipe's user could not release", i+1, info)
		}
	}
	if w := warned(); len(w) > 0 {
		t.Fatalf("warnings logged as the recipe's user: %q", w)
	}

	var without []string
	for _, r := range rules {
		if r != "+lease.raise" {
			without = append(without, r)
		}
	}
	_, started2, warned2, _ := aclQuorumElector(t, without, key)
	select {
	case tok := <-started2:
		t.Fatalf("led (token %d) without +lease.raise", tok)
	case <-time.After(3 * time.Second):
	}
	waitUntil(t, 5*time.Second, "a warning naming the refused RAISE", func() bool {
		for _, w := range warned2() {
			if strings.Contains(w, "LEASE.RAISE") && strings.Contains(w, "NOPERM") {
				return true
			}
		}
		return false
	})
}
