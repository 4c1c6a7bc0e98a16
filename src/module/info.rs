//! `INFO lease`: counters, blocked clients, grace state. Fields appear as `lease_<name>`.

use super::runtime::{self, COUNTERS};
use super::{config, ffi};
use redis_module::{raw, InfoContext};

pub fn add_info(ctx: &InfoContext, _for_crash_report: bool) {
    raw::add_info_section(ctx.ctx, None);
    let left = runtime::grace_ms_left(ffi::now());
    let mut fields = COUNTERS.fields();
    fields.extend([
        ("blocked_clients", runtime::blocked_clients()),
        ("grace_active", u64::from(left > 0)),
        ("grace_ms_left", left),
        ("grace_ms", config::grace_ms()),
        ("max_ttl", config::limits().max_ttl_ms),
        ("expiry_timers", runtime::armed_timers() as u64),
    ]);
    for (name, v) in fields {
        raw::add_info_field_long_long(ctx.ctx, name, v as i64);
    }
}
