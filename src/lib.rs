//! redis-lease: lease-based leader election as a Redis module.
//!
//! - `lease` (the `lease-core` crate, `lease-core/src/`): the pure logic (state machine,
//!   tokens, time, parsing, errors) and the engine that turns each request into (reply,
//!   what to store, effects); no FFI.
//! - `module/`: the thin Redis adapter (command table, the one effect executor, keys, timers,
//!   blocked clients, data type, configuration, INFO). docs/protocol.md, "How the code is
//!   laid out", follows one command through both.
//!
//! Safety statement in one paragraph: expiry is judged by this server's monotonic clock;
//! every grant issues a token strictly above every earlier one on the key; replicas and the
//! AOF receive the primary's decisions as effects; after start or promotion no new lease is
//! granted for `lease.grace-ms`. Redis replication is asynchronous, so a failover can still
//! lose a grant that was not `WAIT`ed for; grace and tokens bound what that can break, and
//! only a resource that checks tokens (`LEASE.FENCE` or its own check) stops a paused,
//! deposed leader from writing. See docs/protocol.md and docs/failover.md.

/// The pure core under the name every file of `src/module/` uses (`crate::lease::...`).
pub use lease_core as lease;
mod module;

use lease::config::parse_module_args;
use module::info::add_info;
use module::{config, datatype::LEASE_TYPE, events, register, timers};
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

/// The load, in an order that leaves the server as it was whenever it refuses: first
/// everything that can fail on the operator's input (module arguments, then config lines
/// and `MODULE LOADEX ... CONFIG` through `RedisModule_LoadConfigs`, whose failure refuses
/// the load instead of being ignored), then the commands, and only at the
/// very end what Redis 7.0 would keep after a failed load (server-event and keyspace
/// subscriptions) and the grace timer. `redis_module!` registers only the data type and the
/// INFO callback before this runs; Redis drops both with a failed load.
fn init(ctx: &Context, args: &[RedisString]) -> Status {
    match load(ctx, args) {
        Ok(()) => Status::Ok,
        Err(e) => {
            ctx.log_warning(&format!("lease: refusing to load: {e}"));
            Status::Err
        }
    }
}

fn load(ctx: &Context, args: &[RedisString]) -> Result<(), String> {
    let raw_args: Vec<&[u8]> = args.iter().map(RedisString::as_slice).collect();
    let values = parse_module_args(&raw_args)?;
    config::register(ctx, &values)?;
    // Entry points catch panics and answer with an error; the default hook would also print
    // a symbolized backtrace (slow, and noisy in the server's stderr) for each. One line.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("redis-lease: internal error caught: {info}")
    }));
    // Corrupt RDB/DUMP input must surface as an IO error we check, never a server panic.
    ctx.set_module_options(redis_module::raw::ModuleOptions::HANDLE_IO_ERRORS);
    // Commands (and their COMMAND DOCS) come from the one table, src/module/table.rs.
    if register::register(ctx) == Status::Err {
        return Err("could not register the commands".into());
    }
    // ACL categories (also from the table), where the server has the API (7.2+).
    module::acl::register(ctx);
    events::subscribe(ctx)?;
    let c = config::snapshot();
    let l = c.limits();
    ctx.log_notice(&format!(
        "lease: loaded (max-ttl {} ms, grace {} ms, max-owner-len {})",
        l.max_ttl_ms,
        c.grace_ms(),
        l.max_owner_len
    ));
    // Warns (and refuses grants) when the server starts with an evicting policy (issue 24).
    module::policy::refresh(ctx);
    timers::start_grace(ctx, "server start");
    Ok(())
}

redis_module! {
    name: "lease",
    version: 1,
    allocator: (Alloc, ALLOC),
    data_types: [LEASE_TYPE],
    init: init,
    info: add_info,
}

#[cfg(test)]
mod layering_tests {
    //! The `use crate::...` (and `use super::...`) lines of src/ and of the core crate
    //! (lease-core/src/, mounted at `lease` as src/lib.rs names it) form no cycle: each file
    //! depends only on files below it, so a reader can follow any module without meeting
    //! itself again. Checked on the source text, at the granularity of files.
    //!
    //! Cargo already forbids the core from using the module (a crate cannot depend on its
    //! dependent); this check still covers the cycles it cannot see, between files inside
    //! each crate. One checker over one graph, here, because this crate sees both.

    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("read src").flatten() {
            let p = e.path();
            if p.is_dir() {
                rust_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    /// The source roots and where this crate mounts them: its own src/ at the root, the core
    /// crate's at `lease` (`pub use lease_core as lease`).
    fn roots() -> Vec<(PathBuf, Vec<String>)> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        vec![
            (dir.join("src"), vec![]),
            (dir.join("lease-core/src"), vec!["lease".to_string()]),
        ]
    }

    /// `src/module/keys.rs` -> ["module", "keys"], `lease-core/src/state.rs` -> ["lease",
    /// "state"]; `mod.rs`/`lib.rs` name their folder.
    fn module_path(src: &Path, mount: &[String], file: &Path) -> Vec<String> {
        let rel = file.strip_prefix(src).expect("under src");
        let mut parts: Vec<String> = mount.to_vec();
        parts.extend(
            rel.iter()
                .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string()),
        );
        if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
            parts.pop();
        }
        parts
    }

    /// The module paths named by the `use` lines of a file (test modules excluded: a test
    /// may look at anything). `use a::{b, c::d}` names a::b and a::c::d.
    /// `mount` is where `crate` of the file's own crate sits in the graph: a core file's
    /// `crate::lease::x` and (once its paths drop the alias) `crate::x` both name lease::x.
    fn uses(
        text: &str,
        here: &[String],
        is_dir_module: bool,
        mount: &[String],
    ) -> Vec<Vec<String>> {
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let mut out = vec![];
        let mut stmt = String::new();
        for line in code.lines() {
            let t = line.trim();
            if stmt.is_empty() && !(t.starts_with("use ") || t.starts_with("pub use ")) {
                continue;
            }
            stmt.push_str(t);
            if !t.ends_with(';') {
                continue;
            }
            let s = std::mem::take(&mut stmt);
            let s = s
                .trim_start_matches("pub ")
                .trim_start_matches("use ")
                .trim_end_matches(';');
            for path in expand(s) {
                let mut segs: Vec<String> =
                    path.split("::").map(|x| x.trim().to_string()).collect();
                let base: Vec<String> = match segs.first().map(String::as_str) {
                    Some("crate") => {
                        if !mount.is_empty() && segs.get(1) == mount.first() {
                            segs.remove(1);
                        }
                        mount.to_vec()
                    }
                    Some("super") => {
                        // `super` of a file module is its folder; of a mod.rs, the parent.
                        let mut b = here.to_vec();
                        if is_dir_module || !b.is_empty() {
                            b.pop();
                        }
                        b
                    }
                    Some("self") => here.to_vec(),
                    _ => continue, // std, other crates
                };
                segs.remove(0);
                let mut full = base;
                full.extend(segs.into_iter().filter(|s| s != "self" && s != "*"));
                out.push(full);
            }
        }
        out
    }

    /// `a::{b, c::{d, e}}` -> ["a::b", "a::c::d", "a::c::e"].
    fn expand(s: &str) -> Vec<String> {
        let Some(open) = s.find('{') else {
            return vec![s.split(" as ").next().unwrap_or(s).to_string()];
        };
        let prefix = &s[..open];
        let inner = &s[open + 1..s.rfind('}').unwrap_or(s.len())];
        let mut parts = vec![];
        let (mut depth, mut start) = (0, 0);
        for (i, ch) in inner.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&inner[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&inner[start..]);
        parts
            .into_iter()
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .flat_map(|p| expand(&format!("{prefix}{p}")))
            .collect()
    }

    #[test]
    fn use_lines_form_no_cycle() {
        // (file, its module path, where its crate is mounted)
        let mut files = vec![];
        for (src, mount) in roots() {
            let mut found = vec![];
            rust_files(&src, &mut found);
            for f in found {
                let here = module_path(&src, &mount, &f);
                files.push((f, here, mount.clone()));
            }
        }
        let modules: BTreeSet<Vec<String>> = files.iter().map(|f| f.1.clone()).collect();
        // Edges between file modules: a used path is attributed to the longest module prefix.
        let mut graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        for (f, here, mount) in &files {
            let here = here.clone();
            let is_dir = f
                .file_name()
                .is_some_and(|n| n == "mod.rs" || n == "lib.rs");
            let text = std::fs::read_to_string(f).expect("read");
            for used in uses(&text, &here, is_dir, mount) {
                let target = (0..=used.len())
                    .rev()
                    .map(|n| used[..n].to_vec())
                    .find(|p| modules.contains(p) && !p.is_empty());
                if let Some(t) = target {
                    if t != here && !here.starts_with(&t) {
                        graph.entry(here.clone()).or_default().insert(t);
                    }
                }
            }
        }
        assert!(
            graph
                .get(&vec!["module".to_string(), "executor".to_string()])
                .is_some_and(|d| d.len() > 5),
            "the parser found the executor's dependencies: {graph:?}"
        );
        // And the core's own edges (the engine uses the state, the node, the requests).
        assert!(
            graph
                .get(&vec!["lease".to_string(), "engine".to_string()])
                .is_some_and(|d| d.len() >= 3),
            "the parser found the engine's dependencies: {graph:?}"
        );
        // Depth-first search with colours; report the first cycle as a path.
        fn visit(
            n: &Vec<String>,
            g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
            state: &mut BTreeMap<Vec<String>, u8>,
            stack: &mut Vec<Vec<String>>,
        ) {
            match state.get(n) {
                Some(2) => return,
                Some(1) => {
                    let at = stack.iter().position(|x| x == n).unwrap_or(0);
                    let cyc: Vec<String> = stack[at..].iter().map(|m| m.join("::")).collect();
                    panic!("module cycle: {} -> {}", cyc.join(" -> "), n.join("::"));
                }
                _ => {}
            }
            state.insert(n.clone(), 1);
            stack.push(n.clone());
            for d in g.get(n).into_iter().flatten() {
                visit(d, g, state, stack);
            }
            stack.pop();
            state.insert(n.clone(), 2);
        }
        let mut state = BTreeMap::new();
        for n in graph.keys() {
            visit(n, &graph, &mut state, &mut vec![]);
        }
    }
}
