//! Questions to Redis itself: role, paused writes, `min-replicas-to-write`, numeric server
//! settings.

use redis_module::{Context, ContextFlags, RedisValue};

pub fn is_primary(ctx: &Context) -> bool {
    ctx.get_flags().contains(ContextFlags::MASTER)
}

/// Does the server forbid writes to reach the AOF and replicas right now? True during
/// `CLIENT PAUSE WRITE|ALL`, `FAILOVER` and `CLUSTER FAILOVER` (while the primary waits for
/// its replica's offset), and `SHUTDOWN` waiting for lagging replicas. Redis then asserts that
/// nothing is propagated (`propagateNow`): a module write would abort the server. This is
/// `RedisModule_AvoidReplicaTraffic`, which is exactly that check on every server we support
/// (7.0: any client pause; 7.2+, Valkey: the paused `PAUSE_ACTION_REPLICA` action), and it
/// first ends a pause whose time is up, so it never reports a pause that is over.
pub fn writes_paused() -> bool {
    // SAFETY: a plain query without arguments; the pointer is filled in at module load.
    unsafe { redis_module::raw::RedisModule_AvoidReplicaTraffic.is_some_and(|f| f() != 0) }
}

pub fn database_count(ctx: &Context) -> i32 {
    config_u64(ctx, "databases")
        .and_then(|n| i32::try_from(n).ok())
        .unwrap_or(16)
}

/// A numeric server setting, via `CONFIG GET name` -> ["name", "value"].
fn config_u64(ctx: &Context, name: &str) -> Option<u64> {
    config_string(ctx, name).and_then(|s| s.parse().ok())
}

/// A server setting as text, via `CONFIG GET name` -> ["name", "value"].
pub fn config_string(ctx: &Context, name: &str) -> Option<String> {
    match ctx.call("CONFIG", &["GET", name]) {
        Ok(RedisValue::Array(v)) => v.get(1).and_then(|x| match x {
            RedisValue::SimpleString(s) => Some(s.clone()),
            RedisValue::BulkString(s) => Some(s.clone()),
            RedisValue::BulkRedisString(s) => Some(s.to_string_lossy()),
            RedisValue::StringBuffer(b) => std::str::from_utf8(b).ok().map(str::to_string),
            _ => None,
        }),
        _ => None,
    }
}

/// Does `min-replicas-to-write` allow a write right now? Redis checks it when a `write`
/// command arrives, but not when a blocked module client is served later; a BLOCKed
/// acquirer admitted while the replicas were up must not be granted after they went away
/// (that grant would exist on no replica, exactly what the setting is there to stop).
/// `INFO replication` carries `min_slaves_good_slaves` only while the setting is active, so
/// the common case (not configured) costs one INFO section and no CONFIG call.
pub fn replicas_allow_write(ctx: &Context) -> bool {
    if !is_primary(ctx) {
        return true;
    }
    let Some(good) = ctx
        .server_info("replication")
        .field("min_slaves_good_slaves")
        .and_then(|v| v.to_string_lossy().trim().parse::<u64>().ok())
    else {
        return true;
    };
    good >= config_u64(ctx, "min-replicas-to-write").unwrap_or(0)
}
