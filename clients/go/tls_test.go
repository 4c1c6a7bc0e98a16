package lease

// TLS with a private CA (docs/security.md §2): a redis-server with only a TLS port
// (--port 0) that requires client certificates, certificates made here with the openssl CLI
// as in client/tests/security.rs. The elector gets a go-redis client whose Options.TLSConfig
// trusts the test CA and presents the client certificate, and logs in as the elector user of
// docs/security.md §3 (rules read from the doc itself).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func openssl(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("openssl", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("openssl %v: %v\n%s", args, err, out)
	}
}

func makeCA(t *testing.T, dir, name string) {
	openssl(t, dir, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
		"-keyout", name+".key", "-out", name+".crt", "-days", "2", "-subj", "/CN="+name,
		"-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
}

func makeLeaf(t *testing.T, dir, ca, name, usage string) {
	ext := "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=" + usage +
		"\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
	if err := os.WriteFile(filepath.Join(dir, name+".ext"), []byte(ext), 0o600); err != nil {
		t.Fatal(err)
	}
	openssl(t, dir, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
		"-keyout", name+".key", "-out", name+".csr", "-subj", "/CN="+name)
	openssl(t, dir, "x509", "-req", "-in", name+".csr", "-CA", ca+".crt", "-CAkey", ca+".key",
		"-CAcreateserial", "-out", name+".crt", "-days", "2", "-extfile", name+".ext")
}

// electorRules is the `elector` recipe of docs/security.md §3, verbatim (the first such line:
// single primary).
func electorRules(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*ACL SETUSER elector on >\.\.\. (.*)$`).FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/security.md has no `ACL SETUSER elector on >... ` line")
	}
	return strings.Fields(string(m[1]))
}

type tlsServer struct {
	dir  string
	port int
}

// tlsConfig trusts the CA in file ca and presents the client certificate.
func (s *tlsServer) tlsConfig(t *testing.T, ca string) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join(s.dir, ca))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", ca)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(s.dir, "client.crt"), filepath.Join(s.dir, "client.key"))
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

func (s *tlsServer) client(t *testing.T, ca, user, password string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.port), TLSConfig: s.tlsConfig(t, ca),
		Username: user, Password: password, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// startTLSServer: CA "ca" signs the server and client certificates, "other-ca" signs nothing
// the server uses; the elector user has password "elector-pw".
func startTLSServer(t *testing.T) *tlsServer {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		skipOrFail(t, "openssl CLI not found (run scripts/setup)")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		skipOrFail(t, "redis-server not found")
	}
	mod := modulePath(t)
	s := &tlsServer{dir: t.TempDir(), port: freePort(t)}
	makeCA(t, s.dir, "ca")
	makeCA(t, s.dir, "other-ca")
	makeLeaf(t, s.dir, "ca", "server", "serverAuth")
	makeLeaf(t, s.dir, "ca", "client", "clientAuth")
	p := func(f string) string { return filepath.Join(s.dir, f) }
	// Debian's redis-server is built with TLS.
	cmd := exec.Command("redis-server", "--port", "0", "--tls-port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--tls-cert-file", p("server.crt"), "--tls-key-file", p("server.key"), "--tls-ca-cert-file", p("ca.crt"),
		"--tls-auth-clients", "yes", "--save", "", "--appendonly", "no", "--dir", s.dir,
		"--loadmodule", mod, "lease.grace-ms", "0")
	logf, err := os.Create(p("redis.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	admin := s.client(t, "ca.crt", "", "")
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := admin.Ping(ctx).Err()
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TLS redis-server on %d did not start: %v", s.port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	args := []any{"ACL", "SETUSER", "elector", "on", ">elector-pw"}
	for _, r := range electorRules(t) {
		args = append(args, r)
	}
	if err := admin.Do(context.Background(), args...).Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

// warnRecorder is a slog handler that keeps every record at Warn or above (and passes all
// records to the test log).
type warnRecorder struct {
	next slog.Handler
	mu   *sync.Mutex
	msgs *[]string
}

func (h warnRecorder) Enabled(ctx context.Context, l slog.Level) bool { return true }
func (h warnRecorder) Handle(ctx context.Context, r slog.Record) error {
	line := r.Message
	r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
	h.mu.Lock()
	if r.Level >= slog.LevelWarn {
		*h.msgs = append(*h.msgs, line)
	}
	h.mu.Unlock()
	return h.next.Handle(ctx, r)
}
func (h warnRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return warnRecorder{h.next.WithAttrs(as), h.mu, h.msgs}
}
func (h warnRecorder) WithGroup(g string) slog.Handler {
	return warnRecorder{h.next.WithGroup(g), h.mu, h.msgs}
}

func newWarnRecorder(t *testing.T) (*slog.Logger, func() []string) {
	var mu sync.Mutex
	var msgs []string
	h := warnRecorder{slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}), &mu, &msgs}
	return slog.New(h), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), msgs...)
	}
}

// The elector leads, renews past its TTL and releases on cancel over mutual TLS with a
// private CA, as the least-privilege user of the recipe, and logs no warning.
func TestLeadsRenewsAndReleasesOverTLSAsTheACLUser(t *testing.T) {
	s := startTLSServer(t)
	admin := s.client(t, "ca.crt", "", "")
	const key = "leases:tls"
	logger, warnings := newWarnRecorder(t)
	started := make(chan int64, 1)
	stopped := make(chan StepDownReason, 1)
	e, err := NewElector(Config{Client: s.client(t, "ca.crt", "elector", "elector-pw"), Key: key, TTL: 2 * time.Second,
		Logger: logger, Callbacks: Callbacks{
			OnStartedLeading: func(ctx context.Context, token int64) { started <- token; <-ctx.Done() },
			OnStoppedLeading: func(r StepDownReason) { stopped <- r },
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer cancel()
	var token int64
	select {
	case token = <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("did not lead over TLS")
	}
	first, _ := e.Deadline()
	led := time.Now()
	// TTL 2 s: the first RENEW opens a connection, a TLS handshake within OpTimeout on a busy host.
	// Renewals: after more than a TTL the deadline has moved and the server still names us.
	end := led.Add(5 * time.Second)
	for d, _ := e.Deadline(); !d.After(first) || time.Since(led) < 2500*time.Millisecond; d, _ = e.Deadline() {
		if time.Now().After(end) {
			t.Fatal("no renewal over TLS")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := leaseOwner(t, admin, key); got != e.Owner()+"#1" || !e.IsLeader() || e.Token() != token {
		t.Fatalf("server says owner %q; IsLeader %v token %d want %d", got, e.IsLeader(), e.Token(), token)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if got := leaseOwner(t, admin, key); got != "" {
		t.Fatalf("after cancel the lease is held by %q: not released", got)
	}
	if w := warnings(); len(w) != 0 {
		t.Fatalf("warnings logged: %q", w)
	}
}

// Negative control: trusting another CA, the elector never leads and says why.
func TestAServerCertificateFromAnotherCAIsRefused(t *testing.T) {
	s := startTLSServer(t)
	admin := s.client(t, "ca.crt", "", "")
	const key = "leases:tls-wrong-ca"
	logger, warnings := newWarnRecorder(t)
	started := make(chan int64, 1)
	e, err := NewElector(Config{Client: s.client(t, "other-ca.crt", "elector", "elector-pw"), Key: key, TTL: 2 * time.Second,
		Logger: logger, Callbacks: Callbacks{
			OnStartedLeading: func(ctx context.Context, token int64) { started <- token; <-ctx.Done() },
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	end := time.Now().Add(5 * time.Second)
	for !strings.Contains(strings.Join(warnings(), "\n"), "certificate signed by unknown authority") {
		if time.Now().After(end) {
			t.Fatalf("no warning naming the certificate failure: %q", warnings())
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-started:
		t.Fatal("led with a server certificate from another CA")
	default:
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if got := leaseOwner(t, admin, key); got != "" {
		t.Fatalf("lease held by %q", got)
	}
}
