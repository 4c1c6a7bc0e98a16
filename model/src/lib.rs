//! A model of the redis-lease protocol for the `stateright` model checker, built on the
//! production decision code rather than a re-description of it:
//!
//! - the servers' lease logic is the module's pure engine (the `lease-core` crate, the
//!   same code the module links, see [`lease`]): every ACQUIRE, RENEW and replicated
//!   `LEASE.APPLY` goes through `engine::handle`;
//! - the electors' decisions are `redis_lease_client::decide` (`on_acquire`, `on_renew`,
//!   `must_stop`, `local_deadline` through them, `op_limit`).
//!
//! What the model adds is only what production gets from the world: true time, clocks,
//! a network, faults, and a fencing resource. docs/model.md explains what is modelled, what
//! is abstracted away and why, and the properties.

// The module's pure logic: the same crate the module links. It is an rlib without a global
// allocator (the module's cdylib installs Redis' allocator, which a plain binary must not
// inherit), so the model links it like any dependency.
pub use lease_core as lease;

pub mod model;
pub mod quorum;
pub mod run;

pub use model::{Control, Faults, LeaseModel, Setup};
pub use quorum::{QControl, QFaults, QSetup, QuorumModel};
pub use run::{check, explore, Report};
