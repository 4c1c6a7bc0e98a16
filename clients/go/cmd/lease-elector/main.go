//go:build linux

// Command lease-elector is the Go client's conformance elector: the process the fault
// harness (lease-harness run --elector-cmd ...) starts for every elector slot. It campaigns
// with the library under test and does the "work" of docs/conformance.md: while leader it
// checks IsLeader(), prepares for 15 ms, writes "W <token> <id> <seq>" to the fencing
// resource, and records everything as JSON lines with CLOCK_MONOTONIC nanoseconds.
//
//	lease-elector --id ID --redis URL [--redis URL ...] --resource HOST:PORT --out PATH --ttl-ms N --key KEY
//	    --mode safe|ignore-deadline|reuse-owner [--quorum-control correct|no-unify|minority]
//	    [--api run|oneshot|oneshot-twice]
//
// --api oneshot takes each term through the one-shot API, Elector.RunOnce, called again after
// each term (one reign per call), instead of Run; every grant records its call's number
// (`call`), and the checker's reigns_per_call allows one reign per call. oneshot-twice is that
// rule's negative control: Run (which campaigns again after a lost term) with every reign
// recorded as call 1.
//
// --redis given once: the ordinary single-primary elector. Given once per node (in node
// order, the same for every elector): quorum mode over those independent primaries
// (Config.Nodes, docs/quorum.md); --quorum-control picks a negative control there. A single
// --redis may be redis+sentinel://[[user]:password@]host:port[,host:port...]/master-name[/db]
// (the Rust client's scheme, which the harness's --topology sentinel hands every elector):
// the elector then uses go-redis' NewFailoverClient on those Sentinels (sentinel_url.go).
//
// Modes ignore-deadline and reuse-owner are negative controls (docs/conformance.md): the
// checker must catch them. reuse-owner works like safe but sends the same owner in every
// reign (the behaviour before protocol R17), switched on through the module's internal hook.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	lease "github.com/redis-lease/redis-lease/clients/go"
	"github.com/redis-lease/redis-lease/clients/go/internal/hooks"
	"github.com/redis/go-redis/v9"
)

const (
	prep       = 15 * time.Millisecond // the window between deciding and writing (deliberate)
	period     = 25 * time.Millisecond
	lingerTTLs = 3                // ignore-deadline: keep writing this many TTLs after the stop signal
	hardStop   = 10 * time.Minute // ignore-deadline: and stop after this in any case
)

// monoNS reads CLOCK_MONOTONIC, the clock every elector of the harness records on (Go's own
// monotonic readings are relative to process start, so they cannot be compared across
// processes).
func monoNS() int64 {
	var ts syscall.Timespec
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic(fmt.Sprintf("clock_gettime: %v", errno))
	}
	return ts.Nano()
}

// deadlineNS converts a deadline on Go's monotonic clock to CLOCK_MONOTONIC ns.
func deadlineNS(d time.Time, ok bool) int64 {
	if !ok {
		return 0
	}
	return monoNS() + int64(time.Until(d))
}

// history appends one JSON object per line, one write per line (a kill loses at most that
// line).
type history struct {
	mu sync.Mutex
	f  *os.File
}

func (h *history) rec(fields map[string]any) {
	b, err := json.Marshal(fields)
	if err != nil {
		fmt.Fprintf(os.Stderr, "lease-elector: cannot encode %v: %v\n", fields, err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := h.f.Write(append(b, '\n')); err != nil {
		fmt.Fprintf(os.Stderr, "lease-elector: cannot record %s: %v\n", b, err)
	}
}

// resource is a client of the fencing resource's line protocol.
type resource struct {
	addr string
	conn net.Conn
	rd   *bufio.Reader
}

// write sends "W token id seq" and reports whether it was accepted. Any failure counts as
// not ok and drops the connection (re-made on the next write).
func (r *resource) write(token int64, id string, seq int64) bool {
	if r.conn == nil {
		c, err := net.DialTimeout("tcp", r.addr, 2*time.Second)
		if err != nil {
			return false
		}
		r.conn, r.rd = c, bufio.NewReader(c)
	}
	_ = r.conn.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := func() (string, error) {
		if _, err := fmt.Fprintf(r.conn, "W %d %s %d\n", token, id, seq); err != nil {
			return "", err
		}
		return r.rd.ReadString('\n')
	}()
	if err != nil {
		r.conn.Close()
		r.conn = nil
		return false
	}
	return strings.TrimSpace(line) == "OK"
}

type worker struct {
	id, res string
	ttl     time.Duration
	h       *history
	e       *lease.Elector
	// call: the one-shot call in progress (--api oneshot), 0 = none (--api run).
	call atomic.Int64
}

// grant records the start of a reign, with the one-shot call it runs in, if any.
func (w *worker) grant(token int64) {
	d, ok := w.e.Deadline()
	ev := map[string]any{"ev": "grant", "t": monoNS(), "token": token, "deadline": deadlineNS(d, ok)}
	if c := w.call.Load(); c != 0 {
		ev["call"] = c
	}
	w.h.rec(ev)
}

func (w *worker) step(r *resource, token, seq int64) {
	d, ok := w.e.Deadline()
	w.h.rec(map[string]any{"ev": "check", "t": monoNS(), "token": token, "seq": seq, "deadline": deadlineNS(d, ok)})
	time.Sleep(prep)
	acked := r.write(token, w.id, seq)
	w.h.rec(map[string]any{"ev": "ack", "t": monoNS(), "token": token, "seq": seq, "ok": acked})
}

// reign is OnStartedLeading in mode safe: check, prepare, write, pause; stop as soon as the
// library says we no longer lead.
func (w *worker) reign(ctx context.Context, token int64) {
	w.grant(token)
	r := &resource{addr: w.res}
	defer func() {
		if r.conn != nil {
			r.conn.Close()
		}
	}()
	var seq int64
	why := ""
	for why == "" {
		// The check, decided right before acting, on the monotonic clock.
		if ctx.Err() != nil || !w.e.IsLeader() {
			why = "not leader at check"
			break
		}
		seq++
		w.step(r, token, seq)
		t := time.NewTimer(period)
		select {
		case <-ctx.Done():
			why = "cancelled"
		case <-t.C:
		}
		t.Stop()
	}
	w.h.rec(map[string]any{"ev": "stop", "t": monoNS(), "token": token, "why": why})
}

// reignUnsafe is mode ignore-deadline (the negative control): the work runs detached from the
// lease's lifetime and keeps going for 3 TTLs after the stop signal.
func (w *worker) reignUnsafe(ctx context.Context, token int64) {
	w.grant(token)
	go func() {
		r := &resource{addr: w.res}
		start := time.Now()
		var stopAfter time.Time
		var seq int64
		for time.Since(start) < hardStop {
			if ctx.Err() != nil && stopAfter.IsZero() {
				stopAfter = time.Now().Add(lingerTTLs * w.ttl)
			}
			if !stopAfter.IsZero() && !time.Now().Before(stopAfter) {
				break
			}
			seq++
			w.step(r, token, seq)
			time.Sleep(period)
		}
		w.h.rec(map[string]any{"ev": "stop", "t": monoNS(), "token": token, "why": "unsafe linger over"})
	}()
	<-ctx.Done()
}

func randomHex() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// urls is a repeatable string flag.
type urls []string

func (u *urls) String() string     { return strings.Join(*u, ",") }
func (u *urls) Set(v string) error { *u = append(*u, v); return nil }

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("lease-elector", flag.ContinueOnError)
	id := fs.String("id", "", "elector id (owner prefix)")
	var redisURLs urls
	fs.Var(&redisURLs, "redis", "redis://host:port/ (repeat once per node for quorum mode) or one redis+sentinel://h:p,h:p/master")
	control := fs.String("quorum-control", "correct", "quorum mode only: correct | no-unify | minority")
	res := fs.String("resource", "", "fencing resource host:port")
	out := fs.String("out", "", "history file (JSON lines, appended)")
	ttlMS := fs.Int64("ttl-ms", 1000, "lease TTL in ms")
	key := fs.String("key", "chaos:leader", "lease key")
	mode := fs.String("mode", "safe", "safe | ignore-deadline | reuse-owner")
	api := fs.String("api", "run", "run | oneshot | oneshot-twice")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *id == "" || len(redisURLs) == 0 || *res == "" || *out == "" || fs.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "lease-elector: --id, --redis, --resource and --out are required")
		return 2
	}
	if *mode != "safe" && *mode != "ignore-deadline" && *mode != "reuse-owner" {
		fmt.Fprintf(os.Stderr, "lease-elector: unknown --mode %s\n", *mode)
		return 2
	}
	if *api != "run" && *api != "oneshot" && *api != "oneshot-twice" {
		fmt.Fprintf(os.Stderr, "lease-elector: unknown --api %s\n", *api)
		return 2
	}
	level := slog.LevelInfo
	if os.Getenv("LEASE_LOG") == "debug" {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("elector", *id)

	f, err := os.OpenFile(*out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "lease-elector: %v\n", err)
		return 2
	}
	h := &history{f: f}
	// The owner starts with our id, so the orchestrator can map LEASE.GET's owner to us.
	owner := fmt.Sprintf("%s-%d-%s", *id, os.Getpid(), randomHex())

	var clients []*redis.Client
	for _, u := range redisURLs {
		fo, err := parseSentinelURL(u)
		if err != nil {
			// Without the URL: it may hold a password.
			fmt.Fprintf(os.Stderr, "lease-elector: --redis: %v\n", err)
			return 2
		}
		if fo != nil {
			if len(redisURLs) > 1 {
				// Quorum mode takes independent primaries (Config.Nodes refuses a failover
				// client: a failover could hand a node's grants to a replica that never had them).
				fmt.Fprintln(os.Stderr, "lease-elector: --redis: a redis+sentinel:// URL must be the only --redis")
				return 2
			}
			// The Sentinel client clients/go/config.go documents; its dialer asks the
			// Sentinels for the primary on every new connection, so a failover is followed.
			c := redis.NewFailoverClient(fo)
			defer c.Close()
			clients = append(clients, c)
			continue
		}
		opts, err := redis.ParseURL(u)
		if err != nil {
			fmt.Fprintf(os.Stderr, "lease-elector: --redis %s: %v\n", u, err)
			return 2
		}
		c := redis.NewClient(opts)
		defer c.Close()
		clients = append(clients, c)
	}
	if len(clients) == 1 && *control != "correct" {
		fmt.Fprintln(os.Stderr, "lease-elector: --quorum-control needs several --redis (quorum mode)")
		return 2
	}
	// Only once every argument was accepted: an elector refused at start never ran, and a
	// "start" record would count it as one that did (and then vanished) in the history.
	h.rec(map[string]any{"ev": "start", "t": monoNS(), "elector": *id, "pid": os.Getpid(), "owner": owner, "mode": *mode})

	ttl := time.Duration(*ttlMS) * time.Millisecond
	w := &worker{id: *id, res: *res, ttl: ttl, h: h}
	task := w.reign
	if *mode == "ignore-deadline" {
		task = w.reignUnsafe
	}
	cfg := lease.Config{
		Key:   *key,
		TTL:   ttl,
		Owner: owner,
		// Reconnect backoff capped at one TTL (library default 5 s): the harness measures
		// "Redis back -> next grant", which the cap bounds.
		BackoffMax: ttl,
		Callbacks:  lease.Callbacks{OnStartedLeading: task},
		Logger:     logger,
		// Quorum campaigns: the id of the real node list (our URLs name our own proxies;
		// docs/conformance.md).
		MembershipID: os.Getenv("LEASE_HARNESS_MEMBERSHIP_ID"),
	}
	if len(clients) == 1 {
		cfg.Client = clients[0]
	} else {
		cfg.Nodes = clients
	}
	e, err := lease.NewElector(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "lease-elector: %v\n", err)
		return 2
	}
	w.e = e
	if *mode == "reuse-owner" {
		hooks.ReuseOwner(e)
	}
	if len(clients) > 1 {
		if err := hooks.QuorumControl(e, *control); err != nil {
			fmt.Fprintf(os.Stderr, "lease-elector: --quorum-control: %v\n", err)
			return 2
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		h.rec(map[string]any{"ev": "resign", "t": monoNS()})
		cancel()
	}()
	why := "resigned"
	switch *api {
	case "oneshot":
		err = oneShots(ctx, e, w)
	case "oneshot-twice":
		w.call.Store(1)
		err = e.Run(ctx)
	default:
		err = e.Run(ctx)
	}
	if err != nil {
		why = "error: " + err.Error()
	} else if ctx.Err() == nil {
		why = "task finished"
	}
	h.rec(map[string]any{"ev": "exit", "t": monoNS(), "why": why})
	return 0
}

// oneShots calls RunOnce, one call per term, until ctx is done: a lost term (a *StopError)
// ends a call and the next call campaigns; any other error ends the process.
func oneShots(ctx context.Context, e *lease.Elector, w *worker) error {
	for call := int64(1); ctx.Err() == nil; call++ {
		w.call.Store(call)
		err := e.RunOnce(ctx)
		var lost *lease.StopError
		if err != nil && !errors.As(err, &lost) {
			return err
		}
		if err == nil && ctx.Err() == nil {
			// Our task returns only when its term ends, so RunOnce cannot end with nil
			// while ctx is live.
			return fmt.Errorf("RunOnce returned nil while not resigned")
		}
	}
	return nil
}
