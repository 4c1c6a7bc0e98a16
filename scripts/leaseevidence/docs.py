"""Figures in the docs.

A figure in README.md, docs/*.md or clients/*/README.md is written between markers:
    <!--ev:SECTION/NAME-->426.2<!--/ev-->            from the current results file
    <!--ev:SECTION/NAME|FMT-->...<!--/ev-->           formatted (FMT below)
    <!--ev:BASE#SECTION/NAME-->...<!--/ev-->          from docs/results/BASE.json instead
    <!--ev:file-->[...](...)<!--/ev-->                a link to the current results file
    <!--ev:BASE#file-->[...](...)<!--/ev-->           a link to docs/results/BASE.md
The current results file is named in docs/results/CURRENT. `--update-docs BASE` makes BASE
current and rewrites every marked figure from it; `--check-docs` (CI) fails when a marked
figure differs from its file or names a figure the file does not hold.
FMT: int (1,234), 0/1/2 (decimals), x (ratio, 1.07×), durN (the N-th duration in a line, e.g.
"1.50 s", "426 ms", "2.3 ms"), numN (the N-th plain number in a line).
"""

from __future__ import annotations

import glob
import json
import os
import re
from typing import Any

from leaseevidence.common import ROOT, Value, parse_duration_ms

DOC_GLOBS = ["README.md", "docs/*.md", "clients/*/README.md"]
MARKER = re.compile(r"<!--ev:([^\n]*?)-->(.*?)<!--/ev-->", re.S)

# (section, name) -> value, per results file base name.
Figures = dict[tuple[str, str], Any]


def fmt_duration_ms(ms: float) -> str:
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    if ms >= 10:
        return f"{ms:.0f} ms"
    return f"{ms:.1f} ms"


def format_figure(value: Value, fmt: str) -> str:
    if fmt == "":
        if isinstance(value, int):
            return f"{value:,}"
        return str(value)
    if fmt == "int":
        return f"{round(float(str(value))):,}"
    if fmt in ("0", "1", "2", "3"):
        return f"{float(str(value)):,.{fmt}f}"
    if fmt == "x":
        return f"{float(str(value)):.2f}×"
    m = re.fullmatch(r"dur(\d+)", fmt)
    if m:
        found = re.findall(r"([0-9.]+(?:ns|µs|us|ms|s))\b", str(value))
        return fmt_duration_ms(parse_duration_ms(found[int(m.group(1)) - 1]))
    m = re.fullmatch(r"num(\d+)", fmt)
    if m:
        found = re.findall(r"(?<![\w.])[0-9]+(?:\.[0-9]+)?(?![\w.])", str(value))
        return str(found[int(m.group(1)) - 1])
    raise ValueError(f"unknown format {fmt!r}")


def doc_files(root: str, globs: list[str]) -> list[str]:
    out: list[str] = []
    for g in globs:
        out += sorted(glob.glob(os.path.join(root, g)))
    return out


def load_results(root: str, base: str, cache: dict[str, Figures]) -> Figures:
    if base not in cache:
        with open(os.path.join(root, "docs", "results", base + ".json")) as fh:
            doc = json.load(fh)
        cache[base] = {(f["section"], f["name"]): f["value"] for f in doc["figures"]}
    return cache[base]


def render_marker(root: str, spec: str, doc_path: str, current: str, cache: dict[str, Figures]) -> str:
    # `BASE#what` names another results file; a figure's own name may contain `#`.
    m = re.match(r"^(\d{4}-\d{2}-\d{2}-[0-9a-f]+[\w-]*)#(.*)$", spec, re.S)
    base, what = (m.group(1), m.group(2)) if m else (current, spec)
    if what == "file":
        target = os.path.relpath(os.path.join(root, "docs", "results", base + ".md"), os.path.dirname(doc_path))
        return f"[{base}.md]({target})"
    what, _, fmt = what.partition("|")
    section, _, name = what.partition("/")
    figures = load_results(root, base, cache)
    if (section, name) not in figures:
        raise KeyError(f"{base} holds no figure {section}/{name}")
    value: Value = figures[(section, name)]
    return format_figure(value, fmt)


def docs_pass(update: bool, root: str = ROOT, globs: list[str] | None = None) -> list[str]:
    """Rewrite (update) or compare (check) every marked figure; returns the list of problems."""
    files = doc_files(root, DOC_GLOBS if globs is None else globs)
    with open(os.path.join(root, "docs", "results", "CURRENT")) as fh:
        current = fh.read().strip()
    cache: dict[str, Figures] = {}
    problems: list[str] = []
    changed: list[str] = []
    n = 0
    for path in files:
        with open(path) as fh:
            text = fh.read()
        rel = os.path.relpath(path, root)

        def sub(m: re.Match[str]) -> str:
            try:
                want = render_marker(root, m.group(1), path, current, cache)
            except (KeyError, ValueError, IndexError, OSError) as e:
                problems.append(f"{rel}: <!--ev:{m.group(1)}-->: {e}")
                return m.group(0)
            if m.group(2) != want:
                if not update:
                    problems.append(f"{rel}: <!--ev:{m.group(1)}--> says "
                                    f"{m.group(2)!r}, the results file {want!r}")
                return f"<!--ev:{m.group(1)}-->{want}<!--/ev-->"
            return m.group(0)

        new = MARKER.sub(sub, text)
        found = len(MARKER.findall(text))
        n += found
        # A marker the pattern does not see would keep a stale figure silently.
        if text.count("<!--ev:") != found or text.count("<!--/ev-->") != found:
            problems.append(f"{rel}: a marker without its pair or not on one line")
        if update and new != text:
            with open(path, "w") as fh:
                fh.write(new)
            changed.append(rel)
    if update:
        print("evidence: updated " + (", ".join(changed) or "nothing"))
    print(f"evidence: {n} marked figures, current results file {current}")
    return problems
