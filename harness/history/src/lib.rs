//! Record formats. Every process appends JSON lines to its own file in the run folder and
//! flushes each line, so a `kill -9` loses at most the line being written.
//!
//! Files of one run folder:
//! - `run.jsonl`: the orchestrator (run parameters, faults, Redis up/down);
//! - `resource.jsonl`: the protected resource, one line per write it decided on, in the
//!   order it decided (that order is the resource's truth);
//! - `elector-<slot>.<incarnation>.jsonl`: one per elector process.

use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

/// One line of an elector's history. `t` is `CLOCK_MONOTONIC` ns.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum ElectorEvent {
    Start {
        t: u64,
        elector: String,
        pid: u32,
        owner: String,
        mode: String,
    },
    /// The library handed us leadership: the task started with `token`; `deadline` is the
    /// library's local deadline on the shared clock. `call`: the one-shot API call (a number
    /// the elector gives each call, unique in its process) whose body this reign runs; absent
    /// for `run()`-style electors. The checker's `reigns_per_call` allows one reign per call.
    Grant {
        t: u64,
        token: u64,
        deadline: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call: Option<u64>,
    },
    /// About to write: the decision "I am leader and act now" was taken at `t`, when the
    /// library's local deadline for this token was `deadline` (0 = the library no longer
    /// reports one: only an unsafe elector acts then).
    Check {
        t: u64,
        token: u64,
        seq: u64,
        #[serde(default)]
        deadline: u64,
    },
    /// The resource's answer to write `seq`.
    Ack {
        t: u64,
        token: u64,
        seq: u64,
        ok: bool,
    },
    /// The task returned (stopped acting) for this token.
    Stop {
        t: u64,
        token: u64,
        why: String,
    },
    /// SIGTERM received; graceful resign begins.
    Resign {
        t: u64,
    },
    Exit {
        t: u64,
        why: String,
    },
}

/// One line of the resource's history: a write it accepted or rejected.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ResourceWrite {
    pub t: u64,
    pub writer: String,
    pub token: u64,
    pub seq: u64,
    pub accepted: bool,
    /// Highest token accepted before this write.
    pub highest: u64,
}

/// One line of the orchestrator's history.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum RunEvent {
    RunStart {
        t: u64,
        run: u32,
        seed: u64,
        electors: u32,
        ttl_ms: u64,
        grace_ms: u64,
        seconds: u64,
        elector_mode: String,
        fence: bool,
    },
    /// A fault from `t` to `t_end` (equal for instantaneous ones). `target` is an elector id
    /// or a server role; `skipped` says why a fault could not be injected (no leader,
    /// missing binary...).
    Fault {
        kind: String,
        t: u64,
        t_end: u64,
        target: String,
        detail: String,
        skipped: Option<String>,
    },
    /// Redis answered again after a restart or a promotion (grace starts about now).
    RedisUp {
        t: u64,
        why: String,
    },
    RunEnd {
        t: u64,
    },
}

/// Append-only JSON-lines writer that flushes every line.
pub struct JsonlWriter {
    file: File,
}

impl JsonlWriter {
    pub fn create(path: &Path) -> std::io::Result<JsonlWriter> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(JsonlWriter { file })
    }

    pub fn write<T: Serialize>(&mut self, v: &T) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(v).map_err(std::io::Error::other)?;
        line.push(b'\n');
        // One write(2) per line with O_APPEND: a line is never interleaved or half-written
        // unless the process dies inside the call.
        self.file.write_all(&line)
    }
}

/// Reads a JSON-lines file. A torn last line (the writer was killed mid-write) is skipped;
/// any other unparsable line is an error, because silently dropping history would hide
/// exactly the events the checker is for.
pub fn read_jsonl<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>, String> {
    let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let lines: Vec<String> = BufReader::new(f)
        .lines()
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = Vec::with_capacity(lines.len());
    let n = lines.len();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(v) => out.push(v),
            Err(_) if i + 1 == n => {} // torn last line
            Err(e) => return Err(format!("{}:{}: {e}", path.display(), i + 1)),
        }
    }
    Ok(out)
}
