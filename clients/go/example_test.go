package lease_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	lease "github.com/redis-lease/redis-lease/clients/go"
	"github.com/redis/go-redis/v9"
)

func buildReport() string                        { return "report" }
func doOneStep(ctx context.Context, token int64) { _, _ = ctx, token }

// The README's example, line for line (TestReadmeExampleIsTheExample checks it); compiled,
// not run.
func ExampleNewElector() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: "10.0.0.5:6379"})
	var e *lease.Elector
	e, err := lease.NewElector(lease.Config{
		Client: rdb, Key: "{jobs}:nightly-report", TTL: 10 * time.Second,
		Callbacks: lease.Callbacks{
			OnStartedLeading: func(ctx context.Context, token int64) {
				// ctx.Err() reads the clock: DeadlineExceeded from the stop point on
				// (StopBudget = TTL/5 before the local deadline), even right after a pause.
				for ctx.Err() == nil {
					// A write into the same Redis, fenced: the server runs SET only if token
					// is still the live lease's token (keys in the lease key's slot).
					err := e.Fence(ctx, token, "SET", "{jobs}:report", buildReport()).Err()
					var fenced *lease.FencedError
					if errors.As(err, &fenced) {
						return // a later reign holds the lease; nothing was written
					}
					// Work that cannot be fenced: check right before each step.
					if !e.IsLeader() {
						return
					}
					doOneStep(ctx, token)
				}
			},
			OnStoppedLeading: func(r lease.StepDownReason) { log.Printf("stopped leading: %s", r) },
			OnNewLeader:      func(owner string) { log.Printf("leader: %s", owner) },
		},
	})
	if err != nil {
		log.Fatal(err) // *lease.ConfigError names the broken rule
	}
	_ = e.Run(ctx) // on SIGTERM or Ctrl-C: task cancelled, waited for, lease released
}

// Quorum mode (README "Quorum mode"): one *redis.Client per independent primary; compiled,
// not run.
func ExampleNewElector_quorum() {
	var nodes []*redis.Client
	for _, addr := range []string{"10.0.0.5:6379", "10.0.1.5:6379", "10.0.2.5:6379"} {
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: addr}))
	}
	e, err := lease.NewElector(lease.Config{
		Nodes: nodes, Key: "jobs:nightly-report", TTL: 10 * time.Second,
		Callbacks: lease.Callbacks{OnStartedLeading: func(ctx context.Context, token int64) {
			doOneStep(ctx, token) // token: one per reign, rising across reigns on every node
		}},
	})
	if err != nil {
		log.Fatal(err) // e.g. two entries of Nodes are one server
	}
	_ = e.Run(context.Background())
}
