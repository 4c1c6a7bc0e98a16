//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseSentinelURL(t *testing.T) {
	o, err := parseSentinelURL("redis+sentinel://127.0.0.1:26379,127.0.0.1:26380,localhost:26381/leases")
	if err != nil || o == nil {
		t.Fatalf("good url: %v, %v", o, err)
	}
	if want := []string{"127.0.0.1:26379", "127.0.0.1:26380", "localhost:26381"}; !reflect.DeepEqual(o.SentinelAddrs, want) || o.MasterName != "leases" || o.Username != "" || o.Password != "" || o.DB != 0 {
		t.Fatalf("good url: %+v", o)
	}

	// Credentials and db are the data nodes'; the Sentinels are asked without them.
	o, err = parseSentinelURL("redis+sentinel://app:s%40cret@h:1,[::1]:2/m/3")
	if err != nil || o == nil {
		t.Fatalf("url with password: %v, %v", o, err)
	}
	if want := []string{"h:1", "[::1]:2"}; !reflect.DeepEqual(o.SentinelAddrs, want) || o.MasterName != "m" || o.Username != "app" || o.Password != "s@cret" || o.DB != 3 || o.SentinelPassword != "" {
		t.Fatalf("url with password: %+v", o)
	}
	if o, err = parseSentinelURL("redis+sentinel://:pw@h:1/m/"); err != nil || o.Username != "" || o.Password != "pw" {
		t.Fatalf("password only: %+v, %v", o, err)
	}

	for _, u := range []string{"redis://127.0.0.1:6379/", "rediss://h:1/0", "unix:///tmp/r.sock", "redis+sentinel:/h:1/m"} {
		if o, err := parseSentinelURL(u); o != nil || err != nil {
			t.Errorf("%s is not a sentinel url: %+v, %v", u, o, err)
		}
	}

	for u, why := range map[string]string{
		"redis+sentinel://h:1":           "needs /master-name",
		"redis+sentinel://h:1/":          "needs a master name",
		"redis+sentinel://h:1,h:2//0":    "needs a master name",
		"redis+sentinel:///m":            "names no sentinel",
		"redis+sentinel://,/m":           "names no sentinel",
		"redis+sentinel://:pw@/m":        "names no sentinel",
		"redis+sentinel://h/m":           "needs host:port",
		"redis+sentinel://h:x/m":         "bad port",
		"redis+sentinel://h:70000/m":     "bad port",
		"redis+sentinel://:1/m":          "empty host",
		"redis+sentinel://h:1/m/zero":    "bad db",
		"redis+sentinel://:pw%zz@h:1/m/": "percent-encoding",
	} {
		o, err := parseSentinelURL(u)
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: want an error with %q, got %+v, %v", u, why, o, err)
		}
	}
}

// TestMalformedSentinelURLExits2: one line on stderr, without the password, and exit code 2;
// the elector runs as a child process (this test binary, re-executed) with a time limit,
// since an elector that took the URL would campaign forever.
func TestMalformedSentinelURLExits2(t *testing.T) {
	if args := os.Getenv("LEASE_ELECTOR_TEST_ARGS"); args != "" {
		os.Args = append([]string{"lease-elector"}, strings.Split(args, " ")...)
		os.Exit(run())
	}
	for redisArgs, why := range map[string]string{
		"--redis redis+sentinel://:hunter2@h:1/":                  "needs a master name",
		"--redis redis+sentinel://h:1/m --redis redis://h:2/":     "must be the only --redis",
		"--redis redis://h:2/ --redis redis+sentinel://h:1,h:2/m": "must be the only --redis",
	} {
		out := filepath.Join(t.TempDir(), "history.jsonl")
		cmd := exec.Command(os.Args[0], "-test.run=^TestMalformedSentinelURLExits2$", "-test.timeout=30s")
		cmd.Env = append(os.Environ(), "LEASE_ELECTOR_TEST_ARGS=--id e1 --resource 127.0.0.1:1 --out "+out+" "+redisArgs)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		msg := stderr.String()
		if code != 2 || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, why) || strings.Contains(msg, "hunter2") {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and one line with %q", redisArgs, code, msg, why)
		}
		// Refused before it ran: no "start" record (the harness would count a started elector).
		if b, err := os.ReadFile(out); err != nil || len(b) != 0 {
			t.Errorf("%s: history %q (%v); want an empty file", redisArgs, b, err)
		}
	}
}
