"""scripts/compare without running a campaign: its table, its fault list, and how it reads a
campaign folder into a row (violations by rule, stale writes, skipped faults) and renders it.
Run: python3 -m unittest discover -s scripts/tests"""

import argparse
import importlib.machinery
import importlib.util
import json
import os
import sys
import tempfile
import types
import unittest

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, SCRIPTS)


def load_compare() -> types.ModuleType:
    loader = importlib.machinery.SourceFileLoader("compare", os.path.join(SCRIPTS, "compare"))
    spec = importlib.util.spec_from_loader("compare", loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["compare"] = mod  # dataclasses look their module up there
    loader.exec_module(mod)
    return mod


compare = load_compare()


def campaign_folder(root: str) -> str:
    """A finished two-run campaign: one stale write and one overlap in run 1, a skipped fault."""
    out = os.path.join(root, "peer")
    for i in range(2):
        os.makedirs(os.path.join(out, f"run-{i:04}"))
    viol = [{"kind": "stale_accepted", "detail": "x"}, {"kind": "overlap", "detail": "y"}]
    for i, v in enumerate([[], viol]):
        with open(os.path.join(out, f"run-{i:04}", "report.json"), "w") as fh:
            json.dump({"violations": v}, fh)
    with open(os.path.join(out, "run-0000", "run.jsonl"), "w") as fh:
        fh.write(json.dumps({"ev": "fault", "kind": "kill", "skipped": "no leader"}) + "\n")
        fh.write(json.dumps({"ev": "fault", "kind": "restart", "skipped": None}) + "\n")
        fh.write('{"ev": "fau')  # a torn last line is skipped
    with open(os.path.join(out, "run-0001", "run.jsonl"), "w") as fh:
        fh.write(json.dumps({"ev": "fault", "kind": "kill", "skipped": "no leader"}) + "\n")
    with open(os.path.join(out, "summary.json"), "w") as fh:
        json.dump({"runs": 2, "violations": 2, "faults": {"restart": 1}}, fh)
    return out


class Compare(unittest.TestCase):
    def test_fault_list_is_the_harness_default_set(self) -> None:
        faults = compare.all_faults()
        for k in ("kill", "pause", "restart", "failover", "clock-jump", "late-delivery"):
            self.assertIn(k, faults)
        self.assertEqual(len(faults), len(set(faults)))

    def test_table_rows(self) -> None:
        names = [p.name for p in compare.PEERS]
        self.assertEqual(len(names), len(set(names)))
        self.assertEqual(names[0], "redis-lease")
        # Only the libraries that hand out a token run fenced (issue 26: the others get a
        # synthetic token and an unfenced resource), and only our own row must be safe.
        with_token = {"redis-lease", "redisson-fencedlock", "etcd-election", "curator-leaderlatch"}
        for p in compare.PEERS:
            self.assertEqual(p.must_be_safe, p.name == "redis-lease", p.name)
            self.assertEqual(p.fenced, p.name in with_token, p.name)
            if p.elector_cmd is not None:
                self.assertIsNotNone(p.install, p.name)
        quick = compare.pick(compare.PEERS, None, True)
        self.assertIn("redis-lease", [p.name for p in quick])
        self.assertGreaterEqual(len(quick), 3)
        self.assertEqual([p.name for p in compare.pick(compare.PEERS, ["redsync"], False)], ["redsync"])
        with self.assertRaises(SystemExit):
            compare.pick(compare.PEERS, ["no-such-peer"], False)

    def test_pinned_versions_match_the_lockfiles(self) -> None:
        self.assertEqual(compare.go_version("redsync", "github.com/go-redsync/redsync/v4"), "v4.18.1")
        root = os.path.join(SCRIPTS, "..", "peers")
        with open(os.path.join(root, "node-redlock", "package-lock.json")) as fh:
            lock = json.load(fh)
        self.assertEqual(lock["packages"]["node_modules/redlock"]["version"], "4.2.0")
        for peer, dist, version in (("redis-py-lock", "redis", "8.1.0"),
                                    ("python-redis-lock", "python-redis-lock", "4.0.1")):
            with open(os.path.join(root, peer, "requirements.txt")) as fh:
                self.assertIn(f"{dist}=={version} \\", fh.read())

    def test_a_campaign_folder_becomes_a_row(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            out = campaign_folder(d)
            line = ("runs=2 violations=2 crash_failover_n=1 crash_failover_p50_ms=2100.5 "
                    "crash_failover_p99_ms=2300.0 handover_n=0 leaderless_max_ms=4200")
            c = compare.read_campaign(f"chaos: topology=replica out={out}\n{line}\n", 1, "peer")
            f = compare.figures(c, out)
        self.assertEqual(f["violations"], 2)
        self.assertEqual(f["stale_writes_accepted"], 1)
        self.assertEqual(f["violations_by_rule"]["overlap"], 1)
        self.assertEqual(f["violations_by_rule"]["early_grant"], 0)
        self.assertEqual(f["faults_skipped"], {"kill: no leader": 2})
        self.assertEqual(f["faults_drawn"], {"restart": 1})
        self.assertEqual(f["crash_failover_p99_ms"], 2300.0)
        self.assertIsNone(f["handover_p50_ms"])
        row = {"name": "peer", "language": "Go", "library": "lib", "version": "v1", "backend": "redis",
               "fenced": False, "notes": "n", "command": "cmd", "faults_not_applicable": {}, **f}
        doc = {"date": "2026-12-02 01:00", "commit": "abc", "quick": False, "command": "scripts/compare",
               "seed": 1, "ttl_ms": 2000, "runs": 2, "seconds": 60, "electors": 5,
               "machine": {"cores": 2, "cpu": "c", "memory_gib": 1, "kernel": "k", "load_at_start": "0",
                           "load_at_end": "0"},
               "servers": {"redis": "7"}, "rows": [row]}
        md = compare.render_md(doc)
        self.assertIn("| peer | v1 | Go | redis | no | 2 | 1 | 2100/2300 | –/– | – | 4200 | restart=1 | 2 |", md)

    def test_a_row_adds_its_leader_campaign(self) -> None:
        def camp(viol: int, stale: int, faults: dict[str, int], crash: float | None,
                 leaderless: float) -> dict[str, object]:
            return {"command": "c", "runs": 1, "violations": viol,
                    "violations_by_rule": {"overlap": viol, "stale_accepted": stale},
                    "stale_writes_accepted": stale, "faults_drawn": faults,
                    "faults_skipped": {"kill: no leader": 1}, "writes_ok": 10, "writes_fenced": None,
                    "leaderless_max_ms": leaderless, "crash_failover_n": 0 if crash is None else 2,
                    "crash_failover_p50_ms": crash, "crash_failover_p99_ms": crash,
                    "handover_n": 0, "handover_p50_ms": None, "handover_p99_ms": None,
                    "redis_back_p99_ms": 40.0, "summary_line": "runs=1"}
        main = camp(3, 1, {"restart": 2, "pause": 1}, None, 900.0)
        lead = camp(1, 0, {"kill": 2}, 2100.0, 2300.0)
        row = compare.combine(main, lead)
        self.assertEqual(row["violations"], 4)
        self.assertEqual(row["violations_by_rule"], {"overlap": 4, "stale_accepted": 1})
        self.assertEqual(row["faults_drawn"], {"restart": 2, "pause": 1, "kill": 2})
        self.assertEqual(row["faults_skipped"], {"kill: no leader": 2})
        self.assertEqual(row["crash_failover_p50_ms"], 2100.0)  # the leader campaign's
        self.assertEqual(row["redis_back_p99_ms"], 40.0)  # the all-faults campaign's
        self.assertEqual(row["leaderless_max_ms"], 2300.0)
        self.assertEqual(row["writes_ok"], 20)
        self.assertIsNone(row["writes_fenced"])
        self.assertEqual(row["runs"], 2)
        self.assertNotIn("command", row)
        self.assertEqual(row["campaigns"]["leader"]["violations"], 1)
        self.assertEqual(compare.combine(main, None)["violations"], 3)

    def test_every_cell_is_a_figure(self) -> None:
        row = {"name": "peer", "version": "v1", "backend": "redis", "fenced": False, "runs": 3,
               "violations": 2, "stale_writes_accepted": 1,
               "violations_by_rule": {"overlap": 1, "stale_accepted": 1},
               "crash_failover_p50_ms": 2100.5, "crash_failover_p99_ms": 2300.0,
               "handover_p50_ms": None, "handover_p99_ms": None, "redis_back_p99_ms": None,
               "leaderless_max_ms": 4200.0, "faults_asked": ["kill", "resign"],
               "faults_drawn": {"kill": 2}, "faults_skipped": {}, "command": "cmd"}
        skipped = {"name": "other", "version": "v2", "backend": "etcd", "fenced": True,
                   "not_run": "why"}
        figs = compare.doc_figures({"command": "scripts/compare", "rows": [row, skipped]})
        got = {(f["section"], f["name"]): f["value"] for f in figs}
        self.assertEqual(got[("peer", "violations")], 2)
        self.assertEqual(got[("peer", "rule_overlap")], 1)
        self.assertEqual(got[("peer", "crash_failover_ms")], "2100/2300")
        self.assertEqual(got[("peer", "crash_failover_p50_ms")], 2100.5)
        self.assertEqual(got[("peer", "handover_ms")], "–/–")
        self.assertNotIn(("peer", "handover_p50_ms"), got)  # no sample, no number
        self.assertEqual(got[("peer", "faults_drawn")], "kill=2 resign=0")
        self.assertEqual(got[("other", "not_run")], "why")
        self.assertNotIn(("other", "violations"), got)
        self.assertEqual(len(got), len(figs))  # section/name pairs are unique

    def test_other_backends_wait_for_the_harness(self) -> None:
        p = compare.Peer(name="curator", language="Java", library="curator", version="5.9.0",
                         elector_cmd="x", backend="zookeeper")
        args = argparse.Namespace(runs=1, electors=3, seconds=40, seed=1, ttl_ms=2000, faults=None)
        row = compare.run_row(p, ["false"], "usage: lease-harness run ...", args, tempfile.gettempdir())
        self.assertIn("no --backend", row["not_run"])


if __name__ == "__main__":
    unittest.main()
