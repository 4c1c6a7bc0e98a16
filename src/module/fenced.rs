//! The command `LEASE.FENCE key token command arg ...` runs once the engine has checked the
//! token (`Reply::RunFenced`).

use crate::lease::slot::key_slot;
use crate::lease::LeaseError;
use redis_module::{raw, Context, ContextFlags, RedisString};
use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_void};

/// Runs the fenced command as the calling user (`C`: ACL checked against that user, never
/// more), propagated to replicas/AOF as itself (`!`), with errors returned as replies (`E`),
/// in script mode (`S`): only commands a Lua script may run are allowed. Without `S` a
/// client could crash the server: `LEASE.FENCE k t WAIT 1 10` trips Redis' assertion that a
/// module's temporary client never blocks (found by `fence_refuses_inner_commands_a_script_cannot_run`).
/// On `Ok` the inner command's reply has been sent.
pub fn run(
    ctx: &Context,
    lease_key: *mut raw::RedisModuleString,
    inner: &[*mut raw::RedisModuleString],
) -> Result<(), LeaseError> {
    let Some(&cmd) = inner.first() else {
        return Err(LeaseError::BadInnerCommand("no command".into()));
    };
    let name = CString::new(RedisString::string_as_slice(cmd))
        .map_err(|_| LeaseError::BadInnerCommand("command name contains a NUL byte".into()))?;
    let mut argv: Vec<*mut raw::RedisModuleString> = inner.to_vec();
    if ctx.get_flags().contains(ContextFlags::CLUSTER) {
        check_same_slot(ctx, lease_key, &mut argv)?;
    }
    // SAFETY: reading a function pointer Redis filled in at module load.
    let Some(call) = (unsafe { raw::RedisModule_Call }) else {
        return Err(LeaseError::BadInnerCommand("RM_Call unavailable".into()));
    };
    // SAFETY: "v" takes (RedisModuleString **, size_t); argv[1..] are the caller's strings,
    // alive for the duration of this command.
    let reply = unsafe {
        call(
            ctx.ctx,
            name.as_ptr(),
            c"vC!ES".as_ptr().cast::<c_char>(),
            argv.as_mut_ptr().add(1),
            argv.len() - 1,
        )
    };
    if reply.is_null() {
        let why = match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ENOENT) => "unknown command".to_string(),
            Some(libc::EINVAL) => "wrong number of arguments".to_string(),
            Some(libc::EACCES) => {
                "NOPERM the user may not run this command or touch these keys".to_string()
            }
            Some(libc::EPERM) => "not allowed from a module call".to_string(),
            Some(libc::ENOSPC) => "OOM".to_string(),
            other => format!("call failed (errno {other:?})"),
        };
        return Err(LeaseError::BadInnerCommand(why));
    }
    // SAFETY: reply is a valid call reply we own; forwarded verbatim then freed.
    unsafe {
        if let Some(f) = raw::RedisModule_ReplyWithCallReply {
            f(ctx.ctx, reply);
        }
        if let Some(f) = raw::RedisModule_FreeCallReply {
            f(reply);
        }
    }
    Ok(())
}

/// Under Cluster the fenced command must stay in the lease key's slot: the FENCE command is
/// routed by its first key only, and RM_Call does not redirect.
fn check_same_slot(
    ctx: &Context,
    lease_key: *mut raw::RedisModuleString,
    argv: &mut [*mut raw::RedisModuleString],
) -> Result<(), LeaseError> {
    // SAFETY: reading a function pointer Redis filled in at module load (7.0+ only).
    let Some(get_keys) = (unsafe { raw::RedisModule_GetCommandKeys }) else {
        return Ok(());
    };
    let slot = key_slot(RedisString::string_as_slice(lease_key));
    let mut n: c_int = 0;
    // SAFETY: argv is a valid array of argc strings; the result is freed with RM_Free.
    let pos = unsafe { get_keys(ctx.ctx, argv.as_mut_ptr(), argv.len() as c_int, &mut n) };
    if pos.is_null() {
        return Ok(()); // unknown command or no keys: RM_Call reports the former
    }
    let mut ok = true;
    for i in 0..n.max(0) as usize {
        // SAFETY: pos has n entries, each an index into argv.
        let p = unsafe { *pos.add(i) } as usize;
        if let Some(&s) = argv.get(p) {
            if key_slot(RedisString::string_as_slice(s)) != slot {
                ok = false;
            }
        }
    }
    // SAFETY: allocated by Redis for us, freed once.
    unsafe {
        if let Some(f) = raw::RedisModule_Free {
            f(pos.cast::<c_void>());
        }
    }
    if ok {
        Ok(())
    } else {
        Err(LeaseError::CrossSlot)
    }
}
