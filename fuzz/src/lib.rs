//! Fuzz targets for every decoder and parser that takes bytes from outside the server:
//! each `pub fn` is one target (a thin `fuzz_targets/<name>.rs` hands libFuzzer's input to
//! it), and `tests/corpus.rs` replays the committed seed corpus (`corpus/<name>/`) through
//! them on stable Rust, so a crash once found stays a regression test.
//!
//! The module's pure half (the `lease-core` crate: parsers, state machine, engine, RDB field
//! decoder) is a dependency like any other: it never touches FFI and installs no allocator
//! (the module crate itself is a cdylib with Redis' allocator), so the code fuzzed here is
//! exactly the code the module runs. Each target checks invariants
//! beyond "does not panic" where one is cheap to state.

pub use lease_core as lease;
/// The harness's history reader (the `lease-history` crate; it needs only serde).
pub use lease_history as history;

use lease::args::{self, Limits};
use lease::config::{parse_module_args, setting, Config, SETTINGS};
use lease::engine::{handle, Call, Effect, Reply, Store};
use lease::node::Node;
use lease::rdb::{encode_v3, Persisted, PersistedSource};
use lease::request::Request;
use lease::state::{Lease, Now, TOKEN_LIMIT};

const NOW: Now = Now {
    mono_us: 5_000_000_000,
    wall_ms: 1_800_000_000_000,
};

/// Module-type fields as Redis stores them in an RDB or DUMP payload: a sequence of
/// opcodes, 2 = unsigned (then an RDB length-encoded integer), 5 = string (an RDB length,
/// then that many bytes). What `RedisModule_LoadUnsigned` / `LoadStringBuffer` read.
pub struct RdbFields<'a> {
    data: &'a [u8],
}

impl<'a> RdbFields<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        RdbFields { data }
    }
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.data.split_first()?;
        self.data = rest;
        Some(b)
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.data.len() < n {
            return None;
        }
        let (a, b) = self.data.split_at(n);
        self.data = b;
        Some(a)
    }
    /// RDB length encoding: 00xxxxxx, 01xxxxxx xxxxxxxx, 0x80 + 4 bytes BE, 0x81 + 8 bytes BE.
    fn length(&mut self) -> Option<u64> {
        let b = self.byte()?;
        match b >> 6 {
            0 => Some(u64::from(b & 0x3f)),
            1 => Some((u64::from(b & 0x3f) << 8) | u64::from(self.byte()?)),
            2 if b == 0x80 => {
                let s = self.take(4)?;
                Some(u64::from(u32::from_be_bytes(s.try_into().ok()?)))
            }
            2 if b == 0x81 => Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?)),
            _ => None,
        }
    }
}

impl PersistedSource for RdbFields<'_> {
    fn unsigned(&mut self) -> Option<u64> {
        (self.byte()? == 2).then_some(())?;
        self.length()
    }
    fn bytes(&mut self) -> Option<Vec<u8>> {
        (self.byte()? == 5).then_some(())?;
        let n = usize::try_from(self.length()?).ok()?;
        Some(self.take(n)?.to_vec())
    }
}

/// RDB value decoder, i.e. what `RESTORE` feeds `datatype::rdb_load`, in every encoding
/// the module loads, on every input:
/// - version 1: the input as module fields (`Persisted::decode_v1`);
/// - versions 2 and 3: the first field of the input as the one string buffer they write
///   (`Persisted::decode_v2`, `decode_v3`; a seed is `05 <length> <buffer>`).
///
/// A loaded lease must be self-consistent: token below 2^53, and it must survive a
/// save/load round trip through the v3 bytes the module writes (so a v1 or v2 value
/// upgrades losslessly; a v2 buffer is a v3 one without the membership bit).
pub fn rdb_value(data: &[u8]) {
    if let Some(p) = Persisted::decode_v1(&mut RdbFields::new(data)) {
        check_loaded(p);
    }
    if let Some(buf) = RdbFields::new(data).bytes() {
        let v2 = Persisted::decode_v2(&buf);
        if let Some(p) = Persisted::decode_v3(&buf) {
            // What a decoder accepted, re-encoded, is the same bytes (one encoding per value).
            let mut again = Vec::new();
            encode_v3(p.as_saved(), &mut again);
            assert_eq!(again, buf, "v3 decode/encode round trip");
            // v2 accepts exactly the v3 values without a membership id, identically.
            assert_eq!(v2.is_some(), p.membership.is_none(), "v2 vs v3");
            if let Some(p2) = v2 {
                assert_eq!(p2, p, "v2 and v3 decode alike");
            }
            check_loaded(p);
        } else {
            assert!(v2.is_none(), "v2 accepted what v3 refused");
        }
    }
}

fn check_loaded(p: Persisted) {
    let Some(lease) = Lease::from_persisted(p, NOW) else {
        return;
    };
    assert!(lease.last_token() < TOKEN_LIMIT);
    let saved = lease.to_persisted(NOW);
    let again = Lease::from_persisted(saved.clone(), NOW).expect("a saved lease loads");
    assert_eq!(again.to_persisted(NOW), saved, "save/load round trip");
    // The module's save path (v3 from the value itself) and back.
    let mut buf = Vec::new();
    encode_v3(lease.saved(NOW), &mut buf);
    let decoded = Persisted::decode_v3(&buf).expect("a saved lease decodes");
    assert_eq!(decoded, saved, "v3 save/decode round trip");
    exercise(lease);
}

/// Runs a few requests against a lease (at, before and after `NOW`): the engine must not
/// panic on any state a decoder produced.
fn exercise(lease: Lease) {
    let node = Node::default();
    for dt in [0u64, 1, 86_400_000] {
        let now = Now {
            mono_us: NOW.mono_us + dt * 1000,
            wall_ms: NOW.wall_ms + dt,
        };
        for req in [
            Request::Get,
            Request::Info,
            Request::Expire,
            Request::Rearm,
            Request::Fence {
                token: lease.last_token(),
                with_command: false,
            },
        ] {
            let mut l = lease.clone();
            let _ = handle(&node, Some(&mut l), now, Call::default(), &req);
        }
    }
}

/// Splits an input into arguments at 0xFF bytes (owners may hold any other byte).
fn split_args(data: &[u8]) -> Vec<&[u8]> {
    data.split(|&b| b == 0xff).collect()
}

type Parser = for<'a> fn(&[&'a [u8]], &Limits) -> Result<Request<'a>, lease::LeaseError>;

/// The parsers of the command table (`src/module/table.rs`, same order).
const PARSERS: [Parser; 8] = [
    args::acquire_request,
    args::renew_request,
    args::release_request,
    args::fence_request,
    args::get_request,
    args::info_request,
    args::raise_request,
    args::apply_request,
];

/// Command argument parsers: first byte picks the command, the rest are its arguments
/// after the key (0xFF-separated). A parsed request then goes through the engine against
/// no lease and a held one, as a client (and, for LEASE.APPLY, as the primary's stream).
pub fn command_args(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let args = split_args(rest);
    let limits = Config::default().limits();
    let Ok(req) = PARSERS[usize::from(which) % PARSERS.len()](&args, &limits) else {
        return;
    };
    check_request(&req, &limits);
    let node = Node::default().start_grace(Now {
        mono_us: 0,
        wall_ms: 0,
    });
    for call in [
        Call {
            can_block: true,
            replicas_ok: true,
            ..Call::default()
        },
        Call {
            from_primary_or_loading: true,
            replicated: true,
            ..Call::default()
        },
    ] {
        let _ = handle(&node, None, NOW, call, &req);
        let mut held = Lease::new();
        let _ = held.acquire(b"holder", 1000, NOW, 0, 0);
        let out = handle(&node, Some(&mut held), NOW, call, &req);
        assert!(held.last_token() < TOKEN_LIMIT);
        if let Reply::Int(t) = out.reply {
            assert!(t >= 0);
        }
    }
}

/// What a parser accepted is within the limits it was given.
fn check_request(req: &Request<'_>, l: &Limits) {
    match *req {
        Request::Acquire { owner, ttl_ms, .. } | Request::AcquireRetry { owner, ttl_ms } => {
            assert!(!owner.is_empty() && owner.len() <= l.max_owner_len);
            assert!(ttl_ms >= 1 && ttl_ms <= l.max_ttl_ms);
        }
        Request::Renew {
            owner,
            token,
            ttl_ms,
            membership,
        } => {
            assert_ne!(membership, Some(0));
            assert!(!owner.is_empty() && owner.len() <= l.max_owner_len);
            assert!(token > 0 && token < TOKEN_LIMIT);
            assert!(ttl_ms >= 1 && ttl_ms <= l.max_ttl_ms);
        }
        Request::Release { owner, token } => {
            assert!(!owner.is_empty() && owner.len() <= l.max_owner_len);
            assert!(token > 0 && token < TOKEN_LIMIT);
        }
        _ => {}
    }
}

/// The replicated effect parser (`LEASE.APPLY key HOLD owner token expires_wall_ms | FREE
/// token`, 0xFF-separated after the key), applied to no lease and to a held one as the
/// primary's stream would: applied state must keep tokens below 2^53 and carry the
/// effect's token.
pub fn apply_effect(data: &[u8]) {
    let args = split_args(data);
    let Ok(eff) = args::parse_apply(&args) else {
        return;
    };
    let req = Request::Apply(eff.clone());
    let call = Call {
        from_primary_or_loading: true,
        replicated: true,
        ..Call::default()
    };
    let node = Node::default();
    let out = handle(&node, None, NOW, call, &req);
    if let Store::Create(l) = out.store {
        assert!(l.last_token() < TOKEN_LIMIT);
        exercise(l);
    }
    let mut held = Lease::new();
    let _ = held.acquire(b"holder", 1000, NOW, 0, 0);
    let out = handle(&node, Some(&mut held), NOW, call, &req);
    if out.reply == Reply::Ok {
        let token = match eff {
            lease::Apply::Hold { token, .. } | lease::Apply::Free { token, .. } => token,
        };
        assert_eq!(held.last_token(), token);
        assert!(out.effects.contains(&Effect::ObserveToken(token)));
    }
}

/// Module load arguments (`--loadmodule ... name value ...`, 0xFF-separated) and `CONFIG
/// SET lease.*` values: Redis checks a CONFIG SET value against the bounds the module
/// registered (`SETTINGS`), so any i64 within them must give usable limits and grace.
pub fn module_config(data: &[u8]) {
    let args = split_args(data);
    let mut cfg = Config::default();
    if let Ok(values) = parse_module_args(&args) {
        for (name, v) in values {
            let row = setting(name).expect("parsed names are known");
            assert!(v >= row.min && v <= row.max, "{name}={v} out of bounds");
            set(&mut cfg, name, v);
        }
    }
    // CONFIG SET: the input's bytes as i64 values, clamped into the bounds as Redis does.
    for (chunk, row) in data.chunks(8).zip(SETTINGS.iter().cycle()) {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        let v = i64::from_le_bytes(b);
        if v >= row.min && v <= row.max {
            set(&mut cfg, row.name, v);
        }
    }
    let l = cfg.limits();
    assert!(l.max_ttl_ms >= 1 && l.max_owner_len >= 1);
    let node = Node {
        config: cfg,
        ..Node::default()
    }
    .start_grace(NOW);
    let left = node.grace_ms_left(NOW);
    assert!(left <= cfg.grace_ms());
    let _ = handle(
        &node,
        None,
        NOW,
        Call::default(),
        &Request::Acquire {
            owner: b"o",
            ttl_ms: l.max_ttl_ms,
            block: None,
            membership: None,
        },
    );
}

fn set(cfg: &mut Config, name: &str, v: i64) {
    match name {
        "max-ttl" => cfg.max_ttl = v,
        "grace-ms" => cfg.grace_ms = v,
        // Not part of `Config` (read by the module's RESTORE hook only).
        "migrate-grace-ms" => {}
        _ => cfg.max_owner_len = v,
    }
}

/// The harness history reader (`harness/history/src/lib.rs`: `read_jsonl`, read by the checker
/// from files a crashed run may have torn), for each record type it reads.
pub fn history_jsonl(data: &[u8]) {
    use history::{read_jsonl, ElectorEvent, ResourceWrite, RunEvent};
    thread_local! {
        static PATH: std::path::PathBuf = std::env::temp_dir()
            .join(format!("lease-fuzz-history-{}.jsonl", std::process::id()));
    }
    PATH.with(|p| {
        if std::fs::write(p, data).is_err() {
            return;
        }
        let _ = read_jsonl::<ElectorEvent>(p);
        let _ = read_jsonl::<ResourceWrite>(p);
        let _ = read_jsonl::<RunEvent>(p);
    });
}
