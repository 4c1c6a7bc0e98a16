//! The executor: the only code that carries out the engine's effects, and the entry point of
//! every callback Redis makes into the module's lease logic (commands, blocked-client
//! callbacks, expiry timers, re-arming). Each runs inside `guard`, so nothing a client sends
//! can unwind into Redis.
//!
//! One command, start to end: `command::<I>` → arity from `table::COMMANDS[I]` → its parser
//! (`crate::lease::args`) → `run_on_key` opens the key (`keys`), calls
//! `crate::lease::engine::handle`, stores what it says and closes the key → `execute` walks
//! the effects in order → `reply`.

use crate::lease::admit::Facts;
use crate::lease::engine::{self, Call, Counter, Effect, Outcome, Reply, Store};
use crate::lease::request::Request;
use crate::lease::{LeaseError, Now};
use crate::module::blocking::{self, Callbacks};
use crate::module::guard::guard;
use crate::module::keys::{self, LeaseKey, Mode};
use crate::module::reply::reply;
use crate::module::table::{Command, COMMANDS};
use crate::module::timers;
use crate::module::{counters, fenced, ffi, node, policy, server};
use redis_module::{raw, Context, ContextFlags, RedisError, RedisString};
use std::os::raw::c_int;

const OK: c_int = raw::REDISMODULE_OK as c_int;
const ERR: c_int = raw::REDISMODULE_ERR as c_int;

const BLOCK_CALLBACKS: Callbacks = Callbacks {
    on_ready,
    on_timeout,
    free: free_waiter,
};

/// Command entry point registered for `COMMANDS[I]` (one monomorphic function per row, so
/// no lookup by name at run time).
pub extern "C" fn command<const I: usize>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    let argv: &[*mut raw::RedisModuleString] = if argv.is_null() || argc <= 0 {
        &[]
    } else {
        // SAFETY: Redis passes `argc` valid strings in `argv`, alive during the command.
        unsafe { std::slice::from_raw_parts(argv, argc as usize) }
    };
    let spec = &COMMANDS[I];
    guard(None, || Some(run_command(&context, spec, argv))).unwrap_or_else(|| {
        // A bug, never expected: one error line instead of a crashed server.
        context.reply(Err(RedisError::Str(
            "ERR internal error in redis-lease (see server log)",
        )));
        OK
    })
}

/// Up to this many arguments are viewed without a heap allocation (every command but a
/// FENCE with a long inner command).
const INLINE_ARGS: usize = 8;

fn run_command(ctx: &Context, spec: &Command, argv: &[*mut raw::RedisModuleString]) -> c_int {
    // Redis checks the arity declared through COMMAND INFO itself (7.0+); checked here as
    // well, from the same table row, in case the metadata was refused.
    if !spec.arity_ok(argv.len()) {
        return reply(ctx, Reply::Error(spec.wrong_arity()));
    }
    let mut inline: [&[u8]; INLINE_ARGS] = [&[]; INLINE_ARGS];
    let heap: Vec<&[u8]>;
    let args: &[&[u8]] = if argv.len() <= INLINE_ARGS {
        for (slot, &s) in inline.iter_mut().zip(argv) {
            *slot = RedisString::string_as_slice(s);
        }
        &inline[..argv.len()]
    } else {
        heap = argv
            .iter()
            .map(|&s| RedisString::string_as_slice(s))
            .collect();
        &heap
    };
    let node = node::snapshot();
    let req = match (spec.parse)(&args[2..], &node.config.limits()) {
        Ok(r) => r,
        Err(e) => return reply(ctx, Reply::Error(e)),
    };
    // LEASE.APPLY is the replica's hot path and never a client's (the engine refuses it).
    if spec.write && !matches!(req, Request::Apply(_)) {
        if let Err(e) = admit(ctx, &req) {
            return reply(ctx, Reply::Error(e));
        }
    }
    let call = call_context(ctx, &req);
    let now = ffi::now();
    let key = argv[1];
    let mode = if spec.write { Mode::Write } else { Mode::Read };
    let out = match run_on_key(ctx, key, mode, &node, now, call, &req, TimerEntry::Known) {
        Ok(out) => out,
        Err(e) => return reply(ctx, Reply::Error(e)),
    };
    // The arguments after the key: a replicated effect reuses those that carry its bytes.
    let reuse = ffi::CommandArgs {
        strings: &argv[2..],
        bytes: &args[2..],
    };
    execute(ctx, key, out.effects, now, reuse);
    if out.reply == Reply::RunFenced {
        // The key handle is closed (end of `run_on_key`) before the inner command runs: that
        // command may touch the very same key.
        return match fenced::run(ctx, key, &argv[3..]) {
            Ok(()) => {
                counters::bump(Counter::FenceOk);
                OK
            }
            Err(e) => reply(ctx, Reply::Error(e)),
        };
    }
    reply(ctx, out.reply)
}

/// Server-level refusals (`crate::lease::admit`): a lease write from a client of a replica,
/// a grant while eviction can delete lease keys (issue 24). One context-flags call per write
/// command; the policy is cached (`policy`).
fn admit(ctx: &Context, req: &Request<'_>) -> Result<(), LeaseError> {
    let flags = ctx.get_flags();
    let evicting = policy::evicting();
    let facts = Facts {
        replica_client: flags.contains(ContextFlags::SLAVE)
            && !flags.intersects(ContextFlags::REPLICATED | ContextFlags::LOADING),
        evicting_policy: evicting.as_deref(),
    };
    crate::lease::admit::admit(req, facts)
}

/// Reads only the context flags a request needs (one FFI call, skipped on the hot paths).
fn call_context(ctx: &Context, req: &Request<'_>) -> Call {
    match req {
        Request::Acquire { block: Some(_), .. } => Call {
            can_block: !ctx
                .get_flags()
                .intersects(ContextFlags::MULTI | ContextFlags::LUA | ContextFlags::DENY_BLOCKING),
            ..Call::default()
        },
        Request::Apply(_) => {
            let flags = ctx.get_flags();
            Call {
                from_primary_or_loading: flags
                    .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING),
                replicated: flags.contains(ContextFlags::REPLICATED),
                ..Call::default()
            }
        }
        _ => Call::default(),
    }
}

/// How a request treats the value's record of a pending expiry-timer entry
/// (`Lease::timer_pending`: one at or before the deadline).
#[derive(Clone, Copy, PartialEq, Eq)]
enum TimerEntry {
    /// The record is right: the engine adds no `ArmTimer` for a value with a pending entry (a
    /// renew moves the deadline later: the entry fires early and re-arms).
    Known,
    /// An entry for this key has just been handled and is gone. It may not be the one the
    /// record meant (a stale one, see `timers`): then one entry too many gets added, which
    /// costs a wake-up, never a missed expiry.
    Fired,
    /// The value arrived under a new name or its entries were dropped (RENAME, COPY,
    /// RESTORE, MOVE, SWAPDB, promotion): whatever it records is not pending here.
    Forget,
}

/// Opens `key`, lets the engine decide, stores what it says and closes the key. WRONGTYPE
/// (another type at the key) is the only error; it happens before any decision.
#[allow(clippy::too_many_arguments)]
fn run_on_key(
    ctx: &Context,
    key: *mut raw::RedisModuleString,
    mode: Mode,
    node: &crate::lease::node::Node,
    now: Now,
    call: Call,
    req: &Request<'_>,
    timer: TimerEntry,
) -> Result<Outcome, LeaseError> {
    let mut handle = LeaseKey::open(ctx.ctx, key, mode);
    let mut lease = handle.lease()?;
    if let Some(l) = lease.as_deref_mut() {
        if timer != TimerEntry::Known {
            l.set_timer_pending(false);
        }
    }
    let fx = SPARE_EFFECTS.with(|c| c.take());
    // The engine decides whether an `ArmTimer` is needed (it reads and records the value's
    // `timer_pending`, `engine::arm_timer`); every effect it returns is carried out.
    let mut out = engine::handle_with(fx, node, lease, now, call, req);
    if let Store::Create(lease) = std::mem::replace(&mut out.store, Store::Keep) {
        handle.create(lease)?;
    }
    Ok(out)
}

/// Carries out the effects, in order, for `key` in the context's selected database. `args`:
/// the command's arguments after the key (empty for callbacks), see `ffi::replicate_effect`.
fn execute(
    ctx: &Context,
    key: *mut raw::RedisModuleString,
    effects: Vec<Effect>,
    now: Now,
    args: ffi::CommandArgs<'_>,
) {
    let mut effects = effects;
    for e in effects.drain(..) {
        match e {
            Effect::Replicate(apply) => ffi::replicate_effect(ctx.ctx, key, &apply, args),
            Effect::ReplicateVerbatim => ffi::replicate_verbatim(ctx.ctx),
            Effect::Notify(event) => ffi::notify(ctx.ctx, event, key),
            Effect::WakeWaiters => ffi::signal_ready(ctx.ctx, key),
            Effect::ArmTimer { deadline_mono_us } => timers::ensure(
                ctx,
                ffi::selected_db(ctx.ctx),
                RedisString::string_as_slice(key),
                deadline_mono_us,
                now,
                on_due,
            ),
            Effect::Block {
                owner,
                ttl_ms,
                timeout_ms,
            } => blocking::block(ctx, key, owner, ttl_ms, timeout_ms, &BLOCK_CALLBACKS),
            Effect::Count(c) => counters::bump(c),
            Effect::ObserveToken(t) => node::observe_token(t),
        }
    }
    // Kept for the next command (an unusually long list is let go).
    if effects.capacity() <= 16 {
        SPARE_EFFECTS.with(|c| c.set(effects));
    }
}

thread_local! {
    /// The last command's (emptied) effect list, reused by the next: Redis runs every
    /// module callback on its main thread. A nested command (FENCE running a lease command)
    /// finds it taken and builds its own.
    static SPARE_EFFECTS: std::cell::Cell<Vec<Effect>> = const { std::cell::Cell::new(Vec::new()) };
}

// ---------------------------------------------------------------------------------------
// Blocked acquirers

/// The key was signalled: retry the grant. ERR keeps the client blocked (still held by
/// someone, or still in grace); OK means we replied.
unsafe extern "C" fn on_ready(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    guard(ERR, || {
        // A grant now would write while the server forbids it (aborting the server, see
        // `timers`): the acquirer stays blocked and is retried right after the pause.
        if server::writes_paused() {
            timers::defer_until_writes_resume(&Context::new(ctx), true);
            return ERR;
        }
        // SAFETY: Redis calls this for a client blocked by `blocking::block`.
        let (w, key) = unsafe { (blocking::waiter(ctx), blocking::ready_key(ctx)) };
        let Some(w) = w else { return ERR };
        if key.is_null() {
            return ERR;
        }
        let context = Context::new(ctx);
        let call = Call {
            replicas_ok: server::replicas_allow_write(&context),
            ..Call::default()
        };
        let req = Request::AcquireRetry {
            owner: &w.owner,
            ttl_ms: w.ttl_ms,
        };
        // Blocked on a primary that has since become a replica: never granted here.
        if let Err(e) = admit(&context, &req) {
            return reply(&context, Reply::Error(e));
        }
        let now = ffi::now();
        match run_on_key(
            &context,
            key,
            Mode::Write,
            &node::snapshot(),
            now,
            call,
            &req,
            TimerEntry::Known,
        ) {
            Ok(out) => {
                execute(&context, key, out.effects, now, ffi::CommandArgs::NONE);
                reply(&context, out.reply)
            }
            Err(e) => reply(&context, Reply::Error(e)),
        }
    })
}

unsafe extern "C" fn on_timeout(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    guard(OK, || {
        let context = Context::new(ctx);
        let out = engine::handle(
            &node::snapshot(),
            None,
            ffi::now(),
            Call::default(),
            &Request::BlockTimeout,
        );
        for e in out.effects {
            if let Effect::Count(c) = e {
                counters::bump(c);
            }
        }
        reply(&context, out.reply)
    })
}

unsafe extern "C" fn free_waiter(
    _ctx: *mut raw::RedisModuleCtx,
    privdata: *mut std::os::raw::c_void,
) {
    // SAFETY: Redis calls the free callback once per client blocked by `blocking::block`,
    // with the private data given there.
    guard((), || unsafe { blocking::take_waiter(privdata) })
}

// ---------------------------------------------------------------------------------------
// Expiry

/// An expiry-timer entry for (db, key) is due (`fired`), or the key has blocked acquirers
/// and is looked at ahead of its entry (see `timers::run_due`). True if waiters were woken.
fn on_due(ctx: &Context, db: i32, key: &[u8], fired: bool) -> bool {
    check_expiry(ctx, db, key, fired)
}

/// Frees the lease at `key` if its monotonic deadline has passed, else re-arms its timer.
/// `fired`: called for a timer entry that was due (it is gone); else the key's entry is
/// still pending and its record stays as it is. True if it signalled blocked acquirers.
pub fn check_expiry(ctx: &Context, db: i32, key_name: &[u8], fired: bool) -> bool {
    // Only the primary judges expiry; a replica waits for the primary's FREE effect.
    let before = ffi::selected_db(ctx.ctx);
    if !server::is_primary(ctx) || !ffi::select_db(ctx.ctx, db) {
        return false;
    }
    let mut woke = false;
    let now = ffi::now();
    let key = ffi::string(ctx.ctx, key_name);
    // Another type at the key (the lease was deleted and the name reused): nothing to do.
    if let Ok(out) = run_on_key(
        ctx,
        key.inner,
        Mode::Write,
        &node::snapshot(),
        now,
        Call::default(),
        &Request::Expire,
        if fired {
            TimerEntry::Fired
        } else {
            TimerEntry::Known
        },
    ) {
        woke = out.effects.iter().any(|e| matches!(e, Effect::WakeWaiters));
        execute(ctx, key.inner, out.effects, now, ffi::CommandArgs::NONE);
    }
    ffi::select_db(ctx.ctx, before);
    woke
}

/// A held lease arrived under a new name (RENAME, COPY, RESTORE, MOVE): arm its timer.
pub fn rearm_key(ctx: &Context, key_name: &[u8]) {
    let now = ffi::now();
    let key = ffi::string(ctx.ctx, key_name);
    if let Ok(out) = run_on_key(
        ctx,
        key.inner,
        Mode::Read,
        &node::snapshot(),
        now,
        Call::default(),
        &Request::Rearm,
        TimerEntry::Forget,
    ) {
        execute(ctx, key.inner, out.effects, now, ffi::CommandArgs::NONE);
    }
}

/// A held lease arrived by a client's `RESTORE` (MIGRATE, resharding): hold it at least
/// `lease.migrate-grace-ms` here (`Request::Migrated`), replicate that, arm its timer.
pub fn migrated_key(ctx: &Context, key_name: &[u8]) {
    let now = ffi::now();
    let key = ffi::string(ctx.ctx, key_name);
    let req = Request::Migrated {
        min_ms: crate::module::config::migrate_grace(),
    };
    if let Ok(out) = run_on_key(
        ctx,
        key.inner,
        Mode::Read,
        &node::snapshot(),
        now,
        Call::default(),
        &req,
        TimerEntry::Forget,
    ) {
        execute(ctx, key.inner, out.effects, now, ffi::CommandArgs::NONE);
    }
}

/// Arms a timer for every held lease in every database: after loading (RDB/AOF), on
/// promotion and after SWAPDB, when leases exist that no command of this process has
/// touched yet.
pub fn rearm_all(ctx: &Context) {
    let dbs = server::database_count(ctx);
    let before = ffi::selected_db(ctx.ctx);
    let now = ffi::now();
    let node = node::snapshot();
    let mut found = 0usize;
    for db in 0..dbs {
        if !ffi::select_db(ctx.ctx, db) {
            continue;
        }
        // Decided during the scan, carried out after it (timers are not created while Redis
        // iterates the keyspace for us). Expiry entries, the only effect of `Rearm` in
        // practice, go into the heap in one batch without opening each key again (issue 16:
        // promotion with 1M leases took 4.4 s through `execute` one key at a time).
        let mut entries: Vec<timers::Entry> = vec![];
        let mut todo: Vec<(Vec<u8>, Vec<Effect>)> = vec![];
        keys::scan_leases(ctx.ctx, &mut |name, lease| {
            // Forced: after loading, promotion or SWAPDB no entry is pending for any lease.
            lease.set_timer_pending(false);
            let mut out = engine::handle(&node, Some(lease), now, Call::default(), &Request::Rearm);
            // The engine recorded the entry in the value already (`engine::arm_timer`).
            out.effects.retain(|e| match *e {
                Effect::ArmTimer { deadline_mono_us } => {
                    entries.push(timers::Entry::new(deadline_mono_us, db, name));
                    false
                }
                _ => true,
            });
            if !out.effects.is_empty() {
                todo.push((name.to_vec(), out.effects));
            }
        });
        found += entries.len();
        timers::add_many(ctx, entries, now, on_due);
        for (name, effects) in todo {
            let key = ffi::string(ctx.ctx, &name);
            execute(ctx, key.inner, effects, now, ffi::CommandArgs::NONE);
        }
    }
    ffi::select_db(ctx.ctx, before);
    if found > 0 {
        ctx.log_notice(&format!(
            "lease: expiry timers armed for {found} held lease(s)"
        ));
    }
}
