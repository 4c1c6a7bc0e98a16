//! What this server process knows beyond any one key, as a plain value: the configuration in
//! force, the highest token it has seen and when its grace period started. The module keeps
//! the live copy and hands the engine a snapshot with every request; the engine never reads
//! or writes process state itself (a token it sees comes back as `Effect::ObserveToken`).

use crate::lease::config::Config;
use crate::lease::state::{Grace, Now};

// `Hash`: the model checker (model/) stores this in its hashed states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Node {
    pub config: Config,
    /// Highest token this process has issued, applied from its primary, or loaded: the next
    /// grant on any key is above it (see `Lease::next_token`).
    pub token_watermark: u64,
    /// Monotonic µs at which the current grace period started (module load or promotion).
    pub grace_started_mono_us: u64,
}

impl Node {
    /// Floor for the next token on any key.
    pub fn token_floor(&self) -> u64 {
        self.token_watermark.saturating_add(1)
    }

    /// Grace left now, with the grace length in force now (lowering `lease.grace-ms`
    /// shortens a running grace; 0 ends it at once).
    pub fn grace_ms_left(&self, now: Now) -> u64 {
        Grace::starting_at(self.grace_started_mono_us).ms_left(now.mono_us, self.config.grace_ms())
    }

    /// Start (server start) or promotion: this server may not know leases granted elsewhere
    /// (by the old primary, or by its own previous life whose last writes were never
    /// persisted), so for `lease.grace-ms` it grants nothing new. Leases it does know are
    /// renewed as usual.
    pub fn start_grace(self, now: Now) -> Node {
        Node {
            grace_started_mono_us: now.mono_us,
            ..self
        }
    }
}
