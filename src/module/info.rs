//! `INFO lease`: counters, blocked clients, grace state. Fields appear as `lease_<name>`.

use crate::module::guard::guard;
use crate::module::{blocking, counters, ffi, node, policy, timers};
use redis_module::{raw, InfoContext};

pub fn add_info(ctx: &InfoContext, _for_crash_report: bool) {
    guard((), || {
        raw::add_info_section(ctx.ctx, None);
        let node = node::snapshot();
        let left = node.grace_ms_left(ffi::now());
        let mut fields = counters::fields();
        fields.extend([
            ("blocked_clients", blocking::blocked_clients()),
            ("grace_active", u64::from(left > 0)),
            ("grace_ms_left", left),
            ("grace_ms", node.grace_len_ms()),
            ("max_ttl", node.config.limits().max_ttl_ms),
            ("expiry_timers", timers::armed() as u64),
        ]);
        let (evicting, policy) = policy::info();
        fields.push(("evicting", u64::from(evicting)));
        for (name, v) in fields {
            raw::add_info_field_long_long(ctx.ctx, name, v as i64);
        }
        raw::add_info_field_str(ctx.ctx, "maxmemory_policy", &policy);
    })
}
