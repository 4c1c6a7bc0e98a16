//! ACL categories of the module's commands, registered where the server supports it.
//!
//! Why: without categories a module command is in no category a user can be granted by
//! class, so `+@write` or `+@read` does not include `LEASE.*` (an operator has to name every
//! command). With them, `ACL CAT write` lists the write commands, and `+@lease` grants the
//! module's client commands at once.
//!
//! Both API functions are optional and looked up at load through the module API's
//! function table (`RedisModule_GetApi`, filled in by `RedisModule_Init`): they are `None`
//! on servers that lack them, and the module then loads without categories. That is why the
//! crate's own category support is not used: with feature `min-redis-compatibility-version-
//! 7-0` or above the crate insists on `RedisModule_SetCommandACLCategories` at load and Redis
//! 7.0.15 refuses the module (see Cargo.toml).
//! - `RedisModule_SetCommandACLCategories`: Redis 7.2+.
//! - `RedisModule_AddACLCategory` (the custom `lease` category): newer servers only (Redis
//!   7.4+/8.x); without it the commands get the standard categories alone.
//!
//! Must run inside `RedisModule_OnLoad` (both functions refuse later) and after the commands
//! exist: `init` is called by `redis_module!` after command creation.

use super::table;
use redis_module::{raw, Context};
use std::ffi::CStr;
use std::os::raw::c_int;

/// The custom category: every command a client may call (`+@lease`). Not `LEASE.APPLY`,
/// which only the replication link and AOF loading may run.
pub const CUSTOM_CATEGORY: &CStr = c"lease";

// The categories themselves are columns of the one command table (`table.rs`). Why these:
// - `blocking`: `LEASE.ACQUIRE ... BLOCK` can block, like `BLPOP`; `-@blocking` users lose it.
// - `fast` only where the command is O(1) and never blocks (as its `fast` command flag says);
//   everything else `slow`, so `+@fast` never hands out a blocking or command-running one.
// - `LEASE.FENCE` is `write`: with a command it writes through that command, which is itself
//   ACL-checked as the caller (RM_Call flag `C`), so `+@write` on FENCE never adds rights.
// - `LEASE.APPLY` is `admin dangerous`: clients are refused anyway (it only runs from the
//   primary's link or the AOF, which ACL does not check), and a user granted `+@all -@dangerous`
//   then does not even see it as allowed.

/// Registers the categories; on a server without the API (Redis 7.0) it does nothing.
/// A failure is logged and the module still loads: categories are a convenience for ACL
/// rules, never needed for the commands to work (explicit `+lease.acquire` always works).
pub fn register(ctx: &Context) {
    // SAFETY: reading function pointers filled in once by RedisModule_Init.
    let (Some(get_command), Some(set_categories)) =
        (unsafe { raw::RedisModule_GetCommand }, unsafe {
            raw::RedisModule_SetCommandACLCategories
        })
    else {
        ctx.log_notice("lease: this server has no command ACL categories (Redis < 7.2)");
        return;
    };
    // SAFETY: reading a function pointer filled in once by RedisModule_Init.
    let add_category = unsafe { raw::RedisModule_AddACLCategory };
    let custom = match add_category {
        // SAFETY: valid ctx during OnLoad; the name is a NUL-terminated literal.
        Some(add) => unsafe {
            add(ctx.ctx, CUSTOM_CATEGORY.as_ptr()) == raw::REDISMODULE_OK as c_int
        },
        None => false,
    };
    if !custom {
        ctx.log_notice(
            "lease: no custom ACL category @lease on this server; standard categories only",
        );
    }
    for row in table::COMMANDS.iter() {
        let (standard, client_command) = (row.acl_categories, row.acl_lease);
        // Table names are literals without NUL.
        let Ok(name) = std::ffi::CString::new(row.name) else {
            continue;
        };
        let cats = if custom && client_command {
            format!(
                "{} {}",
                standard.to_string_lossy(),
                CUSTOM_CATEGORY.to_string_lossy()
            )
        } else {
            standard.to_string_lossy().into_owned()
        };
        // Built from literals above: no NUL inside.
        let Ok(cats) = std::ffi::CString::new(cats) else {
            continue;
        };
        // SAFETY: valid ctx during OnLoad; the command was created by redis_module!; the
        // server copies the category string.
        let ok = unsafe {
            let cmd = get_command(ctx.ctx, name.as_ptr());
            !cmd.is_null() && set_categories(cmd, cats.as_ptr()) == raw::REDISMODULE_OK as c_int
        };
        if !ok {
            ctx.log_warning(&format!(
                "lease: ACL categories {:?} refused for {}",
                cats, row.name
            ));
        }
    }
}
