//! Process plumbing of `lease-run`. All `unsafe` of the binary is in this file, each block
//! with the reason it is sound. Everything else uses safe `nix`/std calls.

use std::os::unix::process::CommandExt;
use std::time::Duration;

use nix::sys::signal::{killpg as nix_killpg, SigHandler, Signal};
use nix::time::{clock_gettime, ClockId};
use nix::unistd::Pid;
use tokio::time::Instant;

/// CLOCK_MONOTONIC now, in ns. The same clock in every process on this machine (and the
/// clock behind `std::time::Instant` on Linux), so the elector can hand absolute deadlines to
/// the watchdog process.
pub fn mono_now_ns() -> u64 {
    match clock_gettime(ClockId::CLOCK_MONOTONIC) {
        Ok(ts) => (ts.tv_sec() as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(ts.tv_nsec() as u64),
        // CLOCK_MONOTONIC cannot fail on Linux; 0 makes every deadline "already passed",
        // which is the safe direction.
        Err(_) => 0,
    }
}

/// The CLOCK_MONOTONIC value of a tokio `Instant`. Why this order: the monotonic clock is
/// read *before* `Instant::now()`, so any delay between the two reads makes the result
/// earlier, never later, than the true value; a watchdog deadline can only move earlier.
pub fn mono_ns_of(at: Instant) -> u64 {
    let mono = mono_now_ns();
    let now = Instant::now();
    if at >= now {
        mono.saturating_add((at - now).as_nanos() as u64)
    } else {
        mono.saturating_sub((now - at).as_nanos() as u64)
    }
}

pub fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// Signal a whole process group. Errors (group already gone) are ignored by design.
pub fn killpg(pgid: i32, sig: Signal) {
    if pgid > 1 {
        let _ = nix_killpg(Pid::from_raw(pgid), sig);
    }
}

/// The watchdog ignores the job-control and termination signals a terminal or a careless
/// `kill` sends to it: only its parent (through the pipe) or SIGKILL stop it, so it can always
/// finish its one job, killing the command's process group.
pub fn watchdog_ignore_signals() {
    for sig in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGTSTP,
        Signal::SIGTTIN,
        Signal::SIGTTOU,
    ] {
        // SAFETY: installing SIG_IGN runs no handler code, so no async-signal-safety or
        // reentrancy question arises; it only changes this process's disposition.
        unsafe {
            let _ = nix::sys::signal::signal(sig, SigHandler::SigIgn);
        }
    }
}

/// Prepare the command the watchdog runs: its own process group (so one `killpg` reaches
/// everything it starts, e.g. children behind a shell), SIGKILL when the watchdog dies, and
/// default signal dispositions (the watchdog's SIG_IGN would otherwise be inherited).
/// `parent`: the watchdog's pid, checked after the prctl; `None` for the namespace init, whose
/// parent is outside its namespace (getppid() is 0 there): if the watchdog died in that
/// window, lease-run itself SIGKILLs the init's group when it sees the watchdog gone.
pub fn prepare_child(cmd: &mut std::process::Command, parent: Option<Pid>) {
    cmd.process_group(0);
    // SAFETY: the closure runs in the forked child before exec. It only makes
    // async-signal-safe system calls (prctl, getppid, sigaction with SIG_DFL) and allocates
    // nothing (the error is built from a raw errno).
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
                .map_err(|e| std::io::Error::from_raw_os_error(e as i32))?;
            // Why: if the parent died between fork and prctl, the death signal will never
            // come; refuse to run an orphan.
            if parent.is_some_and(|p| nix::unistd::getppid() != p) {
                return Err(std::io::Error::from_raw_os_error(nix::libc::ESRCH));
            }
            for sig in [
                Signal::SIGINT,
                Signal::SIGTERM,
                Signal::SIGHUP,
                Signal::SIGTSTP,
                Signal::SIGTTIN,
                Signal::SIGTTOU,
            ] {
                let _ = nix::sys::signal::signal(sig, SigHandler::SigDfl);
            }
            Ok(())
        });
    }
}

/// Name this process (`/proc/PID/comm`, what `killall`, `pkill` and `top` match), so that
/// `killall -9 lease-run` or `pkill -STOP lease-run` aimed at the elector does not also hit
/// the watchdog that exists to outlive the elector's failures.
pub fn set_process_name(name: &str) {
    if let Ok(c) = std::ffi::CString::new(name) {
        let _ = nix::sys::prctl::set_name(&c);
    }
}

/// Install a signal handler (the namespace init's forwarding handlers).
pub fn set_handler(sig: Signal, handler: SigHandler) {
    let action = nix::sys::signal::SigAction::new(
        handler,
        nix::sys::signal::SaFlags::empty(),
        nix::sys::signal::SigSet::empty(),
    );
    // SAFETY: the only handler installed through this is `contain::note_signal`, which does
    // one atomic store: async-signal-safe, no allocation, no lock.
    unsafe {
        let _ = nix::sys::signal::sigaction(sig, &action);
    }
}

/// The command under the namespace init: its own process group (terminal-style job control
/// inside works as before). Signal handlers are reset by exec; nothing is ignored in the init.
pub fn prepare_grandchild(cmd: &mut std::process::Command) {
    cmd.process_group(0);
}
