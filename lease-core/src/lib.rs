//! Pure lease logic: state, tokens, time, argument and effect parsing, configuration, the
//! node's own state and the engine that turns a request into (reply, what to store,
//! effects). Nothing in this crate touches FFI, reads a clock or installs an allocator; the
//! module layer (`src/module/`) parses through the command table, calls `engine::handle`,
//! and its executor carries out the effects.
//!
//! Layering (each file uses only those above it): error, slot → owner → rdb → state → request → admit →
//! args → config → node → engine.

pub mod admit;
pub mod args;
pub mod config;
pub mod engine;
pub mod error;
pub mod node;
pub mod owner;
pub mod rdb;
pub mod request;
pub mod slot;
pub mod state;

pub use error::LeaseError;
pub use rdb::Persisted;
pub use state::{Acquire, Apply, Grace, Holder, Lease, Now, TOKEN_LIMIT};
