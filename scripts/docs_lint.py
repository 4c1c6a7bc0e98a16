"""The docs lint: names quoted in the docs must exist in the code, links must point at files.

Prose drifts where `ev:` markers do not reach (an audit found 30 stale claims). This checks
what can be checked mechanically, in README.md, docs/*.md and every other tracked Markdown
file outside docs/results/:

- a relative link `[text](path)` names a file or folder of the repository;
- a backticked repository path (`client/src/elector.rs`, `harness/tests/checker.rs::name`)
  exists, and the `::name` after it occurs in that file;
- a backticked log line or error text (three or more plain lower-case words, as in
  `redis unreachable again`) occurs in the code;
- a backticked module command (`LEASE.FENCE`), setting (`lease.grace-ms`), CLI flag
  (`--min-replicas`) or metric (`lease_task_overrun_total`) occurs in the code: a tracked file
  that is not Markdown and not a results file;
- a backticked `MODULE LOAD path` (or `MODULE LOADEX path ...`) has `enable-module-command` in
  its paragraph or table row (Redis 7 refuses the command by default), one rule of `CAVEATS`.

Illustrative names (an example flag of another tool, a name the docs show as wrong) go into
scripts/docs-lint.allow as `FILE<TAB>SPAN` lines, so each exception is written down once.

Shell blocks (a fence with info string sh, bash, shell or console, or an unlabelled fence
whose first line is a `$ ` prompt) must say whether CI runs them, on the nearest non-blank
line before the fence:

- `<!-- illustrative -->`: an example to adapt (addresses, paths of your own); not run;
- `<!-- ci: FILE... -->`: every command of the block (continuation lines joined, comments
  dropped, `$ ` lines only in a console block) is run by one of the named repository files:
  its words are the first words of a command line there, where a word of the file that is a
  shell variable (`"$lang"`, `${x}`) or holds one (`clients/$lang/test.sh`) stands for any
  word; and the program itself occurs in a FILE as more than a bare variable.

Exit 0 when everything is found, 1 with one line per problem (`FILE:LINE: ...`).
Run: scripts/docs-lint [--root DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from typing import Iterable, Iterator

CODE_EXTS = (".rs", ".py", ".go", ".ts", ".java", ".sh", ".json", ".toml", ".xml", ".conf", ".yml")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SPAN = re.compile(r"`([^`]+)`")
COMMAND = re.compile(r"^(LEASE\.[A-Z]+)\b")
SETTING = re.compile(r"^(lease\.[a-z][a-z-]*[a-z])\b")
FLAG = re.compile(r"^(--[a-z][a-z0-9-]*[a-z0-9])(?:[ =]|$)")
METRIC = re.compile(r"^(lease_[a-z0-9_]*[a-z0-9])(?:\{|$)")
# A log line or error text quoted in prose: three or more plain lower-case words.
MESSAGE = re.compile(r"^[a-z][a-z' ;,]*[a-z]$")
PATH = re.compile(r"^((?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_.-]+?)(?::\d+(?:-\d+)?)?(?:::([A-Za-z_][A-Za-z0-9_]*))?$")
# A quoted command line that must not appear without a caveat in the same paragraph (a table
# row counts alone): (pattern of the span, required text, why). Headings are exempt. Only the
# form with an argument (`MODULE LOAD /path`, `MODULE LOADEX path ...`), an instruction to run
# it, is held to this; a bare mention of the command is not.
CAVEATS = (
    (re.compile(r"^MODULE LOAD(?:EX)? \S"), "enable-module-command",
     "MODULE LOAD is refused by Redis 7's default enable-module-command no: say so beside it"),
)
SHELL_INFO = ("sh", "bash", "shell", "console")
FENCE_OPEN = re.compile(r"^\s*```\s*([A-Za-z0-9_-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*(illustrative|ci:\s*([^>]*?))\s*-->\s*$")
SEPARATORS = ("|", "||", "&&", ";", "&")
VARIABLE = re.compile(r"\$(?:\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")
TOP_DIRS = ("src/", "lease-core/", "client/", "clients/", "harness/", "model/", "fuzz/", "tests/",
            "testsupport/", "scripts/", "docs/", "conformance/", ".ci/", "peers/", "bench/")


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


def tracked(root: str) -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=root, check=True, capture_output=True, text=True)
    return [p for p in out.stdout.splitlines() if p]


def is_doc(path: str) -> bool:
    # Results files and the CHANGELOG are records of their time: they keep names that were
    # right when they were written.
    return (
        path.endswith(".md")
        and not path.startswith("docs/results/")
        and path != "CHANGELOG.md"
    )


def code_text(root: str, files: Iterable[str]) -> str:
    """Every tracked code file's text, joined: what a quoted name must occur in."""
    parts: list[str] = []
    for p in files:
        if p.endswith(".md") or p.startswith("docs/results/") or not (
            p.endswith(CODE_EXTS) or "/" not in p or p.startswith("scripts/")
        ):
            continue
        try:
            with open(os.path.join(root, p), encoding="utf-8", errors="replace") as f:
                parts.append(f.read())
        except (IsADirectoryError, FileNotFoundError):
            continue
    return "\n".join(parts)


def load_allow(root: str) -> set[tuple[str, str]]:
    path = os.path.join(root, "scripts", "docs-lint.allow")
    allow: set[tuple[str, str]] = set()
    if not os.path.exists(path):
        return allow
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            file, _, span = line.partition("\t")
            allow.add((file, span))
    return allow


def strip_fences(lines: list[str]) -> Iterator[tuple[int, str]]:
    """Lines outside ``` fences (code blocks are examples; their commands are checked by
    running them, not here)."""
    fenced = False
    for i, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield i, line


def ignored(root: str, path: str) -> bool:
    """A build output or other git-ignored path (`target/debug/...`, `dist/...`): it exists
    only after a build, so a fresh clone (CI) cannot check it."""
    r = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=root)
    return r.returncode == 0


def exists(root: str, path: str) -> bool:
    return os.path.exists(os.path.join(root, path))


def paragraphs(lines: list[str]) -> Iterator[tuple[int, str]]:
    """Paragraphs outside fences as (first line number, text with its newlines), so that a
    backticked span broken across two lines is still one span."""
    start, buf = 0, list[str]()
    for n, line in strip_fences(lines):
        if not line.strip():
            if buf:
                yield start, "\n".join(buf)
            start, buf = 0, list[str]()
            continue
        if not buf:
            start = n
        buf.append(line)
    if buf:
        yield start, "\n".join(buf)


def check_file(root: str, doc: str, text: str, code: str, allow: set[tuple[str, str]]) -> list[Problem]:
    problems: list[Problem] = []
    here = os.path.dirname(doc)
    for start, para in paragraphs(text.splitlines()):
        for m in LINK.finditer(para):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            rel = target.split("#", 1)[0]
            if rel and not exists(root, os.path.normpath(os.path.join(here, rel))):
                n = start + para.count("\n", 0, m.start())
                problems.append(Problem(doc, n, f"link to {target}: no such file"))
        for m in SPAN.finditer(para):
            span = " ".join(m.group(1).split())
            if (doc, span) in allow:
                continue
            n = start + para.count("\n", 0, m.start())
            problems.extend(check_span(root, doc, n, span, code))
            line_start = para.rfind("\n", 0, m.start()) + 1
            line = para[line_start:para.find("\n", m.start()) if "\n" in para[m.start():] else len(para)]
            if line.lstrip().startswith("#"):
                continue
            # A table row stands alone; other lines count with their whole paragraph.
            context = line if line.lstrip().startswith("|") else para
            for pattern, needed, why in CAVEATS:
                if pattern.match(span) and needed not in context:
                    problems.append(Problem(doc, n, why))
    return problems


def check_span(root: str, doc: str, n: int, span: str, code: str) -> list[Problem]:
    for pattern, what in ((COMMAND, "command"), (SETTING, "setting"), (METRIC, "metric")):
        m = pattern.match(span)
        if m:
            name = m.group(1)
            # Commands are registered in lower case; both spellings count. `INFO lease` fields
            # are registered without the section prefix Redis adds (`lease_` + field).
            field = '"' + name[len("lease_"):] + '"' if what == "metric" else name
            if name not in code and name.lower() not in code and field not in code:
                return [Problem(doc, n, f"{what} `{name}` occurs nowhere in the code")]
            return []
    if MESSAGE.match(span) and len(span.split()) >= 3:
        if span not in code:
            return [Problem(doc, n, f"message `{span}` occurs nowhere in the code")]
        return []
    m = FLAG.match(span)
    if m:
        flag = m.group(1)
        # clap derives `--min-replicas` from `min_replicas`; other parsers spell it out.
        derived = flag[2:].replace("-", "_")
        if flag not in code and not re.search(rf"\b(pub\s+)?{re.escape(derived)}\s*:", code):
            return [Problem(doc, n, f"flag `{flag}` occurs nowhere in the code")]
        return []
    m = PATH.match(span)
    first = m.group(1).split("/")[0] if m else ""
    # A path is checked when it starts at a top folder of the repository, or at a folder
    # beside the doc (a client README's `src/...`); `./x` and `../x` are examples.
    beside = first not in (".", "..") and exists(root, os.path.join(os.path.dirname(doc), first))
    if m and " " not in span and (span.startswith(TOP_DIRS) or beside):
        path, name = m.group(1), m.group(2)
        if "*" in path or "<" in path or "{" in path or "..." in path or re.search(r"\b[A-Z]{3,}\b", path):
            return []  # a pattern or placeholder (clients/LANG/...), not one path
        if not exists(root, path) and exists(root, os.path.normpath(os.path.join(os.path.dirname(doc), path))):
            path = os.path.normpath(os.path.join(os.path.dirname(doc), path))
        if not exists(root, path) and not ignored(root, path):
            return [Problem(doc, n, f"path `{path}` does not exist")]
        if name and os.path.isfile(os.path.join(root, path)):
            with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                if name not in f.read():
                    return [Problem(doc, n, f"`{name}` does not occur in {path}")]
    return []


def shell_blocks(lines: list[str]) -> Iterator[tuple[int, str, str | None, list[str]]]:
    """Fenced shell blocks as (line of the fence, info string, marker or None, body lines)."""
    fenced = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            if fenced:
                fenced = False
                i += 1
                continue
            fenced = True
            m = FENCE_OPEN.match(line)
            info = m.group(1).lower() if m else ""
            # An unlabelled block whose first line is a `$ ` prompt is a console block too.
            first = next((x for x in lines[i + 1:] if x.strip()), "")
            if not info and first.lstrip().startswith("$ ") and not first.lstrip().startswith("```"):
                info = "console"
            if info in SHELL_INFO:
                j = i - 1
                while j >= 0 and not lines[j].strip():
                    j -= 1
                mk = MARKER.match(lines[j]) if j >= 0 else None
                body: list[str] = []
                k = i + 1
                while k < len(lines) and not lines[k].lstrip().startswith("```"):
                    body.append(lines[k])
                    k += 1
                yield i + 1, info, (mk.group(1) if mk else None), body
        i += 1


def words(line: str) -> list[str]:
    """A command line's words, comments dropped; quotes removed where shlex can parse it."""
    try:
        return shlex.split(line, comments=True)
    except ValueError:
        return line.split("#", 1)[0].split()


def split_commands(ws: list[str]) -> list[list[str]]:
    """Words split at `|`, `&&`, `;` ...: one list per simple command, leading `VAR=x` and
    `exec` dropped."""
    out: list[list[str]] = [[]]
    for w in ws:
        if w in SEPARATORS:
            out.append([])
        elif w.endswith(";") and len(w) > 1:
            out[-1].append(w[:-1])
            out.append([])
        else:
            out[-1].append(w)
    cmds = []
    for c in out:
        while c and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", c[0]) or c[0] in ("exec", "then", "do", "if")):
            c = c[1:]
        if c:
            cmds.append(c)
    return cmds


def logical_lines(lines: list[str], console: bool = False) -> list[str]:
    """Lines with `\\`-continuations joined; in a console block only `$ ` lines, unprefixed."""
    out: list[str] = []
    buf = ""
    for raw in lines:
        line = raw.rstrip()
        if console and not buf:
            if not line.lstrip().startswith("$ "):
                continue
            line = line.lstrip()[2:]
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        out.append(buf + line)
        buf = ""
    if buf:
        out.append(buf)
    return out


def word_pattern(w: str) -> re.Pattern[str]:
    """A file's word as a pattern: each shell variable in it stands for any word part."""
    parts = VARIABLE.split(w)
    return re.compile("[^\\s]+".join(re.escape(p) for p in parts) + "$")


def runs(cmd: list[str], file_cmds: list[list[str]]) -> bool:
    """Whether some command of the file starts with `cmd`'s words (variables match any)."""
    for fc in file_cmds:
        if len(fc) >= len(cmd) and all(word_pattern(f).match(c) for c, f in zip(cmd, fc)):
            return True
    return False


def names_program(program: str, file_words: list[str]) -> bool:
    """The program occurs in a file as more than a bare variable (`"$hook" vectors` alone does
    not vouch for `clients/go/conformance.sh`; `hook="clients/$lang/conformance.sh"` does)."""
    for w in file_words:
        w = w.split("=", 1)[1] if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w) else w
        if VARIABLE.fullmatch(w) or not w:
            continue
        if word_pattern(w).match(program):
            return True
    return False


def check_shell_blocks(root: str, doc: str, text: str) -> list[Problem]:
    problems: list[Problem] = []
    for n, info, marker, body in shell_blocks(text.splitlines()):
        if marker is None:
            problems.append(Problem(doc, n, f"```{info} block without <!-- illustrative --> or "
                                    "<!-- ci: FILE --> on the line before it"))
            continue
        if marker == "illustrative":
            continue
        files = marker.split(":", 1)[1].split()
        if not files:
            problems.append(Problem(doc, n, "<!-- ci: --> names no file"))
            continue
        file_cmds: list[list[str]] = []
        file_words: list[str] = []
        for f in files:
            path = os.path.join(root, f)
            if not os.path.isfile(path):
                problems.append(Problem(doc, n, f"<!-- ci: {f} -->: no such file"))
                continue
            with open(path, encoding="utf-8", errors="replace") as fh:
                for line in logical_lines(fh.read().splitlines()):
                    ws = words(line)
                    file_words.extend(ws)
                    file_cmds.extend(split_commands(ws))
        if not file_cmds:
            continue
        for line in logical_lines(body, console=info == "console"):
            for cmd in split_commands(words(line)):
                if not runs(cmd, file_cmds) or not names_program(cmd[0], file_words):
                    problems.append(Problem(doc, n, f"`{' '.join(cmd)}` is not run by {' '.join(files)}"))
    return problems


def lint(root: str) -> list[Problem]:
    files = tracked(root)
    code = code_text(root, files)
    allow = load_allow(root)
    problems: list[Problem] = []
    for doc in files:
        if not is_doc(doc):
            continue
        with open(os.path.join(root, doc), encoding="utf-8") as f:
            text = f.read()
        problems.extend(check_file(root, doc, text, code, allow))
        problems.extend(check_shell_blocks(root, doc, text))
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="docs-lint", description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = ap.parse_args(argv)
    problems = lint(args.root)
    for p in problems:
        print(p)
    if problems:
        print(f"docs-lint: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("docs-lint: every quoted name and linked path exists; every shell block is marked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
