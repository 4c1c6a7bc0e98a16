//! redis-lease: lease-based leader election as a Redis module.
//!
//! - `lease/`: the pure logic (state machine, tokens, time, parsing, errors), no FFI.
//! - `module/`: the thin Redis adapter (commands, data type, replication effects, timers,
//!   blocked clients, configuration, INFO).
//!
//! Safety statement in one paragraph: expiry is judged by this server's monotonic clock;
//! every grant issues a token strictly above every earlier one on the key; replicas and the
//! AOF receive the primary's decisions as effects; after start or promotion no new lease is
//! granted for `lease.grace-ms`. Redis replication is asynchronous, so a failover can still
//! lose a grant that was not `WAIT`ed for; grace and tokens bound what that can break, and
//! only a resource that checks tokens (`LEASE.FENCE` or its own check) stops a paused,
//! deposed leader from writing. See docs/protocol.md and docs/failover.md.

pub mod lease;
mod module;

use module::info::add_info;
use module::{commands, config, datatype::LEASE_TYPE, events, runtime};
use redis_module::configuration::ConfigurationFlags;
use redis_module::{redis_module, Context, RedisString, Status};
#[allow(unused_imports)] // used by the expansion of `info:` in redis_module!
use redis_module::{InfoContext, RedisResult};

// Unit tests run without Redis, so they cannot use Redis' allocator.
#[cfg(not(test))]
type Alloc = redis_module::alloc::RedisAlloc;
#[cfg(not(test))]
const ALLOC: Alloc = redis_module::alloc::RedisAlloc;
#[cfg(test)]
type Alloc = std::alloc::System;
#[cfg(test)]
const ALLOC: Alloc = std::alloc::System;

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    let raw_args: Vec<&[u8]> = args.iter().map(RedisString::as_slice).collect();
    match config::parse_module_args(&raw_args) {
        Ok(values) => config::apply_module_args(&values),
        Err(e) => {
            ctx.log_warning(&format!("lease: refusing to load: {e}"));
            return Status::Err;
        }
    }
    // Entry points catch panics and answer with an error; the default hook would also print
    // a symbolized backtrace (slow, and noisy in the server's stderr) for each. One line.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("redis-lease: internal error caught: {info}")
    }));
    // Corrupt RDB/DUMP input must surface as an IO error we check, never a server panic.
    ctx.set_module_options(redis_module::raw::ModuleOptions::HANDLE_IO_ERRORS);
    let l = config::limits();
    ctx.log_notice(&format!(
        "lease: loaded (max-ttl {} ms, grace {} ms, max-owner-len {})",
        l.max_ttl_ms,
        config::grace_ms(),
        l.max_owner_len
    ));
    module::docs::register(ctx);
    module::acl::register(ctx);
    events::subscribe_raw_events(ctx);
    runtime::start_grace(ctx, "server start");
    Status::Ok
}

redis_module! {
    name: "lease",
    version: 1,
    allocator: (Alloc, ALLOC),
    data_types: [LEASE_TYPE],
    init: init,
    info: add_info,
    commands: [
        ["lease.acquire", commands::acquire, "write deny-oom", 1, 1, 1, ""],
        // RENEW and RELEASE are not declared deny-oom: they allocate nothing, and refusing
        // them under memory pressure would depose a healthy leader or delay a hand-over.
        // (Redis 7.0 still reports `denyoom` for every module write command in COMMAND INFO.)
        ["lease.renew", commands::renew, "write fast", 1, 1, 1, ""],
        ["lease.release", commands::release, "write fast", 1, 1, 1, ""],
        ["lease.fence", commands::fence, "write deny-oom", 1, 1, 1, ""],
        ["lease.get", commands::get, "readonly fast", 1, 1, 1, ""],
        ["lease.info", commands::info, "readonly fast", 1, 1, 1, ""],
        ["lease.apply", commands::apply, "write", 1, 1, 1, ""],
    ],
    event_handlers: [
        [@GENERIC: events::on_generic_event],
    ],
    configurations: [
        i64: [
            ["max-ttl", &config::MAX_TTL, config::DEFAULT_MAX_TTL, config::BOUNDS[0].1, config::BOUNDS[0].2, ConfigurationFlags::DEFAULT, None],
            ["grace-ms", &config::GRACE_MS, -1, config::BOUNDS[1].1, config::BOUNDS[1].2, ConfigurationFlags::DEFAULT, None],
            ["max-owner-len", &config::MAX_OWNER_LEN, config::DEFAULT_MAX_OWNER_LEN, config::BOUNDS[2].1, config::BOUNDS[2].2, ConfigurationFlags::DEFAULT, None],
        ],
        string: [],
        bool: [],
        enum: [],
        module_args_as_configuration: false,
    ]
}
