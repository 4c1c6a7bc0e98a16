//! The one panic guard. Every function Redis calls into this module (commands, blocked-client
//! callbacks, timers, server events, data type callbacks, INFO) runs inside `guard`, so a
//! bug that panics becomes an error reply or a no-op instead of unwinding into C, which
//! would abort redis-server. (`panic = "unwind"` in Cargo.toml keeps this possible.)

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `f`; on a panic returns `fallback` (the hook installed at load has already logged a
/// one-line message).
pub fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    // AssertUnwindSafe: after a panic the module's maps are still structurally valid (see
    // `lock`), and Redis' own state is only changed through calls that completed.
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// Locks ignoring poisoning: a panic is already contained by `guard`, and the maps stay
/// structurally valid. All of them are used on Redis' main thread only; the mutexes are
/// uncontended and only there to keep Rust's aliasing rules honest.
pub fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
