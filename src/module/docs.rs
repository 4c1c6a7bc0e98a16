//! `COMMAND INFO` / `COMMAND DOCS` metadata (arity, key specs, arguments, summary) through
//! `RedisModule_SetCommandInfo` (Redis 7.0+). With a declared arity Redis itself refuses a
//! wrong argument count before the module runs, with its usual one-line error.

use redis_module::{raw, Context};
use std::ffi::CStr;
use std::os::raw::c_int;

type Arg = raw::RedisModuleCommandArg;

const STRING: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING;
const INTEGER: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER;
const KEY: raw::RedisModuleCommandArgType = raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY;
const OPTIONAL: c_int = raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int;
const MULTIPLE: c_int = raw::REDISMODULE_CMD_ARG_MULTIPLE as c_int;

fn arg(
    name: &'static CStr,
    type_: raw::RedisModuleCommandArgType,
    token: Option<&'static CStr>,
    flags: c_int,
) -> Arg {
    // SAFETY: an all-zero RedisModuleCommandArg is the documented "unset" value (null
    // pointers, zero flags); we fill the fields we need.
    let mut a: Arg = unsafe { std::mem::zeroed() };
    a.name = name.as_ptr();
    a.type_ = type_;
    a.key_spec_index = if type_ == KEY { 0 } else { -1 };
    a.token = token.map_or(std::ptr::null(), CStr::as_ptr);
    a.flags = flags;
    a
}

fn key_spec(flags: u32) -> [raw::RedisModuleCommandKeySpec; 2] {
    // SAFETY: zeroed key specs are the terminator / unset value; the first one is filled in.
    let mut ks: [raw::RedisModuleCommandKeySpec; 2] = unsafe { std::mem::zeroed() };
    ks[0].flags = u64::from(flags);
    ks[0].begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    ks[0].bs.index.pos = 1;
    ks[0].find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
    ks[0].fk.range = raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
        lastkey: 0,
        keystep: 1,
        limit: 0,
    };
    ks
}

struct Doc {
    name: &'static CStr,
    summary: &'static CStr,
    arity: c_int,
    write: bool,
    args: Vec<Arg>,
}

fn docs() -> Vec<Doc> {
    let key = || arg(c"key", KEY, None, 0);
    let owner = || arg(c"owner", STRING, None, 0);
    let ttl = || arg(c"ttl", INTEGER, None, 0);
    let token = || arg(c"token", INTEGER, None, 0);
    vec![
        Doc {
            name: c"lease.acquire",
            summary: c"Grants the lease (returns its fencing token) if nobody holds it live; with BLOCK waits for release, expiry or end of grace.",
            arity: -4,
            write: true,
            args: vec![key(), owner(), ttl(), arg(c"timeout", INTEGER, Some(c"BLOCK"), OPTIONAL)],
        },
        Doc {
            name: c"lease.renew",
            summary: c"Extends the live lease held by owner+token to now+ttl; 1 renewed, 0 not held.",
            arity: 5,
            write: true,
            args: vec![key(), owner(), token(), ttl()],
        },
        Doc {
            name: c"lease.release",
            summary: c"Frees the live lease held by owner+token and wakes blocked acquirers; 1 released, 0 not held.",
            arity: 4,
            write: true,
            args: vec![key(), owner(), token()],
        },
        Doc {
            name: c"lease.fence",
            summary: c"Succeeds only for the live token: returns remaining ms, or runs the given command atomically after the check as the caller.",
            arity: -3,
            write: true,
            args: vec![key(), token(), arg(c"command", STRING, None, OPTIONAL), arg(c"arg", STRING, None, OPTIONAL | MULTIPLE)],
        },
        Doc {
            name: c"lease.get",
            summary: c"The live lease as [owner, token, pttl], or nil.",
            arity: 2,
            write: false,
            args: vec![key()],
        },
        Doc {
            name: c"lease.info",
            summary: c"Lease fields: live, owner, token, pttl, last_token, grants.",
            arity: 2,
            write: false,
            args: vec![key()],
        },
        Doc {
            name: c"lease.apply",
            summary: c"Internal: a replicated effect (HOLD owner token expires_wall_ms | FREE token); refused from clients.",
            arity: -4,
            write: true,
            args: vec![key(), arg(c"effect", STRING, None, MULTIPLE)],
        },
    ]
}

/// Registers the metadata; a server without the API (or refusing it) only loses the docs.
pub fn register(ctx: &Context) {
    let (Some(get_command), Some(set_info)) = (unsafe { raw::RedisModule_GetCommand }, unsafe {
        raw::RedisModule_SetCommandInfo
    }) else {
        return;
    };
    // Redis keeps pointers into these structures: they live for the whole process.
    let version: &'static raw::RedisModuleCommandInfoVersion =
        Box::leak(Box::new(raw::RedisModuleCommandInfoVersion {
            version: 1,
            sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
            sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
            sizeof_arg: std::mem::size_of::<Arg>(),
        }));
    for d in docs() {
        let flags = if d.write {
            raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_UPDATE
        } else {
            raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS
        };
        let specs = Box::leak(Box::new(key_spec(flags)));
        let mut args = d.args;
        // SAFETY: zeroed arg = terminator.
        args.push(unsafe { std::mem::zeroed() });
        let args = Box::leak(args.into_boxed_slice());
        let info = Box::leak(Box::new(raw::RedisModuleCommandInfo {
            version,
            summary: d.summary.as_ptr(),
            complexity: c"O(1)".as_ptr(),
            since: c"0.1.0".as_ptr(),
            history: std::ptr::null_mut(),
            tips: std::ptr::null(),
            arity: d.arity,
            key_specs: specs.as_mut_ptr(),
            args: args.as_mut_ptr(),
        }));
        // SAFETY: valid ctx at load time; the command was created by redis_module! above.
        let ok = unsafe {
            let cmd = get_command(ctx.ctx, d.name.as_ptr());
            !cmd.is_null() && set_info(cmd, info) == raw::REDISMODULE_OK as c_int
        };
        if !ok {
            ctx.log_warning(&format!(
                "lease: COMMAND DOCS metadata refused for {}",
                d.name.to_string_lossy()
            ));
        }
    }
}
