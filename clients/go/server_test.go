package lease

// Real redis-server processes with the module loaded, started by the tests themselves on
// free loopback ports. No mocks: the loop is tested against the module it is written for.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// modulePath finds the module: $LEASE_MODULE, else the repo's debug build, else release.
func modulePath(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("LEASE_MODULE"); p != "" {
		return p
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"target/debug/libredis_lease.so", "target/release/libredis_lease.so"} {
		if _, err := os.Stat(filepath.Join(root, p)); err == nil {
			return filepath.Join(root, p)
		}
	}
	skipOrFail(t, "no module .so (set LEASE_MODULE or run cargo build -p redis-lease)")
	return ""
}

// skipOrFail skips locally but fails in CI (CI=true), where a missing server is a bug.
func skipOrFail(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}

type server struct {
	t    testing.TB
	port int
	dir  string
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startServer starts redis-server with the module (grace 0: otherwise a fresh server refuses
// new grants for lease.max-ttl) plus extra arguments, and stops it when the test ends.
func startServer(t testing.TB, extra ...string) *server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		skipOrFail(t, "redis-server not found")
	}
	mod := modulePath(t)
	s := &server{t: t, port: freePort(t), dir: t.TempDir()}
	s.args = append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--loadmodule", mod, "lease.grace-ms", "0"}, extra...)
	_ = bin
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *server) start() {
	s.t.Helper()
	cmd := exec.Command("redis-server", s.args...)
	cmd.Stdout = nil
	logf, err := os.Create(filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", time.Now().UnixNano())))
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer c.Close()
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if i > 100 {
			s.t.Fatalf("redis-server on %d did not start: %v", s.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *server) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// kill SIGKILLs the server (a crash, as far as clients can tell).
func (s *server) kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused server would never die
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

func (s *server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// client returns a go-redis client to s, closed when the test ends.
func (s *server) client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr()})
	t.Cleanup(func() { c.Close() })
	return c
}
