//! Leader election on the redis-lease module (`LEASE.*` commands).
//!
//! This crate implements the language-neutral election protocol of
//! `docs/client-protocol.md` (rules R1–R17); its pure decisions ([`decide`]) are checked by the
//! shared vectors in `conformance/vectors/` like every other language's client.
//!
//! # API (few verbs)
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lease_client::{Elector, ElectorConfig, RunOutcome};
//!
//! # async fn demo() -> Result<(), redis_lease_client::LeaseError> {
//! let cfg = ElectorConfig::new("redis://127.0.0.1:6379/", "jobs/scheduler", Duration::from_secs(10));
//! let mut elector = Elector::new(cfg)?;
//! let handle = elector.handle();           // resign() / subscribe() from anywhere
//! let mut leadership = elector.subscribe(); // watch::Receiver<Role>
//! let outcome = elector
//!     .run(|ctx| async move {
//!         // Leader now, with fencing token ctx.token(). Pass the token to the resource.
//!         while ctx.is_leader() {
//!             tokio::select! {
//!                 _ = ctx.cancelled() => break,          // stop: leadership is ending
//!                 _ = tokio::time::sleep(Duration::from_millis(100)) => { /* one step */ }
//!             }
//!         }
//!     })
//!     .await?;
//! # let _ = (handle, leadership, outcome); Ok(()) }
//! ```
//!
//! - [`ElectorConfig::new`]`(url, key, ttl)` + `with_*` builders; [`ElectorConfig::validate`].
//! - [`Elector::new`]`(config)` (or [`Elector::with_transport`] with a fake [`Transport`]).
//! - [`Elector::run`]`(task)`: campaign forever; while leader, `task(LeaderContext)` runs in
//!   its own tokio task. Ends with [`RunOutcome::Resigned`] or [`RunOutcome::TaskFinished`].
//! - [`Elector::subscribe`] / [`ElectorHandle::subscribe`]: `watch::Receiver<`[`Role`]`>`.
//! - [`ElectorHandle::resign`]: stop the task, `LEASE.RELEASE`, return from `run`.
//! - [`Elector::metrics`]: Prometheus registry + text rendering ([`Metrics`]).
//! - [`decide`]: the pure decision core (`on_acquire`, `on_renew`, `backoff`, deadlines).
//! - [`Elector::with_nodes`]`(config, urls)`: quorum mode over several independent primaries
//!   (`docs/quorum.md`); its decisions are [`quorum_decide`].
//!
//! # What the lease guarantees, and what it does not
//!
//! Expiry is judged by the Redis primary's monotonic clock. This instance only uses its own
//! monotonic clock: its *local deadline* is `instant before sending + ttl × (1 − drift) −
//! margin`, which is never later than the server's expiry if the clock *rates* differ by at
//! most `drift`. The task is cancelled `stop_budget` before that deadline.
//!
//! That makes "at most one leader" hold as long as: Redis does not lose the grant (async
//! replication: a failover to a replica that missed it, or a restart without fsync, can; use
//! `min_replicas` and the module's grace period), the clock-rate assumption holds, and the
//! task really stops when told. A paused process can still finish a write it started before
//! the pause: only fencing tokens checked by the resource itself (`LEASE.FENCE`) stop that.

#![deny(unsafe_code)]

mod config;
pub mod decide;
mod elector;
mod error;
mod fence;
mod metrics;
mod quorum;
pub mod quorum_decide;
pub mod sentinel;
mod tls;
mod transport;

pub use config::{default_owner, ElectorConfig};
pub use decide::StepDownReason;
pub use elector::{Elector, ElectorHandle, LeaderContext, OnceOutcome, Role, RunOutcome};
pub use error::{CommandError, ErrorKind, LeaseError};
pub use fence::fence;
pub use metrics::Metrics;
pub use quorum::{membership_id_of, node_identity, Nodes, QuorumControl, QuorumTransport};
pub use tls::ConnectOptions;
pub use tokio_util::sync::CancellationToken;
pub use transport::{LeaseInfo, RedisTransport, Replicated, Transport, WaitFor};
