//! Pure lease logic: state, time, tokens, argument parsing, error strings. Nothing in this
//! folder touches FFI; the module layer (`src/module/`) parses, calls in here, replies and
//! replicates.

pub mod args;
pub mod error;
pub mod slot;
pub mod state;

pub use error::LeaseError;
pub use state::{Acquire, Effect, Grace, Holder, Lease, Now, Persisted, TOKEN_LIMIT};
