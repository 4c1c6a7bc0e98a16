//! The engine's `Reply` as RESP: integers, nil, `+OK`, one-line errors, and the field lists of
//! `LEASE.GET` and `LEASE.INFO` (a map under RESP3, an array under RESP2). The only code that
//! encodes a lease reply; the executor calls `reply` once per answered request.

use crate::lease::engine::Reply;
use redis_module::{raw, Context, ContextFlags, RedisError, RedisValue};
use std::os::raw::c_int;

const OK: c_int = raw::REDISMODULE_OK as c_int;
const ERR: c_int = raw::REDISMODULE_ERR as c_int;

/// Sends the reply; returns the status a command function returns.
pub fn reply(ctx: &Context, r: Reply) -> c_int {
    let value = match r {
        Reply::Int(i) => Ok(RedisValue::Integer(i)),
        Reply::Null => Ok(RedisValue::Null),
        Reply::Ok => Ok(RedisValue::SimpleStringStatic("OK")),
        Reply::Error(e) => Err(RedisError::String(e.to_string())),
        Reply::Holder {
            owner,
            token,
            pttl_ms,
        } => {
            reply_fields(
                ctx,
                &[
                    ("owner", Field::Bytes(&owner)),
                    ("token", Field::Int(token as i64)),
                    ("pttl", Field::Int(pttl_ms as i64)),
                ],
                true,
            );
            return OK;
        }
        Reply::Info {
            holder,
            last_token,
            grants,
            membership,
        } => {
            let h = holder.as_ref();
            let hex = membership.map(crate::module::ffi::membership_hex);
            reply_fields(
                ctx,
                &[
                    ("live", Field::Int(i64::from(h.is_some()))),
                    ("owner", h.map_or(Field::Nil, |h| Field::Bytes(&h.0))),
                    ("token", h.map_or(Field::Nil, |h| Field::Int(h.1 as i64))),
                    ("pttl", h.map_or(Field::Nil, |h| Field::Int(h.2 as i64))),
                    ("last_token", Field::Int(last_token as i64)),
                    ("grants", Field::Int(grants as i64)),
                    // Last, so readers of the older fields by position are unaffected.
                    (
                        "membership",
                        hex.as_ref().map_or(Field::Nil, |h| Field::Bytes(h)),
                    ),
                ],
                false,
            );
            return OK;
        }
        // Answered later (blocked) or by the inner command; internal requests have no client.
        Reply::Blocked | Reply::RunFenced | Reply::Nothing => return OK,
        Reply::StayBlocked => return ERR,
    };
    ctx.reply(value);
    OK
}

enum Field<'a> {
    Int(i64),
    Bytes(&'a [u8]),
    Nil,
}

/// Field/value pairs as a map under RESP3, as a flat array of values (`values_only`) or of
/// pairs under RESP2.
fn reply_fields(ctx: &Context, fields: &[(&'static str, Field<'_>)], values_only: bool) {
    let map = ctx.get_flags().contains(ContextFlags::FLAGS_RESP3);
    // SAFETY: plain reply calls on a valid ctx; strings passed with explicit lengths.
    unsafe {
        let n = fields.len() as std::os::raw::c_long;
        if map {
            raw::RedisModule_ReplyWithMap.map(|f| f(ctx.ctx, n));
        } else {
            let len = if values_only { n } else { 2 * n };
            raw::RedisModule_ReplyWithArray.map(|f| f(ctx.ctx, len));
        }
        for (name, v) in fields {
            if map || !values_only {
                raw::RedisModule_ReplyWithStringBuffer
                    .map(|f| f(ctx.ctx, name.as_ptr().cast(), name.len()));
            }
            match v {
                Field::Int(i) => {
                    raw::RedisModule_ReplyWithLongLong.map(|f| f(ctx.ctx, *i));
                }
                Field::Bytes(b) => {
                    raw::RedisModule_ReplyWithStringBuffer
                        .map(|f| f(ctx.ctx, b.as_ptr().cast(), b.len()));
                }
                Field::Nil => {
                    raw::RedisModule_ReplyWithNull.map(|f| f(ctx.ctx));
                }
            }
        }
    }
}
