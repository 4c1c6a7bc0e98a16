"""Unit tests of scripts/docs_lint.py: each kind of quoted name, planted stale, is reported;
the same names present in the code are not. Run: python3 -m unittest discover -s scripts/tests"""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import docs_lint  # noqa: E402

CODE = '''
fn table() { reg("lease.fence"); cfg("lease.grace-ms"); }
#[arg(long)] min_replicas: u32,
const F: &str = "--backoff-max";
counter("lease_task_overrun_total"); info_field("grace_ms_left");
warn!("redis unreachable again");
'''


class Lint(unittest.TestCase):
    def repo(self, doc: str, allow: str = "") -> list[str]:
        root = tempfile.mkdtemp()
        os.makedirs(os.path.join(root, "src"))
        os.makedirs(os.path.join(root, "docs"))
        os.makedirs(os.path.join(root, "scripts"))
        with open(os.path.join(root, "src", "lib.rs"), "w") as f:
            f.write(CODE)
        with open(os.path.join(root, "docs", "guide.md"), "w") as f:
            f.write(doc)
        if allow:
            with open(os.path.join(root, "scripts", "docs-lint.allow"), "w") as f:
                f.write(allow)
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
        subprocess.run(["git", "add", "-A"], cwd=root, check=True)
        return [str(p) for p in docs_lint.lint(root)]

    def test_present_names_pass(self) -> None:
        doc = ("Use `LEASE.FENCE key token`, `lease.grace-ms`, `--min-replicas 1`, `--backoff-max`,\n"
               "`lease_task_overrun_total`, `lease_grace_ms_left` and see `src/lib.rs::table`,\n"
               "[the code](../src/lib.rs); it logs `redis unreachable\nagain`.\n"
               "```\n--not-checked-in-a-fence\n```\n")
        self.assertEqual(self.repo(doc), [])

    def test_each_stale_kind_is_reported(self) -> None:
        doc = ("`LEASE.STEAL key`\n\n`lease.grace-secs`\n\n`--keep-going`\n\n`lease_gone_total`\n\n"
               "`src/old.rs`\n\n`src/lib.rs::renamed_fn`\n\n[gone](../docs/nothing.md)\n\n"
               "`task ignores its stop signal`\n")
        got = self.repo(doc)
        want = [
            "docs/guide.md:1: command `LEASE.STEAL` occurs nowhere in the code",
            "docs/guide.md:3: setting `lease.grace-secs` occurs nowhere in the code",
            "docs/guide.md:5: flag `--keep-going` occurs nowhere in the code",
            "docs/guide.md:7: metric `lease_gone_total` occurs nowhere in the code",
            "docs/guide.md:9: path `src/old.rs` does not exist",
            "docs/guide.md:11: `renamed_fn` does not occur in src/lib.rs",
            "docs/guide.md:13: link to ../docs/nothing.md: no such file",
            "docs/guide.md:15: message `task ignores its stop signal` occurs nowhere in the code",
        ]
        self.assertEqual(got, want)

    def test_allow_list(self) -> None:
        self.assertEqual(self.repo("`--tls-cluster yes`\n", "docs/guide.md\t--tls-cluster yes\n"), [])
        self.assertEqual(len(self.repo("`--tls-cluster yes`\n")), 1)


if __name__ == "__main__":
    unittest.main()
