package lease

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The least-privilege user of docs/security.md §3 leads and hands over. CLIENT ID (used to
// CLIENT UNBLOCK a follower's blocked ask when its Run is cancelled) is not in the recipe: the
// elector asks once, and after NOPERM stops asking (it is not refused on every blocking ask).
func TestLeastPrivilegeUser(t *testing.T) {
	s := startServer(t)
	admin := s.client(t)
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "elector", "on", ">pw", "resetkeys", "resetchannels", "-@all",
		"+lease.acquire", "+lease.renew", "+lease.release", "+lease.get", "+wait", "~leases:*").Err(); err != nil {
		t.Fatal(err)
	}
	admin.Do(ctx, "ACL", "LOG", "RESET")
	uc := redis.NewClient(&redis.Options{Addr: s.addr(), Username: "elector", Password: "pw"})
	t.Cleanup(func() { uc.Close() })
	const key = "leases:acl"
	a := startElector(t, "a", Config{Client: uc, Key: key, TTL: time.Second})
	ta := waitTerm(t, a.started, 5*time.Second, "a leading as the recipe's user")
	// b waits in BLOCK 100 ms, so it asks many times during the test.
	b := startElector(t, "b", Config{Client: uc, Key: key, TTL: time.Second, BlockTimeout: 100 * time.Millisecond})
	time.Sleep(700 * time.Millisecond)
	a.cancel()
	tb := waitTerm(t, b.started, 5*time.Second, "b leading as the recipe's user")
	if tb.token <= ta.token {
		t.Fatalf("tokens %d -> %d", ta.token, tb.token)
	}
	entries, err := admin.Do(ctx, "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal(err)
	}
	n := aclCount(t, entries, "client|id")
	t.Logf("ACL LOG: %d entries; CLIENT ID refused %d times", len(entries), n)
	if n > 2 {
		t.Fatalf("CLIENT ID refused %d times: the elector keeps asking for what its ACL does not allow", n)
	}
}

// aclCount sums the count of the ACL LOG entries about object (entries group repeated
// denials, with a count).
func aclCount(t *testing.T, entries []any, object string) int64 {
	var n int64
	for _, e := range entries {
		m := map[string]any{}
		switch x := e.(type) {
		case map[any]any:
			for k, v := range x {
				m[fmt.Sprint(k)] = v
			}
		case map[string]any:
			m = x
		case []any: // RESP2: field, value, ...
			for i := 0; i+1 < len(x); i += 2 {
				m[fmt.Sprint(x[i])] = x[i+1]
			}
		default:
			t.Fatalf("ACL LOG entry %T", e)
		}
		if m["object"] == object {
			c, _ := m["count"].(int64)
			n += c
		}
	}
	return n
}
