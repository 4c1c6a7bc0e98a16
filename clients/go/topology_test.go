package lease

// Topologies: min_replicas against a real replica, Redis Cluster (ClusterClient), Sentinel
// (FailoverClient).

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func waitUntil(t testing.TB, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	end := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(end) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func infoField(c *redis.Client, section, field string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			return v
		}
	}
	return ""
}

// With MinReplicas, a grant counts only after WAIT on the SAME connection saw the replica
// acknowledge it. A paused replica acknowledges nothing new: no leadership. (WAIT on another
// connection, whose own writes the replica already has, would answer 1 at once and the
// elector would wrongly lead: this test catches that.)
func TestMinReplicasNeedsTheReplicaAck(t *testing.T) {
	primary := startServer(t)
	replica := startServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.port))
	rc := replica.client(t)
	waitUntil(t, 10*time.Second, "replication link up", func() bool { return infoField(rc, "replication", "master_link_status") == "up" })
	pc := primary.client(t)
	cfg := Config{Client: pc, Key: "k:replicas", TTL: time.Second, MinReplicas: 1, WaitTimeout: 100 * time.Millisecond}

	a := startElector(t, "a", cfg)
	waitTerm(t, a.started, 5*time.Second, "a leading with the replica up")
	if a.metrics.get("acquire:granted") != 1 {
		t.Fatalf("acquire:granted = %d", a.metrics.get("acquire:granted"))
	}
	time.Sleep(500 * time.Millisecond) // renewals confirmed by WAIT too
	if !a.e.IsLeader() || a.metrics.get("renew:renewed") == 0 {
		t.Fatalf("leader %v, renewed %d: acknowledged renewals must keep it leading", a.e.IsLeader(), a.metrics.get("renew:renewed"))
	}
	a.stop(5 * time.Second)

	replica.signal(syscall.SIGSTOP)
	b := startElector(t, "b", cfg)
	select {
	case tm := <-b.started:
		t.Fatalf("b led (token %d) on a grant no replica acknowledged", tm.token)
	case <-time.After(1500 * time.Millisecond):
	}
	if n := b.metrics.get("acquire:unconfirmed"); n == 0 {
		t.Fatal("no unconfirmed grant counted")
	}
	replica.signal(syscall.SIGCONT)
	waitTerm(t, b.started, 10*time.Second, "b leading once the replica acknowledges")
}

// Redis Cluster through a ClusterClient (one node owning every slot): the BLOCKing ask goes
// to the key's primary on a dedicated connection; hand-over works.
func TestClusterClient(t *testing.T) {
	s := startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	c := s.client(t)
	ctx := context.Background()
	if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "cluster_state:ok", func() bool {
		v, _ := c.ClusterInfo(ctx).Result()
		return strings.Contains(v, "cluster_state:ok")
	})
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{s.addr()}})
	t.Cleanup(func() { cc.Close() })
	a := startElector(t, "a", Config{Client: cc, Key: "{jobs}:leader", TTL: time.Second})
	ta := waitTerm(t, a.started, 5*time.Second, "a leading via ClusterClient")
	b := startElector(t, "b", Config{Client: cc, Key: "{jobs}:leader", TTL: time.Second})
	time.Sleep(300 * time.Millisecond)
	t0 := time.Now()
	a.cancel()
	tb := waitTerm(t, b.started, 5*time.Second, "b leading via ClusterClient")
	measured(t, "cluster hand-over on cancel %.1f ms", float64(tb.startedAt.Sub(t0).Microseconds())/1000)
	if tb.token <= ta.token || tb.startedAt.Sub(t0) > time.Second {
		t.Fatalf("hand-over: token %d -> %d in %v", ta.token, tb.token, tb.startedAt.Sub(t0))
	}
}

// Sentinel through a FailoverClient: the elector reaches the primary Sentinel names.
func TestFailoverClient(t *testing.T) {
	primary := startServer(t)
	sp := freePort(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	body := "port " + strconv.Itoa(sp) + "\nbind 127.0.0.1\ndir " + dir + "\n" +
		"sentinel monitor m 127.0.0.1 " + strconv.Itoa(primary.port) + " 1\n"
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	sen := &server{t: t, port: sp, dir: dir, args: []string{conf, "--sentinel"}}
	sen.start()
	t.Cleanup(sen.kill)
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{sen.addr()}})
	t.Cleanup(func() { fc.Close() })
	a := startElector(t, "a", Config{Client: fc, Key: "k:sentinel", TTL: time.Second})
	waitTerm(t, a.started, 10*time.Second, "a leading via Sentinel")
	if got := leaseOwner(t, primary.client(t), "k:sentinel"); got != a.e.Owner()+"#1" {
		t.Fatalf("primary says owner %q, want a", got)
	}
	b := startElector(t, "b", Config{Client: fc, Key: "k:sentinel", TTL: time.Second})
	time.Sleep(300 * time.Millisecond)
	a.cancel()
	waitTerm(t, b.started, 5*time.Second, "b leading via Sentinel")
}
