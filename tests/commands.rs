//! The command reference (README, docs/protocol.md) row by row against a real redis-server with the module loaded, plus every error:
//! each is one line, changes nothing, and the server stays up.

mod common;
use common::*;
use std::time::Duration;

#[test]
fn acquire_grants_refreshes_and_refuses_others() {
    let s = start();
    let mut c = s.connection();
    let t1 = acquire(&mut c, "job", "a", 5000).expect("granted");
    assert!(t1 > 0 && t1 < (1 << 53));
    assert_eq!(acquire(&mut c, "job", "b", 5000), None, "held by a");
    // Idempotent retry by the holder: same token, expiry refreshed.
    assert_eq!(acquire(&mut c, "job", "a", 5000), Some(t1));
    let (owner, token, pttl) = get(&mut c, "job").expect("live");
    assert_eq!((owner.as_slice(), token), (&b"a"[..], t1));
    assert!(pttl > 4000 && pttl <= 5000, "{pttl}");
    assert_eq!(info_field(&mut c, "acquired"), 1);
    assert_eq!(info_field(&mut c, "refreshed"), 1);
    assert_eq!(info_field(&mut c, "contended"), 1);
}

#[test]
fn renew_release_fence_rows() {
    let s = start();
    let mut c = s.connection();
    let t = acquire(&mut c, "k", "a", 1000).expect("granted");
    let renew = |c: &mut Con, owner: &str, tok: u64, ttl: u64| -> i64 {
        redis::cmd("LEASE.RENEW")
            .arg("k")
            .arg(owner)
            .arg(tok)
            .arg(ttl)
            .query(c)
            .expect("renew")
    };
    assert_eq!(renew(&mut c, "a", t, 3000), 1);
    assert!(get(&mut c, "k").expect("live").2 > 2000);
    assert_eq!(renew(&mut c, "b", t, 3000), 0, "wrong owner");
    assert_eq!(renew(&mut c, "a", t + 1, 3000), 0, "wrong token");
    let left: i64 = redis::cmd("LEASE.FENCE")
        .arg("k")
        .arg(t)
        .query(&mut c)
        .expect("fence");
    assert!(left > 2000 && left <= 3000, "{left}");
    assert!(err_of(&mut c, &["LEASE.FENCE", "k", &(t + 1).to_string()]).starts_with("FENCED"));
    // FENCE with a command runs it only after the check.
    let r: String = redis::cmd("LEASE.FENCE")
        .arg("k")
        .arg(t)
        .arg("SET")
        .arg("out")
        .arg("1")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, "OK");
    assert!(err_of(&mut c, &["LEASE.FENCE", "k", "1", "SET", "out", "2"]).starts_with("FENCED"));
    let out: String = redis::cmd("GET").arg("out").query(&mut c).unwrap();
    assert_eq!(out, "1", "stale fenced write must not run");
    let rel = |c: &mut Con, owner: &str, tok: u64| -> i64 {
        redis::cmd("LEASE.RELEASE")
            .arg("k")
            .arg(owner)
            .arg(tok)
            .query(c)
            .expect("release")
    };
    assert_eq!(rel(&mut c, "b", t), 0);
    assert_eq!(rel(&mut c, "a", t + 1), 0);
    assert_eq!(rel(&mut c, "a", t), 1);
    assert_eq!(rel(&mut c, "a", t), 0, "already free");
    assert_eq!(get(&mut c, "k"), None);
    assert!(err_of(&mut c, &["LEASE.FENCE", "k", &t.to_string()]).starts_with("FENCED"));
    assert_eq!(
        renew(&mut c, "a", t, 3000),
        0,
        "released lease is not renewed"
    );
    // The free key keeps its token history: the next grant is above.
    let t2 = acquire(&mut c, "k", "b", 1000).expect("granted");
    assert!(t2 > t);
    let info: Vec<redis::Value> = redis::cmd("LEASE.INFO").arg("k").query(&mut c).unwrap();
    assert_eq!(info.len(), 14);
}

#[test]
fn expired_lease_is_not_renewed_and_next_grant_has_a_new_token() {
    let s = start();
    let mut c = s.connection();
    let t = acquire(&mut c, "k", "a", 50).expect("granted");
    wait_for(Duration::from_secs(5), || {
        get(&mut c, "k").is_none().then_some(())
    })
    .expect("expires");
    let r: i64 = redis::cmd("LEASE.RENEW")
        .arg("k")
        .arg("a")
        .arg(t)
        .arg(1000)
        .query(&mut c)
        .unwrap();
    assert_eq!(
        r, 0,
        "an expired lease is never renewed, even if nobody took it"
    );
    let t2 = acquire(&mut c, "k", "a", 1000).expect("same owner regrants");
    assert!(t2 > t, "a new grant after expiry issues a new token");
    assert!(info_field(&mut c, "expired") >= 1);
}

#[test]
fn bad_input_is_one_line_changes_nothing_and_server_stays_up() {
    let mut s = start();
    let mut c = s.connection();
    let t = acquire(&mut c, "k", "a", 30000).expect("granted");
    redis::cmd("SET")
        .arg("str")
        .arg("v")
        .query::<()>(&mut c)
        .unwrap();
    let before = snapshot(&mut c, "k");
    let ts = t.to_string();
    let long_owner = "o".repeat(257);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["LEASE.ACQUIRE", "k", "a"],
            "ERR wrong number of arguments",
        ),
        (
            vec!["LEASE.ACQUIRE", "k", "a", "0"],
            "ERR ttl must be a positive integer",
        ),
        (
            vec!["LEASE.ACQUIRE", "k", "a", "-5"],
            "ERR ttl must be a positive integer",
        ),
        (
            vec!["LEASE.ACQUIRE", "k", "a", "1.5"],
            "ERR ttl must be a positive integer",
        ),
        (
            vec!["LEASE.ACQUIRE", "k", "a", "30001"],
            "ERR ttl exceeds lease.max-ttl",
        ),
        (
            vec!["LEASE.ACQUIRE", "k", "", "100"],
            "ERR owner must be 1 to 256 bytes",
        ),
        (
            vec!["LEASE.ACQUIRE", "k", &long_owner, "100"],
            "ERR owner must be 1 to 256 bytes",
        ),
        (
            vec!["LEASE.ACQUIRE", "k", "a", "100", "NX"],
            "ERR unknown option 'NX'",
        ),
        (
            vec!["LEASE.ACQUIRE", "k", "a", "100", "BLOCK"],
            "ERR wrong number of arguments",
        ),
        (
            vec!["LEASE.ACQUIRE", "k", "a", "100", "BLOCK", "x"],
            "ERR timeout must be",
        ),
        (
            vec!["LEASE.ACQUIRE", "k", "a", "100", "BLOCK", "-1"],
            "ERR timeout must be",
        ),
        (vec!["LEASE.ACQUIRE", "str", "a", "100"], "WRONGTYPE"),
        (
            vec!["LEASE.RENEW", "k", "a", &ts],
            "ERR wrong number of arguments",
        ),
        (
            vec!["LEASE.RENEW", "k", "a", "0", "100"],
            "ERR token must be a positive integer",
        ),
        (
            vec!["LEASE.RENEW", "k", "a", "9007199254740992", "100"],
            "ERR token must be",
        ),
        (vec!["LEASE.RENEW", "k", "a", &ts, "0"], "ERR ttl must be"),
        (
            vec!["LEASE.RENEW", "k", "a", &ts, "99999999"],
            "ERR ttl exceeds",
        ),
        (vec!["LEASE.RENEW", "str", "a", &ts, "100"], "WRONGTYPE"),
        (
            vec!["LEASE.RELEASE", "k", "a"],
            "ERR wrong number of arguments",
        ),
        (vec!["LEASE.RELEASE", "k", "a", "x"], "ERR token must be"),
        (vec!["LEASE.RELEASE", "str", "a", &ts], "WRONGTYPE"),
        (vec!["LEASE.FENCE", "k"], "ERR wrong number of arguments"),
        (vec!["LEASE.FENCE", "k", "-1"], "ERR token must be"),
        (vec!["LEASE.FENCE", "str", &ts], "WRONGTYPE"),
        (
            vec!["LEASE.FENCE", "k", &ts, "NOSUCHCOMMAND"],
            "ERR unknown command",
        ),
        (vec!["LEASE.GET"], "ERR wrong number of arguments"),
        (
            vec!["LEASE.GET", "k", "extra"],
            "ERR wrong number of arguments",
        ),
        (vec!["LEASE.GET", "str"], "WRONGTYPE"),
        (vec!["LEASE.INFO", "str"], "WRONGTYPE"),
        (
            vec!["LEASE.APPLY", "k", "HOLD", "evil", "1", "99999999999999"],
            "ERR LEASE.APPLY is internal",
        ),
        (
            vec!["LEASE.APPLY", "k", "FREE", &ts],
            "ERR LEASE.APPLY is internal",
        ),
    ];
    for (args, want) in &cases {
        let e = err_of(&mut c, args);
        assert!(
            e.starts_with(want),
            "{args:?}: got {e:?}, want prefix {want:?}"
        );
        assert!(!e.contains('\n'), "{e:?}");
        assert_eq!(snapshot(&mut c, "k"), before, "{args:?} changed the lease");
    }
    // Binary junk everywhere, NUL bytes included, never panics the server.
    let junk: [&[u8]; 4] = [b"\0", b"\xff\xfe", b"a\0b", b"\r\n"];
    for j in junk {
        for cmd in [
            "LEASE.ACQUIRE",
            "LEASE.RENEW",
            "LEASE.RELEASE",
            "LEASE.FENCE",
        ] {
            let _ = try_cmd::<redis::Value>(&mut c, &[cmd.as_bytes(), b"k", j, j, j]);
            let _ = try_cmd::<redis::Value>(&mut c, &[cmd.as_bytes(), j, j, b"100"]);
        }
        let _ = try_cmd::<redis::Value>(&mut c, &[b"LEASE.FENCE", b"k", ts.as_bytes(), j, j]);
    }
    // Some junk replies echo invalid UTF-8 that the client library cannot parse: reconnect.
    let mut c = s.connection();
    // A NUL inside an owner is binary safe (a valid, different owner).
    let r: Option<u64> = try_cmd(&mut c, &[b"LEASE.ACQUIRE", b"nul", b"a\0b", b"1000"]).unwrap();
    assert!(r.is_some());
    let (owner, _, _) = get(&mut c, "nul").unwrap();
    assert_eq!(owner, b"a\0b");
    assert_eq!(snapshot(&mut c, "k"), before);
    ping(&mut c);
    s.assert_alive();
}

#[test]
fn fence_runs_the_command_as_the_caller_under_acl() {
    let s = start();
    let mut admin = s.connection();
    let t = acquire(&mut admin, "lk", "a", 30000).unwrap();
    // A user who may run LEASE.* and GET but not SET.
    redis::cmd("ACL")
        .arg(&["SETUSER", "limited", "on", "nopass", "+@all", "-set", "~*"])
        .query::<()>(&mut admin)
        .unwrap();
    let client = redis::Client::open(format!("redis://limited:any@127.0.0.1:{}/", s.port)).unwrap();
    let mut lim = client.get_connection().unwrap();
    let left: i64 = redis::cmd("LEASE.FENCE")
        .arg("lk")
        .arg(t)
        .query(&mut lim)
        .unwrap();
    assert!(left > 0);
    let e = err_of(
        &mut lim,
        &["LEASE.FENCE", "lk", &t.to_string(), "SET", "x", "1"],
    );
    assert!(
        e.contains("acl verification failed") || e.contains("NOPERM"),
        "{e}"
    );
    let x: Option<String> = redis::cmd("GET").arg("x").query(&mut admin).unwrap();
    assert_eq!(
        x, None,
        "SET must not run through FENCE for a user without SET"
    );
    // Allowed commands do run, as that user.
    let r: Option<String> = redis::cmd("LEASE.FENCE")
        .arg("lk")
        .arg(t)
        .arg("GET")
        .arg("x")
        .query(&mut lim)
        .unwrap();
    assert_eq!(r, None);
    // Key permissions too: a user limited to keys app:* cannot touch other keys via FENCE.
    redis::cmd("ACL")
        .arg(&["SETUSER", "keyed", "on", "nopass", "+@all", "~lk", "~app:*"])
        .query::<()>(&mut admin)
        .unwrap();
    let client = redis::Client::open(format!("redis://keyed:any@127.0.0.1:{}/", s.port)).unwrap();
    let mut keyed = client.get_connection().unwrap();
    let ok: String = redis::cmd("LEASE.FENCE")
        .arg("lk")
        .arg(t)
        .arg("SET")
        .arg("app:1")
        .arg("v")
        .query(&mut keyed)
        .unwrap();
    assert_eq!(ok, "OK");
    let e = err_of(
        &mut keyed,
        &["LEASE.FENCE", "lk", &t.to_string(), "SET", "other", "v"],
    );
    assert!(
        e.contains("acl verification failed") || e.contains("NOPERM"),
        "{e}"
    );
}

#[test]
fn fence_error_aborts_a_lua_script() {
    let s = start();
    let mut c = s.connection();
    let t = acquire(&mut c, "lk", "a", 30000).unwrap();
    let script =
        "redis.call('LEASE.FENCE', KEYS[1], ARGV[1]); return redis.call('SET', KEYS[2], ARGV[1])";
    let ok: String = redis::cmd("EVAL")
        .arg(script)
        .arg(2)
        .arg("lk")
        .arg("res")
        .arg(t)
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, "OK");
    let stale = (t - 1).to_string();
    let e = err_of(&mut c, &["EVAL", script, "2", "lk", "res2", &stale]);
    assert!(e.contains("FENCED"), "{e}");
    let v: Option<String> = redis::cmd("GET").arg("res2").query(&mut c).unwrap();
    assert_eq!(v, None, "the write after a failed FENCE must not happen");
}

#[test]
fn get_is_a_map_under_resp3() {
    let s = start();
    let mut c = s.connection();
    let t = acquire(&mut c, "k", "own", 10000).unwrap();
    let client =
        redis::Client::open(format!("redis://127.0.0.1:{}/?protocol=resp3", s.port)).unwrap();
    let mut c3 = client.get_connection().unwrap();
    let v: redis::Value = redis::cmd("LEASE.GET").arg("k").query(&mut c3).unwrap();
    let redis::Value::Map(pairs) = v else {
        panic!("expected a map, got {v:?}")
    };
    let keys: Vec<String> = pairs
        .iter()
        .map(|(k, _)| redis::from_redis_value(k.clone()).unwrap())
        .collect();
    assert_eq!(keys, ["owner", "token", "pttl"]);
    assert_eq!(pairs[1].1, redis::Value::Int(t as i64));
    let none: redis::Value = redis::cmd("LEASE.GET").arg("nokey").query(&mut c3).unwrap();
    assert_eq!(none, redis::Value::Nil);
}

#[test]
fn keyspace_notifications_for_acquire_release_expire() {
    let s = start();
    let mut c = s.connection();
    redis::cmd("CONFIG")
        .arg(&["SET", "notify-keyspace-events", "Ed"])
        .query::<()>(&mut c)
        .unwrap();
    let client = redis::Client::open(s.url()).unwrap();
    let mut sub = client.get_connection().unwrap();
    sub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut ps = sub.as_pubsub();
    ps.psubscribe("__keyevent@0__:lease.*").unwrap();
    let t = acquire(&mut c, "n", "a", 10000).unwrap();
    let _: i64 = redis::cmd("LEASE.RELEASE")
        .arg("n")
        .arg("a")
        .arg(t)
        .query(&mut c)
        .unwrap();
    acquire(&mut c, "n", "b", 50).unwrap();
    let mut seen = vec![];
    while seen.len() < 4 {
        let m = ps.get_message().expect("notification within 5 s");
        let key: String = m.get_payload().unwrap();
        assert_eq!(key, "n");
        seen.push(
            m.get_channel_name()
                .trim_start_matches("__keyevent@0__:")
                .to_string(),
        );
    }
    assert_eq!(
        seen,
        [
            "lease.acquired",
            "lease.released",
            "lease.acquired",
            "lease.expired"
        ]
    );
}

#[test]
fn config_set_validates_and_applies() {
    let s = start();
    let mut c = s.connection();
    for (name, bad) in [
        ("lease.max-ttl", "0"),
        ("lease.max-ttl", "abc"),
        ("lease.grace-ms", "-2"),
        ("lease.max-owner-len", "0"),
        ("lease.max-owner-len", "70000"),
    ] {
        let e = err_of(&mut c, &["CONFIG", "SET", name, bad]);
        assert!(e.starts_with("ERR"), "{name} {bad}: {e}");
    }
    redis::cmd("CONFIG")
        .arg(&["SET", "lease.max-ttl", "1000"])
        .query::<()>(&mut c)
        .unwrap();
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg(&["GET", "lease.max-ttl"])
        .query(&mut c)
        .unwrap();
    assert_eq!(v, ["lease.max-ttl", "1000"]);
    assert!(
        err_of(&mut c, &["LEASE.ACQUIRE", "k", "a", "1001"]).contains("lease.max-ttl (1000 ms)")
    );
    redis::cmd("CONFIG")
        .arg(&["SET", "lease.max-owner-len", "3"])
        .query::<()>(&mut c)
        .unwrap();
    assert!(err_of(&mut c, &["LEASE.ACQUIRE", "k", "abcd", "100"]).contains("1 to 3 bytes"));
    assert!(acquire(&mut c, "k", "abc", 100).is_some());
}

#[test]
fn bad_module_arguments_refuse_the_load() {
    let dir = tempfile_dir();
    let out = std::process::Command::new(testsupport::server_bin())
        .args([
            "--port",
            &testsupport::free_port().to_string(),
            "--dir",
            &dir,
            "--loadmodule",
        ])
        .arg(testsupport::module_path())
        .args(["lease.max-ttl", "0"])
        .output()
        .expect("run server");
    assert!(
        !out.status.success(),
        "server must refuse to start with a bad module argument"
    );
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(
        log.contains("lease.max-ttl must be an integer between 1 and"),
        "{log}"
    );
}

fn tempfile_dir() -> String {
    let d = std::env::temp_dir().join(format!("lease-badargs-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.display().to_string()
}

#[test]
fn command_info_reports_arity_flags_and_key_positions() {
    let s = start();
    let mut c = s.connection();
    let want: [(&str, i64, &[&str], &[&str]); 5] = [
        (
            "lease.acquire",
            -4,
            &["write", "denyoom"],
            &["fast", "readonly"],
        ),
        ("lease.renew", -5, &["write", "fast"], &["readonly"]),
        ("lease.release", 4, &["write", "fast"], &["readonly"]),
        ("lease.fence", -3, &["write", "denyoom"], &["readonly"]),
        ("lease.get", 2, &["readonly", "fast"], &["write"]),
    ];
    for (name, arity, has, lacks) in want {
        let info: Vec<redis::Value> = redis::cmd("COMMAND")
            .arg("INFO")
            .arg(name)
            .query(&mut c)
            .unwrap();
        let redis::Value::Array(f) = &info[0] else {
            panic!("{name}: {info:?}")
        };
        let got_arity: i64 = redis::from_redis_value(f[1].clone()).unwrap();
        let flags: Vec<String> = redis::from_redis_value(f[2].clone()).unwrap();
        let keys: (i64, i64, i64) = (
            redis::from_redis_value(f[3].clone()).unwrap(),
            redis::from_redis_value(f[4].clone()).unwrap(),
            redis::from_redis_value(f[5].clone()).unwrap(),
        );
        assert_eq!(got_arity, arity, "{name}");
        assert_eq!(keys, (1, 1, 1), "{name}: key positions for Cluster routing");
        for h in has {
            assert!(flags.iter().any(|x| x == h), "{name} lacks {h}: {flags:?}");
        }
        for l in lacks {
            assert!(!flags.iter().any(|x| x == l), "{name} has {l}: {flags:?}");
        }
    }
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg(&["GETKEYS", "LEASE.FENCE", "lk", "1", "SET", "x", "y"])
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["lk"]);
    let docs: redis::Value = redis::cmd("COMMAND")
        .arg(&["DOCS", "lease.acquire"])
        .query(&mut c)
        .unwrap();
    assert!(format!("{docs:?}").contains("BLOCK"), "{docs:?}");
}

/// Would catch: an inner command that crashes or wedges the server through the module's
/// call path. Before script mode was enforced, `WAIT 1 10` tripped a Redis assertion and
/// killed the server (a client could crash it at will).
#[test]
fn fence_refuses_inner_commands_a_script_cannot_run() {
    let mut s = start();
    let mut c = s.connection();
    let t = acquire(&mut c, "k", "a", 30000).unwrap().to_string();
    // Refused on every server version: commands a script may not run.
    let refused: &[&[&str]] = &[
        &["MULTI"],
        &["EXEC"],
        &["WATCH", "k"],
        &["SUBSCRIBE", "ch"],
        &["MONITOR"],
        &["CLIENT", "PAUSE", "10"],
        &["EVAL", "return 1", "0"],
        &["SHUTDOWN", "NOSAVE"],
        &["DEBUG", "SLEEP", "0"],
        &["SAVE"],
        &["REPLICAOF", "NO", "ONE"],
        &["PSYNC", "?", "-1"],
        &["QUIT"],
        &["RESET"],
    ];
    // Refused on 7.0; newer servers run them in scripts without blocking. Either way the
    // server must answer at once and stay up (7.0 crashed on WAIT before script mode).
    let must_not_block_or_crash: &[&[&str]] = &[&["WAIT", "1", "10"], &["BLPOP", "l", "1"]];
    for inner in refused.iter().chain(must_not_block_or_crash) {
        let mut args = vec!["LEASE.FENCE", "k", &t];
        args.extend_from_slice(inner);
        let a: Vec<&[u8]> = args.iter().map(|x| x.as_bytes()).collect();
        let t0 = std::time::Instant::now();
        let r = try_cmd::<redis::Value>(&mut c, &a);
        assert!(
            t0.elapsed() < Duration::from_millis(900),
            "{inner:?} blocked"
        );
        if refused.contains(inner) {
            let e = r.expect_err("refused");
            assert_eq!(e.code(), Some("ERR"), "{inner:?}: {e}");
        }
        ping(&mut c);
        s.assert_alive();
    }
    s.assert_alive();
    // Ordinary writes and reads still go through.
    let ok: String = redis::cmd("LEASE.FENCE")
        .arg(&["k", &t, "SET", "x", "y"])
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, "OK");
}
