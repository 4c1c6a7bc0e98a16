//! `lease.max-ttl`, `lease.grace-ms`, `lease.max-owner-len` (README, Configuration) as a plain value, their
//! bounds and defaults, and the parser of `loadmodule` arguments. The module layer keeps the
//! three numbers in the atomics Redis' CONFIG machinery writes to and hands a `Config`
//! snapshot to the engine with every request.

use crate::args::{parse_u64, printable, Limits};
use crate::owner::OWNER_HARD_CAP;

pub const DEFAULT_MAX_TTL: i64 = 30_000;
pub const DEFAULT_MAX_OWNER_LEN: i64 = 256;
/// -1 = follow `lease.max-ttl` (the default: a new primary waits out the longest
/// lease the old one could have granted).
pub const DEFAULT_GRACE_MS: i64 = -1;

/// -1 = follow `lease.max-ttl` (a migrated lease stays held at least as long as any lease
/// can have left on its source, whatever the two wall clocks say).
pub const DEFAULT_MIGRATE_GRACE_MS: i64 = -1;

/// (name, min, max). max-ttl stays below 2^31 ms (~24.8 days) so deadline arithmetic has
/// headroom everywhere; the owner cap matches the loader's hard cap.
pub const BOUNDS: [(&str, i64, i64); 4] = [
    ("max-ttl", 1, i32::MAX as i64),
    ("grace-ms", -1, i32::MAX as i64),
    ("max-owner-len", 1, OWNER_HARD_CAP as i64),
    ("migrate-grace-ms", -1, i32::MAX as i64),
];

/// The floor `lease.migrate-grace-ms` sets on a migrated lease's remaining time: the
/// setting, or `max_ttl` when it is -1.
pub fn migrate_grace_ms(setting: i64, max_ttl: i64) -> u64 {
    if setting < 0 {
        max_ttl.max(0) as u64
    } else {
        setting as u64
    }
}

/// The configuration in force, as Redis stores it (`grace_ms` may be -1).
// `Hash`: the model checker (model/) stores this in its hashed states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    pub max_ttl: i64,
    pub grace_ms: i64,
    pub max_owner_len: i64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_ttl: DEFAULT_MAX_TTL,
            grace_ms: DEFAULT_GRACE_MS,
            max_owner_len: DEFAULT_MAX_OWNER_LEN,
        }
    }
}

impl Config {
    pub fn limits(&self) -> Limits {
        Limits {
            max_ttl_ms: self.max_ttl.max(1) as u64,
            max_owner_len: self.max_owner_len.max(1) as usize,
        }
    }

    /// Grace length in force: `lease.grace-ms`, or `lease.max-ttl` when it is -1.
    pub fn grace_ms(&self) -> u64 {
        if self.grace_ms < 0 {
            self.max_ttl.max(0) as u64
        } else {
            self.grace_ms as u64
        }
    }
}

/// Parses `loadmodule` arguments: pairs of `[lease.]name value`. Any error refuses the module
/// load with a one-line reason in the server log.
pub fn parse_module_args(args: &[&[u8]]) -> Result<Vec<(&'static str, i64)>, String> {
    if !args.len().is_multiple_of(2) {
        return Err("module arguments must be pairs: [lease.]name value".into());
    }
    let mut out = vec![];
    for pair in args.chunks(2) {
        let raw_name = String::from_utf8_lossy(pair[0]);
        let name = raw_name.strip_prefix("lease.").unwrap_or(&raw_name);
        let Some(&(canon, min, max)) = BOUNDS.iter().find(|(n, _, _)| *n == name) else {
            return Err(format!("unknown module argument '{}'", printable(pair[0])));
        };
        let value = if pair[1] == b"-1" {
            Some(-1)
        } else {
            parse_u64(pair[1]).and_then(|v| i64::try_from(v).ok())
        };
        if out.iter().any(|(n, _)| *n == canon) {
            return Err(format!("module argument lease.{canon} given twice"));
        }
        match value {
            Some(v) if v >= min && v <= max => out.push((canon, v)),
            _ => {
                return Err(format!(
                    "lease.{canon} must be an integer between {min} and {max}, got '{}'",
                    printable(pair[1])
                ))
            }
        }
    }
    Ok(out)
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
        assert!(a(&["max-ttl", "5", "lease.max-ttl", "6"])
            .unwrap_err()
            .contains("twice"));
    }

    #[test]
    fn grace_follows_max_ttl_unless_set() {
        let mut c = Config::default();
        assert_eq!(c.grace_ms(), 30_000);
        c.grace_ms = 0;
        assert_eq!(c.grace_ms(), 0);
        c.grace_ms = -1;
        c.max_ttl = 5;
        assert_eq!(c.grace_ms(), 5);
        assert_eq!(c.limits().max_ttl_ms, 5);
        assert_eq!(migrate_grace_ms(-1, 5), 5);
        assert_eq!(migrate_grace_ms(0, 5), 0);
        assert_eq!(migrate_grace_ms(7, 5), 7);
    }
}
