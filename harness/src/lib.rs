//! `lease-harness`: Jepsen-style evidence for redis-lease on one machine.
//!
//! Layers, one module each:
//! - [`clock`]: the shared `CLOCK_MONOTONIC` every history is stamped with;
//! - [`history`]: the JSON-lines record formats (the `lease-history` crate,
//!   `harness/history/`, so the fuzz targets can depend on it alone);
//! - [`resource`]: the protected resource that enforces fencing (and its unsafe variant);
//! - [`proxy`]: the fault-injecting TCP proxy between each elector and Redis;
//! - [`checker`]: safety and liveness from the recorded histories;
//! - [`leader`]: who leads now, from the electors' histories (aims the faults);
//! - [`svg`]: the timeline picture.
//!
//! The processes (`run`, `elector`, `resource`) live in the binary.

pub mod checker;
pub mod clock;
pub use lease_history as history;
pub mod leader;
pub mod proxy;
pub mod resource;
pub mod svg;
