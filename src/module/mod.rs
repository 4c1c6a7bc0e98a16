//! The Redis adapter: FFI, command handlers, data type, timers, events. Everything that
//! decides lives in `crate::lease`.

pub mod acl;
pub mod blocking;
pub mod commands;
pub mod config;
pub mod datatype;
pub mod docs;
pub mod events;
pub mod ffi;
pub mod info;
pub mod runtime;
