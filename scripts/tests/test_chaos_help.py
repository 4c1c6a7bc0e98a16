"""scripts/chaos --help and scripts/conformance --help print their usage and exit 0 before
building anything (chaos used to build, then the harness refused `--help` with exit 2;
conformance made a release build, then took `--help` for an unknown language).
Run: python3 -m unittest discover -s scripts/tests"""

import os
import subprocess
import unittest

CHAOS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chaos")
CONFORMANCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "conformance")


class ChaosHelp(unittest.TestCase):
    def run_chaos(self, *args: str) -> subprocess.CompletedProcess[str]:
        # An invalid profile makes any path that reaches the build exit 2 at once, so a zero
        # exit here proves help was answered before it.
        env = dict(os.environ, CHAOS_PROFILE="not-a-profile")
        return subprocess.run([CHAOS, *args], env=env, capture_output=True, text=True, timeout=60)

    def test_help_exits_zero_with_usage(self) -> None:
        for args in (["--help"], ["-h"], ["--runs", "3", "--help"]):
            p = self.run_chaos(*args)
            self.assertEqual(p.returncode, 0, f"{args}: {p.stderr}")
            self.assertIn("scripts/chaos --runs N --electors M --seconds S", p.stdout)
            self.assertIn("lease-harness run --help", p.stdout)
            self.assertNotIn("set -euo", p.stdout)

    def test_without_help_it_goes_on_to_the_build(self) -> None:
        p = self.run_chaos("--runs", "1")
        self.assertEqual(p.returncode, 2)
        self.assertIn("CHAOS_PROFILE must be release or debug", p.stderr)


class ConformanceHelp(unittest.TestCase):
    def run_conformance(self, *args: str) -> subprocess.CompletedProcess[str]:
        # As above: an invalid profile makes any path that reaches the build exit 2 at once.
        env = dict(os.environ, CHAOS_PROFILE="not-a-profile")
        return subprocess.run(
            [CONFORMANCE, *args], env=env, capture_output=True, text=True, timeout=60
        )

    def test_help_exits_zero_with_usage(self) -> None:
        for args in (["--help"], ["-h"], ["python", "--netns", "--help"]):
            p = self.run_conformance(*args)
            self.assertEqual(p.returncode, 0, f"{args}: {p.stderr}")
            self.assertIn("scripts/conformance LANG", p.stdout)
            self.assertIn("--netns", p.stdout)
            self.assertNotIn("set -uo", p.stdout)

    def test_without_help_it_goes_on_to_the_build(self) -> None:
        p = self.run_conformance("python", "--runs", "1")
        self.assertEqual(p.returncode, 2)
        self.assertIn("CHAOS_PROFILE must be release or debug", p.stderr)


if __name__ == "__main__":
    unittest.main()
