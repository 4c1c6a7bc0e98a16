//! Replays the committed seed corpus (and every crash input kept as a regression case) of
//! each fuzz target on stable Rust, without libFuzzer: `cargo test -p redis-lease-fuzz`.
//! A target that panics on any file fails here.

use std::path::Path;

fn replay(target: &str, f: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.expect("entry").path();
        let data = std::fs::read(&p).expect("read seed");
        f(&data);
        n += 1;
    }
    assert!(n > 0, "{target}: empty seed corpus");
    println!("{target}: {n} inputs replayed");
}

#[test]
fn rdb_value() {
    replay("rdb_value", redis_lease_fuzz::rdb_value);
}

#[test]
fn command_args() {
    replay("command_args", redis_lease_fuzz::command_args);
}

#[test]
fn apply_effect() {
    replay("apply_effect", redis_lease_fuzz::apply_effect);
}

#[test]
fn module_config() {
    replay("module_config", redis_lease_fuzz::module_config);
}

#[test]
fn history_jsonl() {
    replay("history_jsonl", redis_lease_fuzz::history_jsonl);
}
