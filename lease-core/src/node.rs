//! What this server process knows beyond any one key, as a plain value: the configuration in
//! force, the highest token it has seen and when its grace period started. The module keeps
//! the live copy and hands the engine a snapshot with every request; the engine never reads
//! or writes process state itself (a token it sees comes back as `Effect::ObserveToken`).

use crate::config::Config;
use crate::state::{Grace, Now};

// `Hash`: the model checker (model/) stores this in its hashed states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Node {
    pub config: Config,
    /// Highest token this process has issued, applied from its primary, or loaded: the next
    /// grant on any key is above it (see `Lease::next_token`).
    pub token_watermark: u64,
    /// Monotonic µs at which the current grace period started (module load or promotion).
    pub grace_started_mono_us: u64,
    /// The `lease.max-ttl` in force when the running grace started: its length never drops
    /// below it while it follows max-ttl (`lease.grace-ms -1`), or at all after lost state
    /// (`grace_after_lost_state`). See `grace_len_ms`.
    pub grace_floor_ms: u64,
    /// The running grace was started by `start_grace_for_lost_state`.
    pub grace_after_lost_state: bool,
    /// The grace has ended (the module saw it end). Raising `lease.grace-ms` or
    /// `lease.max-ttl` afterwards does not reopen it: a new length applies from the next
    /// start or promotion (issue 34: a server up ~70 s answered `GRACE 528897 ms left` after
    /// `CONFIG SET lease.grace-ms 600000`, refusing every newcomer for nearly ten minutes
    /// although nothing had happened that grace protects against).
    pub grace_over: bool,
}

impl Node {
    /// Floor for the next token on any key.
    pub fn token_floor(&self) -> u64 {
        self.token_watermark.saturating_add(1)
    }

    /// Grace left now, with the grace length in force now (`grace_len_ms`).
    pub fn grace_ms_left(&self, now: Now) -> u64 {
        Grace::starting_at(self.grace_started_mono_us).ms_left(now.mono_us, self.grace_len_ms())
    }

    /// Length of the running grace: `lease.grace-ms` in force now (or `lease.max-ttl` for
    /// -1), but at least `grace_floor_ms`. An explicit `lease.grace-ms` on a start or
    /// promotion grace is the operator's choice and applies at once (lowering it shortens a
    /// running grace, 0 ends it). SAFETY (issue 24): a grace that follows `lease.max-ttl` must
    /// outlast leases granted elsewhere under the limit in force when it started; lowering
    /// max-ttl during it bounds only leases granted from now on, so it must not cut the grace
    /// (it did: 30 s became 2 s). Raising max-ttl lengthens it.
    /// After lost state (eviction) the floor holds whatever `lease.grace-ms` says.
    pub fn grace_len_ms(&self) -> u64 {
        if self.grace_over {
            return 0;
        }
        if self.config.grace_ms < 0 || self.grace_after_lost_state {
            self.config.grace_ms().max(self.grace_floor_ms)
        } else {
            self.config.grace_ms()
        }
    }

    /// Start (server start) or promotion: this server may not know leases granted elsewhere
    /// (by the old primary, or by its own previous life whose last writes were never
    /// persisted), so for `lease.grace-ms` it grants nothing new. Leases it does know are
    /// renewed as usual.
    pub fn start_grace(self, now: Now) -> Node {
        Node {
            grace_started_mono_us: now.mono_us,
            grace_floor_ms: self.config.max_ttl.max(0) as u64,
            grace_after_lost_state: false,
            grace_over: false,
            ..self
        }
    }

    /// The running grace has ended: a later raise of its settings does not reopen it.
    pub fn end_grace(self) -> Node {
        Node {
            grace_over: true,
            ..self
        }
    }

    /// A grace after this server lost lease state no persistence setting protects (leases
    /// evicted under an `allkeys-*` policy): at least the `lease.max-ttl` in force now,
    /// whatever `lease.grace-ms` says, since any lease it lost was granted for at most that
    /// long and may have been renewed just before it was lost. `lease.grace-ms` below max-ttl
    /// is a choice about restarts with reliable persistence; it does not cover this.
    pub fn start_grace_for_lost_state(self, now: Now) -> Node {
        Node {
            grace_after_lost_state: true,
            ..self.start_grace(now)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_grace_is_not_reopened_by_raising_its_settings() {
        let t0 = Now {
            mono_us: 1_000_000,
            wall_ms: 1,
        };
        let t1 = Now {
            mono_us: 3_000_000,
            wall_ms: 2001,
        };
        let n = Node {
            config: Config {
                max_ttl: 1_000,
                grace_ms: -1,
                max_owner_len: 8,
            },
            ..Node::default()
        }
        .start_grace(t0);
        assert_eq!(n.grace_ms_left(t1), 0, "1 s grace, 2 s later");
        let mut over = n.end_grace();
        over.config.grace_ms = 600_000;
        over.config.max_ttl = 30_000;
        assert_eq!(over.grace_ms_left(t1), 0, "a raise after the end");
        // Without the end recorded the same raise would reopen it (what the fix prevents).
        let mut open = n;
        open.config.grace_ms = 600_000;
        assert!(open.grace_ms_left(t1) > 590_000);
        // The next start or promotion takes the new length.
        assert_eq!(over.start_grace(t1).grace_ms_left(t1), 600_000);
    }

    #[test]
    fn lowering_max_ttl_never_shortens_a_running_grace_but_grace_ms_does() {
        let t0 = Now {
            mono_us: 1_000_000,
            wall_ms: 1,
        };
        let t1 = Now {
            mono_us: 2_000_000,
            wall_ms: 1001,
        };
        let mut n = Node {
            config: Config {
                max_ttl: 30_000,
                grace_ms: -1,
                max_owner_len: 8,
            },
            ..Node::default()
        }
        .start_grace(t0);
        assert_eq!(n.grace_ms_left(t1), 29_000);
        n.config.max_ttl = 2_000;
        assert_eq!(n.grace_ms_left(t1), 29_000, "max-ttl lowered");
        n.config.max_ttl = 40_000;
        assert_eq!(n.grace_ms_left(t1), 39_000, "max-ttl raised");
        n.config.grace_ms = 5_000;
        assert_eq!(n.grace_ms_left(t1), 4_000, "explicit grace-ms");
        n.config.grace_ms = 0;
        assert_eq!(n.grace_ms_left(t1), 0);
        // A new grace takes the max-ttl in force then.
        n.config.grace_ms = -1;
        n.config.max_ttl = 2_000;
        let n = n.start_grace(t1);
        assert_eq!(n.grace_len_ms(), 2_000);
        // After lost state (eviction): at least max-ttl, also with an explicit grace-ms.
        let mut lost = n;
        lost.config.grace_ms = 0;
        assert_eq!(lost.start_grace(t1).grace_len_ms(), 0);
        let mut lost = lost.start_grace_for_lost_state(t1);
        assert_eq!(lost.grace_ms_left(t1), 2_000);
        lost.config.grace_ms = 1;
        assert_eq!(lost.grace_ms_left(t1), 2_000, "grace-ms does not cut it");
        lost.config.grace_ms = 5_000;
        assert_eq!(lost.grace_ms_left(t1), 5_000);
    }
}
