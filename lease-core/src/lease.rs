//! The files of this crate name each other `crate::lease::...`: the path they had while they
//! were a module of the module crate (which still names this crate `crate::lease`), kept so
//! the move to a crate was a pure rename. This alias resolves those paths inside the crate; a
//! mechanical `crate::lease::` -> `crate::` rewrite of the crate's files retires it. A glob,
//! so a module added to the crate is reachable the same way without a second list.

pub use crate::*;
