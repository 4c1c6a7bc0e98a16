//! Containment: how the watchdog makes sure that *every* process the command starts ends with
//! the lease, whatever process group or session it moves to (`setsid worker &`, Python's
//! `start_new_session=True`, `setpgid`, a daemonizer). Killing CMD's process group is not
//! enough: any of those leaves the group, and such a worker would go on writing with the old
//! token beside the next leader's.
//!
//! Two mechanisms, the strongest one the system allows (`--containment auto`):
//!
//! - **`pidns`**: the watchdog runs CMD under a small init (`lease-init`) that is PID 1 of a
//!   new PID namespace. No process can leave a PID namespace. When its init dies the kernel
//!   SIGKILLs every process in it, and the init has SIGKILL as its parent-death signal, so the
//!   whole tree dies with the watchdog — even when both lease-run processes are SIGKILLed at
//!   once. The init also reaps the orphans (no zombies under a lease-run that is PID 1).
//!   Needs CAP_SYS_ADMIN (root, or a container that grants it). The command then sees
//!   namespace PIDs (`$$` is small); `/proc` still shows the host's.
//! - **`subreaper`**: the watchdog marks itself a child subreaper
//!   (`PR_SET_CHILD_SUBREAPER`), so every orphaned descendant is re-parented to it instead of
//!   to init; it signals the whole tree it finds under itself in `/proc` (any group, any
//!   session), and only exits once it has reaped every descendant. Works unprivileged, but
//!   only while the watchdog lives: if the watchdog itself is SIGKILLed, descendants outside
//!   CMD's process group escape (lease-run then keeps the lease until it expires on the
//!   server, instead of releasing it, see `main.rs`).
//!
//! A cgroup (`cgroup.kill`) would also contain the tree, but needs a living process to write
//! to it; the PID namespace needs none, so it is the one used where privileges allow.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, SigHandler, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::sys;

/// The argument that makes `lease-run` act as the namespace's init.
pub const INIT_ARG: &str = "__lease-run-init";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    PidNs,
    Subreaper,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::PidNs => "pidns",
            Mode::Subreaper => "subreaper",
        }
    }
}

/// Which containment was asked for on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Wanted {
    /// The PID namespace where the system allows it, else the subreaper.
    Auto,
    /// The PID namespace, or refuse to run the command.
    Pidns,
    /// The subreaper (keeps host PIDs for the command).
    Subreaper,
}

impl Wanted {
    pub fn arg(self) -> &'static str {
        match self {
            Wanted::Auto => "auto",
            Wanted::Pidns => "pidns",
            Wanted::Subreaper => "subreaper",
        }
    }
    pub fn parse(s: &str) -> Option<Wanted> {
        match s {
            "auto" => Some(Wanted::Auto),
            "pidns" => Some(Wanted::Pidns),
            "subreaper" => Some(Wanted::Subreaper),
            _ => None,
        }
    }
}

/// Can this process create a PID namespace? Asked in a throwaway child (a process that has
/// called `unshare(CLONE_NEWPID)` can no longer start threads, and the watchdog needs them).
fn can_create_pid_namespace() -> bool {
    // SAFETY: called from the watchdog's main before it starts any thread, so the process is
    // single-threaded and fork() is sound; the child only calls unshare and _exit, both
    // async-signal-safe, and never returns into Rust code.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            let ok = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWPID).is_ok();
            // SAFETY: _exit ends the child at once, without running atexit handlers or
            // destructors that belong to the parent's state.
            unsafe { nix::libc::_exit(if ok { 0 } else { 1 }) }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            matches!(waitpid(child, None), Ok(WaitStatus::Exited(_, 0)))
        }
        Err(_) => false,
    }
}

/// Called by the watchdog before it starts any thread. The watchdog is a child subreaper in
/// every mode: whatever is orphaned under it comes back to it (in pidns mode only the
/// namespace's init could, if its parent died first).
pub fn enter(wanted: Wanted) -> Result<Mode, String> {
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| format!("cannot become a child subreaper: {e}"))?;
    if wanted == Wanted::Subreaper {
        return Ok(Mode::Subreaper);
    }
    if can_create_pid_namespace() {
        return Ok(Mode::PidNs);
    }
    if wanted == Wanted::Pidns {
        return Err("--containment pidns: this process may not create a PID namespace (needs CAP_SYS_ADMIN)".into());
    }
    Ok(Mode::Subreaper)
}

/// `(pid, ppid)` of every process in `/proc`.
fn parents() -> HashMap<i32, i32> {
    let mut map = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return map;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(ppid) = stat_field(pid, 1).and_then(|s| s.parse().ok()) {
            map.insert(pid, ppid);
        }
    }
    map
}

/// Field `n` (0 = state) after the command name of `/proc/PID/stat`.
fn stat_field(pid: i32, n: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name may contain spaces and ')': everything after the last ')' is fields.
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(n).map(str::to_string)
}

/// Does any live (not zombie) process belong to process group `pgid`? In pidns mode the group
/// of lease-init holds lease-init and the namespace's init, whose exit the kernel completes
/// only after every other process of the namespace has ended.
pub fn group_alive(pgid: i32) -> bool {
    if pgid <= 1 {
        return false;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return true; // cannot tell: not confirmed
    };
    dir.flatten().any(|entry| {
        entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
            .is_some_and(|pid| {
                stat_field(pid, 2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid)
                    && stat_field(pid, 0).is_some_and(|s| s != "Z")
            })
    })
}

/// Zombie children of `parent`.
pub fn zombie_children(parent: i32) -> Vec<i32> {
    parents()
        .into_iter()
        .filter(|&(pid, ppid)| ppid == parent && stat_field(pid, 0).as_deref() == Some("Z"))
        .map(|(pid, _)| pid)
        .collect()
}

/// Every descendant of `root` (not `root` itself), whatever its group or session.
pub fn descendants(root: i32) -> Vec<i32> {
    let map = parents();
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (&pid, &ppid) in &map {
        children.entry(ppid).or_default().push(pid);
    }
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
            if seen.insert(c) {
                out.push(c);
                todo.push(c);
            }
        }
    }
    out
}

/// Signal everything the command runs as. `pid` is CMD's (subreaper) or lease-init's (pidns),
/// each in its own process group.
pub fn signal(mode: Mode, pid: i32, sig: Signal) {
    // pidns: lease-init forwards catchable signals to its namespace's init, which sends them
    // to every process of the namespace; SIGKILL of lease-init kills the namespace's init by
    // its parent-death signal, and with it the namespace.
    sys::killpg(pid, sig);
    if mode == Mode::Subreaper || sig == Signal::SIGKILL {
        for d in descendants(std::process::id() as i32) {
            let _ = kill(Pid::from_raw(d), sig);
        }
    }
}

/// Reap until no child is left, SIGKILLing what remains once CMD (`cmd`, or lease-init) has
/// exited. Returns its exit code. Why wait for all: the watchdog's exit is what tells
/// lease-run that nothing of the command runs any more (and may be released).
pub fn reap_all(cmd: i32) -> i32 {
    let mut code: Option<i32> = None;
    loop {
        if code.is_some() {
            signal(Mode::Subreaper, cmd, Signal::SIGKILL);
        }
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(p, c)) if p.as_raw() == cmd => code = Some(c),
            Ok(WaitStatus::Signaled(p, s, _)) if p.as_raw() == cmd => code = Some(128 + s as i32),
            Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_millis(5)),
            Ok(_) => {}
            Err(Errno::EINTR) => {}
            Err(_) => return code.unwrap_or(1), // ECHILD: nothing left
        }
    }
}

static PENDING: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn note_signal(sig: nix::libc::c_int) {
    PENDING.store(sig, std::sync::atomic::Ordering::SeqCst);
}

const FORWARD: [Signal; 6] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

fn take_pending() -> Option<Signal> {
    match PENDING.swap(0, std::sync::atomic::Ordering::SeqCst) {
        0 => None,
        s => Signal::try_from(s).ok(),
    }
}

/// `lease-run __lease-run-init -- CMD ARGS...` (named `lease-init`), started by the watchdog
/// in pidns mode. Single-threaded by construction (it starts no thread), so it may
/// `unshare(CLONE_NEWPID)` and then fork: the fork is PID 1 of the new namespace and runs
/// [`ns_init`]; this process forwards signals to it and exits with its code.
pub fn init_main(args: Vec<OsString>) -> ! {
    sys::set_process_name("lease-init");
    if args.get(1).is_none() {
        eprintln!("lease-run init: no command");
        std::process::exit(1);
    }
    for sig in FORWARD {
        sys::set_handler(sig, SigHandler::Handler(note_signal));
    }
    if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWPID) {
        eprintln!("lease-run: cannot create a PID namespace: {e}");
        std::process::exit(126);
    }
    // SAFETY: this process never started a thread (see above), so fork() is sound; the child
    // goes on in ns_init, which only uses std and nix calls that are fine after a fork of a
    // single-threaded process.
    let ns_pid = match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => ns_init(&args[1..]),
        Ok(nix::unistd::ForkResult::Parent { child }) => child,
        Err(e) => {
            eprintln!("lease-run: cannot start the namespace's init: {e}");
            std::process::exit(126);
        }
    };
    loop {
        if let Some(s) = take_pending() {
            let _ = kill(ns_pid, s);
        }
        match waitpid(ns_pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, c)) => std::process::exit(c),
            Ok(WaitStatus::Signaled(_, s, _)) => std::process::exit(128 + s as i32),
            Ok(_) | Err(Errno::EINTR) => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => std::process::exit(1),
        }
    }
}

/// PID 1 of the command's namespace. Starts CMD, forwards SIGTERM/SIGINT/SIGHUP/SIGQUIT/
/// SIGUSR1/SIGUSR2 to every process of the namespace (not only CMD's group: a worker in its
/// own session must get the graceful stop too), reaps every orphan, and exits with CMD's code
/// once CMD has exited and the rest is killed; the kernel kills whatever remains when it exits.
fn ns_init(cmd_args: &[OsString]) -> ! {
    // Why: if lease-init dies (SIGKILL, or its own parent-death signal when the watchdog
    // dies), this init must die too, and the kernel then kills the whole namespace.
    if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err() {
        std::process::exit(126);
    }
    let mut cmd = std::process::Command::new(&cmd_args[0]);
    cmd.args(&cmd_args[1..]);
    sys::prepare_grandchild(&mut cmd);
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("lease-run: cannot run {:?}: {e}", cmd_args[0]);
            std::process::exit(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            });
        }
    };
    let cmd_pid = child.id() as i32;
    let mut code: Option<i32> = None;
    let mut killed_at: Option<Instant> = None;
    loop {
        if let Some(s) = take_pending() {
            // kill(-1) from a namespace's init: every process of the namespace but us.
            let _ = kill(Pid::from_raw(-1), s);
        }
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(p, c)) if p.as_raw() == cmd_pid => code = Some(c),
            Ok(WaitStatus::Signaled(p, s, _)) if p.as_raw() == cmd_pid => {
                code = Some(128 + s as i32)
            }
            Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_millis(5)),
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => std::process::exit(code.unwrap_or(1)),
        }
        if let Some(c) = code {
            // CMD is done: nothing else of it may run on. Our own exit would kill the rest
            // too; killing and reaping first makes the exit code mean "all gone".
            let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
            let t = *killed_at.get_or_insert_with(Instant::now);
            if t.elapsed() > Duration::from_secs(1) {
                std::process::exit(c);
            }
        }
    }
}
