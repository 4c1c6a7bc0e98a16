//! Creates every command of `table::COMMANDS` and gives it its `COMMAND INFO`/`COMMAND DOCS`
//! metadata (arity, key spec, arguments, summary) through `RedisModule_SetCommandInfo`
//! (Redis 7.0+). With a declared arity Redis itself refuses a wrong argument count before the
//! module runs, with its usual one-line error.

use crate::module::executor::command;
use crate::module::table::{ArgKind, Command, COMMANDS, COUNT};
use redis_module::{raw, Context, Status};
use std::ffi::CString;
use std::os::raw::c_int;

type CmdFn =
    extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// Entry point of each row, in table order.
const ENTRIES: [CmdFn; COUNT] = [
    command::<0>,
    command::<1>,
    command::<2>,
    command::<3>,
    command::<4>,
    command::<5>,
    command::<6>,
    command::<7>,
    command::<8>,
];

/// Creates the commands (fails the module load if Redis refuses one), then their metadata
/// (a server without the API, or refusing it, only loses the docs).
pub fn register(ctx: &Context) -> Status {
    // SAFETY: reading a function pointer Redis filled in at module load.
    let Some(create) = (unsafe { raw::RedisModule_CreateCommand }) else {
        return Status::Err;
    };
    for (cmd, entry) in COMMANDS.iter().zip(ENTRIES) {
        let (Ok(name), Ok(flags)) = (CString::new(cmd.name), CString::new(cmd.flags)) else {
            return Status::Err;
        };
        // SAFETY: valid ctx during OnLoad; Redis copies name and flags.
        let status = unsafe {
            create(
                ctx.ctx,
                name.as_ptr(),
                Some(entry),
                flags.as_ptr(),
                cmd.first_key,
                cmd.last_key,
                cmd.key_step,
            )
        };
        if status != raw::REDISMODULE_OK as c_int {
            ctx.log_warning(&format!("lease: could not create command {}", cmd.name));
            return Status::Err;
        }
        set_info(ctx, cmd, &name);
    }
    Status::Ok
}

type Arg = raw::RedisModuleCommandArg;

fn arg(d: &crate::module::table::ArgDoc) -> Arg {
    // SAFETY: an all-zero RedisModuleCommandArg is the documented "unset" value (null
    // pointers, zero flags); we fill the fields we need.
    let mut a: Arg = unsafe { std::mem::zeroed() };
    a.name = d.name.as_ptr();
    a.type_ = match d.kind {
        ArgKind::Key => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
        ArgKind::Str => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
        ArgKind::Int => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    };
    a.key_spec_index = if d.kind == ArgKind::Key { 0 } else { -1 };
    a.token = d.token.map_or(std::ptr::null(), |t| t.as_ptr());
    let mut flags = 0;
    if d.optional {
        flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int;
    }
    if d.multiple {
        flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE as c_int;
    }
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

fn set_info(ctx: &Context, cmd: &Command, name: &CString) {
    // SAFETY: reading function pointers Redis filled in at module load (7.0+ only).
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
    let flags = if cmd.write {
        raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_UPDATE
    } else {
        raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS
    };
    let specs = Box::leak(Box::new(key_spec(flags)));
    let mut args: Vec<Arg> = cmd.args.iter().map(arg).collect();
    // SAFETY: zeroed arg = terminator.
    args.push(unsafe { std::mem::zeroed() });
    let args = Box::leak(args.into_boxed_slice());
    let info = Box::leak(Box::new(raw::RedisModuleCommandInfo {
        version,
        summary: cmd.summary.as_ptr(),
        complexity: c"O(1)".as_ptr(),
        since: c"0.1.0".as_ptr(),
        history: std::ptr::null_mut(),
        tips: std::ptr::null(),
        arity: cmd.arity,
        key_specs: specs.as_mut_ptr(),
        args: args.as_mut_ptr(),
    }));
    // SAFETY: valid ctx at load time; the command was created just before.
    let ok = unsafe {
        let c = get_command(ctx.ctx, name.as_ptr());
        !c.is_null() && set_info(c, info) == raw::REDISMODULE_OK as c_int
    };
    if !ok {
        ctx.log_warning(&format!(
            "lease: COMMAND DOCS metadata refused for {}",
            cmd.name
        ));
    }
}
