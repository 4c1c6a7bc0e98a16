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
    def repo(self, doc: str, allow: str = "", script: str = "") -> list[str]:
        root = tempfile.mkdtemp()
        os.makedirs(os.path.join(root, "src"))
        os.makedirs(os.path.join(root, "docs"))
        os.makedirs(os.path.join(root, "scripts"))
        with open(os.path.join(root, "src", "lib.rs"), "w") as f:
            f.write(CODE)
        with open(os.path.join(root, "docs", "guide.md"), "w") as f:
            f.write(doc)
        if script:
            with open(os.path.join(root, "scripts", "ci.sh"), "w") as f:
                f.write(script)
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

    def test_shell_blocks_need_a_marker(self) -> None:
        doc = ("Run:\n\n```sh\nscripts/ci.sh --fast\n```\n\n"
               "<!-- illustrative -->\n```bash\nmy-tool --anything\n```\n\n"
               "```python\nnot_a_shell_block()\n```\n\n"
               "```\nunlabelled, not checked\n```\n\n"
               "```\n$ an unlabelled prompt is a console block\n```\n")
        self.assertEqual(self.repo(doc), [
            "docs/guide.md:3: ```sh block without <!-- illustrative --> or <!-- ci: FILE --> "
            "on the line before it",
            "docs/guide.md:20: ```console block without <!-- illustrative --> or <!-- ci: FILE --> "
            "on the line before it",
        ])

    def test_ci_marker_commands_must_be_run_by_the_file(self) -> None:
        script = ('for lang in go java; do\n  "clients/$lang/test.sh"\ndone\n'
                  'hook="clients/$lang/conformance.sh"\n"$hook" vectors || exit 2\n'
                  'scripts/conformance "$lang" --runs 2 \\\n  --seconds 15 --out "x/$lang"\n')
        ok = ("<!-- ci: scripts/ci.sh -->\n```sh\n"
              "clients/go/test.sh          # a comment\n"
              "clients/go/conformance.sh vectors\n"
              "scripts/conformance go --runs 2 \\\n    --seconds 15\n```\n")
        self.assertEqual(self.repo(ok, script=script), [])
        stale = ("<!-- ci: scripts/ci.sh -->\n```sh\n"
                 "scripts/conformance go --runs 3\n"
                 "clients/go/bench.sh\n"
                 "npm test\n```\n")
        self.assertEqual(self.repo(stale, script=script), [
            "docs/guide.md:2: `scripts/conformance go --runs 3` is not run by scripts/ci.sh",
            "docs/guide.md:2: `clients/go/bench.sh` is not run by scripts/ci.sh",
            "docs/guide.md:2: `npm test` is not run by scripts/ci.sh",
        ])
        # A bare variable in the file vouches for no program by itself.
        self.assertEqual(self.repo("<!-- ci: scripts/ci.sh -->\n```sh\nanything vectors\n```\n",
                                   script='"$hook" vectors\n'),
                         ["docs/guide.md:2: `anything vectors` is not run by scripts/ci.sh"])
        self.assertEqual(self.repo("<!-- ci: scripts/gone.sh -->\n```sh\nx\n```\n"),
                         ["docs/guide.md:2: <!-- ci: scripts/gone.sh -->: no such file"])

    def test_console_blocks_check_only_prompt_lines(self) -> None:
        doc = ("<!-- ci: scripts/ci.sh -->\n```console\n$ scripts/run --x\noutput line\n"
               "$ scripts/other\n```\n")
        self.assertEqual(self.repo(doc, script="scripts/run --x --y\n"),
                         ["docs/guide.md:2: `scripts/other` is not run by scripts/ci.sh"])

    def test_module_load_needs_its_caveat(self) -> None:
        doc = ("Load it with `MODULE LOAD /x.so`.\n\n"
               "Or `MODULE LOAD /x.so` where `enable-module-command` allows it.\n\n"
               "## Services that refuse `MODULE LOAD`\n\n"
               "| a | b |\n|---|---|\n| `MODULE LOADEX /x.so CONFIG k v` at run time | grace |\n"
               "| `MODULE LOAD /x.so` (needs enable-module-command) | grace |\n"
               "| a bare mention of `MODULE LOAD` | not an instruction |\n")
        why = "MODULE LOAD is refused by Redis 7's default enable-module-command no: say so beside it"
        self.assertEqual(self.repo(doc), [f"docs/guide.md:1: {why}", f"docs/guide.md:9: {why}"])

    def test_ignored_build_outputs_are_not_paths_to_check(self) -> None:
        root = tempfile.mkdtemp()
        os.makedirs(os.path.join(root, "target"))
        with open(os.path.join(root, ".gitignore"), "w") as f:
            f.write("/target\n")
        with open(os.path.join(root, "guide.md"), "w") as f:
            f.write("Build `target/debug/libx.so` first; `src/gone.rs` is stale.\n")
        os.makedirs(os.path.join(root, "src"))
        with open(os.path.join(root, "src", "lib.rs"), "w") as f:
            f.write("fn f() {}\n")
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
        subprocess.run(["git", "add", "-A"], cwd=root, check=True)
        got = [str(p) for p in docs_lint.lint(root)]
        self.assertEqual(got, ["guide.md:1: path `src/gone.rs` does not exist"])

    def test_allow_list(self) -> None:
        self.assertEqual(self.repo("`--tls-cluster yes`\n", "docs/guide.md\t--tls-cluster yes\n"), [])
        self.assertEqual(len(self.repo("`--tls-cluster yes`\n")), 1)


if __name__ == "__main__":
    unittest.main()
