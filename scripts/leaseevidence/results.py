"""The results file: DIR/<date>-<commit>[-quick][-steps].json with every figure and the command
that produced it, the same as a Markdown table (.md), and `--combine`."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from leaseevidence.common import ROOT, sh

# Paths that may differ between the commits of a combined file: the evidence tooling and docs.
TOOLING = ("docs/", "scripts/evidence", "scripts/leaseevidence/", "scripts/tests/", ".gitignore")


def render_md(doc: dict[str, Any]) -> str:
    lines = [
        f"# Evidence {doc['date']} at {doc['commit']}{' (quick)' if doc['quick'] else ''}",
        "",
        f"Produced by `{doc['command']}` at commit `{doc['commit']}` ({doc['date']} UTC)."
        + (f" Steps measured at commits {', '.join(doc['commits_measured'])}, which differ only in"
           " the evidence tooling and docs (same code)." if len(doc.get("commits_measured", [])) > 1 else ""),
        f"Machine: {doc['machine']['cores']} cores ({doc['machine']['cpu']}), "
        f"{doc['machine']['memory_gib']} GiB, kernel {doc['machine']['kernel']}; load average "
        f"at start {doc['machine']['load_at_start']}, at end {doc['machine']['load_at_end']}.",
        "Servers: " + "; ".join(f"{k}: {v}" for k, v in doc["servers"].items()) + ".",
        f"Campaigns built with CHAOS_PROFILE={doc['chaos_profile']}."
        + (" (debug build: safety verdicts and fault counts hold, latencies are not release figures)"
           if doc["chaos_profile"] == "debug" else "") if "chaos_profile" in doc else "",
        "",
    ]
    if doc["problems"]:
        lines += ["**Implausible or failed:**", ""] + [f"- {p}" for p in doc["problems"]] + [""]
    section = None
    order: list[str] = []
    for f in doc["figures"]:
        if f["section"] not in order:
            order.append(f["section"])
    for f in sorted(doc["figures"], key=lambda f: order.index(f["section"])):
        if f["section"] != section:
            section = f["section"]
            lines += ["", f"## {section}", "", "| figure | value | unit |", "|---|---|---|"]
        lines.append(f"| {f['name']} | {f['value']} | {f['unit']} |")
    lines += ["", "## Commands", ""]
    seen: list[str] = []
    for f in doc["figures"]:
        if f["command"] not in seen:
            seen.append(f["command"])
            lines.append(f"- `{f['command']}`")
    return "\n".join(lines) + "\n"


def write(doc: dict[str, Any], base: str) -> None:
    """BASE.json and BASE.md."""
    with open(base + ".json", "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
    with open(base + ".md", "w") as fh:
        fh.write(render_md(doc))


def combine(paths: list[str], out: str, label: str = "") -> int:
    """`--combine a.json b.json ...`: one results file from runs of different steps at the same
    commit (e.g. the CPU-bound steps and the wall-clock-bound campaigns run side by side)."""
    docs: list[dict[str, Any]] = []
    for p in paths:
        with open(p) as fh:
            docs.append(json.load(fh))
    # One commit, or commits whose code is identical: between them only the evidence tooling
    # and the docs may differ (a step re-run after a change to the tooling measures the same
    # code). A later file's section replaces the same section of an earlier file.
    commits = [str(d["commit"]) for d in docs]
    if any(c.endswith("-dirty") for c in commits):
        print(f"evidence: --combine refuses a dirty checkout's results: {commits}", file=sys.stderr)
        return 2
    for c in sorted(set(commits)):
        if c == commits[-1]:
            continue
        changed = sh(["git", "diff", "--name-only", c, commits[-1]]).stdout.split()
        code = [p for p in changed if not (p.startswith(TOOLING) or p == "scripts/evidence")]
        if code:
            print(f"evidence: --combine: {c} and {commits[-1]} differ in code: {code[:5]}", file=sys.stderr)
            return 2
    later: set[str] = set()
    figures: list[dict[str, Any]] = []
    for d in reversed(docs):
        sections = {f["section"] for f in d["figures"]}
        figures = [f for f in d["figures"] if f["section"] not in later] + figures
        later |= sections
    first = docs[0]
    doc = dict(first)
    doc["commit"] = commits[-1]
    doc["commits_measured"] = sorted(set(commits))
    # Run side by side or one after the other (the dates say which): each file's command.
    doc["command"] = " + ".join(d["command"] for d in docs)
    doc["steps"] = [x for d in docs for x in d.get("steps", [])]
    doc["quick"] = all(d.get("quick") for d in docs)
    doc["date"] = min(d["date"] for d in docs)
    doc["machine"] = dict(first["machine"])
    doc["machine"]["load_at_end"] = " / ".join(d["machine"].get("load_at_end", "?") for d in docs)
    profiles = sorted({str(d.get("chaos_profile", "unknown")) for d in docs})
    doc["chaos_profile"] = " / ".join(profiles)
    doc["problems"] = [x for d in docs for x in d["problems"]]
    doc["figures"] = figures
    doc["combined_from"] = [os.path.basename(p) for p in paths]
    # A label names what the files hold (e.g. `long`, one results file from one per language).
    suffix = ("-quick" if doc["quick"] else "") + (f"-{label}" if label else "")
    doc["command"] += f" (scripts/evidence --combine ...{' --label ' + label if label else ''})"
    base = os.path.join(out, f"{doc['date'][:10]}-{doc['commit']}{suffix}")
    write(doc, base)
    print(f"evidence: wrote {os.path.relpath(base, ROOT)}.json and .md ({len(doc['figures'])} figures, "
          f"{len(doc['problems'])} problems)")
    return 1 if doc["problems"] else 0
