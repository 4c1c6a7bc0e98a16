//! The Redis adapter. Everything that decides lives in `crate::lease` (the engine); this
//! folder turns Redis calls into engine requests and carries out the effects.
//!
//! Layering (each file uses only those listed before it; `tests::use_lines_form_no_cycle`
//! checks the whole crate):
//! - `ffi`, `guard`, `config`, `counters`: raw calls, the panic guard, CONFIG atomics, INFO
//!   counters; `duekey`: the packed (db, key) of an expiry-timer entry.
//! - `node`: this process' token watermark and grace start; `server`: questions to Redis;
//!   `policy`: whether the eviction policy can delete lease keys.
//! - `datatype` (RDB/AOF/DUMP callbacks) → `keys` (the one way to open a lease key).
//! - `blocking` (BLOCKed acquirers) → `timers` (expiry and grace timers); `fenced` (the
//!   command run by LEASE.FENCE); `table` (one row per command).
//! - `executor`: the only code that interprets effects, and every callback's entry point.
//! - `register` (commands and their COMMAND DOCS from the table), `events`, `info`.

pub mod acl;
pub mod blocking;
pub mod config;
pub mod counters;
pub mod datatype;
pub mod duekey;
pub mod events;
pub mod executor;
pub mod fenced;
pub mod ffi;
pub mod guard;
pub mod info;
pub mod keys;
pub mod node;
pub mod policy;
pub mod register;
pub mod reply;
pub mod server;
pub mod table;
pub mod timers;
