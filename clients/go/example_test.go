package lease_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	lease "github.com/redis-lease/redis-lease/clients/go"
	"github.com/redis/go-redis/v9"
)

func doOneStep(ctx context.Context, token int64) { _, _ = ctx, token }

// The README's example (compiled, not run).
func ExampleNewElector() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: "10.0.0.5:6379"})
	var e *lease.Elector
	e, err := lease.NewElector(lease.Config{
		Client: rdb, Key: "jobs/nightly-report", TTL: 10 * time.Second,
		Callbacks: lease.Callbacks{
			OnStartedLeading: func(ctx context.Context, token int64) {
				for ctx.Err() == nil { // cancelled StopBudget (TTL/5) before the local deadline
					// Carry token to the resource (LEASE.FENCE, a token column it checks...).
					// Work that cannot be fenced: check right before each step.
					if !e.IsLeader() {
						return
					}
					doOneStep(ctx, token)
				}
			},
			OnStoppedLeading: func(r lease.StopReason) { log.Printf("stopped leading: %s", r) },
			OnNewLeader:      func(owner string) { log.Printf("leader: %s", owner) },
		},
	})
	if err != nil {
		log.Fatal(err) // *lease.ConfigError names the broken rule
	}
	_ = e.Run(ctx) // on SIGTERM: task cancelled, waited for, lease released, Run returns
}
