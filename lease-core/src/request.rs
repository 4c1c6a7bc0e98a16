//! What a caller asks of the engine: one value per command (parsed by `args`) plus the
//! requests that come from the module's own callbacks (timer, blocked-client retry, timeout,
//! re-arm after load or promotion).

use crate::state::Apply;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// `LEASE.ACQUIRE key owner ttl [BLOCK timeout]`; `block` is `Some(timeout_ms)` with
    /// BLOCK (0 = forever).
    Acquire {
        owner: &'a [u8],
        ttl_ms: u64,
        block: Option<u64>,
        /// `MEMBERSHIP id` (quorum mode, docs/quorum.md §4.1); never together with `block`.
        membership: Option<u64>,
    },
    /// A BLOCKed acquirer retried because its key was signalled ready.
    AcquireRetry { owner: &'a [u8], ttl_ms: u64 },
    /// A BLOCKed acquirer's timeout passed.
    BlockTimeout,
    /// `LEASE.RENEW key owner token ttl`
    Renew {
        owner: &'a [u8],
        token: u64,
        ttl_ms: u64,
        membership: Option<u64>,
    },
    /// `LEASE.RAISE key owner token newtoken` (quorum mode, docs/quorum.md): the live lease
    /// held by owner+token carries `newtoken` from now on; `newtoken >= token` (parser).
    Raise {
        owner: &'a [u8],
        token: u64,
        new_token: u64,
        membership: Option<u64>,
    },
    /// `LEASE.MEMBERSHIP key old new [TOKEN t]`: the operator's compare-and-set of the key's
    /// quorum membership binding (`old = None`: bound to nothing, or no key yet); with
    /// `token`, a free key's last token becomes at least `t` (docs/quorum.md §4.1).
    Membership {
        old: Option<u64>,
        new: u64,
        token: Option<u64>,
    },
    /// `LEASE.RELEASE key owner token`
    Release { owner: &'a [u8], token: u64 },
    /// `LEASE.FENCE key token [command arg ...]`; the inner command stays in the caller's
    /// argument vector, the engine only needs to know whether there is one.
    Fence { token: u64, with_command: bool },
    /// `LEASE.GET key`
    Get,
    /// `LEASE.INFO key`
    Info,
    /// `LEASE.APPLY key HOLD owner token expires_wall_ms | FREE token`
    Apply(Apply),
    /// The key's expiry timer fired (or the cron found it overdue).
    Expire,
    /// A lease this process has not touched yet (loaded, promoted, renamed, SWAPDB): make
    /// sure its expiry timer is armed.
    Rearm,
    /// A lease that arrived by a client's `RESTORE` (MIGRATE, resharding; not loading, not
    /// replication): held for at least `min_ms` (`lease.migrate-grace-ms`), then as `Rearm`.
    Migrated { min_ms: u64 },
}
