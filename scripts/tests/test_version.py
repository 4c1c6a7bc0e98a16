"""One version across the project (CHANGELOG.md, "Versions"): every Cargo crate of the
workspace, the Python package (pyproject and __version__), the Node package (package.json
and its lock file), the Java pom (X.Y.Z, or X.Y.Z-SNAPSHOT while X.Y.Z is unreleased), the Go
README's require line, lease-run --version (clap's `version` = the crate's), and the newest
CHANGELOG.md section. A planted mismatch in a copy of each manifest must be reported.
Run: python3 -m unittest discover -s scripts/tests"""

import json
import os
import re
import shutil
import tempfile
import tomllib
import unittest
import xml.etree.ElementTree as ET

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8") as f:
        return f.read()


def project_version(root):
    """The module crate's version: the project's."""
    return tomllib.loads(read(root, "Cargo.toml"))["package"]["version"]


def versions(root):
    """(place, version found) for every place that states the project's version."""
    found = []
    workspace = tomllib.loads(read(root, "Cargo.toml"))["workspace"]["members"]
    for member in workspace:
        rel = os.path.normpath(os.path.join(member, "Cargo.toml"))
        found.append((rel, tomllib.loads(read(root, rel))["package"].get("version", "<none>")))
    found.append(("clients/python/pyproject.toml",
                  tomllib.loads(read(root, "clients/python/pyproject.toml"))["project"]["version"]))
    m = re.search(r'^__version__ = "([^"]+)"', read(root, "clients/python/redis_lease/__init__.py"), re.M)
    found.append(("clients/python/redis_lease/__init__.py __version__", m.group(1) if m else "<none>"))
    found.append(("clients/node/package.json", json.loads(read(root, "clients/node/package.json"))["version"]))
    lock = json.loads(read(root, "clients/node/package-lock.json"))
    found.append(("clients/node/package-lock.json", lock.get("version", "<none>")))
    found.append(('clients/node/package-lock.json packages[""]', lock["packages"][""].get("version", "<none>")))
    pom = ET.fromstring(read(root, "clients/java/pom.xml"))
    v = pom.find("m:version", POM_NS)
    # Maven's convention for a version not yet released; `mvn install` of a checkout installs
    # it under that name, and the Java README's dependency snippet says so.
    found.append(("clients/java/pom.xml", re.sub(r"-SNAPSHOT$", "", v.text.strip()) if v is not None else "<none>"))
    m = re.search(r"-require=github\.com/redis-lease/redis-lease/clients/go@v(\S+)", read(root, "clients/go/README.md"))
    found.append(("clients/go/README.md go mod edit -require", m.group(1) if m else "<none>"))
    # lease-run --version is clap's `version` attribute: CARGO_PKG_VERSION of client/Cargo.toml
    # (checked above). A literal `version = "..."` would be a second source.
    main = read(root, "client/src/bin/lease-run/main.rs")
    m = re.search(r'#\[command\(([^\]]*)\)\]', main)
    attr = m.group(1) if m else ""
    crate = tomllib.loads(read(root, "client/Cargo.toml"))["package"]["version"]
    by_crate = re.search(r"\bversion\b", attr) and not re.search(r"\bversion\s*=", attr)
    found.append(("client/src/bin/lease-run/main.rs #[command(version)]", crate if by_crate else "<not the crate's>"))
    m = re.search(r"^## \[?(\d+\.\d+\.\d+)", read(root, "CHANGELOG.md"), re.M)
    found.append(("CHANGELOG.md newest section", m.group(1) if m else "<none>"))
    return found


def mismatches(root):
    want = project_version(root)
    return [f"{place}: {v} (the project is {want})" for place, v in versions(root) if v != want]


class OneVersion(unittest.TestCase):
    def test_every_manifest_states_the_project_version(self):
        self.assertEqual(mismatches(ROOT), [])

    def test_a_planted_mismatch_is_reported(self):
        want = project_version(ROOT)
        # Every stated place, changed one at a time in a copy, must be caught.
        edits = [
            ("client/Cargo.toml", f'version = "{want}"', 'version = "9.9.9"'),
            ("clients/python/pyproject.toml", 'version = "', 'version = "9'),
            ("clients/python/redis_lease/__init__.py", '__version__ = "', '__version__ = "9'),
            ("clients/node/package.json", '"version": "', '"version": "9'),
            ("clients/java/pom.xml", "<version>", "<version>9"),
            ("clients/go/README.md", "clients/go@v", "clients/go@v9"),
            ("client/src/bin/lease-run/main.rs", "version,", 'version = "9",'),
            ("CHANGELOG.md", f"\n## {want}", "\n## 9"),
        ]
        for rel, old, new in edits:
            with self.subTest(file=rel), tempfile.TemporaryDirectory() as tmp:
                for place, _ in versions(ROOT):
                    path = place.split(" ")[0]
                    os.makedirs(os.path.dirname(os.path.join(tmp, path)) or tmp, exist_ok=True)
                    shutil.copy(os.path.join(ROOT, path), os.path.join(tmp, path))
                text = read(tmp, rel)
                self.assertIn(old, text)
                with open(os.path.join(tmp, rel), "w", encoding="utf-8") as f:
                    f.write(text.replace(old, new, 1))
                self.assertTrue(mismatches(tmp), f"{rel} edited, no mismatch reported")
        self.assertRegex(want, r"^\d+\.\d+\.\d+$")


if __name__ == "__main__":
    unittest.main()
