//! Loading the module with bad settings, and a setting given two ways (issue 35, items 2, 3;
//! README, Configuration; docs/deploy.md).
//!
//! Would catch: a refused load that leaves server-event or keyspace subscriptions behind
//! (Redis 7.0 keeps them after unloading the library: the next cron tick crashes the server),
//! a failing `RedisModule_LoadConfigs` that is ignored (Redis 7.2+/Valkey then force-unload a
//! module with a data type and crash; 7.0 keeps it loaded with defaults), a bad config line
//! at start-up that crashes instead of refusing, and a `loadmodule` argument that silently
//! beats a config line, `CONFIG REWRITE` output or `LOADEX ... CONFIG`.

mod common;
use common::*;
use std::time::{Duration, Instant};
use testsupport::module_path;

/// A server without the module that allows `MODULE LOAD`.
fn bare() -> RedisServer {
    let mut o = ServerOptions::default().extra_args(&["--enable-module-command", "yes"]);
    o.load_module = false;
    o.module_args = vec![];
    RedisServer::start(o)
}

fn so() -> String {
    module_path().display().to_string()
}

fn modules(con: &mut Con) -> String {
    let v: redis::Value = redis::cmd("MODULE")
        .arg("LIST")
        .query(con)
        .expect("module list");
    format!("{v:?}")
}

/// Pings for `window` (several server cron ticks at hz 10, and keyspace events in between):
/// a subscription left behind by a refused load crashes the server on the next one.
fn stays_up_for(s: &mut RedisServer, window: Duration) {
    let end = Instant::now() + window;
    let mut c = s.connection();
    let mut i = 0u32;
    while Instant::now() < end {
        i += 1;
        // RENAME fires generic keyspace events, the kind the module subscribes to.
        let ok = redis::cmd("SET")
            .arg("a")
            .arg(i)
            .query::<()>(&mut c)
            .is_ok()
            && redis::cmd("RENAME")
                .arg("a")
                .arg("b")
                .query::<()>(&mut c)
                .is_ok();
        if !ok || !s.alive() {
            panic!(
                "the server died after a refused load; log tail:\n{}",
                s.log_tail(40)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn load_err(con: &mut Con, args: &[&str]) -> String {
    let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    match try_cmd::<redis::Value>(con, &a) {
        Ok(v) => panic!("{args:?} should be refused, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

/// Bad `MODULE LOAD` arguments and bad `MODULE LOADEX ... CONFIG` values: each refused with
/// an error, the module not loaded, the server up through several cron ticks, and a good load
/// afterwards works.
#[test]
fn bad_settings_on_a_runtime_load_are_refused_and_change_nothing() {
    let mut s = bare();
    let mut c = s.connection();
    let so = so();
    let cases: Vec<Vec<&str>> = vec![
        vec!["MODULE", "LOAD", &so, "bogus", "1"],
        vec!["MODULE", "LOAD", &so, "lease.max-ttl", "0"],
        vec!["MODULE", "LOAD", &so, "lease.grace-ms"],
        vec!["MODULE", "LOADEX", &so, "CONFIG", "lease.max-ttl", "0"],
        vec!["MODULE", "LOADEX", &so, "CONFIG", "lease.grace-ms", "x"],
        vec![
            "MODULE",
            "LOADEX",
            &so,
            "CONFIG",
            "lease.max-owner-len",
            "1",
            "ARGS",
            "max-ttl",
            "0",
        ],
        vec!["MODULE", "LOAD", &so, "max-ttl", "5", "max-ttl", "6"],
    ];
    for case in &cases {
        let e = load_err(&mut c, case);
        assert!(!e.is_empty());
        assert!(
            !modules(&mut c).contains("lease"),
            "{case:?} left the module loaded"
        );
        stays_up_for(&mut s, Duration::from_millis(300));
    }
    assert!(
        s.log().contains("lease: refusing to load"),
        "no one-line reason in the log"
    );
    // A good load afterwards: the settings given, the commands there.
    let _: () = redis::cmd("MODULE")
        .arg("LOADEX")
        .arg(&so)
        .arg("CONFIG")
        .arg("lease.grace-ms")
        .arg(0)
        .query(&mut c)
        .expect("good load");
    assert!(acquire(&mut c, "k", "me", 1000).is_some());
    stays_up_for(&mut s, Duration::from_millis(300));
}

/// At start-up a bad module argument or a bad config line stops the server with the module's
/// or Redis' one-line reason, not a crash.
#[test]
fn bad_settings_at_start_up_stop_the_server_cleanly() {
    let bad_arg = ServerOptions::default().module_args(&["lease.max-ttl", "0"]);
    let bad_line = ServerOptions::default()
        .module_args(&[])
        .extra_args(&["--lease.max-ttl", "0"]);
    for (what, opts) in [("argument", bad_arg), ("config line", bad_line)] {
        let err = match RedisServer::try_start_with(None, opts) {
            Ok(_) => panic!("a server with a bad {what} started"),
            Err(e) => e,
        };
        assert!(
            !err.contains("BUG REPORT") && !err.contains("crashed by signal"),
            "a bad {what} crashed the server:\n{err}"
        );
        assert!(
            err.contains("max-ttl"),
            "the log does not name the setting ({what}):\n{err}"
        );
    }
}

fn grace(con: &mut Con) -> String {
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("lease.grace-ms")
        .query(con)
        .expect("config get");
    v.get(1).cloned().unwrap_or_default()
}

/// A config line beats a `loadmodule` argument, and the log says so naming both values.
#[test]
fn a_config_line_beats_a_module_argument_and_the_log_says_so() {
    let mut s = RedisServer::start(
        ServerOptions::default()
            .module_args(&["lease.grace-ms", "14000"])
            .extra_args(&["--lease.grace-ms", "22000"]),
    );
    let mut c = s.connection();
    assert_eq!(grace(&mut c), "22000");
    let log = s.log();
    assert!(
        log.contains("loadmodule argument (14000)") && log.contains("lease.grace-ms is 22000"),
        "no warning naming both values and the winner:\n{}",
        s.log_tail(20)
    );
    // The same value given both ways is no conflict: no warning.
    s.restart_with(
        ServerOptions::default()
            .module_args(&["lease.grace-ms", "22000"])
            .extra_args(&["--lease.grace-ms", "22000"]),
    );
    let mut c = s.connection();
    assert_eq!(grace(&mut c), "22000");
    assert_eq!(s.log().matches("the config line wins").count(), 1);
}

/// `CONFIG SET` + `CONFIG REWRITE` survive a restart although the `loadmodule` line still
/// carries the old value as an argument (the deploy.md recipe before this issue).
#[test]
fn config_rewrite_survives_a_restart_over_a_module_argument() {
    let so = so();
    let load = format!("loadmodule {so} lease.grace-ms 14000");
    let mut o = ServerOptions::default().conf(&[&load]);
    o.load_module = false;
    let mut s = RedisServer::start(o);
    let mut c = s.connection();
    assert_eq!(grace(&mut c), "14000");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("lease.grace-ms")
        .arg(22000)
        .query(&mut c)
        .expect("config set");
    let _: () = redis::cmd("CONFIG")
        .arg("REWRITE")
        .query(&mut c)
        .expect("config rewrite");
    s.restart();
    let mut c = s.connection();
    assert_eq!(grace(&mut c), "22000", "the rewritten setting was lost");
    // Back to the argument's value: the rewrite drops the line, the argument counts again.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("lease.grace-ms")
        .arg(14000)
        .query(&mut c)
        .expect("config set");
    let _: () = redis::cmd("CONFIG")
        .arg("REWRITE")
        .query(&mut c)
        .expect("config rewrite");
    s.restart();
    let mut c = s.connection();
    assert_eq!(grace(&mut c), "14000");
}

/// `MODULE LOADEX ... CONFIG` beats `ARGS`.
#[test]
fn loadex_config_beats_loadex_args() {
    let s = bare();
    let mut c = s.connection();
    let _: () = redis::cmd("MODULE")
        .arg("LOADEX")
        .arg(so())
        .arg("CONFIG")
        .arg("lease.grace-ms")
        .arg(22000)
        .arg("ARGS")
        .arg("lease.grace-ms")
        .arg(14000)
        .query(&mut c)
        .expect("loadex");
    assert_eq!(grace(&mut c), "22000");
    assert!(s.log().contains("the config line wins"));
}
