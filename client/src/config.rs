//! [`ElectorConfig`]: what an elector needs to know, with defaults derived from the TTL.

use std::time::Duration;

use crate::error::LeaseError;

/// Configuration of one [`crate::Elector`]. Build it with [`ElectorConfig::new`] and adjust
/// fields with the `with_*` methods (or set the public fields directly).
///
/// Defaults for `ttl = T`: `renew_interval = T/3`, `drift = 0.01`, `margin = min(T/100, 50 ms)`,
/// `stop_budget = T/5`, `block_timeout = 5 s`, `op_timeout = T/5` (at least 50 ms),
/// `min_replicas = 0`, `wait_timeout = T/10`, backoff 50 ms .. 5 s.
// Debug is written by hand: `redis_url` may carry a password (`redis://user:pw@host`), and a
// configuration is the kind of value that ends up in a log line.
#[derive(Clone)]
pub struct ElectorConfig {
    /// `redis://host:port/db` (anything the `redis` crate accepts).
    pub redis_url: String,
    /// The lease key.
    pub key: String,
    /// Owner id base, 1..=239 bytes; unique per process incarnation (default from
    /// [`default_owner`]). Each reign sends `owner#reign` on the wire (protocol R17).
    pub owner: String,
    /// Lease TTL sent with every ACQUIRE/RENEW (server side expiry).
    pub ttl: Duration,
    /// Time between successful renewals.
    pub renew_interval: Duration,
    /// Maximum relative clock-rate difference between this host and the Redis server
    /// (0.01 = 1 %). The local deadline shrinks by `ttl * drift`.
    pub drift: f64,
    /// Extra safety subtracted from the local deadline (scheduling jitter, the time between
    /// checking the deadline and acting on it).
    pub margin: Duration,
    /// How long before the local deadline the task is told to stop (its cancellation token
    /// fires at `deadline - stop_budget`). Must cover the task's own shutdown time.
    pub stop_budget: Duration,
    /// With `> 0`, every grant and renewal must be acknowledged by this many replicas
    /// (`WAIT min_replicas wait_timeout`) to count.
    pub min_replicas: u32,
    /// Timeout of `WAIT`.
    pub wait_timeout: Duration,
    /// Followers wait with `LEASE.ACQUIRE ... BLOCK block_timeout`, then ask again. A grant
    /// that arrives after a longer wait than `lead_time() - stop_budget` cannot be used as is
    /// (its deadline counts from the send instant) and costs one more round trip (a
    /// non-blocking ACQUIRE that refreshes it), so keep this below that window for the
    /// fastest handover.
    pub block_timeout: Duration,
    /// Time limit for one command (added to `block_timeout` for blocking acquires).
    pub op_timeout: Duration,
    /// Reconnect backoff: full jitter in `[0, min(backoff_max, backoff_min * 2^attempt)]`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// Quorum mode: how long a node whose server identity changed (a restart, or its address
    /// moved to another server) counts toward no grant or renewal; at least `ttl`. Default
    /// 30 s, the module's default `lease.max-ttl`: the longest lease any elector could have
    /// left on the server that vanished. Set it to the nodes' `lease.max-ttl`.
    pub node_quarantine: Duration,
    /// Quorum mode: the membership id to send (Q9, 16 hex digits) instead of the one computed
    /// from the node URLs. For electors that reach the same servers under different addresses
    /// (proxies, NAT, a test harness): each would compute its own id and the first one to bind
    /// a key would shut the others out. Every elector of one membership must then set the
    /// same id (`lease-run --print-membership-id` on the real node list gives it).
    pub membership_id: Option<String>,
}

impl std::fmt::Debug for ElectorConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElectorConfig")
            .field("redis_url", &redact_url(&self.redis_url))
            .field("key", &self.key)
            .field("owner", &self.owner)
            .field("ttl", &self.ttl)
            .field("renew_interval", &self.renew_interval)
            .field("drift", &self.drift)
            .field("margin", &self.margin)
            .field("stop_budget", &self.stop_budget)
            .field("min_replicas", &self.min_replicas)
            .field("wait_timeout", &self.wait_timeout)
            .field("block_timeout", &self.block_timeout)
            .field("op_timeout", &self.op_timeout)
            .field("backoff_min", &self.backoff_min)
            .field("backoff_max", &self.backoff_max)
            .field("node_quarantine", &self.node_quarantine)
            .field("membership_id", &self.membership_id)
            .finish()
    }
}

/// `scheme://user:secret@host/...` -> `scheme://user:<redacted>@host/...`; a URL without a
/// password is returned as is. The authority ends at the first `/` after `://`; its userinfo
/// ends at the LAST `@` in it (a password may itself contain `@`).
pub fn redact_url(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let end = url[start..].find('/').map_or(url.len(), |i| start + i);
    let Some(at) = url[start..end].rfind('@').map(|i| start + i) else {
        return url.to_string();
    };
    match url[start..at].find(':') {
        Some(colon) => format!("{}<redacted>{}", &url[..start + colon + 1], &url[at..]),
        // `redis://secret@host`: the redis crate takes a lone userinfo as the password.
        None => format!("{}<redacted>{}", &url[..start], &url[at..]),
    }
}

impl ElectorConfig {
    /// A configuration with every other field derived from `ttl` (see the type docs).
    pub fn new(redis_url: impl Into<String>, key: impl Into<String>, ttl: Duration) -> Self {
        ElectorConfig {
            redis_url: redis_url.into(),
            key: key.into(),
            owner: default_owner(),
            ttl,
            renew_interval: ttl / 3,
            drift: 0.01,
            margin: (ttl / 100).min(Duration::from_millis(50)),
            stop_budget: ttl / 5,
            min_replicas: 0,
            wait_timeout: ttl / 10,
            block_timeout: Duration::from_secs(5),
            op_timeout: (ttl / 5).max(Duration::from_millis(50)),
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_secs(5),
            node_quarantine: Duration::from_secs(30),
            membership_id: None,
        }
    }

    /// See [`ElectorConfig::membership_id`].
    pub fn with_membership_id(mut self, id: impl Into<String>) -> Self {
        self.membership_id = Some(id.into());
        self
    }

    pub fn with_node_quarantine(mut self, d: Duration) -> Self {
        self.node_quarantine = d;
        self
    }

    pub fn with_owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }
    pub fn with_renew_interval(mut self, d: Duration) -> Self {
        self.renew_interval = d;
        self
    }
    pub fn with_drift(mut self, drift: f64) -> Self {
        self.drift = drift;
        self
    }
    pub fn with_margin(mut self, d: Duration) -> Self {
        self.margin = d;
        self
    }
    pub fn with_stop_budget(mut self, d: Duration) -> Self {
        self.stop_budget = d;
        self
    }
    pub fn with_min_replicas(mut self, n: u32, wait_timeout: Duration) -> Self {
        self.min_replicas = n;
        self.wait_timeout = wait_timeout;
        self
    }
    pub fn with_block_timeout(mut self, d: Duration) -> Self {
        self.block_timeout = d;
        self
    }
    pub fn with_op_timeout(mut self, d: Duration) -> Self {
        self.op_timeout = d;
        self
    }
    pub fn with_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.backoff_min = min;
        self.backoff_max = max;
        self
    }

    /// The usable leadership time per grant/renewal: `ttl * (1 - drift) - margin`.
    ///
    /// Computed from the TTL as the server gets it (whole ms, floored: protocol R15), not from
    /// `ttl` itself: a 1.9 ms TTL is sent as 1 ms, and leading for 1.9 ms would outlive it.
    pub fn lead_time(&self) -> Duration {
        Duration::from_millis(crate::decide::wire_ms(self.ttl))
            .mul_f64(1.0 - self.drift)
            .saturating_sub(self.margin)
    }

    /// Refuse configurations that cannot be safe or cannot work (the rules and their names
    /// are [`crate::decide::config_problem`]'s). The error reads `rule: why`.
    pub fn validate(&self) -> Result<(), LeaseError> {
        match crate::decide::config_problem(self) {
            Some((rule, why)) => Err(LeaseError::Config(format!("{rule}: {why}"))),
            None => Ok(()),
        }
    }
}

/// `host-pid-random`: unique per process incarnation, so a restarted process never inherits
/// (and silently "refreshes") the lease of its previous life.
pub fn default_owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".into());
    format!("{host}-{}-{:08x}", std::process::id(), fastrand::u32(..))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_a_password() {
        for (url, shown) in [
            (
                "redis://user:hunter2@h:6379/0",
                "redis://user:<redacted>@h:6379/0",
            ),
            ("rediss://:hunter2@h:6380", "rediss://:<redacted>@h:6380"),
            ("redis://hunter2@h", "redis://<redacted>@h"),
            ("redis://u:p@ss@w0rd@h/2", "redis://u:<redacted>@h/2"),
            (
                "redis+sentinel://u:hunter2@s1:26379,s2:26379/mymaster",
                "redis+sentinel://u:<redacted>@s1:26379,s2:26379/mymaster",
            ),
            ("redis://h:6379/0", "redis://h:6379/0"),
            ("unix:///run/redis.sock", "unix:///run/redis.sock"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
            let dbg = format!("{:?}", ElectorConfig::new(url, "k", Duration::from_secs(1)));
            assert!(dbg.contains(&format!("{shown:?}")), "{dbg}");
            for secret in ["hunter2", "ss@w0rd"] {
                assert!(!dbg.contains(secret), "{dbg}");
            }
        }
    }
}
