"""Unit tests of the evidence package's pure parts (scripts/leaseevidence/): figure formats,
test-line names, the step table, reading a campaign's results (summary.json, report.json and
its summary line), and the docs markers (update and check against a results file).
Run: python3 -m unittest discover -s scripts/tests"""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from leaseevidence import common, docs, harness, steps  # noqa: E402
from leaseevidence.common import StepFailed  # noqa: E402


class Formats(unittest.TestCase):
    def test_numbers(self):
        self.assertEqual(docs.format_figure(396432, ""), "396,432")
        self.assertEqual(docs.format_figure(426.2, ""), "426.2")
        self.assertEqual(docs.format_figure(396432.12, "int"), "396,432")
        self.assertEqual(docs.format_figure(0.684, "2"), "0.68")
        self.assertEqual(docs.format_figure(1.0749, "x"), "1.07×")

    def test_durations_and_numbers_in_a_line(self):
        line = "kill -9 of leader lease-run: child dead after 1.120913ms, next child started after 547.529837ms (ttl 600ms)"
        self.assertEqual(docs.format_figure(line, "dur1"), "1.1 ms")
        self.assertEqual(docs.format_figure(line, "dur2"), "548 ms")
        self.assertEqual(docs.format_figure("grant after 1.501276276s (grace 1500 ms)", "dur1"), "1.50 s")
        self.assertEqual(docs.format_figure("hand-over on release: 228.095µs", "dur1"), "0.2 ms")
        self.assertEqual(docs.format_figure("grace 1984 ms left, wall clock -3600 s", "num1"), "1984")
        with self.assertRaises(ValueError):
            docs.format_figure(1, "bogus")
        with self.assertRaises(IndexError):
            docs.format_figure("no duration here", "dur1")

    def test_line_keys_do_not_depend_on_the_numbers(self):
        a = steps.test_line_key("kill -9 of leader lease-run: child dead after 1.1ms")
        b = steps.test_line_key("kill -9 of leader lease-run: child dead after 2.7ms")
        self.assertEqual(a, b)
        self.assertEqual(a, "kill -# of leader lease-run")
        self.assertEqual(steps.test_line_key("stepped down 705.8ms after losing the majority"),
                         "stepped down # after losing the majority")


class Parsing(unittest.TestCase):
    def test_summary_fields(self):
        f = common.summary_fields("runs=2 violations=0 handover_p50_ms=1.9 faults=12")
        self.assertEqual(f, {"runs": 2, "violations": 0, "handover_p50_ms": 1.9, "faults": 12})

    def test_violation_rules_count_every_rule(self):
        reports = [{"violations": [{"kind": "overlap", "detail": "x"}]},
                   {"violations": [{"kind": "overlap", "detail": "y"}, {"kind": "stale_accepted", "detail": "z"}]}]
        r = harness.violation_rules(reports)
        self.assertEqual(r["overlap"], 2)
        self.assertEqual(r["stale_accepted"], 1)
        self.assertEqual(r["token_regression"], 0)
        self.assertEqual(set(r), set(harness.RULES))


class CampaignResults(unittest.TestCase):
    """A campaign as the harness leaves it: header line with out=DIR, DIR/summary.json,
    DIR/run-NNNN/report.json, and the summary line printed last."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.kinds = [["overlap"], [], ["overlap", "stale_accepted"]]
        for i, kinds in enumerate(self.kinds):
            os.makedirs(os.path.join(self.dir, f"run-{i:04}"))
            with open(os.path.join(self.dir, f"run-{i:04}", "report.json"), "w") as fh:
                json.dump({"violations": [{"kind": k, "detail": "d"} for k in kinds]}, fh)
        self.summary(3, 3)

    def tearDown(self):
        self.tmp.cleanup()

    def summary(self, runs, violations):
        with open(os.path.join(self.dir, "summary.json"), "w") as fh:
            json.dump({"runs": runs, "violations": violations, "latencies": {}}, fh)

    def stdout(self, line):
        return (f"chaos: topology=replica runs=3 seed=1 out={self.dir}\n"
                f"run-0000 seed=1 violations=1\n{line}\n")

    def test_reads_the_files_and_the_line(self):
        c = harness.read_campaign(self.stdout("runs=3 violations=3 handover_n=2 handover_p99_ms=4.5"), 1, "c")
        self.assertEqual((c.runs, c.violations, c.returncode), (3, 3, 1))
        self.assertEqual(c.rules["overlap"], 2)
        self.assertEqual(c.rules["stale_accepted"], 1)
        self.assertEqual(c.rules["orphan_write"], 0)
        self.assertEqual(c.fields["handover_p99_ms"], 4.5)

    def test_line_and_file_disagreeing_is_a_failed_step(self):
        with self.assertRaises(StepFailed):
            harness.read_campaign(self.stdout("runs=3 violations=0"), 0, "c")
        self.summary(3, 2)  # the run reports hold 3
        with self.assertRaises(StepFailed):
            harness.read_campaign(self.stdout("runs=3 violations=2"), 1, "c")

    def test_missing_summary_or_files_is_a_failed_step(self):
        with self.assertRaises(StepFailed):
            harness.read_campaign(self.stdout("error: no servers"), 2, "c")
        os.remove(os.path.join(self.dir, "run-0001", "report.json"))
        with self.assertRaises(StepFailed):
            harness.read_campaign(self.stdout("runs=3 violations=3"), 1, "c")


class StepTable(unittest.TestCase):
    def test_full_quick_and_named_only(self):
        self.assertEqual(steps.ALL_STEPS, ["bench", "chaos", "handover", "many", "controls", "sentinel",
                                           "quorum", "conformance", "quorum_conformance", "sentinel_conformance", "tests", "scale", "persist", "model", "fuzz",
                                           "long"])
        self.assertEqual(steps.QUICK_STEPS, ["bench", "chaos", "handover", "quorum", "conformance"])
        self.assertNotIn("quorum_long", steps.ALL_STEPS)
        self.assertIn("quorum_long", steps.BY_NAME)
        for s in steps.STEPS:
            self.assertTrue(s.run.__doc__, f"step {s.name} has no description for --help")


class LongCampaigns(unittest.TestCase):
    def test_minimum_scales_with_the_runs_and_names_the_netns_kinds(self):
        self.assertEqual(steps.long_min_faults(100, False),
                         "crash=5,pause=5,partition=5,handover=5,late-delivery=5")
        self.assertEqual(steps.long_min_faults(1, True).split(","),
                         ["crash=1", "pause=1", "partition=1", "handover=1", "late-delivery=1",
                          "loss=1", "oneway=1", "cut-resource=1", "heal-delivers=1"])

    def test_faults_per_kind_add_up_across_campaigns(self):
        self.assertEqual(steps.merge_kinds(["kill=3 pause=2", "kill=1 loss=4", "none"]),
                         "kill=4 loss=4 pause=2")
        self.assertEqual(steps.merge_kinds(["none"]), "none")

    def test_every_language_reaches_the_minimum_of_runs(self):
        ev = steps.Evidence(False, [])
        for lang in ("rust", "python", "go", "node", "java"):
            netns, other = steps.long_campaigns(ev, lang)
            self.assertEqual(sum(c.runs for c in netns + other), steps.LONG_MIN_RUNS, lang)
            self.assertTrue(all("--netns" in c.argv for c in netns))
            self.assertFalse(any("--netns" in c.argv for c in other))
            for c in netns + other:
                self.assertIn("--min-faults", c.argv)

    def test_quorum_handover_measures_every_language_and_checks_each_ratio(self):
        """Rust through scripts/chaos with its old section names, every other language through
        scripts/conformance; a ratio per language, each checked against 2."""
        ev = steps.Evidence(False, ["rust", "go"])
        chaos_calls, conf_calls = [], []
        p50 = {"quorum3_handover": 2.0, "replica_handover": 2.0, "quorum": 5.0, "replica": 2.0}

        def campaign(section, args, ttl, grace, expect, must_violate=False):
            chaos_calls.append((section, args))
            return {"handover_p50_ms": p50[section]}

        def conformance_campaign(argv, env=None):
            conf_calls.append((argv, env))
            topo = argv[argv.index("--topology") + 1]
            v = p50["quorum" if topo == "quorum3" else "replica"]
            line = f"runs=3 violations=0 handover_p50_ms={v}"
            return harness.Campaign(0, line, common.summary_fields(line), 3, 0, {}), " ".join(argv)

        ev.campaign = campaign  # type: ignore[method-assign]
        ev.conformance_campaign = conformance_campaign  # type: ignore[method-assign]
        steps.quorum_handover(ev)
        self.assertEqual([c[0] for c in chaos_calls], ["quorum3_handover", "replica_handover"])
        self.assertEqual([a[:2] for a, _ in conf_calls], [["scripts/conformance", "go"]] * 2)
        for argv, _ in conf_calls:
            for opt in ("--runs", "--electors", "--seconds", "--fault", "--seed", "--ttl-ms", "--grace-ms"):
                self.assertIn(opt, argv)
        # The vectors run once per language, before its first campaign.
        self.assertEqual([env for _, env in conf_calls], [{}, {"CONFORMANCE_VECTORS": "skip"}])
        ratios = {f["section"]: f["value"] for f in ev.figures if f["name"] == "ratio_p50_to_one_primary"}
        self.assertEqual(ratios, {"quorum3_handover": 1.0, "quorum3_handover_go": 2.5})
        self.assertEqual(len(ev.problems), 1)
        self.assertIn("go: quorum hand-over p50 5.0 ms above 2x", ev.problems[0])

    def test_a_run_line_with_violations_is_recognised(self):
        m = steps.RUN_LINE.match("run-0007 seed=12 violations=3 (8 runs, 3 violations so far)")
        self.assertIsNotNone(m)
        assert m is not None
        self.assertEqual((m.group(1), m.group(2)), ("0007", "3"))


class Markers(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        os.makedirs(os.path.join(self.root, "docs", "results"))
        doc = {"figures": [
            {"section": "throughput", "name": "set_px", "value": 441988.97, "unit": "requests/s", "command": "c"},
            {"section": "chaos", "name": "violations", "value": 0, "unit": "count", "command": "c"},
        ]}
        with open(os.path.join(self.root, "docs", "results", "R1.json"), "w") as fh:
            json.dump(doc, fh)
        with open(os.path.join(self.root, "docs", "results", "CURRENT"), "w") as fh:
            fh.write("R1\n")
        self.doc = os.path.join(self.root, "docs", "page.md")
        with open(self.doc, "w") as fh:
            fh.write("SET <!--ev:throughput/set_px|int-->1<!--/ev--> rps, "
                     "<!--ev:chaos/violations-->…<!--/ev--> violations, file <!--ev:file-->x<!--/ev-->\n")

    def tearDown(self):
        self.tmp.cleanup()

    def docs_pass(self, update):
        return docs.docs_pass(update, root=self.root, globs=["docs/*.md"])

    def test_check_fails_until_updated_then_passes(self):
        problems = self.docs_pass(update=False)
        self.assertEqual(len(problems), 3, problems)
        self.assertEqual(self.docs_pass(update=True), [])
        with open(self.doc) as fh:
            text = fh.read()
        self.assertIn("<!--ev:throughput/set_px|int-->441,989<!--/ev-->", text)
        self.assertIn("<!--ev:file-->[R1.md](results/R1.md)<!--/ev-->", text)
        self.assertEqual(self.docs_pass(update=False), [])

    def test_names_with_arrows_and_hashes_and_broken_markers(self):
        with open(os.path.join(self.root, "docs", "results", "R1.json")) as fh:
            doc = json.load(fh)
        doc["figures"].append({"section": "test_x", "name": "restart -> grant after grace #2",
                               "value": "restart -> grant after grace: 1.5s", "unit": "line", "command": "c"})
        with open(os.path.join(self.root, "docs", "results", "R1.json"), "w") as fh:
            json.dump(doc, fh)
        with open(self.doc, "w") as fh:
            fh.write("<!--ev:test_x/restart -> grant after grace #2|dur1-->…<!--/ev-->\n")
        self.assertEqual(self.docs_pass(update=True), [])
        with open(self.doc) as fh:
            self.assertIn("-->1.50 s<!--/ev-->", fh.read())
        with open(self.doc, "a") as fh:
            fh.write("<!--ev:chaos/violations-->0\n")  # never closed
        self.assertEqual(len(self.docs_pass(update=False)), 1)

    def test_a_figure_the_file_does_not_hold_is_a_problem(self):
        with open(self.doc, "a") as fh:
            fh.write("<!--ev:chaos/nonexistent-->1<!--/ev-->\n")
        problems = self.docs_pass(update=True)
        self.assertEqual(len(problems), 1)
        self.assertIn("holds no figure chaos/nonexistent", problems[0])


if __name__ == "__main__":
    unittest.main()
