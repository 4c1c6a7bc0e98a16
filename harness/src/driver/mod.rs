//! `lease-harness run`: the one campaign driver (issue 26). A campaign is many runs; a run is
//! a backend (the coordination service under test), the resource process, M elector
//! processes each behind its own fault-injecting proxy to every node, faults drawn from the
//! seed until the run's time is up, a graceful stop, and the checker. The topology (replica,
//! Sentinel, quorum of N primaries, etcd, ZooKeeper) and so the backend are values, not separate drivers.
//!
//! - `cli`: the command line, checked once into a [`cli::Config`]; the faults per topology;
//! - `run`: one run (set-up, electors, the leader lookup, the fault loop, the stop);
//! - `faults`: the dispatcher and the faults every backend shares (electors, nodes);
//! - `faults_redis`: replication failovers, `FAILOVER`, `CLIENT PAUSE`, Sentinel;
//! - `faults_netns`: the kernel's network faults of `--netns`;
//! - `backend` (the trait), `backend_redis` (every Redis topology's servers),
//!   `backend_store` (one etcd or ZooKeeper server, for the peer electors of issue 26);
//! - `summary`: faults per kind and `--min-faults` beside the checker's summary line.
//!
//! Every wait is bounded (server start, replica link, process exit); every process and server
//! is ended on every path (the `Drop` impls), SIGCONT first in case a fault left it stopped.

mod backend;
mod backend_redis;
mod backend_store;
mod cli;
mod faults;
mod faults_netns;
mod faults_redis;
mod run;
mod summary;

use crate::args::Args;
use crate::check_one;
use lease_harness::checker::Summary;
use std::process::ExitCode;

pub fn main(args: Args) -> Result<ExitCode, String> {
    let cfg = cli::parse(args)?;
    println!("{}", cfg.header());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut summary = Summary::default();
    // Runs in which no elector was ever granted the lease (a cold JVM on a loaded machine can
    // miss a short run now and then).
    let mut ungranted: Vec<u32> = vec![];
    for run in 0..cfg.runs {
        let dir = cfg.out.join(format!("run-{run:04}"));
        let run_seed = cfg
            .seed
            .wrapping_add(u64::from(run).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        if let Err(e) = rt.block_on(run::run_one(&cfg, run, run_seed, &dir, &summary.faults)) {
            // A run that could not even be set up is not evidence either way: say so loudly
            // and count it as a failure of the campaign.
            return Err(format!("run {run} (seed {run_seed}): {e}"));
        }
        let before = summary.violations;
        if check_one(&dir, true, false, &mut summary)? == 0 {
            ungranted.push(run);
        }
        println!(
            "run-{run:04} seed={run_seed} violations={} ({} runs, {} violations so far)",
            summary.violations - before,
            summary.runs,
            summary.violations
        );
    }
    if !ungranted.is_empty() {
        println!("runs without a grant: {ungranted:?}");
    }
    if ungranted.len() == cfg.runs as usize {
        // No elector ever led: the campaign tested nothing, and its violations=0 would pass
        // electors that cannot even reach the backend (seen: a conformance elector given a
        // redis+sentinel:// URL its adapter does not take).
        return Err(format!(
            "no elector was ever granted the lease in any run: the campaign tested nothing \
             (see the elector logs in {})",
            cfg.out.display()
        ));
    }
    let json = serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?;
    std::fs::write(cfg.out.join("summary.json"), json).map_err(|e| e.to_string())?;
    let line = summary.line();
    std::fs::write(cfg.out.join("summary.txt"), format!("{line}\n")).map_err(|e| e.to_string())?;
    // Before the summary: scripts read the summary as the last line printed.
    println!("faults per kind: {}", summary::faults_per_kind(&summary));
    let short = summary::short_faults(&summary, &cfg.min_faults);
    if !short.is_empty() {
        println!("--min-faults not met: {}", short.join(", "));
    }
    println!("{line}");
    Ok(if summary.violations > 0 {
        ExitCode::from(1)
    } else if !short.is_empty() {
        // Too few faults of a kind: the campaign tested too little to mean anything.
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}
