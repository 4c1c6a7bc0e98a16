// Command etcd-election is the conformance elector (docs/conformance.md) for etcd's
// go.etcd.io/etcd/client/v3/concurrency Election, written the way etcd's own `etcdctl elect`
// uses it: a Session (a lease kept alive by the client), Election.Campaign to become leader,
// the session's Done channel as the end of leadership, Election.Resign to give it up. Session
// TTL = the campaign's TTL in whole seconds (etcd leases have whole-second TTLs; 2 s is the
// minimum a default etcd grants). Token = Election.Rev(), the create revision of our leader
// key; the resource fences with it.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

const (
	prepare  = 15 * time.Millisecond
	period   = 25 * time.Millisecond
	lingerTT = 3
)

// monoNs is CLOCK_MONOTONIC in nanoseconds: the clock every process of the campaign stamps
// its history with.
func monoNs() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot fail on Linux with a valid clock id
	}
	return ts.Nano()
}

// history appends one JSON object per line, one write per line (a kill loses at most it).
type history struct {
	mu sync.Mutex
	f  *os.File
}

func (h *history) record(ev string, fields ...any) {
	m := map[string]any{"ev": ev, "t": monoNs()}
	for i := 0; i+1 < len(fields); i += 2 {
		m[fields[i].(string)] = fields[i+1]
	}
	b, err := json.Marshal(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "elector: cannot encode %v: %v\n", m, err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := h.f.Write(append(b, '\n')); err != nil {
		fmt.Fprintf(os.Stderr, "elector: cannot record %s: %v\n", b, err)
	}
}

// resource speaks the fencing resource's line protocol: W token writer seq -> OK | FENCED n | ERR.
type resource struct {
	addr string
	conn net.Conn
	rd   *bufio.Reader
}

// write is true for OK; false for FENCED, ERR or a broken connection (reconnect next time).
func (r *resource) write(token int64, writer string, seq int64) bool {
	if r.conn == nil {
		c, err := net.DialTimeout("tcp", r.addr, 2*time.Second)
		if err != nil {
			return false
		}
		r.conn, r.rd = c, bufio.NewReader(c)
	}
	_ = r.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(r.conn, "W %d %s %d\n", token, writer, seq); err != nil {
		r.close()
		return false
	}
	line, err := r.rd.ReadString('\n')
	if err != nil {
		r.close()
		return false
	}
	return strings.TrimRight(line, "\r\n") == "OK"
}

func (r *resource) close() {
	if r.conn != nil {
		_ = r.conn.Close()
		r.conn, r.rd = nil, nil
	}
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

type elector struct {
	id, resourceAddr, mode string
	ttl                    time.Duration
	h                      *history
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "elector: "+format+"\n", a...)
	os.Exit(2)
}

func main() {
	var redis multi
	fs := flag.NewFlagSet("etcd-election", flag.ContinueOnError)
	endpoints := fs.String("etcd", "", "etcd endpoints HOST:PORT[,HOST:PORT...] (default: the host:port of every --redis)")
	fs.Var(&redis, "redis", "the harness's backend node URL, once per node")
	id := fs.String("id", "", "elector id")
	res := fs.String("resource", "", "fencing resource HOST:PORT")
	out := fs.String("out", "", "history path")
	ttlMs := fs.Int64("ttl-ms", 2000, "lease TTL in ms (rounded up to whole seconds)")
	key := fs.String("key", "chaos:leader", "election name")
	mode := fs.String("mode", "safe", "safe|ignore-deadline")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fail("unexpected argument %q", fs.Arg(0))
	}
	if *id == "" || *res == "" || *out == "" {
		fail("missing --id, --resource or --out")
	}
	if *ttlMs <= 0 {
		fail("--ttl-ms must be positive, got %d", *ttlMs)
	}
	if *mode != "safe" && *mode != "ignore-deadline" {
		fail("--mode %s: a peer elector runs safe or ignore-deadline", *mode)
	}
	eps := endpointsOf(*endpoints, redis)
	f, err := os.OpenFile(*out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fail("%v", err)
	}
	h := &history{f: f}
	pid := os.Getpid()
	owner := fmt.Sprintf("%s-%d-%08x", *id, pid, rand.Uint32())
	h.record("start", "elector", *id, "pid", pid, "owner", owner, "mode", *mode)
	ttl := time.Duration(*ttlMs) * time.Millisecond
	e := &elector{id: *id, resourceAddr: *res, mode: *mode, ttl: ttl, h: h}

	cli, err := clientv3.New(clientv3.Config{
		Endpoints: eps,
		// The dial timeout of etcd's client examples; the reconnect backoff capped at one TTL
		// (docs/conformance.md; gRPC's default cap is 120 s).
		DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{BaseDelay: time.Second, Multiplier: 1.6, Jitter: 0.2, MaxDelay: ttl},
		})},
	})
	if err != nil {
		fail("clientv3.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan struct{})
	go func() {
		e.campaign(ctx, cli, owner, "/"+strings.ReplaceAll(*key, ":", "_")+"/")
		close(done)
	}()
	<-sig
	// SIGTERM: record resign, stop the task, resign through the library (campaign does it
	// when its context ends), record exit, exit 0.
	h.record("resign")
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	_ = cli.Close()
	h.record("exit", "why", "resigned")
	os.Exit(0)
}

// endpointsOf is --etcd, or else the host:port of every --redis URL: a harness backend that
// hands each elector its proxy to each node as --redis needs no other option.
func endpointsOf(flagValue string, redis []string) []string {
	if flagValue != "" {
		return strings.Split(flagValue, ",")
	}
	var eps []string
	for _, u := range redis {
		p, err := url.Parse(u)
		if err != nil || p.Host == "" || p.Port() == "" {
			fail("cannot read HOST:PORT from --redis %s", u)
		}
		eps = append(eps, p.Host)
	}
	if len(eps) == 0 {
		fail("give --etcd HOST:PORT (or --redis URLs of the etcd nodes)")
	}
	return eps
}

// campaign: session -> Campaign -> reign until the session ends -> again, until ctx ends.
func (e *elector) campaign(ctx context.Context, cli *clientv3.Client, owner, prefix string) {
	// etcd lease TTLs are whole seconds: round up, so the session never lasts less than the TTL.
	ttlS := int((e.ttl + time.Second - 1) / time.Second)
	for ctx.Err() == nil {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttlS))
		if err != nil {
			fmt.Fprintf(os.Stderr, "elector: NewSession: %v\n", err)
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		el := concurrency.NewElection(s, prefix)
		if err := el.Campaign(ctx, owner); err != nil {
			if !errors.Is(err, context.Canceled) {
				fmt.Fprintf(os.Stderr, "elector: Campaign: %v\n", err)
			}
			_ = s.Close()
			continue
		}
		e.reign(ctx, s, el.Rev())
		if ctx.Err() != nil {
			// Resigning: delete our leader key (the next candidate's watch fires at once).
			rctx, rcancel := context.WithTimeout(context.Background(), e.ttl)
			if err := el.Resign(rctx); err != nil {
				fmt.Fprintf(os.Stderr, "elector: Resign: %v\n", err)
			}
			rcancel()
		}
		// Revokes the lease (bounded by the TTL inside Close); a new session campaigns next.
		_ = s.Close()
	}
}

// reign records grant, works while the session lives and ctx does, records stop.
func (e *elector) reign(ctx context.Context, s *concurrency.Session, token int64) {
	e.h.record("grant", "token", token, "deadline", 0)
	// The library's stop signal: the session ended (its keep-alive stopped or the lease was
	// reported expired) or we are resigning.
	stopped := func() (bool, string) {
		select {
		case <-s.Done():
			return true, "session done"
		case <-ctx.Done():
			return true, "resign"
		default:
			return false, ""
		}
	}
	if e.mode == "ignore-deadline" {
		go e.linger(ctx, s, token)
		for {
			if st, _ := stopped(); st {
				return
			}
			sleepCtx(ctx, period)
		}
	}
	r := &resource{addr: e.resourceAddr}
	defer r.close()
	var seq int64
	why := ""
	for {
		// The check: the library says leader while the session has not ended.
		if st, w := stopped(); st {
			why = w
			break
		}
		seq++
		// Election keeps no local deadline (the lease's lives in the lessor, unexported): 0.
		e.h.record("check", "token", token, "seq", seq, "deadline", 0)
		time.Sleep(prepare) // deliberately not cut by the stop signal
		ok := r.write(token, e.id, seq)
		e.h.record("ack", "token", token, "seq", seq, "ok", ok)
		select {
		case <-s.Done():
			why = "session done"
		case <-ctx.Done():
			why = "resign"
		case <-time.After(period):
			continue
		}
		break
	}
	e.h.record("stop", "token", token, "why", why)
}

// linger is the negative control's detached writer: no check, 3 TTLs past the session's end.
func (e *elector) linger(ctx context.Context, s *concurrency.Session, token int64) {
	r := &resource{addr: e.resourceAddr}
	defer r.close()
	hard := time.Now().Add(10 * time.Minute)
	var until time.Time
	var seq int64
	for time.Now().Before(hard) {
		if until.IsZero() {
			select {
			case <-s.Done():
				until = time.Now().Add(lingerTT * e.ttl)
			case <-ctx.Done():
				until = time.Now().Add(lingerTT * e.ttl)
			default:
			}
		} else if time.Now().After(until) {
			break
		}
		seq++
		e.h.record("check", "token", token, "seq", seq, "deadline", 0)
		time.Sleep(prepare)
		e.h.record("ack", "token", token, "seq", seq, "ok", r.write(token, e.id, seq))
		time.Sleep(period)
	}
	e.h.record("stop", "token", token, "why", "unsafe linger over")
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
