//! The `lease.*` settings (README, Configuration): one row per setting (`SETTINGS`: name,
//! default, bounds), `lease.max-ttl`, `lease.grace-ms`, `lease.max-owner-len` as a plain value
//! (`Config`), and the parser of `loadmodule` arguments. The module layer keeps the numbers
//! in the atomics Redis' CONFIG machinery writes to and hands a `Config` snapshot to the
//! engine with every request.

use crate::args::{parse_u64, printable, Limits};
use crate::owner::OWNER_HARD_CAP;

/// One setting, one row: its name (without the `lease.` prefix), built-in default and
/// bounds. Everything that knows a setting reads its row: the `loadmodule` argument parser
/// below, the module's registration with Redis (`src/module/config.rs`, which also checks
/// CONFIG SET values against these bounds) and the fuzz target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    pub name: &'static str,
    pub default: i64,
    pub min: i64,
    pub max: i64,
}

/// Stays below 2^31 ms (~24.8 days) so deadline arithmetic has headroom everywhere.
pub const MAX_TTL: Setting = Setting {
    name: "max-ttl",
    default: 30_000,
    min: 1,
    max: i32::MAX as i64,
};

/// -1 = follow `lease.max-ttl` (the default: a new primary waits out the longest
/// lease the old one could have granted).
pub const GRACE_MS: Setting = Setting {
    name: "grace-ms",
    default: -1,
    min: -1,
    max: i32::MAX as i64,
};

/// The cap matches the loader's hard cap, so no accepted owner is unloadable.
pub const MAX_OWNER_LEN: Setting = Setting {
    name: "max-owner-len",
    default: 256,
    min: 1,
    max: OWNER_HARD_CAP as i64,
};

/// -1 = follow `lease.max-ttl` (a migrated lease stays held at least as long as any lease
/// can have left on its source, whatever the two wall clocks say).
pub const MIGRATE_GRACE_MS: Setting = Setting {
    name: "migrate-grace-ms",
    default: -1,
    min: -1,
    max: i32::MAX as i64,
};

/// Every setting, in the order the module registers them.
pub const SETTINGS: [Setting; 4] = [MAX_TTL, GRACE_MS, MAX_OWNER_LEN, MIGRATE_GRACE_MS];

/// The row of `name` (without the `lease.` prefix).
pub fn setting(name: &str) -> Option<Setting> {
    SETTINGS.iter().copied().find(|s| s.name == name)
}

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
            max_ttl: MAX_TTL.default,
            grace_ms: GRACE_MS.default,
            max_owner_len: MAX_OWNER_LEN.default,
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
        let Some(Setting {
            name: canon,
            min,
            max,
            ..
        }) = setting(name)
        else {
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

    /// The rows as the README documents them (names, defaults, bounds), and each name
    /// found by its row.
    #[test]
    fn one_row_per_setting() {
        let rows: Vec<_> = SETTINGS
            .iter()
            .map(|s| (s.name, s.default, s.min, s.max))
            .collect();
        assert_eq!(
            rows,
            [
                ("max-ttl", 30_000, 1, 2_147_483_647),
                ("grace-ms", -1, -1, 2_147_483_647),
                ("max-owner-len", 256, 1, 65_536),
                ("migrate-grace-ms", -1, -1, 2_147_483_647),
            ]
        );
        for s in SETTINGS {
            assert_eq!(setting(s.name), Some(s));
        }
        assert_eq!(setting("lease.max-ttl"), None);
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
