"""What every step needs: the repository root, subprocess helpers, the machine description and
the parsers of the values tools print."""

from __future__ import annotations

import os
import re
import subprocess
from typing import Union

# scripts/leaseevidence/common.py -> the repository root.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A figure's value: a number, a verbatim line, or None when a tool did not report it.
Value = Union[int, float, str, None]


class StepFailed(Exception):
    """A step could not run (a tool exited with an error): exit status 2, no results file."""


def sh(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, text=True, capture_output=True)


def first_line(cmd: list[str]) -> str:
    try:
        r = sh(cmd)
        return (r.stdout or r.stderr).strip().splitlines()[0]
    except (OSError, IndexError):
        return "not found"


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def machine() -> dict[str, Value]:
    mem_kb = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "kernel": os.uname().release,
        "load_at_start": loadavg(),
    }


def servers() -> dict[str, str]:
    out = {"redis-server (Debian)": first_line(["redis-server", "--version"])}
    newer = sh(["scripts/newer-redis-server"]).stdout.strip()
    if newer:
        out["redis-server (newer)"] = first_line([newer, "--version"])
    return out


def parse_duration_ms(s: str) -> float:
    """`113.2µs`, `1.4ms`, `2s`, `850ns` (Rust Debug of a Duration) -> ms."""
    m = re.fullmatch(r"([0-9.]+)(ns|µs|us|ms|s)", s)
    if not m:
        raise ValueError(s)
    scale = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1000.0}[m.group(2)]
    return float(m.group(1)) * scale


def summary_fields(line: str) -> dict[str, Value]:
    """`runs=2 violations=0 handover_p50_ms=1.9` -> {"runs": 2, ...}; non-numbers stay text."""
    out: dict[str, Value] = {}
    for kv in line.split():
        if "=" in kv:
            k, v = kv.split("=", 1)
            try:
                out[k] = float(v) if "." in v else int(v)
            except ValueError:
                out[k] = v
    return out


def number(v: Value) -> float | None:
    """A figure as a number, None when it is missing or text."""
    return float(v) if isinstance(v, (int, float)) else None
