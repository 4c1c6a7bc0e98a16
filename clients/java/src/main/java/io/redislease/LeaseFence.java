package io.redislease;

import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.api.async.BaseRedisAsyncCommands;
import io.lettuce.core.api.sync.BaseRedisCommands;
import io.lettuce.core.protocol.CommandArgs;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;

/**
 * Fenced writes into the same Redis: {@code LEASE.FENCE key token command...} runs
 * {@code command} atomically only if {@code token} is the live lease's token, on YOUR Lettuce
 * connection (its timeouts, codec options, TLS). Why this is the safe write: the check and the
 * write are one command on the server, so a leader paused between {@code isLeader()} and its
 * write cannot overwrite the work of a newer leader; the stale write is refused instead.
 *
 * <p>Works on a standalone/Sentinel connection ({@code connection.sync()}) and on a Cluster
 * connection (the command is routed by the lease key; the inner command's keys must hash to
 * the same slot, e.g. {@code {jobs}/lease} and {@code {jobs}/report}).
 *
 * <p>The reply is the inner command's reply as plain Java values: {@code Long}, {@code String},
 * {@code Double}, {@code Boolean}, {@code null}, or a {@code List} of those (a RESP3 map as its
 * keys and values alternating). With no inner command, the lease's remaining ms ({@code Long}).
 */
public final class LeaseFence {
    private LeaseFence() {}

    /**
     * Run {@code command} fenced by ({@code key}, {@code token}) and return its reply.
     *
     * @throws FencedException the token is stale: nothing was written
     * @throws RedisCommandExecutionException any other error reply (the inner command's included)
     */
    public static Object fence(BaseRedisCommands<String, String> redis, String key, long token, String... command) {
        Objects.requireNonNull(redis, "redis");
        try {
            return redis.dispatch(Transport.Cmd.FENCE, new ReplyOutput(), args(key, token, command));
        } catch (RedisCommandExecutionException e) {
            throw fenced(key, token, e);
        }
    }

    /** {@link #fence} on an async connection; completes exceptionally with {@link FencedException}. */
    public static CompletableFuture<Object> fenceAsync(BaseRedisAsyncCommands<String, String> redis, String key, long token,
            String... command) {
        Objects.requireNonNull(redis, "redis");
        CompletableFuture<Object> out = new CompletableFuture<>();
        redis.dispatch(Transport.Cmd.FENCE, new ReplyOutput(), args(key, token, command)).whenComplete((v, e) -> {
            if (e == null) {
                out.complete(v);
                return;
            }
            Throwable c = e instanceof CompletionException && e.getCause() != null ? e.getCause() : e;
            out.completeExceptionally(c instanceof RedisCommandExecutionException r ? fenced(key, token, r) : c);
        });
        return out;
    }

    private static CommandArgs<String, String> args(String key, long token, String... command) {
        if (key == null || key.isEmpty()) {
            throw new IllegalArgumentException("fence: key is empty");
        }
        if (token <= 0) {
            throw new IllegalArgumentException("fence: token must be positive");
        }
        CommandArgs<String, String> a = Transport.args(key).add(token);
        for (String part : command) {
            a.add(Objects.requireNonNull(part, "fence: command part"));
        }
        return a;
    }

    /** The server's FENCED reply as the typed exception; every other error unchanged. */
    private static RedisCommandExecutionException fenced(String key, long token, RedisCommandExecutionException e) {
        String msg = String.valueOf(e.getMessage());
        return Decide.classifyError(msg).kind() == ErrorKind.FENCED ? new FencedException(key, token, msg) : e;
    }
}
