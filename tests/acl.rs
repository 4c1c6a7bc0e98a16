//! ACL: the least-privilege recipes of docs/security.md, tested command by command (each user
//! can do its job and nothing more), and the commands' ACL categories where the server has
//! them (Redis 7.2+; the custom `@lease` category on newer servers) while Redis 7.0 still
//! loads the module without them.

mod common;
use common::*;

/// The recipes exactly as docs/security.md prints them (password added by `setuser`).
/// Elector: the election loop's commands on its lease keys, plus WAIT (min_replicas).
pub const ELECTOR: &str =
    "resetkeys resetchannels -@all +lease.acquire +lease.renew +lease.release +lease.get +wait ~leases:*";
/// Reader (dashboards, `lease-run status`-like tools): read-only key access.
pub const READER: &str = "resetkeys resetchannels -@all +lease.get +lease.info %R~leases:*";
/// Worker: fenced writes of HSET into report:* under a lease in leases:*.
pub const WORKER: &str = "resetkeys resetchannels -@all +lease.fence +hset ~leases:* ~report:*";

fn setuser(admin: &mut Con, name: &str, rules: &str) {
    let mut c = redis::cmd("ACL");
    c.arg("SETUSER")
        .arg(name)
        .arg("on")
        .arg(format!(">{name}-pw"));
    for r in rules.split_whitespace() {
        c.arg(r);
    }
    c.query::<()>(admin).expect("ACL SETUSER");
}

fn login(s: &RedisServer, name: &str) -> Con {
    let client =
        redis::Client::open(format!("redis://{name}:{name}-pw@127.0.0.1:{}/", s.port)).unwrap();
    client.get_connection().expect("login")
}

/// The command must be refused by ACL (not by the module, not for another reason).
#[track_caller]
fn denied(con: &mut Con, args: &[&str]) {
    let e = err_of(con, args);
    assert!(e.contains("NOPERM"), "{args:?}: expected NOPERM, got {e}");
}

fn run(con: &mut Con, args: &[&str]) -> redis::Value {
    let a: Vec<&[u8]> = args.iter().map(|x| x.as_bytes()).collect();
    try_cmd::<redis::Value>(con, &a).unwrap_or_else(|e| panic!("{args:?} refused: {e}"))
}

/// Would catch: a recipe that lets the elector do more than elect (DEL, RESTORE, RENAME,
/// FLUSHALL through FENCE, other keys) or too little to run the loop.
#[test]
fn elector_user_runs_the_election_commands_and_nothing_else() {
    let s = start();
    let mut admin = s.connection();
    setuser(&mut admin, "elector", ELECTOR);
    let mut e = login(&s, "elector");
    // Its job: acquire (also BLOCK), renew, release, get, WAIT.
    let t: u64 =
        redis::from_redis_value(run(&mut e, &["LEASE.ACQUIRE", "leases:a", "e1", "5000"])).unwrap();
    let ts = t.to_string();
    assert_eq!(
        run(&mut e, &["LEASE.RENEW", "leases:a", "e1", &ts, "5000"]),
        redis::Value::Int(1)
    );
    assert!(matches!(
        run(&mut e, &["LEASE.GET", "leases:a"]),
        redis::Value::Array(_)
    ));
    assert_eq!(run(&mut e, &["WAIT", "0", "10"]), redis::Value::Int(0));
    assert_eq!(
        run(&mut e, &["LEASE.RELEASE", "leases:a", "e1", &ts]),
        redis::Value::Int(1)
    );
    let t2 = run(
        &mut e,
        &["LEASE.ACQUIRE", "leases:a", "e2", "5000", "BLOCK", "100"],
    );
    assert!(matches!(t2, redis::Value::Int(_)), "{t2:?}");
    let t2: u64 = redis::from_redis_value(t2).unwrap();
    let t2s = t2.to_string();
    // Nothing more: no other key, no raw writes to its own lease keys, no FENCE, no admin.
    let dump: Vec<u8> = redis::cmd("DUMP")
        .arg("leases:a")
        .query(&mut admin)
        .unwrap();
    denied(&mut e, &["LEASE.ACQUIRE", "other:a", "e1", "5000"]);
    denied(&mut e, &["LEASE.GET", "other:a"]);
    denied(&mut e, &["DEL", "leases:a"]);
    denied(&mut e, &["UNLINK", "leases:a"]);
    denied(&mut e, &["RENAME", "leases:a", "leases:b"]);
    denied(&mut e, &["COPY", "leases:a", "leases:b"]);
    denied(&mut e, &["DUMP", "leases:a"]);
    let a: Vec<&[u8]> = vec![b"RESTORE", b"leases:a", b"0", &dump, b"REPLACE"];
    let r = try_cmd::<redis::Value>(&mut e, &a);
    let restore_err = r.expect_err("RESTORE must be refused");
    assert_eq!(restore_err.code(), Some("NOPERM"), "RESTORE: {restore_err}");
    denied(&mut e, &["LEASE.FENCE", "leases:a", &t2s]);
    denied(&mut e, &["LEASE.FENCE", "leases:a", &t2s, "FLUSHALL"]);
    denied(&mut e, &["LEASE.INFO", "leases:a"]);
    denied(&mut e, &["LEASE.APPLY", "leases:a", "FREE", "1"]);
    denied(&mut e, &["FLUSHALL"]);
    denied(&mut e, &["SET", "leases:a", "x"]);
    denied(
        &mut e,
        &["EVAL", "return redis.call('DEL', KEYS[1])", "1", "leases:a"],
    );
    denied(&mut e, &["CONFIG", "SET", "lease.max-ttl", "1"]);
    denied(&mut e, &["KEYS", "*"]);
    denied(&mut e, &["MULTI"]);
    // The lease is intact after all of that.
    assert_eq!(get(&mut admin, "leases:a").map(|g| g.1), Some(t2));
    // What the recipe does not stop (docs/security.md §1): the owner id is not a secret, so
    // an elector user can read another holder's owner and token and release its lease.
    let other = acquire(&mut admin, "leases:other", "someone-else", 30000).unwrap();
    let (owner, token, _) = get(&mut e, "leases:other").unwrap();
    assert_eq!(token, other);
    let owner = String::from_utf8(owner).unwrap();
    assert_eq!(
        run(
            &mut e,
            &["LEASE.RELEASE", "leases:other", &owner, &token.to_string()]
        ),
        redis::Value::Int(1)
    );
}

/// Would catch: a reader recipe that can change a lease.
#[test]
fn reader_user_reads_leases_and_nothing_else() {
    let s = start();
    let mut admin = s.connection();
    let t = acquire(&mut admin, "leases:a", "holder", 30000).unwrap();
    let ts = t.to_string();
    setuser(&mut admin, "reader", READER);
    let mut r = login(&s, "reader");
    assert!(matches!(
        run(&mut r, &["LEASE.GET", "leases:a"]),
        redis::Value::Array(_)
    ));
    assert!(matches!(
        run(&mut r, &["LEASE.INFO", "leases:a"]),
        redis::Value::Array(_)
    ));
    denied(&mut r, &["LEASE.GET", "other:a"]);
    denied(&mut r, &["LEASE.ACQUIRE", "leases:b", "r", "5000"]);
    denied(&mut r, &["LEASE.RENEW", "leases:a", "holder", &ts, "5000"]);
    denied(&mut r, &["LEASE.RELEASE", "leases:a", "holder", &ts]);
    denied(&mut r, &["LEASE.FENCE", "leases:a", &ts]);
    denied(&mut r, &["DEL", "leases:a"]);
    denied(&mut r, &["WAIT", "0", "10"]);
    assert_eq!(get(&mut admin, "leases:a").map(|g| g.1), Some(t));
}

/// Would catch: FENCE running its inner command with rights the caller does not have
/// (the module's own user, or the FENCE permission standing in for the inner command's).
#[test]
fn fence_requires_the_inner_commands_own_rights_and_never_adds_any() {
    let s = start();
    let mut admin = s.connection();
    let t = acquire(&mut admin, "leases:job", "holder", 30000).unwrap();
    let ts = t.to_string();
    setuser(&mut admin, "worker", WORKER);
    let mut w = login(&s, "worker");
    // Its job: the fence check and fenced HSETs into report:*.
    assert!(matches!(
        run(&mut w, &["LEASE.FENCE", "leases:job", &ts]),
        redis::Value::Int(_)
    ));
    assert_eq!(
        run(
            &mut w,
            &[
                "LEASE.FENCE",
                "leases:job",
                &ts,
                "HSET",
                "report:1",
                "step",
                "7"
            ]
        ),
        redis::Value::Int(1)
    );
    // A stale token is fenced before any ACL question about the inner command.
    let stale = (t - 1).to_string();
    let e = err_of(
        &mut w,
        &[
            "LEASE.FENCE",
            "leases:job",
            &stale,
            "HSET",
            "report:1",
            "step",
            "8",
        ],
    );
    assert!(e.contains("FENCED"), "{e}");
    // Nothing more: other commands, other keys, keyless admin commands, all through FENCE.
    for inner in [
        &["SET", "report:1", "x"][..],
        &["HSET", "other:1", "f", "v"],
        &["DEL", "report:1"],
        &["FLUSHALL"],
        &["FLUSHDB"],
        &["PUBLISH", "ch", "x"],
        &["EXPIRE", "report:1", "1"],
        &["LEASE.RELEASE", "leases:job", "holder", &ts],
    ] {
        let mut a = vec!["LEASE.FENCE", "leases:job", &ts];
        a.extend_from_slice(inner);
        let e = err_of(&mut w, &a);
        assert!(
            e.contains("NOPERM") || e.contains("acl verification failed"),
            "{inner:?} through FENCE: {e}"
        );
    }
    denied(&mut w, &["HGET", "report:1", "step"]);
    denied(&mut w, &["LEASE.ACQUIRE", "leases:other", "w", "5000"]);
    // A user with FENCE but without HSET cannot HSET through FENCE.
    setuser(
        &mut admin,
        "nohset",
        "resetkeys -@all +lease.fence +hget ~leases:* ~report:*",
    );
    let mut n = login(&s, "nohset");
    let e = err_of(
        &mut n,
        &[
            "LEASE.FENCE",
            "leases:job",
            &ts,
            "HSET",
            "report:1",
            "step",
            "9",
        ],
    );
    assert!(
        e.contains("NOPERM") || e.contains("acl verification failed"),
        "{e}"
    );
    let step: String = redis::cmd("HGET")
        .arg("report:1")
        .arg("step")
        .query(&mut admin)
        .unwrap();
    assert_eq!(step, "7", "nothing but the one allowed fenced HSET ran");
    ping(&mut admin);
}

/// Server generation, from INFO (Valkey reports redis_version 7.2.4 for compatibility and
/// its own valkey_version).
fn server_kind(c: &mut Con) -> (&'static str, u32, u32) {
    let info = info_text(c, "server");
    let (kind, v) = match info_value(&info, "valkey_version") {
        Some(v) => ("valkey", v),
        None => (
            "redis",
            info_value(&info, "redis_version").unwrap_or_default(),
        ),
    };
    let mut it = v.split('.').map(|x| x.parse::<u32>().unwrap_or(0));
    (kind, it.next().unwrap_or(0), it.next().unwrap_or(0))
}

fn acl_cat(c: &mut Con, cat: Option<&str>) -> redis::RedisResult<Vec<String>> {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("CAT");
    if let Some(x) = cat {
        cmd.arg(x);
    }
    cmd.query(c)
}

/// The ACL categories field of `COMMAND INFO name` (7th element, 7.0+), as strings.
fn info_categories(c: &mut Con, name: &str) -> Vec<String> {
    let info: Vec<redis::Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg(name)
        .query(c)
        .unwrap();
    let redis::Value::Array(f) = &info[0] else {
        panic!("{name}: {info:?}")
    };
    f.get(6)
        .map(|v| redis::from_redis_value::<Vec<String>>(v.clone()).unwrap_or_default())
        .unwrap_or_default()
}

/// Would catch: categories not registered where the server has the API (a `+@write` user
/// could not acquire), the module refusing to load where it lacks it (7.0), a blocking or
/// command-running command in `@fast`, or LEASE.APPLY in `@lease`.
#[test]
fn acl_categories_show_in_command_info_and_acl_cat_where_supported() {
    let s = start();
    let mut c = s.connection();
    let (kind, major, minor) = server_kind(&mut c);
    // The module loaded (start() checks PING) and works on every version.
    acquire(&mut c, "leases:x", "a", 1000).unwrap();
    let standard = kind == "valkey" || (major, minor) >= (7, 2);
    let custom_required = kind == "redis" && major >= 8;
    let all = acl_cat(&mut c, None).unwrap();
    let custom = all.iter().any(|x| x == "lease");
    println!("{kind} {major}.{minor}: standard categories expected {standard}, custom @lease present {custom}");
    for name in ["lease.acquire", "lease.renew", "lease.get", "lease.apply"] {
        println!(
            "COMMAND INFO {name} categories: {:?}",
            info_categories(&mut c, name)
        );
    }
    if !standard {
        // Redis 7.0: no API; the commands are in no category and the module loaded anyway.
        assert!(!custom);
        assert!(!acl_cat(&mut c, Some("write"))
            .unwrap()
            .iter()
            .any(|x| x.starts_with("lease.")));
        return;
    }
    if custom_required {
        assert!(custom, "@lease missing on {kind} {major}.{minor}: {all:?}");
    }
    let cat = |c: &mut Con, x: &str| -> Vec<String> {
        let mut v = acl_cat(c, Some(x)).unwrap();
        v.retain(|n| n.starts_with("lease."));
        v.sort();
        v
    };
    assert_eq!(
        cat(&mut c, "write"),
        [
            "lease.acquire",
            "lease.apply",
            "lease.fence",
            "lease.membership",
            "lease.raise",
            "lease.release",
            "lease.renew"
        ]
    );
    assert_eq!(cat(&mut c, "read"), ["lease.get", "lease.info"]);
    assert_eq!(cat(&mut c, "admin"), ["lease.apply", "lease.membership"]);
    assert_eq!(
        cat(&mut c, "fast"),
        [
            "lease.get",
            "lease.info",
            "lease.raise",
            "lease.release",
            "lease.renew"
        ]
    );
    assert_eq!(cat(&mut c, "blocking"), ["lease.acquire"]);
    assert_eq!(cat(&mut c, "dangerous"), ["lease.apply"]);
    if custom {
        assert_eq!(
            cat(&mut c, "lease"),
            [
                "lease.acquire",
                "lease.fence",
                "lease.get",
                "lease.info",
                "lease.raise",
                "lease.release",
                "lease.renew"
            ]
        );
    }
    let acq = info_categories(&mut c, "lease.acquire");
    for want in ["@write", "@slow", "@blocking"] {
        assert!(
            acq.iter().any(|x| x == want),
            "lease.acquire lacks {want}: {acq:?}"
        );
    }
    if custom {
        assert!(acq.iter().any(|x| x == "@lease"), "{acq:?}");
        assert!(!info_categories(&mut c, "lease.apply")
            .iter()
            .any(|x| x == "@lease"));
    }
    assert!(info_categories(&mut c, "lease.get")
        .iter()
        .any(|x| x == "@read"));

    // The point of it: a user granted by category can elect, and `-@dangerous` keeps APPLY out.
    setuser(
        &mut c,
        "bycat",
        "resetkeys -@all +@write +@read -@dangerous ~leases:*",
    );
    let mut u = login(&s, "bycat");
    let t: u64 =
        redis::from_redis_value(run(&mut u, &["LEASE.ACQUIRE", "leases:cat", "u", "5000"]))
            .unwrap();
    run(&mut u, &["LEASE.GET", "leases:cat"]);
    denied(
        &mut u,
        &["LEASE.APPLY", "leases:cat", "FREE", &t.to_string()],
    );
    if custom {
        setuser(&mut c, "leaseonly", "resetkeys -@all +@lease ~leases:*");
        let mut l = login(&s, "leaseonly");
        run(&mut l, &["LEASE.INFO", "leases:cat"]);
        denied(&mut l, &["DEL", "leases:cat"]);
        denied(
            &mut l,
            &["LEASE.APPLY", "leases:cat", "FREE", &t.to_string()],
        );
    }
}
