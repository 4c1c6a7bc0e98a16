//! One row per command: name, flags, key spec, arity, docs and parser. Registration,
//! `COMMAND DOCS`/`COMMAND INFO` and the arity check before parsing all read this table
//! (`register.rs`, `executor::command`), so they cannot disagree.

use crate::lease::args::{self, Limits};
use crate::lease::request::Request;
use crate::lease::LeaseError;

pub type Parser = for<'a> fn(&[&'a [u8]], &Limits) -> Result<Request<'a>, LeaseError>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    Key,
    Str,
    Int,
}

/// One argument as `COMMAND DOCS` shows it.
pub struct ArgDoc {
    pub name: &'static std::ffi::CStr,
    pub kind: ArgKind,
    /// A literal token before the value (`BLOCK`).
    pub token: Option<&'static std::ffi::CStr>,
    pub optional: bool,
    pub multiple: bool,
}

const fn a(name: &'static std::ffi::CStr, kind: ArgKind) -> ArgDoc {
    ArgDoc {
        name,
        kind,
        token: None,
        optional: false,
        multiple: false,
    }
}

const KEY: ArgDoc = a(c"key", ArgKind::Key);
const OWNER: ArgDoc = a(c"owner", ArgKind::Str);
const TTL: ArgDoc = a(c"ttl", ArgKind::Int);
const TOKEN: ArgDoc = a(c"token", ArgKind::Int);
/// Quorum mode's `MEMBERSHIP id` (docs/quorum.md §4.1): 16 hex digits.
const MEMBERSHIP: ArgDoc = ArgDoc {
    token: Some(c"MEMBERSHIP"),
    optional: true,
    ..a(c"id", ArgKind::Str)
};

pub struct Command {
    /// Lower case, as Redis reports it and as arity errors name it.
    pub name: &'static str,
    /// `RedisModule_CreateCommand` flags.
    pub flags: &'static str,
    /// Key spec: every command takes one key, first (first=1, last=1, step=1), so Redis
    /// Cluster routes them.
    pub first_key: i32,
    pub last_key: i32,
    pub key_step: i32,
    /// Redis' convention: N = exactly N arguments (command name included), -N = at least N.
    pub arity: i32,
    /// Writes the key (RW+UPDATE key spec, opened for writing) or only reads it.
    pub write: bool,
    pub summary: &'static std::ffi::CStr,
    pub args: &'static [ArgDoc],
    /// Parses everything after the key.
    pub parse: Parser,
    /// Standard ACL categories (Redis 7.2+; `acl.rs` registers them where the server can).
    /// `fast` only where the command is O(1) and never blocks; `blocking` where it can block.
    pub acl_categories: &'static std::ffi::CStr,
    /// Whether the command joins the custom `@lease` category (every client command; not the
    /// internal `LEASE.APPLY`).
    pub acl_lease: bool,
}

impl Command {
    pub fn arity_ok(&self, argc: usize) -> bool {
        let n = self.arity.unsigned_abs() as usize;
        if self.arity >= 0 {
            argc == n
        } else {
            argc >= n
        }
    }

    pub fn wrong_arity(&self) -> LeaseError {
        LeaseError::WrongArity(self.name)
    }
}

/// Rows in the table (`register::ENTRIES` has one entry point per row, checked by type).
pub const COUNT: usize = 9;

pub static COMMANDS: [Command; COUNT] = [
    Command {
        name: "lease.acquire",
        flags: "write deny-oom",
        first_key: 1,
        last_key: 1,
        key_step: 1,
        arity: -4,
        write: true,
        summary: c"Grants the lease (returns its fencing token) if nobody holds it live; with BLOCK waits for release, expiry or end of grace.",
        args: &[
            KEY,
            OWNER,
            TTL,
            ArgDoc {
                token: Some(c"BLOCK"),
                optional: true,
                ..a(c"timeout", ArgKind::Int)
            },
            MEMBERSHIP,
        ],
        parse: args::acquire_request,
        acl_categories: c"write slow blocking",
        acl_lease: true,
    },
    // RENEW and RELEASE are not declared deny-oom: they allocate nothing, and refusing them
    // under memory pressure would depose a healthy leader or delay a hand-over. (Redis 7.0
    // still reports `denyoom` for every module write command in COMMAND INFO.)
    Command {
        name: "lease.renew",
        flags: "write fast",
        first_key: 1,
        last_key: 1,
        key_step: 1,
        arity: -5,
        write: true,
        summary: c"Extends the live lease held by owner+token to now+ttl; 1 renewed, 0 not held.",
        args: &[KEY, OWNER, TOKEN, TTL, MEMBERSHIP],
        parse: args::renew_request,
        acl_categories: c"write fast",
        acl_lease: true,
    },
    Command {
        name: "lease.release",
        flags: "write fast",
        first_key: 1,
        last_key: 1,
        key_step: 1,
        arity: 4,
        write: true,
        summary: c"Frees the live lease held by owner+token and wakes blocked acquirers; 1 released, 0 not held.",
        args: &[KEY, OWNER, TOKEN],
        parse: args::release_request,
        acl_categories: c"write fast",
        acl_lease: true,
    },
    Command {
        name: "lease.fence",
        flags: "write deny-oom",
        first_key: 1,
        last_key: 1,
        key_step: 1,
        arity: -3,
        write: true,
        summary: c"Succeeds only for the live token: returns remaining ms, or runs the given command atomically after the check as the caller.",
        args: &[
            KEY,
            TOKEN,
            ArgDoc {
                optional: true,
                ..a(c"command", ArgKind::Str)
            },
            ArgDoc {
                optional: true,
                multiple: true,
                ..a(c"arg", ArgKind::Str)
            },
        ],
        parse: args::fence_request,
        acl_categories: c"write slow",
        acl_lease: true,
    },
    Command {
        name: "lease.get",
        flags: "readonly fast",
        first_key: 1,
        last_key: 1,
        key_step: 1,
        arity: 2,
        write: false,
        summary: c"The live lease as [owner, token, pttl], or nil.",
        args: &[KEY],
        parse: args::get_request,
        acl_categories: c"read fast",
        acl_lease: true,
    },
    Command {
        name: "lease.info",
        flags: "readonly fast",
        first_key: 1,
        last_key: 1,
        key_step: 1,
        arity: 2,
        write: false,
        summary: c"Lease fields: live, owner, token, pttl, last_token, grants.",
        args: &[KEY],
        parse: args::info_request,
        acl_categories: c"read fast",
        acl_lease: true,
    },
    Command {
        name: "lease.raise",
        flags: "write fast",
        first_key: 1,
        last_key: 1,
        key_step: 1,
        arity: -5,
        write: true,
        summary: c"Quorum mode: the live lease held by owner+token takes newtoken (>= token) as its token; 1 raised, 0 not held.",
        args: &[KEY, OWNER, TOKEN, a(c"newtoken", ArgKind::Int), MEMBERSHIP],
        parse: args::raise_request,
        // Like RENEW: O(1), never blocks; a client command (quorum electors call it).
        acl_categories: c"write fast",
        acl_lease: true,
    },
    Command {
        name: "lease.membership",
        flags: "write deny-oom",
        first_key: 1,
        last_key: 1,
        key_step: 1,
        arity: -4,
        write: true,
        summary: c"Quorum mode, operator step of a membership change: binds the key to membership new if it is bound to old (NONE: to nothing); with TOKEN, a free key's last token becomes at least t; 1 done, 0 bound to another.",
        args: &[
            KEY,
            a(c"old", ArgKind::Str),
            a(c"new", ArgKind::Str),
            ArgDoc {
                token: Some(c"TOKEN"),
                optional: true,
                ..a(c"t", ArgKind::Int)
            },
        ],
        parse: args::membership_request,
        // An operator's command, not an elector's: `admin`, and outside `@lease` (the
        // electors' ACL grant), so an elector cannot rebind the key it campaigns for. Not
        // `dangerous`: it cannot end a live lease or grant one (engine/membership.rs).
        acl_categories: c"write slow admin",
        acl_lease: false,
    },
    // The shortest effect is `FREE token`: 4 arguments with the command name and key.
    Command {
        name: "lease.apply",
        flags: "write",
        first_key: 1,
        last_key: 1,
        key_step: 1,
        arity: -4,
        write: true,
        summary: c"Internal: a replicated effect (HOLD owner token expires_wall_ms | FREE token, then optionally MEMBERSHIP id); refused from clients.",
        args: &[
            KEY,
            ArgDoc {
                multiple: true,
                ..a(c"effect", ArgKind::Str)
            },
        ],
        parse: args::apply_request,
        acl_categories: c"write admin dangerous slow",
        acl_lease: false,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The arity in the table is what the parser itself accepts at the boundary: one
    /// argument fewer than the minimum is refused by the arity check, and the minimum
    /// reaches the parser (which may still refuse the values, but not the count).
    #[test]
    fn arity_matches_the_parsers() {
        let l = Limits {
            max_ttl_ms: 1000,
            max_owner_len: 8,
        };
        let samples: [&[&str]; COUNT] = [
            &["o", "10"],
            &["o", "1", "10"],
            &["o", "1"],
            &["1"],
            &[],
            &[],
            &["o", "1", "2"],
            &["NONE", "0123456789abcdef"],
            &["FREE", "1"],
        ];
        for (i, c) in COMMANDS.iter().enumerate() {
            let after_key: Vec<&[u8]> = samples[i].iter().map(|s| s.as_bytes()).collect();
            let argc = after_key.len() + 2;
            assert!(c.arity_ok(argc), "{}: minimum refused", c.name);
            assert!(!c.arity_ok(argc - 1), "{}: below minimum accepted", c.name);
            assert_eq!(c.arity.unsigned_abs() as usize, argc, "{}", c.name);
            assert!((c.parse)(&after_key, &l).is_ok(), "{}", c.name);
            assert_eq!(c.args[0].kind, ArgKind::Key, "{}: key first", c.name);
        }
        let names: Vec<&str> = COMMANDS.iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "lease.acquire",
                "lease.renew",
                "lease.release",
                "lease.fence",
                "lease.get",
                "lease.info",
                "lease.raise",
                "lease.membership",
                "lease.apply"
            ]
        );
    }
}
