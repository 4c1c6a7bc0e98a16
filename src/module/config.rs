//! `lease.max-ttl`, `lease.grace-ms`, `lease.max-owner-len` (SPEC §8). Registered as Redis
//! module configs (so `CONFIG SET/GET lease.*` and redis.conf lines work, and Redis itself
//! refuses out-of-range values with its own one-line error), and also accepted as
//! `loadmodule` arguments, with or without the `lease.` prefix.

use crate::lease::args::{parse_u64, Limits};
use std::sync::atomic::{AtomicI64, Ordering};

pub static MAX_TTL: AtomicI64 = AtomicI64::new(DEFAULT_MAX_TTL);
/// -1 = follow `lease.max-ttl` (the SPEC's default: a new primary waits out the longest
/// lease the old one could have granted).
pub static GRACE_MS: AtomicI64 = AtomicI64::new(-1);
pub static MAX_OWNER_LEN: AtomicI64 = AtomicI64::new(DEFAULT_MAX_OWNER_LEN);

pub const DEFAULT_MAX_TTL: i64 = 30_000;
pub const DEFAULT_MAX_OWNER_LEN: i64 = 256;

/// (name, min, max). max-ttl stays below 2^31 ms (~24.8 days) so deadline arithmetic has
/// headroom everywhere; the owner cap matches the loader's hard cap.
pub const BOUNDS: [(&str, i64, i64); 3] = [
    ("max-ttl", 1, i32::MAX as i64),
    ("grace-ms", -1, i32::MAX as i64),
    (
        "max-owner-len",
        1,
        crate::lease::state::OWNER_HARD_CAP as i64,
    ),
];

pub fn limits() -> Limits {
    Limits {
        max_ttl_ms: MAX_TTL.load(Ordering::Relaxed).max(1) as u64,
        max_owner_len: MAX_OWNER_LEN.load(Ordering::Relaxed).max(1) as usize,
    }
}

/// Grace length in force: `lease.grace-ms`, or `lease.max-ttl` when it is -1.
pub fn grace_ms() -> u64 {
    let g = GRACE_MS.load(Ordering::Relaxed);
    if g < 0 {
        MAX_TTL.load(Ordering::Relaxed).max(0) as u64
    } else {
        g as u64
    }
}

fn var(name: &str) -> Option<&'static AtomicI64> {
    match name {
        "max-ttl" => Some(&MAX_TTL),
        "grace-ms" => Some(&GRACE_MS),
        "max-owner-len" => Some(&MAX_OWNER_LEN),
        _ => None,
    }
}

/// Parses `loadmodule` arguments: pairs of `[lease.]name value`. Pure, so it is unit tested;
/// any error refuses the module load with a one-line reason in the server log.
pub fn parse_module_args(args: &[&[u8]]) -> Result<Vec<(&'static str, i64)>, String> {
    if !args.len().is_multiple_of(2) {
        return Err("module arguments must be pairs: [lease.]name value".into());
    }
    let mut out = vec![];
    for pair in args.chunks(2) {
        let raw_name = String::from_utf8_lossy(pair[0]);
        let name = raw_name.strip_prefix("lease.").unwrap_or(&raw_name);
        let Some(&(canon, min, max)) = BOUNDS.iter().find(|(n, _, _)| *n == name) else {
            return Err(format!(
                "unknown module argument '{}'",
                crate::lease::args::printable(pair[0])
            ));
        };
        let value = if pair[1] == b"-1" {
            Some(-1)
        } else {
            parse_u64(pair[1]).and_then(|v| i64::try_from(v).ok())
        };
        match value {
            Some(v) if v >= min && v <= max => out.push((canon, v)),
            _ => {
                return Err(format!(
                    "lease.{canon} must be an integer between {min} and {max}, got '{}'",
                    crate::lease::args::printable(pair[1])
                ))
            }
        }
    }
    Ok(out)
}

pub fn apply_module_args(values: &[(&'static str, i64)]) {
    for (name, v) in values {
        if let Some(a) = var(name) {
            a.store(*v, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_args() {
        let a = |v: &[&str]| {
            let b: Vec<&[u8]> = v.iter().map(|s| s.as_bytes()).collect();
            parse_module_args(&b)
        };
        assert_eq!(a(&[]), Ok(vec![]));
        assert_eq!(
            a(&["lease.grace-ms", "0", "max-ttl", "5000"]),
            Ok(vec![("grace-ms", 0), ("max-ttl", 5000)])
        );
        assert_eq!(a(&["grace-ms", "-1"]), Ok(vec![("grace-ms", -1)]));
        assert!(a(&["max-ttl"]).is_err());
        assert!(a(&["max-ttl", "0"]).is_err());
        assert!(a(&["max-ttl", "-1"]).is_err());
        assert!(a(&["max-owner-len", "65537"]).is_err());
        assert!(a(&["bogus", "1"]).unwrap_err().contains("unknown"));
        assert!(a(&["max-ttl", "1x"]).is_err());
    }
}
