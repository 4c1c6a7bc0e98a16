//! The harness command line: asking for help succeeds with the usage, before or after the
//! subcommand; a real mistake still exits 2 with a one-line error.

use std::process::Command;

fn harness(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lease-harness"))
        .args(args)
        .output()
        .expect("run lease-harness");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_exits_zero_with_usage() {
    for args in [
        &["--help"][..],
        &["-h"],
        &["run", "--help"],
        &["run", "--runs", "2", "-h"],
        &["run", "--topology", "quorum3", "--help"],
        &["check", "--help"],
        &["elector", "--help"],
    ] {
        let (code, stdout, stderr) = harness(args);
        assert_eq!(code, 0, "{args:?}: stderr {stderr}");
        assert!(
            stdout.starts_with("usage:") && stdout.contains("lease-harness run --runs N"),
            "{args:?}: {stdout}"
        );
    }
}

#[test]
fn a_typo_still_exits_two() {
    let (code, stdout, stderr) = harness(&["run", "--rnus", "2"]);
    assert_eq!(code, 2, "stdout {stdout}");
    assert!(
        stderr.contains("unexpected argument --rnus"),
        "stderr {stderr}"
    );
}
