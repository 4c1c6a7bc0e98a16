package lease

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Sentinel promotion through a FailoverClient: a primary and a replica with the module, one
// Sentinel, the elector leading through Sentinel; SENTINEL FAILOVER promotes the replica (the
// old primary becomes its replica and answers READONLY to writes). The elector must lead on the
// promoted node: a renewal or new grant sent after the promotion backs its deadline and the
// lease lives there with this elector's owner.
//
// Would catch: an elector that keeps asking the demoted primary (READONLY until its deadline,
// then never leads again), and a lease on the new primary that is not this elector's.
func TestFailoverClientFollowsASentinelPromotion(t *testing.T) {
	primary := startServer(t)
	replica := startServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.port))
	rc := replica.client(t)
	waitUntil(t, 10*time.Second, "replication link up", func() bool { return infoField(rc, "replication", "master_link_status") == "up" })

	sp := freePort(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	body := "port " + strconv.Itoa(sp) + "\nbind 127.0.0.1\ndir " + dir + "\n" +
		"sentinel monitor m 127.0.0.1 " + strconv.Itoa(primary.port) + " 1\n" +
		"sentinel down-after-milliseconds m 1000\nsentinel failover-timeout m 10000\n"
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	sen := &server{t: t, port: sp, dir: dir, args: []string{conf, "--sentinel"}}
	sen.start()
	t.Cleanup(sen.kill)
	sc := redis.NewSentinelClient(&redis.Options{Addr: sen.addr()})
	t.Cleanup(func() { sc.Close() })
	ctx := context.Background()
	masterPort := func() string {
		a, err := sc.GetMasterAddrByName(ctx, "m").Result()
		if err != nil || len(a) != 2 {
			return ""
		}
		return a[1]
	}

	const key = "k:sentinel-promotion"
	ttl := 2 * time.Second
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{sen.addr()}})
	t.Cleanup(func() { fc.Close() })
	a := startElector(t, "a", Config{Client: fc, Key: key, TTL: ttl})
	ta := waitTerm(t, a.started, 10*time.Second, "a leading via Sentinel")
	if got := leaseOwner(t, primary.client(t), key); !strings.HasPrefix(got, a.e.Owner()+"#") {
		t.Fatalf("primary says owner %q, want a's", got)
	}

	// Sentinel needs a moment to see the replica healthy (NOGOODSLAVE until then).
	t0 := time.Now()
	waitUntil(t, 25*time.Second, "SENTINEL FAILOVER accepted", func() bool {
		err := sc.Failover(ctx, "m").Err()
		if err != nil && !strings.Contains(err.Error(), "NOGOODSLAVE") {
			t.Fatalf("SENTINEL FAILOVER: %v", err)
		}
		return err == nil
	})
	waitUntil(t, 20*time.Second, "Sentinel names the replica as primary", func() bool { return masterPort() == strconv.Itoa(replica.port) })
	promoted := time.Now()
	waitUntil(t, 20*time.Second, "a leading on the promoted node", func() bool {
		got := leaseOwner(t, rc, key)
		d, leading := a.e.Deadline()
		return strings.HasPrefix(got, a.e.Owner()+"#") && leading && d.After(promoted.Add(ttl*9/10))
	})
	measured(t, "sentinel promotion: leading on the new primary %.0f ms after SENTINEL FAILOVER (token %d -> %d)",
		float64(time.Since(t0).Microseconds())/1000, ta.token, a.e.Token())
	a.stop(5 * time.Second)
	if got := leaseOwner(t, rc, key); got != "" {
		t.Fatalf("after Run returned the promoted node still holds %q: the release went elsewhere", got)
	}
}
