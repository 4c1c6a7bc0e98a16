"""What a harness campaign (`scripts/chaos`, `scripts/conformance`) leaves behind, read as
data: its output folder's `summary.json` (runs, violations) and each run's `report.json`
(every violation with its rule), and the one-line summary it prints last (the latency
percentiles: `summary.json` holds only the raw samples, and the percentile definition is the
checker's, so it is read, not re-implemented here)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from leaseevidence.common import ROOT, StepFailed, Value, summary_fields

# The checker's rules (harness/src/checker.rs); each is reported, 0 when it never fired.
RULES = ["overlap", "token_regression", "stale_accepted", "token_order", "duplicate_token", "orphan_write"]


@dataclass
class Campaign:
    """One finished campaign."""

    returncode: int
    line: str  # the printed one-line summary, `runs=… violations=… …`
    fields: dict[str, Value]  # the line's fields
    runs: int  # from summary.json
    violations: int  # from summary.json
    rules: dict[str, int] = field(default_factory=dict)  # violations by rule, every RULES key


def out_dir(stdout: str) -> str | None:
    """The folder the harness wrote, from its header line `chaos: … out=DIR` (always last)."""
    for line in stdout.splitlines():
        if line.startswith("chaos: ") and " out=" in line:
            return line.split(" out=", 1)[1].strip()
    return None


def load_json(path: str) -> Any:
    with open(path) as fh:
        return json.load(fh)


def violation_rules(reports: list[Any]) -> dict[str, int]:
    """Each run's `report.json` -> {rule: count}, every rule of RULES included."""
    out = {r: 0 for r in RULES}
    for rep in reports:
        for v in rep.get("violations", []):
            kind = str(v.get("kind", "unknown"))
            out[kind] = out.get(kind, 0) + 1
    return out


def read_campaign(stdout: str, returncode: int, what: str) -> Campaign:
    """A campaign's results; StepFailed when it did not finish (no summary line or files)."""
    lines = stdout.strip().splitlines()
    last = lines[-1] if lines else ""
    d = out_dir(stdout)
    if not last.startswith("runs=") or d is None:
        raise StepFailed(f"{what} exited {returncode} without a summary: {stdout[-1500:]}")
    d = os.path.join(ROOT, d)  # an absolute DIR stays as it is
    try:
        summary = load_json(os.path.join(d, "summary.json"))
        runs, violations = int(summary["runs"]), int(summary["violations"])
        reports = [load_json(os.path.join(d, f"run-{i:04}", "report.json")) for i in range(runs)]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise StepFailed(f"{what}: cannot read its results in {d}: {e}") from e
    fields = summary_fields(last)
    # The line and the file are written from the same summary; if they disagree, neither is
    # evidence.
    if fields.get("runs") != runs or fields.get("violations") != violations:
        raise StepFailed(f"{what}: {d}/summary.json says runs={runs} violations={violations}, "
                         f"its last line {last!r}")
    rules = violation_rules(reports)
    if sum(rules.values()) != violations:
        raise StepFailed(f"{what}: the run reports hold {sum(rules.values())} violations, "
                         f"summary.json {violations}")
    return Campaign(returncode, last, fields, runs, violations, rules)
