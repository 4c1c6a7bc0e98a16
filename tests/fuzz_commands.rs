//! Seeded random commands with hostile arguments against a real server: whatever a client
//! sends, the server answers (a reply or a one-line error) and stays up.

mod common;
use common::*;
use std::time::Duration;

#[test]
fn random_hostile_commands_never_crash_the_server() {
    let mut s = start();
    let mut c = s.connection();
    let token = acquire(&mut c, "k", "owner", 30000).unwrap().to_string();
    redis::cmd("SET")
        .arg("str")
        .arg("v")
        .query::<()>(&mut c)
        .unwrap();
    let long = "x".repeat(300);
    let vocab: Vec<Vec<u8>> = [
        "k",
        "str",
        "nokey",
        "",
        "0",
        "1",
        "-1",
        "+1",
        "01",
        "1.5",
        "30000",
        "30001",
        "9007199254740991",
        "9007199254740992",
        "18446744073709551615",
        "18446744073709551616",
        "BLOCK",
        "block",
        "owner",
        "other",
        "HOLD",
        "FREE",
        "SET",
        "GET",
        "DEL",
        "WAIT",
        "MULTI",
        "LEASE.FENCE",
        "LEASE.ACQUIRE",
        &token,
        &long,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .chain([b"\0".to_vec(), b"\xff\xfe".to_vec(), b"a\r\nb".to_vec()])
    .collect();
    let cmds = [
        "LEASE.ACQUIRE",
        "LEASE.RENEW",
        "LEASE.RELEASE",
        "LEASE.RAISE",
        "LEASE.FENCE",
        "LEASE.GET",
        "LEASE.INFO",
        "LEASE.APPLY",
    ];
    let mut rng = Rng(0xfeed_beef);
    let (mut ok, mut err) = (0, 0);
    for i in 0..3000 {
        let cmd = *rng.pick(&cmds);
        let n = (rng.next() % 8) as usize;
        let mut args: Vec<Vec<u8>> = (0..n).map(|_| rng.pick(&vocab).clone()).collect();
        // Never wait forever: a BLOCK gets a 1 ms timeout.
        for j in 0..args.len() {
            if args[j].eq_ignore_ascii_case(b"BLOCK") && j + 1 < args.len() {
                args[j + 1] = b"1".to_vec();
            }
        }
        let mut full: Vec<&[u8]> = vec![cmd.as_bytes()];
        full.extend(args.iter().map(|a| a.as_slice()));
        match try_cmd::<redis::Value>(&mut c, &full) {
            Ok(_) => ok += 1,
            Err(e) => {
                err += 1;
                // Some error replies echo invalid UTF-8 the client cannot parse: reconnect.
                if e.is_io_error() || e.code().is_none() {
                    c = s.connection();
                }
            }
        }
        if i % 200 == 0 {
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            ping(&mut c);
            s.assert_alive();
        }
    }
    println!("random commands: {ok} replies, {err} errors");
    ping(&mut c);
    s.assert_alive();
    assert!(
        !s.stdio().contains("internal error"),
        "a panic was caught: {}",
        s.stdio()
    );
    // Both paths must have been exercised (most random calls are refused by the parser).
    assert!(
        ok >= 50 && err >= 100,
        "the mix must exercise both paths: {ok}/{err}"
    );
}
