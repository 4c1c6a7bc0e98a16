package lease

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterPort is a free port whose cluster bus port (port + 10000) is free too.
func clusterPort(t *testing.T) int {
	t.Helper()
	for i := 0; i < 100; i++ {
		p := freePort(t)
		if p > 55535 {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000))
		if err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no free port pair for a cluster node")
	return 0
}

// startCluster starts three primaries with the module, each owning a third of the slots, and
// waits until every node knows every slot.
func startCluster(t *testing.T) []*server {
	t.Helper()
	ranges := [3][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	nodes := make([]*server, 3)
	ctx := context.Background()
	for i := range nodes {
		s := &server{t: t, port: clusterPort(t), dir: t.TempDir()}
		s.args = []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", s.dir, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000", "--loadmodule", modulePath(t), "lease.grace-ms", "0"}
		s.start()
		t.Cleanup(s.kill)
		nodes[i] = s
		// Distinct config epochs before MEET (as redis-cli --cluster create): left at 0, the
		// gossip that resolves the collision can undo a migration made meanwhile (the old
		// owner's bumped epoch takes the slot back from the importing node).
		if err := s.client(t).Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.client(t).Do(ctx, "CLUSTER", "ADDSLOTSRANGE", ranges[i][0], ranges[i][1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c0 := nodes[0].client(t)
	for _, n := range nodes[1:] {
		if err := c0.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", n.port).Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 20*time.Second, "a 3-primary cluster with every slot known on every node", func() bool {
		for _, n := range nodes {
			c := n.client(t)
			info, err := c.ClusterInfo(ctx).Result()
			slots, err2 := c.ClusterSlots(ctx).Result()
			if err != nil || err2 != nil || !strings.Contains(info, "cluster_state:ok") || len(slots) != 3 {
				return false
			}
		}
		return true
	})
	return nodes
}

// heldOn is LEASE.GET answered by node n itself (no redirection): nil when no live lease.
func heldOn(t *testing.T, n *server, key string) *leaseInfo {
	t.Helper()
	tr := &transport{client: n.client(t), key: key}
	info, err := tr.get(context.Background(), time.Second)
	if err != nil {
		t.Fatalf("LEASE.GET on %s: %v", n.addr(), err)
	}
	return info
}

// Redis Cluster with three primaries: the elector, given a ClusterClient seeded with a node
// that does not own the lease key's slot, leads on the slot's primary; the slot then migrates
// to another primary mid-term (the steps of redis-cli --cluster reshard) and the term goes on:
// renewals land on the new owner and move the deadline, a fenced write through the
// application's ClusterClient lands there, and the release at the end too.
//
// Would catch: a pinned BLOCK/renew path that keeps asking the old owner after the migration
// (renewals refused with MOVED until the deadline: the term ends), a term ended by the
// migration, a release sent to the old owner (the lease stays held on the new one).
func TestClusterSlotMigrationKeepsTheTerm(t *testing.T) {
	nodes := startCluster(t)
	ctx := context.Background()
	const key, data = "{go-cluster}:leader", "{go-cluster}:data"
	slot, err := nodes[0].client(t).ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	si := 0 // the node whose range (startCluster's) holds the slot
	for si < 2 && slot > []int64{5460, 10922}[si] {
		si++
	}
	src, dst, other := nodes[si], nodes[(si+1)%3], nodes[(si+2)%3]
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{other.addr()}})
	t.Cleanup(func() { cc.Close() })
	ttl := 2 * time.Second
	a := startElector(t, "a", Config{Client: cc, Key: key, TTL: ttl})
	ta := waitTerm(t, a.started, 10*time.Second, "a leading via ClusterClient")
	if info := heldOn(t, src, key); info == nil || info.Token != ta.token {
		t.Fatalf("the slot's primary holds %+v, want token %d", info, ta.token)
	}
	if v, err := a.e.Fence(ctx, ta.token, "SET", data, "before").Result(); err != nil || v != "OK" {
		t.Fatalf("fenced write before the migration: %v %v", v, err)
	}

	srcID, _ := src.client(t).Do(ctx, "CLUSTER", "MYID").Text()
	dstID, _ := dst.client(t).Do(ctx, "CLUSTER", "MYID").Text()
	sc, dc := src.client(t), dst.client(t)
	for _, step := range []struct {
		c    *redis.Client
		args []any
	}{
		{dc, []any{"CLUSTER", "SETSLOT", slot, "IMPORTING", srcID}},
		{sc, []any{"CLUSTER", "SETSLOT", slot, "MIGRATING", dstID}},
		{sc, []any{"MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", key, data}},
		{dc, []any{"CLUSTER", "SETSLOT", slot, "NODE", dstID}},
		{sc, []any{"CLUSTER", "SETSLOT", slot, "NODE", dstID}},
		{other.client(t), []any{"CLUSTER", "SETSLOT", slot, "NODE", dstID}},
	} {
		if err := step.c.Do(ctx, step.args...).Err(); err != nil {
			t.Fatalf("%v: %v", step.args, err)
		}
	}
	migrated := time.Now()
	d0, _ := a.e.Deadline()
	moved := heldOn(t, dst, key)
	// A restored lease is held for the module's maximum TTL (never shorter than the holder's),
	// so a pttl back within our TTL below proves a RENEW ran on dst.
	if moved == nil || moved.Token != ta.token || moved.PTTL <= ttl {
		t.Fatalf("MIGRATE carried %+v, want token %d with the restored (long) pttl", moved, ta.token)
	}
	waitUntil(t, 10*time.Second, "a renewal on the slot's new owner", func() bool {
		info := heldOn(t, dst, key)
		d, leading := a.e.Deadline()
		return info != nil && info.Token == ta.token && info.PTTL <= ttl && leading && d.After(d0) &&
			d.After(migrated.Add(ttl*9/10))
	})
	select {
	case tm := <-a.ended:
		t.Fatalf("the migration ended the term (cause %v)", tm.cause)
	case r := <-a.stopped:
		t.Fatalf("the migration stopped the leadership: %v", r)
	default:
	}
	if v, err := a.e.Fence(ctx, ta.token, "SET", data, "after").Result(); err != nil || v != "OK" {
		t.Fatalf("fenced write after the migration: %v %v", v, err)
	}
	if v, err := dc.Get(ctx, data).Result(); err != nil || v != "after" {
		t.Fatalf("the new owner has %q (%v), want the fenced write", v, err)
	}
	// A stale token through the cluster: refused, not applied.
	_, err = a.e.Fence(ctx, ta.token-1, "SET", data, "stale").Result()
	var fe *FencedError
	if !errors.As(err, &fe) {
		t.Fatalf("a stale token through the cluster: %v, want a *FencedError", err)
	}
	a.stop(5 * time.Second)
	if info := heldOn(t, dst, key); info != nil {
		t.Fatalf("after Run returned the new owner still holds %+v: the release went elsewhere", info)
	}
}
