//! `lease-harness`: one binary, one subcommand per process role.
//!
//! - `run`: the campaign driver (`driver/`: a backend in some topology, resource, electors,
//!   proxies, faults, then the checker). `scripts/chaos` wraps it.
//! - `elector`: one elector process (the client library's election loop + the work loop).
//! - `resource`: the protected resource process.
//! - `check DIR...`: the checker over recorded run folders (exit 1 on any violation).

use lease_harness::checker::{check, RunData, Summary};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

mod args;
mod driver;
mod elector;
mod netns;
mod procs;

use args::Args;

const USAGE: &str = "\
usage:
  lease-harness run --runs N --electors M --seconds S [--fault KIND]... [--seed X] [--out DIR]
                    [--ttl-ms T] [--grace-ms G] [--elector-mode safe|ignore-deadline|reuse-owner] [--no-fence]
                    [--module PATH] [--elector-cmd \"PROGRAM ARGS\"]
                    [--topology replica|sentinel] [--down-after-ms D] [--min-replicas-max-lag S]
                    [--netns] [--elector-clock-rate R [--elector-real-clock]] [--min-faults KIND=N,...]
  lease-harness --help | SUBCOMMAND --help   (this text; exit 0)
  lease-harness check [--svg] [--explain] DIR...   (run folders, or folders of run-* folders;
                                                   --explain prints each stale write's story)
  lease-harness resource --out FILE [--no-fence]
  lease-harness elector --id ID --redis URL --resource ADDR --out FILE --ttl-ms T
                        [--mode safe|ignore-deadline|reuse-owner] [--api run|oneshot|oneshot-twice]
--elector-cmd runs PROGRAM ARGS --id --redis --resource --out --ttl-ms --key --mode for each
elector instead of `lease-harness elector` (any language's elector; docs/conformance.md).
faults: kill pause partition blackhole delay resign restart restart-aof failover clock-jump late-delivery (default: all);
  opt-in: split-brain (needs --min-replicas-max-lag; the grace-sizing experiment, docs/failover.md);
  --netns (root; each elector in its own network namespace behind a veth link; every Redis
  topology: replica, sentinel, quorum1/3/5) adds, and draws by default: loss delay-jitter
  oneway cut-resource heal-delivers;
  --elector-clock-rate R: electors under libfaketime at clock rate R (x1.005 within the drift
  allowance; an --elector-cmd elector also needs --elector-real-clock, its word that it
  records its history on the real clock); --min-faults KIND=N,...: draw the kinds short of N first, exit 3 when the campaign
  still drew fewer (kinds, or the groups crash, partition, handover);
  --topology sentinel (3 Sentinels, primary + 2 replicas, electors via redis+sentinel://):
  kill pause resign sentinel-failover (default: all four)
  lease-harness run --topology quorum1|quorum3|quorum5 [--quorum-control correct|no-unify|minority]
                    [--skew-ms MS] [--node-replicas] [--elector-cmd \"PROGRAM ARGS\"]
                    ... (quorum mode, docs/quorum.md; an external elector gets one --redis per node;
                    faults: kill pause partition split resign node-kill node-restart
                    node-restart-aof node-partition node-pause node-clock-jump node-failover
                    late-delivery (default: all); opt-in: node-split-brain (outside quorum
                    mode's fault model on a bare majority, docs/quorum.md §5.3))
  lease-harness run --backend redis|etcd|zookeeper --elector-cmd \"PROGRAM ARGS\" ...
                    (etcd, zookeeper: one server of that store, for peer electors; they get
                    --redis tcp://...; --topology is Redis's;
                    faults: kill pause partition blackhole delay resign restart restart-aof
                    node-kill node-pause node-partition; the others print why they do not apply)";

fn main() -> ExitCode {
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    // `--help` anywhere (`lease-harness run --help`) prints the usage and succeeds: asking for
    // help is not a mistake, and scripts/chaos passes its arguments through.
    if argv.is_empty() || args::wants_help(&argv) {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let sub = argv.remove(0);
    let args = Args::new(argv);
    let res = match sub.as_str() {
        "run" => driver::main(args),
        "elector" => elector::main(args),
        "resource" => resource_main(args),
        "check" => check_main(args),
        other => Err(format!("unknown subcommand {other}\n{USAGE}")),
    };
    match res {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lease-harness {sub}: {e}");
            ExitCode::from(2)
        }
    }
}

fn resource_main(mut args: Args) -> Result<ExitCode, String> {
    let out = PathBuf::from(args.required("--out")?);
    let fence = !args.flag("--no-fence");
    args.done()?;
    let log = lease_harness::history::JsonlWriter::create(&out)
        .map_err(|e| format!("{}: {e}", out.display()))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        // The orchestrator reads this line to learn where we listen.
        println!("LISTENING {addr}");
        let res = lease_harness::resource::Resource::new(log, fence);
        tokio::select! {
            r = lease_harness::resource::serve(listener, res) => r.map_err(|e| e.to_string()),
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Run folders under `dir`: itself if it holds `run.jsonl`, else its `run-*` children.
pub fn run_dirs(dir: &Path) -> Result<Vec<PathBuf>, String> {
    if dir.join("run.jsonl").exists() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("run.jsonl").exists())
        .collect();
    v.sort();
    if v.is_empty() {
        return Err(format!(
            "{}: no run.jsonl and no run folders",
            dir.display()
        ));
    }
    Ok(v)
}

/// Check one run folder: print its violations, write `report.json` (and the timeline when
/// asked), and add it to the summary; returns the run's number of grants.
pub fn check_one(
    dir: &Path,
    svg: bool,
    explain: bool,
    summary: &mut Summary,
) -> Result<u64, String> {
    let data = RunData::load(dir)?;
    let rep = check(&data);
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("run");
    if explain {
        for s in lease_harness::checker::stale_write_stories(&data) {
            println!("{name}: {s}\n");
        }
    }
    for v in &rep.violations {
        println!("VIOLATION {name} {}: {}", v.kind, v.detail);
    }
    let json = serde_json::to_string_pretty(&rep).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("report.json"), json).map_err(|e| e.to_string())?;
    if svg {
        let title = format!(
            "{name}: {} grants, {} violations",
            rep.grants,
            rep.violations.len()
        );
        std::fs::write(
            dir.join("timeline.svg"),
            lease_harness::svg::timeline(&data, &title),
        )
        .map_err(|e| e.to_string())?;
    }
    summary.add(&rep);
    Ok(rep.grants)
}

fn check_main(mut args: Args) -> Result<ExitCode, String> {
    let svg = args.flag("--svg");
    let explain = args.flag("--explain");
    let dirs = args.positional()?;
    if dirs.is_empty() {
        return Err("check needs at least one folder".into());
    }
    let mut summary = Summary::default();
    for d in dirs {
        for run in run_dirs(Path::new(&d))? {
            check_one(&run, svg, explain, &mut summary)?;
        }
    }
    println!("{}", summary.line());
    Ok(if summary.violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::USAGE;

    /// Every option the usage names is one a parser takes (`args.flag("--x")`,
    /// `args.value("--x")`, ...): the usage once listed an option nothing parsed.
    #[test]
    fn every_usage_option_is_parsed() {
        let parsers = [
            include_str!("main.rs"),
            include_str!("driver/cli.rs"),
            include_str!("elector.rs"),
        ]
        .concat();
        let mut options: Vec<&str> = USAGE
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|w| w.starts_with("--") && w.len() > 2)
            .collect();
        options.sort_unstable();
        options.dedup();
        assert!(options.len() > 20, "usage options found: {options:?}");
        let unparsed: Vec<&str> = options
            .into_iter()
            .filter(|o| *o != "--help")
            .filter(|o| {
                !parsers.contains(&format!("\"{o}\")")) && !parsers.contains(&format!("\"{o}\","))
            })
            .collect();
        assert_eq!(
            unparsed,
            Vec::<&str>::new(),
            "named in USAGE, parsed nowhere"
        );
    }
}
