"""Unit tests of scripts/evidence's pure parts: figure formats, test-line names, summary and
violation parsing, and the docs markers (update and check against a results file).
Run: python3 -m unittest discover -s scripts/tests"""

import importlib.machinery
import importlib.util
import json
import os
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
_loader = importlib.machinery.SourceFileLoader("evidence", os.path.join(HERE, "..", "evidence"))
_spec = importlib.util.spec_from_loader("evidence", _loader)
ev = importlib.util.module_from_spec(_spec)
_loader.exec_module(ev)


class Formats(unittest.TestCase):
    def test_numbers(self):
        self.assertEqual(ev.format_figure(396432, ""), "396,432")
        self.assertEqual(ev.format_figure(426.2, ""), "426.2")
        self.assertEqual(ev.format_figure(396432.12, "int"), "396,432")
        self.assertEqual(ev.format_figure(0.684, "2"), "0.68")
        self.assertEqual(ev.format_figure(1.0749, "x"), "1.07×")

    def test_durations_and_numbers_in_a_line(self):
        line = "kill -9 of leader lease-run: child dead after 1.120913ms, next child started after 547.529837ms (ttl 600ms)"
        self.assertEqual(ev.format_figure(line, "dur1"), "1.1 ms")
        self.assertEqual(ev.format_figure(line, "dur2"), "548 ms")
        self.assertEqual(ev.format_figure("grant after 1.501276276s (grace 1500 ms)", "dur1"), "1.50 s")
        self.assertEqual(ev.format_figure("hand-over on release: 228.095µs", "dur1"), "0.2 ms")
        self.assertEqual(ev.format_figure("grace 1984 ms left, wall clock -3600 s", "num1"), "1984")
        with self.assertRaises(ValueError):
            ev.format_figure(1, "bogus")
        with self.assertRaises(IndexError):
            ev.format_figure("no duration here", "dur1")

    def test_line_keys_do_not_depend_on_the_numbers(self):
        a = ev.test_line_key("kill -9 of leader lease-run: child dead after 1.1ms")
        b = ev.test_line_key("kill -9 of leader lease-run: child dead after 2.7ms")
        self.assertEqual(a, b)
        self.assertEqual(a, "kill -# of leader lease-run")
        self.assertEqual(ev.test_line_key("stepped down 705.8ms after losing the majority"),
                         "stepped down # after losing the majority")


class Parsing(unittest.TestCase):
    def test_summary_fields(self):
        f = ev.summary_fields("runs=2 violations=0 handover_p50_ms=1.9 faults=12")
        self.assertEqual(f, {"runs": 2, "violations": 0, "handover_p50_ms": 1.9, "faults": 12})

    def test_violation_rules_count_every_rule(self):
        out = "VIOLATION run-0000 overlap: x\nVIOLATION run-0001 overlap: y\nVIOLATION run-0001 stale_accepted: z\nruns=2 violations=3\n"
        r = ev.violation_rules(out)
        self.assertEqual(r["overlap"], 2)
        self.assertEqual(r["stale_accepted"], 1)
        self.assertEqual(r["token_regression"], 0)
        self.assertEqual(set(r), set(ev.RULES))


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
        self.saved = (ev.ROOT, ev.DOC_GLOBS)
        ev.ROOT, ev.DOC_GLOBS = self.root, ["docs/*.md"]

    def tearDown(self):
        ev.ROOT, ev.DOC_GLOBS = self.saved
        self.tmp.cleanup()

    def test_check_fails_until_updated_then_passes(self):
        problems = ev.docs_pass(update=False)
        self.assertEqual(len(problems), 3, problems)
        self.assertEqual(ev.docs_pass(update=True), [])
        with open(self.doc) as fh:
            text = fh.read()
        self.assertIn("<!--ev:throughput/set_px|int-->441,989<!--/ev-->", text)
        self.assertIn("<!--ev:file-->[R1.md](results/R1.md)<!--/ev-->", text)
        self.assertEqual(ev.docs_pass(update=False), [])

    def test_names_with_arrows_and_hashes_and_broken_markers(self):
        with open(os.path.join(self.root, "docs", "results", "R1.json")) as fh:
            doc = json.load(fh)
        doc["figures"].append({"section": "test_x", "name": "restart -> grant after grace #2",
                               "value": "restart -> grant after grace: 1.5s", "unit": "line", "command": "c"})
        with open(os.path.join(self.root, "docs", "results", "R1.json"), "w") as fh:
            json.dump(doc, fh)
        with open(self.doc, "w") as fh:
            fh.write("<!--ev:test_x/restart -> grant after grace #2|dur1-->…<!--/ev-->\n")
        self.assertEqual(ev.docs_pass(update=True), [])
        with open(self.doc) as fh:
            self.assertIn("-->1.50 s<!--/ev-->", fh.read())
        with open(self.doc, "a") as fh:
            fh.write("<!--ev:chaos/violations-->0\n")  # never closed
        self.assertEqual(len(ev.docs_pass(update=False)), 1)

    def test_a_figure_the_file_does_not_hold_is_a_problem(self):
        with open(self.doc, "a") as fh:
            fh.write("<!--ev:chaos/nonexistent-->1<!--/ev-->\n")
        problems = ev.docs_pass(update=True)
        self.assertEqual(len(problems), 1)
        self.assertIn("holds no figure chaos/nonexistent", problems[0])


if __name__ == "__main__":
    unittest.main()
