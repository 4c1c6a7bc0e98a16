//! The fencing helper: `LEASE.FENCE key token command...` on the application's own
//! connection. The module checks the token and runs the command atomically after the check,
//! with the caller's ACL rights, so a write of a deposed leader (paused past its deadline,
//! its token no longer the live one) is refused by the server, not by the client's clock.

use redis::aio::ConnectionLike;
use redis::{ToRedisArgs, Value};

use crate::error::CommandError;
use crate::transport::reply;

/// Runs `command` (its name and arguments) only if `token` is the live lease's token of
/// `key`, and returns the command's own reply. A stale token is `ErrorKind::Fenced` (the
/// server's `FENCED ...`), and then the command did not run. Under Cluster, the command's
/// keys must be in the lease key's hash slot.
pub async fn fence<C, A>(
    conn: &mut C,
    key: &str,
    token: u64,
    command: &[A],
) -> Result<Value, CommandError>
where
    C: ConnectionLike + Send,
    A: ToRedisArgs,
{
    let mut cmd = redis::cmd("LEASE.FENCE");
    cmd.arg(key).arg(token);
    for a in command {
        cmd.arg(a);
    }
    reply(cmd.query_async::<Value>(conn).await)
}
