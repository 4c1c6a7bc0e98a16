//! The watchdog: a second `lease-run` process (`lease-run __lease-run-watchdog ...`) that owns
//! the command. It exists because a paused elector (SIGSTOP, a frozen VM, swap storm) cannot
//! stop anything: the watchdog keeps the command's deadline on CLOCK_MONOTONIC and kills the
//! command and everything it started (contain.rs) on time even if the elector never runs again.
//! It names itself `lease-watchdog`, so that `killall lease-run` does not reach it.
//!
//! ```text
//! lease-run (elector) --socket--> lease-watchdog (own pgrp, ignores INT/TERM/HUP/TSTP)
//!     --> lease-init (PID 1 of a new PID namespace, PDEATHSIG=KILL) --> CMD (own pgrp)   [pidns]
//!     --> CMD (own pgrp, PDEATHSIG=KILL), the watchdog a child subreaper                [subreaper]
//! ```
//!
//! Protocol on the control socket (the watchdog's fd 0, one end of a Unix socket pair; the
//! other end stays in the elector), one line each, times are absolute CLOCK_MONOTONIC ns:
//! - `D <term_ns> <kill_ns>`: new schedule (after a renewal): SIGTERM the group at
//!   `term_ns`, SIGKILL it at `kill_ns`.
//! - `S <kill_ns> [signo]`: stop now: signal `signo` (default SIGTERM) now, SIGKILL at
//!   `kill_ns`.
//! - end of file (the elector died, even by SIGKILL): SIGKILL the group now.
//!
//! On the same socket it reports `pid <n>` once CMD runs and `fired term|kill` when it acts on its own
//! schedule (the elector then knows the stop was a deadline stop). It exits with CMD's exit
//! code (128+N if CMD died of signal N) after killing whatever CMD left in its group; 127/126
//! if CMD cannot be started.

use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::{contain, sys};

pub const ARG: &str = "__lease-run-watchdog";

struct Sched {
    term_ns: u64,
    kill_ns: u64,
    termed: bool,
    killed: bool,
}

/// Report to the elector over the control socket (our fd 0, a Unix socket pair end, so it is
/// bidirectional). Not stdout: CMD inherits our stdout/stderr, which are lease-run's.
fn say(line: &str) {
    static REPORT: std::sync::OnceLock<Option<Mutex<std::fs::File>>> = std::sync::OnceLock::new();
    let report = REPORT.get_or_init(|| {
        use std::os::fd::AsFd;
        // A CLOEXEC duplicate of fd 0: CMD does not inherit it.
        let fd = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
        Some(Mutex::new(std::fs::File::from(fd)))
    });
    if let Some(f) = report {
        let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(f, "{line}");
        let _ = f.flush();
    }
}

pub fn exit_code(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    }
}

/// `args` = everything after `ARG`: `<term_ns> <kill_ns> <containment> -- CMD ARGS...`.
pub fn main(args: Vec<OsString>) -> ! {
    sys::set_process_name("lease-watchdog");
    sys::watchdog_ignore_signals();
    let parse = |i: usize| {
        args.get(i)
            .and_then(|a| a.to_str())
            .and_then(|s| s.parse::<u64>().ok())
    };
    let (Some(term_ns), Some(kill_ns)) = (parse(0), parse(1)) else {
        eprintln!("lease-run watchdog: bad arguments");
        std::process::exit(1);
    };
    let Some(wanted) = args
        .get(2)
        .and_then(|a| a.to_str())
        .and_then(contain::Wanted::parse)
    else {
        eprintln!("lease-run watchdog: bad containment argument");
        std::process::exit(1);
    };
    let Some(program) = args.get(4) else {
        eprintln!("lease-run watchdog: no command");
        std::process::exit(1);
    };
    // Before any thread exists: the namespace (if any) applies to the next child we start.
    let mode = match contain::enter(wanted) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("lease-run: {e}");
            std::process::exit(126);
        }
    };
    say(&format!("containment {}", mode.name()));
    let mut cmd = match mode {
        contain::Mode::PidNs => {
            let exe = std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into());
            let mut c = std::process::Command::new(exe);
            std::os::unix::process::CommandExt::arg0(&mut c, "lease-init");
            c.arg(contain::INIT_ARG)
                .arg("--")
                .arg(program)
                .args(&args[5..]);
            c
        }
        contain::Mode::Subreaper => {
            let mut c = std::process::Command::new(program);
            c.args(&args[5..]);
            c
        }
    };
    cmd.stdin(std::process::Stdio::null());
    let parent = (mode == contain::Mode::Subreaper).then(nix::unistd::getpid);
    sys::prepare_child(&mut cmd, parent);
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("lease-run: cannot run {program:?}: {e}");
            std::process::exit(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            });
        }
    };
    // CMD's pid and process group (subreaper), or the namespace init's (pidns): what every
    // signal below is aimed at, through `contain::signal`.
    let pgid = child.id() as i32;
    say(&format!("pid {pgid}"));

    let state = Arc::new((
        Mutex::new(Sched {
            term_ns,
            kill_ns,
            termed: false,
            killed: false,
        }),
        Condvar::new(),
    ));

    // Reader: schedule updates from the elector; EOF means the elector is gone.
    let st = state.clone();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            let f: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect();
            let mut s = st.0.lock().unwrap_or_else(|p| p.into_inner());
            match (line.chars().next(), f.as_slice()) {
                (Some('D'), [t, k]) => {
                    s.term_ns = *t;
                    s.kill_ns = *k;
                }
                (Some('S'), [k, rest @ ..]) => {
                    s.term_ns = 0;
                    s.kill_ns = s.kill_ns.min(*k);
                    // An explicit stop is not a deadline firing: do not report it as one.
                    // The stop signal is SIGTERM unless the elector forwards another one
                    // (the operator's SIGINT).
                    if !s.termed {
                        let sig = rest
                            .first()
                            .and_then(|n| Signal::try_from(*n as i32).ok())
                            .unwrap_or(Signal::SIGTERM);
                        contain::signal(mode, pgid, sig);
                        s.termed = true;
                    }
                }
                _ => {}
            }
            st.1.notify_all();
        }
        let mut s = st.0.lock().unwrap_or_else(|p| p.into_inner());
        // Why: without the elector nobody renews the lease; the command must not outlive it.
        s.kill_ns = 0;
        st.1.notify_all();
    });

    // Waiter: CMD's exit ends the watchdog, after ending everything else it started (a
    // shell's background children, workers in their own sessions: none may keep running
    // unsupervised, consul lock's bug #2022). Our exit code therefore means "all gone".
    std::thread::spawn(move || {
        // We reap every adopted orphan ourselves (not `child.wait()`, which would lose the
        // child's status to the reaping loop). In pidns mode lease-init exits only after its
        // namespace is empty.
        let code = {
            drop(child);
            contain::reap_all(pgid)
        };
        std::process::exit(code);
    });

    let (lock, cv) = &*state;
    let mut s = lock.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let now = sys::mono_now_ns();
        if now >= s.kill_ns {
            // Re-sent every 200 ms until the waiter thread exits the process (SIGKILL cannot
            // be ignored, but a process may be in the middle of forking a new member).
            // Say it first: once the group is dead the waiter thread exits the process.
            if !s.killed {
                s.killed = true;
                say("fired kill");
            }
            contain::signal(mode, pgid, Signal::SIGKILL);
        } else if !s.termed && now >= s.term_ns {
            s.termed = true;
            say("fired term");
            contain::signal(mode, pgid, Signal::SIGTERM);
        }
        let next = if now >= s.kill_ns {
            now + sys::ns(Duration::from_millis(200))
        } else if s.termed {
            s.kill_ns
        } else {
            s.term_ns.min(s.kill_ns)
        };
        let wait = Duration::from_nanos(next.saturating_sub(now)).max(Duration::from_micros(100));
        s = cv
            .wait_timeout(s, wait)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
}
