// Peer elector: redsync (github.com/go-redsync/redsync/v4) on go-redis, as its README and
// godoc show a Mutex (peers/redsync/README.md says exactly what this adapter does).
//
//	elector --id ID --redis URL --resource HOST:PORT --out PATH --ttl-ms N --key KEY
//
// One reign: mutex.LockContext (the library's defaults: 32 tries, 50..250 ms apart) -> leader;
// a goroutine calls mutex.Extend every TTL/3; the first Extend that fails ends the reign. The
// work loop's check is the library's own validity: now before mutex.Until() (the godoc's
// replacement for the deprecated Valid), and no failed Extend.
//
// History and resource protocol: docs/conformance.md. The token is synthetic
// (peers/README.md, "Tokens"): CLOCK_MONOTONIC in microseconds at the grant.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"
)

const (
	prep   = 15 * time.Millisecond // check -> write window (where a pause turns a write stale)
	period = 25 * time.Millisecond
)

func monoNs() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		log.Fatalf("clock_gettime: %v", err)
	}
	return ts.Nano()
}

// untilNs converts the library's deadline (a time.Time with Go's monotonic reading) to
// CLOCK_MONOTONIC nanoseconds: now + (until - now).
func untilNs(until time.Time) int64 {
	if until.IsZero() {
		return 0
	}
	return monoNs() + int64(time.Until(until))
}

type recorder struct {
	mu sync.Mutex
	f  *os.File
}

func (r *recorder) write(ev string, fields map[string]any) {
	m := map[string]any{"ev": ev, "t": monoNs()}
	for k, v := range fields {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		log.Printf("record %s: %v", ev, err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.f.Write(append(b, '\n')); err != nil {
		log.Printf("record %s: %v", ev, err)
	}
}

// resource is a client of the fencing resource: W <token> <writer> <seq> -> OK | FENCED n.
type resource struct {
	addr string
	conn net.Conn
	rd   *bufio.Reader
}

func (r *resource) write(token int64, writer string, seq int) bool {
	if r.conn == nil {
		c, err := net.DialTimeout("tcp", r.addr, 2*time.Second)
		if err != nil {
			return false
		}
		r.conn, r.rd = c, bufio.NewReader(c)
	}
	_ = r.conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(r.conn, "W %d %s %d\n", token, writer, seq); err != nil {
		r.close()
		return false
	}
	line, err := r.rd.ReadString('\n')
	if err != nil {
		r.close()
		return false
	}
	return strings.TrimSpace(line) == "OK"
}

func (r *resource) close() {
	if r.conn != nil {
		_ = r.conn.Close()
	}
	r.conn, r.rd = nil, nil
}

func main() {
	id := flag.String("id", "", "elector id")
	redisURL := flag.String("redis", "", "redis URL")
	resAddr := flag.String("resource", "", "fencing resource HOST:PORT")
	out := flag.String("out", "", "history file")
	ttlMs := flag.Int("ttl-ms", 2000, "lease TTL in ms")
	key := flag.String("key", "chaos:leader", "lock key")
	mode := flag.String("mode", "safe", "only safe")
	flag.Parse()
	if *id == "" || *redisURL == "" || *resAddr == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "redsync elector: --id, --redis, --resource and --out are required")
		os.Exit(2)
	}
	if *mode != "safe" {
		fmt.Fprintf(os.Stderr, "redsync elector: --mode %s: a peer elector runs only mode safe\n", *mode)
		os.Exit(2)
	}
	f, err := os.OpenFile(*out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "redsync elector: %v\n", err)
		os.Exit(2)
	}
	rec := &recorder{f: f}
	owner := fmt.Sprintf("%s-%d-%08x", *id, os.Getpid(), rand.Uint32())
	rec.write("start", map[string]any{"elector": *id, "pid": os.Getpid(), "owner": owner, "mode": *mode})

	opts, err := goredislib.ParseURL(*redisURL)
	if err != nil {
		fmt.Fprintf(os.Stderr, "redsync elector: --redis: %v\n", err)
		os.Exit(2)
	}
	client := goredislib.NewClient(opts)
	rs := redsync.New(goredis.NewPool(client))
	ttl := time.Duration(*ttlMs) * time.Millisecond

	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	go func() {
		<-sigs
		rec.write("resign", nil)
		cancel()
	}()

	res := &resource{addr: *resAddr}
	for ctx.Err() == nil {
		// The README's mutex, its expiry scaled to the common TTL; every other option default.
		mutex := rs.NewMutex(*key, redsync.WithExpiry(ttl))
		if err := mutex.LockContext(ctx); err != nil {
			if ctx.Err() == nil {
				log.Printf("lock: %v", err)
			}
			continue
		}
		reign(ctx, rec, res, *id, mutex, ttl)
	}
	rec.write("exit", map[string]any{"why": "resigned"})
}

// reign runs one leadership: the Extend loop and the work loop, then Unlock.
func reign(ctx context.Context, rec *recorder, res *resource, id string, mutex *redsync.Mutex, ttl time.Duration) {
	token := monoNs() / 1000
	// The Extend goroutine owns the mutex while the reign runs; it publishes Until() after
	// each Extend (the Mutex's fields are not safe for concurrent use).
	var deadline atomic.Int64
	deadline.Store(untilNs(mutex.Until()))
	rec.write("grant", map[string]any{"token": token, "deadline": deadline.Load()})
	lost := make(chan struct{})
	done := make(chan struct{})
	extender := make(chan struct{})
	go func() {
		defer close(extender)
		tick := time.NewTicker(ttl / 3)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			ok, err := mutex.Extend()
			if !ok || err != nil {
				log.Printf("extend failed, leadership lost: ok=%v err=%v", ok, err)
				close(lost)
				return
			}
			deadline.Store(untilNs(mutex.Until()))
		}
	}()
	why := work(ctx, rec, res, id, token, lost, &deadline)
	rec.write("stop", map[string]any{"token": token, "why": why})
	close(done)
	<-extender
	select {
	case <-lost:
	default:
		if ok, err := mutex.Unlock(); !ok || err != nil {
			log.Printf("unlock: ok=%v err=%v", ok, err)
		}
	}
}

func work(ctx context.Context, rec *recorder, res *resource, id string, token int64, lost <-chan struct{}, deadline *atomic.Int64) string {
	for seq := 1; ; seq++ {
		select {
		case <-ctx.Done():
			return "cancelled"
		case <-lost:
			return "extend failed"
		default:
		}
		d := deadline.Load()
		if monoNs() >= d {
			return "not leader at check (past mutex.Until)"
		}
		rec.write("check", map[string]any{"token": token, "seq": seq, "deadline": d})
		time.Sleep(prep)
		ok := res.write(token, id, seq)
		rec.write("ack", map[string]any{"token": token, "seq": seq, "ok": ok})
		select {
		case <-ctx.Done():
			return "cancelled"
		case <-lost:
			return "extend failed"
		case <-time.After(period):
		}
	}
}
