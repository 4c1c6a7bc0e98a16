"""The evidence tooling behind `scripts/evidence`: run every measurement of docs/evidence.md,
stamp the figures with the commit, and keep the figures quoted in the docs equal to their
results file.

- `common`: the repository root, subprocess helpers, the machine description, value parsers;
- `harness`: what a `scripts/chaos` / `scripts/conformance` campaign leaves behind
  (`summary.json`, each run's `report.json`) and its one-line summary;
- `steps`: the `Evidence` collector and the table of steps (`STEPS`), one function each;
- `results`: the results file (JSON + Markdown) and `--combine`;
- `docs`: the `<!--ev:...-->` markers in README.md, docs/*.md and clients/*/README.md;
- `cli`: the command line (`scripts/evidence` and `python3 -m leaseevidence`).
"""
