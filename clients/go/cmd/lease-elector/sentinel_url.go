//go:build linux

package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// sentinelScheme is the Rust client's Sentinel address scheme (client/src/sentinel.rs), the
// one the harness's --topology sentinel hands every elector.
const sentinelScheme = "redis+sentinel://"

// parseSentinelURL parses redis+sentinel://[[user]:password@]host:port[,host:port...]/master-name[/db]
// into the options of go-redis' NewFailoverClient (the Sentinel client clients/go/config.go
// documents); nil, nil for a URL of any other scheme. As in Rust, the credentials and db apply
// to the data nodes (Username, Password, DB), not to the Sentinels. The errors never contain
// the password.
func parseSentinelURL(u string) (*redis.FailoverOptions, error) {
	rest, ok := strings.CutPrefix(u, sentinelScheme)
	if !ok {
		return nil, nil
	}
	authority, path, ok := strings.Cut(rest, "/")
	if !ok {
		return nil, fmt.Errorf("sentinel url needs /master-name after the hosts (%sh:p,h:p/name)", sentinelScheme)
	}
	o := &redis.FailoverOptions{}
	hosts := authority
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		hosts = authority[i+1:]
		// As redis:// URLs: "user:password", ":password" or "user"; percent-encoded.
		user, pw, _ := strings.Cut(authority[:i], ":")
		var err1, err2 error
		o.Username, err1 = url.PathUnescape(user)
		o.Password, err2 = url.PathUnescape(pw)
		if err1 != nil || err2 != nil {
			return nil, errors.New("sentinel url: bad percent-encoding in the credentials")
		}
	}
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			continue
		}
		i := strings.LastIndex(h, ":")
		if i < 0 {
			return nil, fmt.Errorf("sentinel address %q needs host:port", h)
		}
		host, port := strings.TrimSuffix(strings.TrimPrefix(h[:i], "["), "]"), h[i+1:]
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
			return nil, fmt.Errorf("sentinel address %q: bad port", h)
		}
		if host == "" {
			return nil, fmt.Errorf("sentinel address %q: empty host", h)
		}
		o.SentinelAddrs = append(o.SentinelAddrs, net.JoinHostPort(host, port))
	}
	if len(o.SentinelAddrs) == 0 {
		return nil, errors.New("sentinel url names no sentinel")
	}
	master, db, _ := strings.Cut(strings.TrimRight(path, "/"), "/")
	if master == "" {
		return nil, errors.New("sentinel url needs a master name")
	}
	o.MasterName = master
	if db != "" {
		n, err := strconv.ParseUint(db, 10, 31)
		if err != nil {
			return nil, fmt.Errorf("bad db %q", db)
		}
		o.DB = int(n)
	}
	return o, nil
}
