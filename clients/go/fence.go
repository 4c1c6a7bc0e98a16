package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// FencedError is the error of Fence when the server refused the token: it is not the live
// lease's token (a later reign holds the lease, or none does). The inner command did not run.
type FencedError struct {
	Token int64
	Msg   string // the server's error line, "FENCED ..."
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("lease: token %d fenced: %s", e.Token, e.Msg)
}

// Fence runs LEASE.FENCE key token [command arg ...] on the application's client (Config.Client)
// and returns it as a *redis.Cmd: with a command, the command's own reply (Result, Text, Int
// ...), run atomically on the server right after the check, with the connection's ACL
// permissions; without one, the lease's remaining ms. If token is not the live lease's token
// the command does not run and the Cmd's error is a *FencedError. Other errors are go-redis'.
//
// Why it protects a write that IsLeader() cannot: the check and the write are one step on the
// server, so a reign that ended while this process was paused (or its reply was late) cannot
// write. Under Cluster the command's keys must be in the lease key's hash slot ({tag}).
func (e *Elector) Fence(ctx context.Context, token int64, command ...any) *redis.Cmd {
	args := append([]any{"LEASE.FENCE", e.cfg.Key, token}, command...)
	cmd := redis.NewCmd(ctx, args...)
	_ = e.cfg.Client.Process(ctx, cmd)
	var re redis.Error
	if err := cmd.Err(); errors.As(err, &re) && strings.HasPrefix(re.Error(), "FENCED") {
		cmd.SetErr(&FencedError{Token: token, Msg: re.Error()})
	}
	return cmd
}
