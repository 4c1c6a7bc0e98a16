"""Regenerate every published figure in one run, stamped with its commit.

    scripts/evidence            full run (a release's evidence; about an hour on the 2-core machine,
                                plus the long campaigns: about 20 minutes per language, root)
    scripts/evidence --quick    CI size (a few minutes): checks the figures are produced and
                                plausible, with loose latency bounds
    options: --out DIR (default docs/results), --skip-bench, --langs rust,python,...,
             --steps a,b (a subset; the file name then ends in the steps),
             --combine A.json B.json [--label L] (one file from subsets run at the same commit),
             --update-docs BASE / --check-docs (figures marked in the docs, see below)

Writes DIR/<date>-<commit>[-quick][-steps].json with every figure and the command that
produced it, and the same as a Markdown table (.md). README and docs quote figures from such
a file and name it. EVIDENCE_SMOKE=1 shrinks every campaign to one 8 s run (testing this
script; such figures are not meaningful).

Exit status: 0 all produced and plausible, 1 a figure missing, implausible, a safety
violation or a negative control not caught, 2 a step failed to run.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
from typing import Any

from leaseevidence import docs, results
from leaseevidence.common import ROOT, StepFailed, loadavg, machine, servers, sh
from leaseevidence.steps import ALL_STEPS, BY_NAME, QUICK_STEPS, STEPS, Evidence


def step_list() -> str:
    """The steps for --help, from the table: name, where it runs, what it measures."""
    rows = []
    for s in STEPS:
        where = "full, quick" if s.quick else "full" if s.full else "only when named"
        doc = " ".join((s.run.__doc__ or "").split())
        rows.append(f"  {s.name:<12} ({where}) {doc}")
    return "Steps, in order:\n" + "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/evidence", description=__doc__, epilog=step_list(),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "results"))
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--langs", default="rust,python,go,node,java")
    ap.add_argument("--steps", default="",
                    help="comma-separated subset of: " + ",".join(BY_NAME) + " "
                    "(default: all but quorum_long; the results file name then ends in the steps)")
    ap.add_argument("--label", default="",
                    help="with --steps or --combine: the file name's ending instead of the steps")
    ap.add_argument("--combine", nargs="+", metavar="JSON",
                    help="merge results files of one commit into one (no step is run)")
    ap.add_argument("--update-docs", metavar="BASE",
                    help="make docs/results/BASE current and rewrite every marked figure in the docs")
    ap.add_argument("--check-docs", action="store_true",
                    help="fail if a marked figure in the docs differs from its results file")
    a = ap.parse_args(argv)
    if a.combine:
        return results.combine(a.combine, a.out, a.label)
    if a.update_docs or a.check_docs:
        if a.update_docs:
            base = os.path.basename(a.update_docs)
            base = base[:-5] if base.endswith(".json") else base[:-3] if base.endswith(".md") else base
            if not os.path.exists(os.path.join(ROOT, "docs", "results", base + ".json")):
                ap.error(f"docs/results/{base}.json not found")
            with open(os.path.join(ROOT, "docs", "results", "CURRENT"), "w") as fh:
                fh.write(base + "\n")
        problems = docs.docs_pass(update=bool(a.update_docs))
        for p in problems:
            print(f"evidence: {p}", file=sys.stderr)
        return 1 if problems else 0
    steps = [x for x in a.steps.split(",") if x] or list(QUICK_STEPS if a.quick else ALL_STEPS)
    if a.skip_bench and "bench" in steps:
        steps.remove("bench")
    unknown = [x for x in steps if x not in BY_NAME]
    if unknown:
        ap.error(f"unknown step(s) {unknown}")
    partial = bool(a.steps)

    commit = sh(["git", "rev-parse", "--short=12", "HEAD"]).stdout.strip() or "unknown"
    dirty = bool(sh(["git", "status", "--porcelain", "--untracked-files=no"]).stdout.strip())
    date = datetime.datetime.now(datetime.timezone.utc)
    ev = Evidence(a.quick, [x for x in a.langs.split(",") if x])
    doc: dict[str, Any] = {
        "command": "scripts/evidence" + (" --quick" if a.quick else "") + (f" --steps {a.steps}" if partial else ""),
        "steps": steps,
        "commit": commit + ("-dirty" if dirty else ""),
        "date": date.strftime("%Y-%m-%d %H:%M"),
        "quick": a.quick,
        "machine": machine(),
        "servers": servers(),
        # The build the campaigns ran (scripts/chaos, scripts/conformance): a debug build's
        # latencies are not worth quoting, its safety verdicts are.
        "chaos_profile": os.environ.get("CHAOS_PROFILE", "release"),
    }
    try:
        for step in steps:
            BY_NAME[step].run(ev)
    except (StepFailed, subprocess.TimeoutExpired) as e:
        print(f"evidence: step failed: {e}", file=sys.stderr)
        return 2
    doc["machine"]["load_at_end"] = loadavg()
    doc["problems"] = ev.problems
    doc["figures"] = ev.figures
    os.makedirs(a.out, exist_ok=True)
    suffix = ("-quick" if a.quick else "") + ("-" + (a.label or "-".join(steps)) if partial else "")
    base = os.path.join(a.out, f"{date.strftime('%Y-%m-%d')}-{commit}{suffix}")
    results.write(doc, base)
    print(f"evidence: wrote {os.path.relpath(base, ROOT)}.json and .md "
          f"({len(ev.figures)} figures, {len(ev.problems)} problems)")
    return 1 if ev.problems else 0
