"""The steps of an evidence run, as a table (`STEPS`): each row names a step, says whether the
full and the quick run include it, and points to the one function that runs it against an
`Evidence` collector."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Callable

from leaseevidence.common import ROOT, StepFailed, Value, number, parse_duration_ms
from leaseevidence.harness import Campaign, read_campaign

Figure = dict[str, Value]


class Evidence:
    """Collects figures and problems; `quick` is CI size, `langs` the conformance languages."""

    def __init__(self, quick: bool, langs: list[str]) -> None:
        self.quick = quick
        self.langs = langs
        self.figures: list[Figure] = []  # section, name, value, unit, command
        self.problems: list[str] = []

    def add(self, section: str, name: str, value: Value, unit: str, command: str) -> None:
        self.figures.append(
            {"section": section, "name": name, "value": value, "unit": unit, "command": command}
        )

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.problems.append(what)
            print(f"evidence: IMPLAUSIBLE: {what}", file=sys.stderr)

    def run(self, argv: list[str], env: dict[str, str] | None = None,
            timeout: int = 3600) -> tuple[subprocess.CompletedProcess[str], str]:
        cmd = " ".join(shlex.quote(a) for a in argv)
        if env:
            cmd = " ".join(f"{k}={v}" for k, v in env.items()) + " " + cmd
        print(f"evidence: $ {cmd}", flush=True)
        e = dict(os.environ)
        e.update(env or {})
        r = subprocess.run(argv, cwd=ROOT, text=True, capture_output=True, env=e, timeout=timeout)
        return r, cmd

    def campaign(self, section: str, args: list[str], ttl_ms: int, grace_ms: int,
                 expect: dict[str, float], must_violate: bool | None = False) -> dict[str, Value]:
        """One `scripts/chaos` campaign. `must_violate`: a negative control, which must be
        caught (violations > 0, exit 1); None: recorded, not asserted (the caller says why)."""
        if os.environ.get("EVIDENCE_SMOKE"):
            # Testing this script itself: every campaign 1 run of 8 s (figures not meaningful).
            args = list(args)
            for opt, val in (("--runs", "1"), ("--seconds", "8")):
                if opt in args:
                    args[args.index(opt) + 1] = val
        argv = ["scripts/chaos"] + args + ["--ttl-ms", str(ttl_ms), "--grace-ms", str(grace_ms)]
        r, cmd = self.run(argv)
        # Exit 3: the campaign ran but drew fewer faults of a kind than its --min-faults.
        if r.returncode not in (0, 1, 3):
            raise StepFailed(f"{cmd} exited {r.returncode}: {r.stdout[-1500:]}{r.stderr[-1500:]}")
        short = [ln for ln in r.stdout.splitlines() if ln.startswith("--min-faults not met")]
        self.check(r.returncode != 3, f"{section}: {short[0] if short else '--min-faults not met'}")
        c = read_campaign(r.stdout, 1 if r.returncode == 3 else r.returncode, cmd)
        self.add(section, "summary", c.line, "line", cmd)
        for ln in r.stdout.splitlines():
            if ln.startswith("faults per kind: "):
                self.add(section, "faults_per_kind", ln[len("faults per kind: "):], "line", cmd)
        for k, v in c.fields.items():
            if isinstance(v, (int, float)):
                self.add(section, k, v, "ms" if k.endswith("_ms") else "count", cmd)
        for rule, n in sorted(c.rules.items()):
            self.add(section, f"violations_{rule}", n, "count", cmd)
        if must_violate is None:
            return c.fields
        if must_violate:
            # A control the checker does not catch would make every "violations=0" above
            # meaningless: it is a failure of the evidence, not a pass.
            self.check(c.returncode == 1 and c.violations > 0,
                       f"{section}: negative control NOT caught (violations={c.violations})")
            return c.fields
        self.check(c.violations == 0, f"{section}: violations={c.violations}")
        for fig, bound in expect.items():
            cat = fig.rsplit("_p", 1)[0]
            if not number(c.fields.get(cat + "_n")):
                self.check(False, f"{section}: no {cat} events measured")
                continue
            got = number(c.fields.get(fig))
            self.check(got is not None and got < bound,
                       f"{section}: {fig}={c.fields.get(fig)} not below {bound} ms")
        return c.fields

    def conformance_campaign(self, args: list[str],
                             env: dict[str, str] | None = None) -> tuple[Campaign, str]:
        r, cmd = self.run(args, env=env)
        if r.returncode == 2:
            raise StepFailed(f"{cmd} exited {r.returncode}: {r.stdout[-1500:]}{r.stderr[-1500:]}")
        return read_campaign(r.stdout, r.returncode, cmd), cmd


# --- steps ---------------------------------------------------------------------------------

BENCH_ROWS = ("native_renew", "lua_renew", "native_acquire_contended", "lua_acquire_contended", "set_px")


def bench(ev: Evidence) -> None:
    """scripts/bench: throughput, instructions per command (callgrind, full mode), MEMORY
    USAGE, BLOCK hand-over."""
    # Quick (CI): no callgrind (valgrind runs take minutes); full: instructions per command too.
    env = {"BENCH_N": "40000", "BENCH_ROUNDS": "1", "BENCH_NO_CALLGRIND": "1"} if ev.quick else {}
    r, cmd = ev.run(["scripts/bench"], env=env)
    if r.returncode != 0:
        raise StepFailed(f"scripts/bench exited {r.returncode}: {r.stderr[-2000:]}")
    rps: dict[str, float] = {}
    in_callgrind = False
    for line in r.stdout.splitlines():
        if line.startswith("instructions per command"):
            in_callgrind = True
            continue
        m = re.match(r"^(\w+)\s+(\d+)\s", line)
        if in_callgrind and m:
            ev.add("instructions", m.group(1), int(m.group(2)), "instructions/command", cmd)
            continue
        m = re.match(r"^(.*) instructions:\s+([0-9.]+)x", line)
        if m:
            ev.add("instructions", m.group(1).strip(), float(m.group(2)), "ratio", cmd)
            continue
        m = re.match(r"^(\w+)\s+(\d+(?:\.\d+)?)\s", line)
        if m and m.group(1) in BENCH_ROWS:
            rps[m.group(1)] = float(m.group(2))
            ev.add("throughput", m.group(1), float(m.group(2)), "requests/s", cmd)
        m = re.search(r"MEMORY USAGE of one lease.*: (\d+) bytes", line)
        if m:
            ev.add("memory", "memory_usage_one_lease", int(m.group(1)), "bytes", cmd)
            ev.check(50 <= int(m.group(1)) <= 400, f"MEMORY USAGE {m.group(1)} bytes")
        m = re.search(r"BLOCK hand-over, (release sent|lease deadline).*?: p50 (\S+)\s+p99 (\S+)\s+max (\S+)\s+\(n=(\d+)\)", line)
        if m:
            which = "release" if m.group(1) == "release sent" else "expiry"
            for q, v in (("p50", m.group(2)), ("p99", m.group(3)), ("max", m.group(4))):
                ev.add("block_handover", f"{which}_{q}", round(parse_duration_ms(v), 3), "ms", cmd)
            # Loose: an order of magnitude above what a quiet machine shows (< 5 ms).
            ev.check(parse_duration_ms(m.group(3)) < 50, f"BLOCK hand-over {which} p99 {m.group(3)}")
    for n in BENCH_ROWS:
        ev.check(rps.get(n, 0) > 1000, f"throughput {n} missing or < 1000/s")
    if rps.get("set_px"):
        for n in ("native_renew", "native_acquire_contended"):
            if n in rps:
                ev.add("throughput", f"{n}_over_set_px", round(rps[n] / rps["set_px"], 2), "ratio", cmd)
        for a, b in (("native_renew", "lua_renew"), ("native_acquire_contended", "lua_acquire_contended")):
            if a in rps and b in rps:
                ev.add("throughput", f"{a}_over_lua", round(rps[a] / rps[b], 2), "ratio", cmd)


# Campaign timing of the single-primary steps (ms).
TTL, GRACE = 500, 500


def chaos(ev: Evidence) -> None:
    """A chaos campaign of fixed size and seed, all faults."""
    runs = "2" if ev.quick else "20"
    secs = "15" if ev.quick else "20"
    # Loose bounds (a busy 2-core machine; they catch order-of-magnitude regressions): Redis
    # back below grace + a few hundred ms (grace is included in that figure by design).
    ev.campaign("chaos_campaign", ["--runs", runs, "--electors", "5", "--seconds", secs, "--seed", "1000"],
                TTL, GRACE, {"redis_back_p99_ms": GRACE + 500})


def handover(ev: Evidence) -> None:
    """Hand-over and crash failover (faults resign, kill)."""
    runs, secs = ("1", "20") if ev.quick else ("5", "30")
    # Hand-over p99 below tens of ms, crash failover below TTL + a few hundred ms.
    ev.campaign("handover_and_crash", ["--runs", runs, "--electors", "5", "--seconds", secs,
                "--seed", "7000", "--fault", "resign,kill"], TTL, GRACE,
                {"handover_p99_ms": 50, "crash_failover_p99_ms": TTL + 400})


def many(ev: Evidence) -> None:
    """50 electors through faults; 10 electors without faults (no flapping)."""
    ev.campaign("fifty_electors", ["--runs", "1", "--electors", "50", "--seconds", "40",
                "--seed", "6000", "--fault", "kill,pause,resign,partition,restart,failover"],
                TTL, GRACE, {})
    f = ev.campaign("ten_electors_no_faults", ["--runs", "1", "--electors", "10", "--seconds",
                    "120", "--seed", "3000", "--fault", "none"], TTL, GRACE, {})
    # Loose (a loaded 2-core machine can delay a renewal past a 500 ms TTL now and then);
    # flapping would be many changes per minute.
    per_min = number(f.get("fault_free_changes_per_min"))
    ev.check(per_min is not None and per_min < 2,
             f"ten_electors_no_faults: leadership moved without a fault ({f.get('fault_free_changes_per_min')}/min)")


def controls(ev: Evidence) -> None:
    """The single-primary negative controls (docs/evidence.md §6): an elector that ignores its
    deadline, with and without fencing at the resource (both must be caught), and the split
    brain grace pair."""
    runs = "2" if ev.quick else "5"
    base = ["--runs", runs, "--electors", "3", "--seconds", "20", "--seed", "4000",
            "--fault", "pause,partition", "--elector-mode", "ignore-deadline"]
    ev.campaign("control_ignore_deadline_no_fence", base + ["--no-fence"], 500, 500, {},
                must_violate=True)
    ev.campaign("control_ignore_deadline_fence", base, 500, 500, {}, must_violate=True)
    # Split brain of two primaries (docs/failover.md §3.1): with min-replicas-max-lag L = 2
    # the grace rule is grace >= max-ttl + 1000 x (L + 2) = 5000 ms. Below it the old leader
    # and a new one overlap (must be caught); at the rule they do not.
    sb = ["--runs", "1" if ev.quick else "2", "--electors", "3", "--seconds", "20",
          "--min-replicas-max-lag", "2", "--fault", "split-brain", "--seed", "1"]
    ev.campaign("split_brain_grace_below_rule_control", sb, 1000, 1000, {}, must_violate=True)
    ev.campaign("split_brain_grace_at_rule", sb, 1000, 5000, {})


def sentinel(ev: Evidence) -> None:
    """Sentinel failover campaign with docs/deploy.md's recipe."""
    # Real Sentinel promotes a replica after kill -9 of the primary (half the time after a
    # grant only the dead primary had). Leaderless time is down-after + promotion + grace
    # (docs/deploy.md). With docs/deploy.md's recipe (min-replicas-to-write 1, max-lag 2,
    # grace sized max-ttl + 1000 x (lag + 2)): without it a double failover is a split brain.
    ev.campaign("sentinel_failover", ["--topology", "sentinel", "--fault", "sentinel-failover",
                "--runs", "2", "--electors", "3", "--seconds", "60", "--down-after-ms", "1000",
                "--min-replicas-max-lag", "2", "--seed", "1500"], 1000, 5000,
                # down-after + grace + promotion and a busy machine (9.5 s seen at 456ce7b).
                {"sentinel_failover_p99_ms": 1000 + 5000 + 5000})


def quorum(ev: Evidence) -> None:
    """Quorum mode (docs/quorum.md §5): campaigns on 3 and 5 independent primaries, node
    failover with a lost grant, the single-primary failover side by side, split brain of one
    node, and the three negative controls."""
    ttl, grace = 1000, 1000
    if ev.quick:
        ev.campaign("quorum3", ["--topology", "quorum3", "--runs", "1", "--electors", "3",
                    "--seconds", "15", "--seed", "17"], ttl, grace, {})
        return
    # Node and elector faults, all kinds; failover figures are p99 over the runs.
    ev.campaign("quorum3", ["--topology", "quorum3", "--runs", "6", "--electors", "3",
                "--seconds", "20", "--seed", "17"], ttl, grace,
                {"crash_failover_p99_ms": ttl + 1000})
    ev.campaign("quorum5", ["--topology", "quorum5", "--runs", "3", "--electors", "3",
                "--seconds", "20", "--seed", "5"], ttl, grace, {})
    ev.campaign("quorum3_node_failover", ["--topology", "quorum3", "--node-replicas",
                "--runs", "3", "--electors", "3", "--seconds", "30", "--seed", "41",
                "--fault", "node-failover,resign,kill"], ttl, grace, {})
    # Side by side: one primary, failover that may lose a grant, with and without grace.
    ev.campaign("single_primary_failover", ["--runs", "2", "--electors", "3", "--seconds", "20",
                "--fault", "failover", "--seed", "21"], ttl, grace, {})
    ev.campaign("single_primary_failover_no_grace_control", ["--runs", "2", "--electors", "3",
                "--seconds", "20", "--fault", "failover", "--seed", "21"], ttl, 0, {},
                must_violate=True)
    # Split brain of one node (a node answering as two servers): outside quorum mode's fault
    # model when the leader holds a bare majority (docs/quorum.md §5.3); recorded, not
    # asserted, except that one primary (quorum1) must break.
    ev.campaign("quorum1_node_split_brain_control", ["--topology", "quorum1", "--node-replicas",
                "--runs", "2", "--electors", "3", "--seconds", "20", "--fault", "node-split-brain",
                "--seed", "61"], ttl, grace, {}, must_violate=True)
    ev.campaign("quorum3_node_split_brain", ["--topology", "quorum3", "--node-replicas",
                "--runs", "2", "--electors", "3", "--seconds", "20", "--fault", "node-split-brain",
                "--seed", "61"], ttl, grace, {}, must_violate=None)
    # Negative controls: each must be caught.
    ev.campaign("quorum3_control_minority", ["--topology", "quorum3", "--quorum-control", "minority",
                "--runs", "2", "--electors", "3", "--seconds", "10", "--fault", "resign,kill",
                "--seed", "11"], ttl, grace, {}, must_violate=True)
    ev.campaign("quorum3_control_no_grace", ["--topology", "quorum3", "--runs", "3", "--electors", "3",
                "--seconds", "20", "--fault", "node-restart", "--seed", "13"], ttl, 0, {},
                must_violate=True)
    ev.campaign("quorum3_control_no_unify", ["--topology", "quorum3", "--quorum-control", "no-unify",
                "--skew-ms", "30000", "--no-fence", "--runs", "6", "--electors", "3", "--seconds", "20",
                "--fault", "resign,kill", "--seed", "31"], ttl, grace, {}, must_violate=True)


def quorum_long(ev: Evidence) -> None:
    """The done criterion of quorum mode: 100 seeded runs with every node fault."""
    ev.campaign("quorum3_100_runs", ["--topology", "quorum3", "--runs", "100", "--electors", "3",
                "--seconds", "20", "--seed", "17"], 1000, 1000,
                {"crash_failover_p99_ms": 2000})


def handover_campaign(ev: Evidence, lang: str, section: str, args: list[str], ttl_ms: int,
                      grace_ms: int, vectors: bool) -> dict[str, Value]:
    """One hand-over campaign of one language: Rust's elector through `scripts/chaos` (as
    before, so its sections keep their names), another language's through `scripts/conformance
    LANG` with the same options. `vectors`: run the language's shared vectors first (once per
    language is enough: they do not change between its two campaigns)."""
    if lang == "rust":
        return ev.campaign(section, args, ttl_ms, grace_ms, {})
    args = list(args)
    if os.environ.get("EVIDENCE_SMOKE"):
        for opt, val in (("--runs", "1"), ("--seconds", "8")):
            if opt in args:
                args[args.index(opt) + 1] = val
    argv = (["scripts/conformance", lang] + args
            + ["--ttl-ms", str(ttl_ms), "--grace-ms", str(grace_ms), "--out", f"chaos-out/evidence-{section}"])
    c, cmd = ev.conformance_campaign(argv, {} if vectors else {"CONFORMANCE_VECTORS": "skip"})
    ev.add(section, "summary", c.line, "line", cmd)
    for k, v in c.fields.items():
        if isinstance(v, (int, float)):
            ev.add(section, k, v, "ms" if k.endswith("_ms") else "count", cmd)
    for rule, n in sorted(c.rules.items()):
        ev.add(section, f"violations_{rule}", n, "count", cmd)
    ev.check(c.violations == 0, f"{section}: violations={c.violations}")
    return c.fields


def quorum_handover(ev: Evidence) -> None:
    """Hand-over on resign, quorum mode beside one primary, same seed and machine in one run,
    per language of `--langs` (issue 27: within 2x at p50 in every language). Followers in
    quorum mode wait on one node, then run one round (client-protocol.md Q10); with one
    primary they BLOCK. A language's two campaigns run back to back, so that its ratio compares
    figures taken under the same load. Sections: Rust's `quorum3_handover` and
    `replica_handover` (docs quote them), every other language's with `_LANG` appended."""
    ttl, grace = 1000, 1000
    args = ["--runs", "3", "--electors", "3", "--seconds", "30", "--fault", "resign",
            "--seed", "17"]
    for lang in ev.langs:
        suffix = "" if lang == "rust" else f"_{lang}"
        qs, rs = f"quorum3_handover{suffix}", f"replica_handover{suffix}"
        q = handover_campaign(ev, lang, qs, ["--topology", "quorum3"] + args, ttl, grace, True)
        one = handover_campaign(ev, lang, rs, ["--topology", "replica"] + args, ttl, grace, False)
        qp, op = q.get("handover_p50_ms"), one.get("handover_p50_ms")
        if isinstance(qp, (int, float)) and isinstance(op, (int, float)) and op > 0:
            ev.add(qs, "ratio_p50_to_one_primary", round(qp / op, 2), "ratio",
                   f"{qs}/handover_p50_ms / {rs}/handover_p50_ms")
            ev.check(qp <= 2 * op, f"{lang}: quorum hand-over p50 {qp} ms above 2x one primary's {op} ms")
        else:
            ev.check(False, f"quorum_handover {lang}: no hand-over measured")


def netns(ev: Evidence) -> None:
    """Kernel faults on each elector's veth link (docs/evidence.md §2; needs root), and the
    clock-rate pair: within the drift allowance (x1.005) no violation; beyond it (x0.95, the
    elector's clock slower, so it believes it has more time) with fencing off the checker must
    report violations — the negative control of the one residual clock assumption."""
    # Ten runs draw about 30 faults of 4 kinds, so one of each is a safe minimum.
    kinds = "loss,oneway,cut-resource,heal-delivers"
    ev.campaign("netns_campaign", ["--netns", "--fault", kinds, "--runs", "10", "--electors", "3",
                "--seconds", "20", "--seed", "3030", "--min-faults",
                ",".join(k + "=1" for k in kinds.split(","))], 1000, 1000, {})
    # The same kernel faults with each topology's own (its default set plus the netns kinds):
    # quorum3 (every node's proxy on the elector's link) and Sentinel (servers and Sentinels
    # on the harness's service address, evidence.md §2).
    for topo, seed in (("quorum3", "3031"), ("sentinel", "3032")):
        ev.campaign(f"netns_{topo}", ["--netns", "--topology", topo, "--runs", "6", "--electors", "3",
                    "--seconds", "20", "--seed", seed, "--min-faults",
                    "crash=1,pause=1,handover=1," + ",".join(k + "=1" for k in kinds.split(","))],
                    1000, 1000, {})
    # TTL 1000 ms: at x0.95 the elector's deadline lies ~30 ms past the server's expiry. Same
    # seed and faults; only the rate differs.
    drift = ["--fault", "kill,pause", "--runs", "3", "--electors", "3", "--seconds", "20",
             "--seed", "3096"]
    ev.campaign("drift_within_allowance", ["--elector-clock-rate", "1.005"] + drift, 1000, 1000, {})
    ev.campaign("drift_beyond_allowance_control", ["--elector-clock-rate", "0.95", "--no-fence"]
                + drift, 1000, 1000, {}, must_violate=True)


# The long campaigns (issue 30 item 3): per language, at least LONG_MIN_RUNS runs over every
# fault the harness has: the proxy's (late delivery among them), the kernel's (`--netns`, which
# draws the proxy's faults too) and, for Rust, clock-rate drift within the allowance. Runs are
# short (8 s, 3 electors, TTL 500 ms: about 2 faults a run) so that 200 per language fit in a
# few hours on the 2-core machine; the netns campaign and the others run side by side (two
# campaigns at once, never two netns harnesses: their nftables tables are per pid, but two
# would halve the CPU each run gets).
LONG_MIN_RUNS = 200
LONG_SECONDS, LONG_ELECTORS = "8", "3"
# (section suffix, runs, extra options); Rust's proxy share is split with the drift campaign.
LONG_NETNS_RUNS = 100
LONG_PROXY_RUNS = {"rust": 60}
LONG_PROXY_RUNS_DEFAULT = 100
LONG_DRIFT_RUNS = 40
LONG_SEED = {"rust": 30100, "python": 30200, "go": 30300, "node": 30400, "java": 30500}
NETNS_KINDS = ("loss", "oneway", "cut-resource", "heal-delivers")


def long_min_faults(runs: int, netns: bool) -> str:
    """The stated minimum of a long campaign: crash, pause, partition and hand-over (and late
    delivery, and each netns kind) at least runs/20 times each. The driver draws the kinds
    still short first (harness/src/driver/summary.rs `draw_kind`), so a campaign below it had
    its faults skipped (a broken fault, electors that never led): it tested too little, and
    fails. (Under a uniform draw, about runs/9 of each of 17 kinds, it failed good campaigns
    by chance.)"""
    n = max(1, runs // 20)
    kinds = ["crash", "pause", "partition", "handover", "late-delivery"] + (list(NETNS_KINDS) if netns else [])
    return ",".join(f"{k}={n}" for k in kinds)


@dataclass
class LongCampaign:
    section: str
    argv: list[str]
    runs: int


def long_campaigns(ev: Evidence, lang: str) -> tuple[list[LongCampaign], list[LongCampaign]]:
    """(the netns campaign, the others) of one language."""
    smoke = bool(os.environ.get("EVIDENCE_SMOKE"))
    base = ["--electors", LONG_ELECTORS, "--seconds", LONG_SECONDS, "--ttl-ms", str(TTL), "--grace-ms", str(GRACE)]
    seed = LONG_SEED.get(lang, 30900)

    def make(section: str, argv: list[str], runs: int, netns: bool, seed: int) -> LongCampaign:
        runs = 1 if smoke else runs
        return LongCampaign(section, argv + base + [
            "--runs", str(runs), "--seed", str(seed), "--min-faults", long_min_faults(runs, netns),
            "--out", f"chaos-out/evidence-long-{section}"], runs)

    conf = ["scripts/conformance", lang]
    netns = [make(f"long_{lang}_netns", conf + ["--netns"], LONG_NETNS_RUNS, True, seed)]
    other = [make(f"long_{lang}_proxy", conf, LONG_PROXY_RUNS.get(lang, LONG_PROXY_RUNS_DEFAULT), False, seed + 1)]
    if lang == "rust":
        # Within the drift allowance (x1.005 against the library's 1 %): 0 violations expected.
        # Only our Rust elector records its history on the real clock under libfaketime.
        other.append(make("long_rust_drift", ["scripts/chaos", "--elector-clock-rate", "1.005"],
                          LONG_DRIFT_RUNS, False, seed + 2))
    return netns, other


RUN_LINE = re.compile(r"^run-(\d{4}) seed=\d+ violations=(\d+)")


def run_watched(ev: Evidence, c: LongCampaign,
                started: threading.Event | None = None) -> tuple[int, str, str, str | None]:
    """Runs one long campaign, its output to chaos-out/<section>.log as it goes (to watch it),
    and stops it at the first run with a violation: that is a finding to read, not a figure to
    pile more runs onto; its folder is kept as the harness left it. Returns (exit status,
    stdout, command, the stop reason or None)."""
    cmd = " ".join(shlex.quote(a) for a in c.argv)
    print(f"evidence: $ {cmd}", flush=True)
    os.makedirs(os.path.join(ROOT, "chaos-out"), exist_ok=True)
    log = os.path.join(ROOT, "chaos-out", f"evidence-{c.section}.log")
    with open(log, "w") as out, open(log + ".err", "w") as err:
        p = subprocess.Popen(c.argv, cwd=ROOT, text=True, stdout=out, stderr=err, start_new_session=True)
        stop: str | None = None
        seen = 0
        while True:
            done = p.poll() is not None
            with open(log) as fh:
                lines = fh.read().splitlines()
            for line in lines[seen:]:
                m = RUN_LINE.match(line)
                if m and int(m.group(2)) > 0 and stop is None:
                    stop = f"stopped after run-{m.group(1)}: {m.group(2)} violation(s), folder kept ({line})"
                if line.startswith("chaos: ") and started is not None:
                    started.set()  # past its build and vector tests
            seen = len(lines)
            if done:
                break
            if stop is not None:
                os.killpg(p.pid, 15)  # its servers and electors die with it
                p.wait()
                break
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
    with open(log) as fh:
        stdout = fh.read()
    if started is not None:
        started.set()
    print(f"evidence: {c.section}: exit {p.returncode}" + (f", {stop}" if stop else ""), flush=True)
    return p.returncode, stdout, cmd, stop


def merge_kinds(lines: list[str]) -> str:
    """`kill=3 pause=2` + `kill=1 loss=4` -> `kill=4 loss=4 pause=2` (sorted by kind)."""
    total: dict[str, int] = {}
    for line in lines:
        for kv in line.split():
            k, _, n = kv.partition("=")
            if n.isdigit():
                total[k] = total.get(k, 0) + int(n)
    return " ".join(f"{k}={total[k]}" for k in sorted(total)) or "none"


def record_long(ev: Evidence, c: LongCampaign, result: tuple[int, str, str, str | None]) -> tuple[int, int, int, str]:
    """The figures of one long campaign; returns (runs, violations, faults, faults per kind)."""
    rc, stdout, cmd, stop = result
    if stop is not None:
        done = sum(1 for ln in stdout.splitlines() if RUN_LINE.match(ln))
        ev.check(False, f"{c.section}: {stop}")
        ev.add(c.section, "stopped", stop, "line", cmd)
        return done, sum(int(m.group(2)) for ln in stdout.splitlines() if (m := RUN_LINE.match(ln))), 0, "none"
    if rc not in (0, 1, 3):
        raise StepFailed(f"{cmd} exited {rc}: {stdout[-1500:]}")
    short = [ln for ln in stdout.splitlines() if ln.startswith("--min-faults not met")]
    ev.check(rc != 3, f"{c.section}: {short[0] if short else '--min-faults not met'}")
    camp = read_campaign(stdout, 1 if rc == 3 else rc, cmd)
    kinds = "none"
    for ln in stdout.splitlines():
        if ln.startswith("faults per kind: "):
            kinds = ln[len("faults per kind: "):]
    ev.add(c.section, "summary", camp.line, "line", cmd)
    ev.add(c.section, "faults_per_kind", kinds, "line", cmd)
    ev.add(c.section, "min_faults", long_min_faults(c.runs, "--netns" in c.argv), "line", cmd)
    for k, v in camp.fields.items():
        if isinstance(v, (int, float)):
            ev.add(c.section, k, v, "ms" if k.endswith("_ms") else "count", cmd)
    for rule, n in sorted(camp.rules.items()):
        ev.add(c.section, f"violations_{rule}", n, "count", cmd)
    ev.check(camp.violations == 0, f"{c.section}: violations={camp.violations}")
    ev.check(camp.runs == c.runs, f"{c.section}: {camp.runs} runs, asked for {c.runs}")
    faults = camp.fields.get("faults")
    return camp.runs, camp.violations, int(faults) if isinstance(faults, int) else 0, kinds


def long(ev: Evidence) -> None:
    """Per language, at least 200 short runs (8 s, 3 electors, TTL 500 ms) over every fault:
    a --netns campaign (kernel faults and the proxy's), a proxy campaign (late delivery among
    them) and, for Rust, clock-rate drift within the allowance (x1.005); each campaign fails
    below its stated minimum of crash, pause, partition, hand-over and late-delivery faults
    (and each netns kind); faults per kind and totals per language. Needs root (--netns);
    about 20 minutes per language on the 2-core machine, the two campaigns side by side."""
    for lang in ev.langs:
        netns, other = long_campaigns(ev, lang)
        results: dict[str, tuple[int, str, str, str | None]] = {}
        failed: list[BaseException] = []

        # The second queue starts once the first campaign is past its build and vector tests:
        # two builds of one client at once (javac, tsc, go build into the same folder) clash.
        built = threading.Event()

        def queue(cs: list[LongCampaign], started: threading.Event | None) -> None:
            for c in cs:
                try:
                    results[c.section] = run_watched(ev, c, started)
                    started = None
                except BaseException as e:  # re-raised below, in the step's thread
                    failed.append(e)
                    return
                if results[c.section][3] is not None:
                    return  # a violation: this language's queue stops

        threads = [threading.Thread(target=queue, args=(netns, built)),
                   threading.Thread(target=queue, args=(other, None))]
        threads[0].start()
        built.wait()
        threads[1].start()
        for t in threads:
            t.join()
        if failed:
            raise failed[0]
        runs = violations = faults = 0
        kinds: list[str] = []
        for c in netns + other:
            if c.section not in results:
                continue  # not run: the other queue stopped at a violation (reported there)
            r, v, f, k = record_long(ev, c, results[c.section])
            runs, violations, faults = runs + r, violations + v, faults + f
            kinds.append(k)
        section = f"long_{lang}"
        cmd = "scripts/evidence --steps long --langs " + lang
        ev.add(section, "runs", runs, "count", cmd)
        ev.add(section, "violations", violations, "count", cmd)
        ev.add(section, "faults", faults, "count", cmd)
        ev.add(section, "faults_per_kind", merge_kinds(kinds), "line", cmd)
        ev.add(section, "campaigns", ", ".join(c.section for c in netns + other if c.section in results), "line", cmd)
        ev.add(section, "chaos_profile", os.environ.get("CHAOS_PROFILE", "release"), "line", cmd)
        ev.check(violations == 0, f"{section}: violations={violations}")
        if not os.environ.get("EVIDENCE_SMOKE"):
            ev.check(runs >= LONG_MIN_RUNS, f"{section}: {runs} runs, fewer than {LONG_MIN_RUNS}")


CONFORMANCE_FIGURES = ("violations", "handover_p50_ms", "handover_p99_ms", "crash_failover_p50_ms",
                       "crash_failover_p99_ms", "faults")


def record_conformance(ev: Evidence, section: str, c: Campaign, cmd: str) -> None:
    """A language's campaign that must be clean: its summary, figures and the check."""
    ev.add(section, "summary", c.line, "line", cmd)
    for k in CONFORMANCE_FIGURES:
        v = c.fields.get(k)
        if isinstance(v, (int, float)):
            ev.add(section, k, v, "ms" if k.endswith("_ms") else "count", cmd)
    ev.check(c.violations == 0, f"{section}: violations={c.violations}")


def negative_control(ev: Evidence, section: str, argv: list[str]) -> None:
    """A language's elector made unsafe (it ignores its deadline, the resource does not fence)
    under pause and partition faults: the campaign must catch it, or the clean campaigns'
    violations=0 proves nothing about that language's loop."""
    c, cmd = ev.conformance_campaign(argv + [
        "--elector-mode", "ignore-deadline", "--no-fence", "--fault", "pause,partition"])
    ev.add(section, "summary", c.line, "line", cmd)
    ev.add(section, "violations", c.violations, "count", cmd)
    for rule, n in sorted(c.rules.items()):
        ev.add(section, f"violations_{rule}", n, "count", cmd)
    ev.check(c.returncode == 1 and c.violations > 0,
             f"{section}: negative control NOT caught ({c.line})")


def conformance_lang(ev: Evidence, lang: str) -> None:
    args = ["scripts/conformance", lang]
    if ev.quick:
        args += ["--runs", "1", "--seconds", "15"]
    else:
        # 4 runs of 20 s: with 2 the seeded schedule drew only Redis restarts (no crash, no
        # hand-over), too little for a client's campaign.
        args += ["--runs", "4", "--seconds", "20"]
    args += ["--out", f"chaos-out/evidence-{lang}"]
    c, cmd = ev.conformance_campaign(args)
    record_conformance(ev, f"conformance_{lang}", c, cmd)
    if ev.quick:
        return
    negative_control(ev, f"conformance_{lang}_negative_control", [
        "scripts/conformance", lang, "--runs", "2", "--seconds", "20",
        "--out", f"chaos-out/evidence-{lang}-negative"])


def quorum_conformance(ev: Evidence) -> None:
    """Each language's elector in quorum mode (issue 27 item 1): quorum3 and quorum5 campaigns
    with every node and elector fault, and the quorum negative control (the elector made
    unsafe, on quorum3), which must be caught."""
    ttl, grace = "1000", "1000"
    for lang in ev.langs:
        base = ["scripts/conformance", lang, "--electors", "3", "--seconds", "20",
                "--ttl-ms", ttl, "--grace-ms", grace]
        # Each node with a replica, so that node-failover runs too (without one it is skipped);
        # the minimums make every campaign draw elector and node faults alike (a first try
        # without them drew 9 faults in 4 quorum3 runs, no hand-over, no node failover).
        for topo, runs, seed, mins in (
                ("quorum3", "6", "17", "crash=1,pause=1,partition=1,handover=1,node-kill=1,node-failover=1"),
                ("quorum5", "3", "5", "crash=1,partition=1,handover=1,node-failover=1")):
            c, cmd = ev.conformance_campaign(base + [
                "--topology", topo, "--node-replicas", "--runs", runs, "--seed", seed,
                "--min-faults", mins, "--out", f"chaos-out/evidence-{lang}-{topo}"])
            ev.check(c.returncode != 3, f"conformance_{lang}_{topo}: --min-faults not met")
            section = f"conformance_{lang}_{topo}"
            record_conformance(ev, section, c, cmd)
            ev.check(c.runs == int(runs), f"{section}: {c.runs} runs, asked for {runs}")
        negative_control(ev, f"conformance_{lang}_quorum3_negative_control", base + [
            "--topology", "quorum3", "--runs", "2", "--seed", "23",
            "--out", f"chaos-out/evidence-{lang}-quorum3-negative"])


def sentinel_conformance(ev: Evidence) -> None:
    """Each language's elector on Sentinel (3 Sentinels, a primary, 2 replicas), given the
    Sentinels' redis+sentinel:// URL (docs/conformance.md "The Sentinel topology"): through the
    proxy (the sentinel step's recipe: down-after 1 s, min-replicas-max-lag 2, grace 5 s), and
    with every elector in its own network namespace under the kernel's faults (the netns step's
    Sentinel campaign; needs root). Each must be clean and draw its minimum of every kind."""
    netns_kinds = ("loss", "oneway", "cut-resource", "heal-delivers")
    for lang in ev.langs:
        for name, extra, ttl, grace, runs, seed, mins in (
                ("sentinel", ["--down-after-ms", "1000", "--min-replicas-max-lag", "2", "--seconds", "40"],
                 "1000", "5000", "2", "1500", "crash=1,pause=1,handover=1,sentinel-failover=1"),
                ("netns_sentinel", ["--netns", "--seconds", "30"], "1000", "1000", "2", "3032",
                 "crash=1,pause=1,handover=1," + ",".join(k + "=1" for k in netns_kinds))):
            section = f"conformance_{lang}_{name}"
            c, cmd = ev.conformance_campaign(["scripts/conformance", lang, "--topology", "sentinel",
                                              "--electors", "3", "--runs", runs, "--seed", seed,
                                              "--ttl-ms", ttl, "--grace-ms", grace, "--min-faults", mins,
                                              "--out", f"chaos-out/evidence-{lang}-{name}"] + extra)
            ev.check(c.returncode != 3, f"{section}: --min-faults not met")
            record_conformance(ev, section, c, cmd)
            ev.check(c.runs == int(runs), f"{section}: {c.runs} runs, asked for {runs}")


def conformance(ev: Evidence) -> None:
    """Each language's conformance campaign, and (full mode) its negative control."""
    for lang in ev.langs:
        if lang != "rust" and not os.path.exists(os.path.join(ROOT, "clients", lang, "conformance.sh")):
            ev.check(False, f"conformance {lang}: clients/{lang}/conformance.sh missing")
            continue
        conformance_lang(ev, lang)


def scale(ev: Evidence) -> None:
    """scripts/scale --json: 1M leases vs 1M SET PX keys, persistence, renew at scale,
    promotion, expiry storm (docs/scale.md §2)."""
    out = os.path.join(ROOT, "target", "evidence-scale.json")
    argv = ["scripts/scale", "--json", out] + (["100000", "20000"] if ev.quick else [])
    r, cmd = ev.run(argv)
    if r.returncode != 0 or not os.path.exists(out):
        raise StepFailed(f"{cmd} exited {r.returncode}: {r.stdout[-1500:]}{r.stderr[-1500:]}")
    with open(out) as fh:
        figs = json.load(fh)
    for name, v in figs.items():
        ev.add("scale", name, v["value"], v["unit"], cmd)
    ev.check(bool(figs), "scale: no figures")


def persist(ev: Evidence) -> None:
    """scripts/callgrind-persist: instructions per key of SAVE and the AOF rewrite child with
    and without the RDB preamble, leases against SET PX keys (docs/scale.md §2)."""
    r, cmd = ev.run(["scripts/callgrind-persist"], env={"PERSIST_PORT": "6491"}, timeout=3600)
    if r.returncode != 0:
        raise StepFailed(f"{cmd} exited {r.returncode}: {r.stdout[-1500:]}{r.stderr[-1500:]}")
    n = 0
    for line in r.stdout.splitlines():
        m = re.match(r"^(\w+)\s+SET PX\s+(\d+)\s+lease\s+(\d+)\s+([0-9.]+)x", line)
        if m:
            n += 1
            ev.add("persist", f"{m.group(1)}_set_px", int(m.group(2)), "instructions/key", cmd)
            ev.add("persist", f"{m.group(1)}_lease", int(m.group(3)), "instructions/key", cmd)
            ev.add("persist", f"{m.group(1)}_ratio", float(m.group(4)), "ratio", cmd)
    ev.check(n == 3, f"persist: {n} of 3 lines")


def model(ev: Evidence) -> None:
    """scripts/model (docs/model.md): states explored and time per configuration; no
    violation in a check, a counterexample in every negative control (scripts/model itself
    exits non-zero when a control is not caught)."""
    r, cmd = ev.run(["scripts/model"], timeout=5400)
    if r.returncode != 0:
        raise StepFailed(f"{cmd} exited {r.returncode}: {r.stdout[-1500:]}{r.stderr[-1500:]}")
    n = 0
    args = ""
    for line in r.stdout.splitlines():
        if line.startswith("-- lease-model "):
            args = line[len("-- lease-model "):].strip()
            continue
        m = re.match(r"^(.*): (\d+) states \((\d+) unique\), depth (\d+), ([0-9.]+) s, violations: \[([^\]]*)\]", line)
        if not m or not args:
            continue
        n += 1
        control = "--control" in args or "--release-on-lost" in args
        ev.add("model", f"{args}: unique states", int(m.group(3)), "states", cmd)
        ev.add("model", f"{args}: states", int(m.group(2)), "states", cmd)
        ev.add("model", f"{args}: seconds", float(m.group(5)), "s", cmd)
        ev.add("model", f"{args}: violations", m.group(6).strip() or "none", "properties", cmd)
        if control:
            ev.check(m.group(6).strip() != "", f"model: control {args} found no counterexample")
        else:
            ev.check(m.group(6).strip() == "", f"model: {args}: violations {m.group(6)}")
        args = ""
    ev.check(n > 0, "model: no check reported")


def fuzz(ev: Evidence) -> None:
    """scripts/fuzz (docs/scale.md §4): executions per target, 0 crashes."""
    secs = "10" if ev.quick else "60"
    r, cmd = ev.run(["scripts/fuzz", "--seconds", secs])
    if r.returncode != 0:
        raise StepFailed(f"{cmd} exited {r.returncode}: {r.stdout[-1500:]}{r.stderr[-1500:]}")
    for line in r.stdout.splitlines():
        m = re.match(r"^fuzz: (\S+)\s+(\d+) runs in (\d+) s, cov: (\d+), 0 crashes", line)
        if m:
            ev.add("fuzz", f"{m.group(1)} executions", int(m.group(2)), "executions", cmd)
            ev.add("fuzz", f"{m.group(1)} coverage", int(m.group(4)), "libFuzzer cov", cmd)
        m = re.match(r"^fuzz: (\d+) runs in total, 0 crashes", line)
        if m:
            ev.add("fuzz", "total executions", int(m.group(1)), "executions", cmd)
            ev.add("fuzz", "crashes", 0, "count", cmd)
            ev.check(int(m.group(1)) > 1000, "fuzz: too few executions")


# Tests that print what they measured (`cargo test ... -- --nocapture`); docs/failover.md,
# docs/operations.md, docs/protocol.md, docs/deploy.md and docs/quorum.md quote these lines.
TEST_FIGURES = [
    ("redis-lease", ["failover", "blocking", "cluster", "clock_jump"]),
    ("redis-lease-client", ["elector_redis", "elector_fake", "lease_run", "quorum_redis", "sentinel"]),
]
DURATION = re.compile(r"\d(\.\d+)?\s?(ns|µs|us|ms|s)\b")


def test_line_key(line: str) -> str:
    """A measured line's name: its words up to the first `:` or `(`, numbers as `#`
    ("kill -9 of leader lease-run: child dead after 1.1ms" -> "kill -# of leader lease-run")."""
    words = re.sub(r"[0-9][0-9.]*(?:ns|µs|us|ms|s)?\b", "#", line)
    return re.split(r"[:(\[]", words, maxsplit=1)[0].strip()[:60] or "line"


def measured_lines(output: str) -> list[str]:
    """The lines of a test run's output that carry a measured figure (a duration or a token)."""
    out = []
    for line in output.splitlines():
        # With --nocapture a test's first line follows libtest's `test name ... `.
        line = re.sub(r"^test \S+ \.\.\. ", "", line.strip())
        if ((not DURATION.search(line) and " token" not in line)
                or line.startswith(("test ", "running ", "Finished", "Running"))
                or "test result:" in line or len(line) > 400):
            continue
        out.append(line)
    return out


def tests(ev: Evidence) -> None:
    """The figures the integration tests print (`-- --nocapture`), line by line: each
    measured line, verbatim, per test file. The tests assert their own bounds; this records
    the values seen in this run."""
    build = ev.run(["cargo", "build", "-q", "-p", "redis-lease"])[0]
    if build.returncode != 0:
        raise StepFailed(f"cargo build -p redis-lease: {build.stderr[-1500:]}")
    for pkg, files in TEST_FIGURES:
        for t in files:
            r, cmd = ev.run(["cargo", "test", "-p", pkg, "--test", t, "--",
                             "--nocapture", "--test-threads=1"], timeout=1800)
            if r.returncode != 0:
                raise StepFailed(f"{cmd} exited {r.returncode}: {r.stdout[-1500:]}{r.stderr[-1500:]}")
            seen: dict[str, int] = {}
            lines = measured_lines(r.stdout + "\n" + r.stderr)
            for line in lines:
                # Named by the words before the first number (stable across runs, unlike a
                # line number), `#2`... when a test prints the same kind of line again.
                key = test_line_key(line)
                seen[key] = seen.get(key, 0) + 1
                if seen[key] > 1:
                    key += f" #{seen[key]}"
                ev.add(f"test_{t}", key, line.replace("|", "/"), "line", cmd)
            ev.check(bool(lines), f"tests: {t} printed no measured figure")


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[Evidence], None]
    full: bool  # in a full run (all steps but the long ones)
    quick: bool  # in a quick (CI) run


# In order: a run without --steps runs the rows it includes from top to bottom.
STEPS: tuple[Step, ...] = (
    Step("bench", bench, full=True, quick=True),
    Step("chaos", chaos, full=True, quick=True),
    Step("handover", handover, full=True, quick=True),
    Step("many", many, full=True, quick=False),
    Step("controls", controls, full=True, quick=False),
    Step("sentinel", sentinel, full=True, quick=False),
    Step("quorum", quorum, full=True, quick=True),
    Step("conformance", conformance, full=True, quick=True),
    # Every language's elector on quorum3 and quorum5, and its quorum negative control.
    Step("quorum_conformance", quorum_conformance, full=True, quick=False),
    # Every language's elector on Sentinel, through the proxy and in network namespaces (root).
    Step("sentinel_conformance", sentinel_conformance, full=True, quick=False),
    Step("tests", tests, full=True, quick=False),
    Step("scale", scale, full=True, quick=False),
    Step("persist", persist, full=True, quick=False),
    Step("model", model, full=True, quick=False),
    Step("fuzz", fuzz, full=True, quick=False),
    # The 100-run quorum campaign, about 40 minutes: only when named in --steps.
    Step("quorum_long", quorum_long, full=False, quick=False),
    # Quorum hand-over beside one primary's, about 4 minutes per language: only when named
    # in --steps.
    Step("quorum_handover", quorum_handover, full=False, quick=False),
    # Kernel faults and clock-rate drift (root): only when named in --steps.
    Step("netns", netns, full=False, quick=False),
    # The long campaigns per language (issue 30; root, about 20 minutes per language): full
    # mode's last step, `--steps long --langs L` one language at a time.
    Step("long", long, full=True, quick=False),
)
BY_NAME = {s.name: s for s in STEPS}
ALL_STEPS = [s.name for s in STEPS if s.full]
QUICK_STEPS = [s.name for s in STEPS if s.quick]
