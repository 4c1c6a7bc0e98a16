//! A model of the redis-lease protocol for the `stateright` model checker, built on the
//! production decision code rather than a re-description of it:
//!
//! - the servers' lease logic is the module's pure engine (`src/lease/`, compiled into this
//!   crate from the very same files, see [`lease`]): every ACQUIRE, RENEW and replicated
//!   `LEASE.APPLY` goes through `engine::handle`;
//! - the electors' decisions are `redis_lease_client::decide` (`on_acquire`, `on_renew`,
//!   `must_stop`, `local_deadline` through them, `op_limit`).
//!
//! What the model adds is only what production gets from the world: true time, clocks,
//! a network, faults, and a fencing resource. docs/model.md explains what is modelled, what
//! is abstracted away and why, and the properties.

// The module's pure logic, from the same source files the module is built from. Why not a
// dependency on the `redis-lease` crate: it is a cdylib whose `redis_module!` installs
// Redis' allocator as the `#[global_allocator]`; linked into a plain binary (as an rlib)
// every allocation would call into a Redis that is not there. `src/lease/` uses no FFI and
// names itself only as `crate::lease::...`, so mounting it here at the same path compiles it
// unchanged.
#[path = "../../src/lease/mod.rs"]
#[allow(dead_code, unused_imports)]
pub mod lease;

pub mod model;
pub mod quorum;
pub mod run;

pub use model::{Control, Faults, LeaseModel, Setup};
pub use quorum::{QControl, QFaults, QSetup, QuorumModel};
pub use run::{check, explore, Report};
