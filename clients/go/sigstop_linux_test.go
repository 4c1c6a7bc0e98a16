package lease

// A leader PROCESS is paused with SIGSTOP past its TTL while a follower takes over; after
// SIGCONT it must not act again: its context is cancelled with reason deadline (it stepped
// down on its own clock, without even sending a RENEW that the server would refuse) and no
// IsLeader() check passes after the pause. At its first check after the pause, the task's
// context already reports the stop point: Err() is DeadlineExceeded and Deadline() is past
// (issue 33), whichever goroutine the runtime ran first.
//
// The paused process is this test binary re-executed as a helper (TestMain), so the test
// needs nothing but `go test`.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) {
	if os.Getenv("LEASE_TEST_HELPER") == "leader" {
		os.Exit(helperLeader())
	}
	os.Exit(m.Run())
}

// monoNS reads CLOCK_MONOTONIC, shared by every process of the machine.
func monoNS() int64 {
	var ts syscall.Timespec
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic(errno)
	}
	return ts.Nano()
}

// helperLeader campaigns on $LEASE_HELPER_ADDR / $LEASE_HELPER_KEY and, while leader, "acts"
// every 10 ms after an IsLeader() check, printing one line per event on stdout:
//
//	grant TOKEN T | act TOKEN T STOP_NS | stop TOKEN T CAUSE ERR PAST_US LEADER | stopped REASON T
//
// stop: what the task saw at the check that ended it: ctx.Err() (nil, canceled,
// deadline_exceeded), how far ctx.Deadline() was in the past (µs, negative = ahead), IsLeader().
//
// T is CLOCK_MONOTONIC ns. For act, T is read BEFORE the check, so an act line with T after
// SIGCONT means a check passed after the pause.
func helperLeader() int {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: os.Getenv("LEASE_HELPER_ADDR")})
	defer c.Close()
	var e *Elector
	say := func(format string, a ...any) { fmt.Fprintf(os.Stdout, format+"\n", a...) }
	e, err := NewElector(Config{
		Client: c,
		Key:    os.Getenv("LEASE_HELPER_KEY"),
		TTL:    time.Second,
		Owner:  "helper-" + DefaultOwner(),
		Callbacks: Callbacks{
			OnStartedLeading: func(ctx context.Context, token int64) {
				say("grant %d %d", token, monoNS())
				for {
					before := monoNS()
					err, leader := ctx.Err(), e.IsLeader()
					if err != nil || !leader {
						dl, _ := ctx.Deadline()
						errs := map[error]string{nil: "nil", context.Canceled: "canceled", context.DeadlineExceeded: "deadline_exceeded"}[err]
						say("stop %d %d %s %s %d %v", token, monoNS(), strings.ReplaceAll(fmt.Sprint(context.Cause(ctx)), " ", "_"),
							errs, time.Since(dl).Microseconds(), leader)
						return
					}
					d, _ := e.Deadline()
					stopNS := monoNS() + int64(time.Until(d.Add(-e.p.StopBudget)))
					say("act %d %d %d", token, before, stopNS)
					time.Sleep(10 * time.Millisecond)
				}
			},
			OnStoppedLeading: func(r StepDownReason) { say("stopped %s %d", r, monoNS()) },
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := e.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

type helperEvent struct {
	kind  string
	token int64
	t     int64
	extra string
	more  []string
}

func TestSIGSTOPLeaderProcess(t *testing.T) {
	s := startServer(t)
	c := s.client(t)
	const key = "k:sigstop"
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LEASE_TEST_HELPER=leader", "LEASE_HELPER_ADDR="+s.addr(), "LEASE_HELPER_KEY="+key)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = testWriter{t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-exited
	})
	var mu sync.Mutex
	var events []helperEvent
	granted := make(chan struct{}, 1)
	stopped := make(chan string, 1)
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 3 {
				continue
			}
			ev := helperEvent{kind: f[0]}
			if f[0] == "stopped" {
				ev.extra = f[1]
				ev.t, _ = strconv.ParseInt(f[2], 10, 64)
			} else {
				ev.token, _ = strconv.ParseInt(f[1], 10, 64)
				ev.t, _ = strconv.ParseInt(f[2], 10, 64)
				if len(f) > 3 {
					ev.extra = f[3]
					ev.more = f[4:]
				}
			}
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
			switch ev.kind {
			case "grant":
				select {
				case granted <- struct{}{}:
				default:
				}
			case "stopped":
				select {
				case stopped <- ev.extra:
				default:
				}
			}
		}
		_ = cmd.Wait()
	}()

	select {
	case <-granted:
	case <-time.After(10 * time.Second):
		t.Fatal("helper never became leader")
	}
	time.Sleep(300 * time.Millisecond)
	tStop := monoNS()
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	b := startElector(t, "b", Config{Client: c, Key: key, TTL: time.Second})
	tb := waitTerm(t, b.started, 5*time.Second, "b taking over from the paused helper")
	// Paused well past its TTL (1 s).
	for time.Duration(monoNS()-tStop) < 1500*time.Millisecond {
		time.Sleep(20 * time.Millisecond)
	}
	tCont := monoNS()
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var reason string
	select {
	case reason = <-stopped:
	case <-time.After(3 * time.Second):
		t.Fatal("helper did not step down after SIGCONT")
	}
	time.Sleep(300 * time.Millisecond) // anything it would do after waking, it has done now
	if !b.e.IsLeader() {
		t.Fatal("b lost leadership after the helper woke up")
	}
	if got := leaseOwner(t, c, key); got != b.e.Owner()+"#1" {
		t.Fatalf("server owner %q, want b", got)
	}

	mu.Lock()
	defer mu.Unlock()
	var grantToken int64
	acts, stops := 0, 0
	for _, ev := range events {
		switch ev.kind {
		case "grant":
			if grantToken == 0 {
				grantToken = ev.token
			}
		case "act":
			acts++
			if ev.t >= tStop {
				t.Errorf("helper passed an IsLeader check at %d ns, after SIGSTOP at %d (SIGCONT %d)", ev.t, tStop, tCont)
			}
			if stopNS, _ := strconv.ParseInt(ev.extra, 10, 64); ev.t >= stopNS {
				t.Errorf("helper acted at %d ns, at or after its stop point %d", ev.t, stopNS)
			}
		case "stop":
			stops++
			if ev.t < tCont {
				t.Errorf("helper's task stopped before SIGCONT?")
			}
			t.Logf("helper task stopped %.1f ms after SIGCONT, cause %s; its ctx.Err() %v", float64(ev.t-tCont)/1e6, ev.extra, ev.more)
			if len(ev.more) != 3 || ev.more[0] != "deadline_exceeded" || strings.HasPrefix(ev.more[1], "-") || ev.more[2] != "false" {
				t.Errorf("at its first check after the pause the task saw ctx.Err(), µs past ctx.Deadline(), IsLeader() = %v; want deadline_exceeded, >= 0, false", ev.more)
			}
		}
	}
	if acts == 0 || stops != 1 {
		t.Fatalf("helper events: %d acts, %d stops; want > 0 and 1", acts, stops)
	}
	// deadline, not renew_rejected: it stepped down on its own clock before sending anything.
	if reason != string(ReasonDeadline) {
		t.Fatalf("helper stepped down with reason %s, want deadline", reason)
	}
	if tb.token <= grantToken {
		t.Fatalf("b's token %d not above the paused helper's %d", tb.token, grantToken)
	}
	measured(t, "SIGSTOP leader: paused %.0f ms, follower took over %.0f ms into the pause, leader acts after SIGCONT: 0",
		float64(tCont-tStop)/1e6, float64(time.Duration(monoNS()-tStop)-time.Since(tb.startedAt))/1e6)
}
