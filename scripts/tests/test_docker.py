"""The Dockerfile builds what is tested: both stages are the Debian release this machine (where
the suite runs) is, the runtime's redis-server comes from that release's own archive (no other
apt source, the same major.minor as the redis-server the suite runs on), and the image ships
LICENSE and THIRD-PARTY-LICENSES.txt next to the project's binaries. Planted departures must be reported.
Run: python3 -m unittest discover -s scripts/tests"""

import os
import re
import subprocess
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def os_release():
    out = {}
    with open("/etc/os-release", encoding="utf-8") as f:
        for line in f:
            k, _, v = line.strip().partition("=")
            out[k] = v.strip('"')
    return out


def problems(dockerfile, codename):
    """What departs from 'the image is the suite's Debian release and ships LICENSE'."""
    found = []
    stages = re.split(r"(?m)^FROM ", dockerfile)[1:]
    if len(stages) != 2:
        return [f"expected a build and a runtime stage, found {len(stages)}"]
    build, runtime = stages
    if not re.match(rf"rust:[0-9.]+-{codename}\b", build):
        found.append(f"the build stage is {build.split()[0]}, not rust:*-{codename}")
    if not re.match(rf"debian:{codename}(-slim)?\s", runtime):
        found.append(f"the runtime stage is {runtime.split()[0]}, not debian:{codename}")
    if re.search(r"sources\.list|apt-key|signed-by|add-apt-repository|packages\.redis\.io", runtime):
        found.append("the runtime stage adds an apt source: its redis-server would not be the release's")
    if not re.search(r"apt-get install[^\n]*(\\\n[^\n]*)*\bredis-server\b", runtime):
        found.append("the runtime stage does not apt-get install redis-server")
    ships_binaries = re.search(r"^COPY --from=build ", runtime, re.M)
    copies = [ln.split()[1:-1] for ln in runtime.splitlines() if ln.startswith("COPY ") and "--from=" not in ln]
    for notice in ("LICENSE", "THIRD-PARTY-LICENSES.txt"):
        if ships_binaries and not any(notice in c for c in copies):
            found.append(f"the runtime stage ships the binaries but not {notice}")
    return found


class Dockerfile(unittest.TestCase):
    def setUp(self):
        with open(os.path.join(ROOT, "Dockerfile"), encoding="utf-8") as f:
            self.text = f.read()
        self.codename = os_release().get("VERSION_CODENAME", "")

    def test_the_image_is_what_the_suite_runs_on(self):
        self.assertEqual(os_release().get("ID"), "debian", "the suite's machine is not Debian")
        self.assertEqual(problems(self.text, self.codename), [])

    def test_redis_server_is_the_releases_package(self):
        # The suite's redis-server is the release's Debian package, so the image's (the same
        # package from the same archive) is the same major.minor.
        pkg = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "redis-server"],
                             check=True, capture_output=True, text=True).stdout
        line = subprocess.run(["redis-server", "--version"], check=True, capture_output=True, text=True).stdout
        running = re.search(r"v=(\d+\.\d+\.\d+)", line).group(1)
        self.assertIn(f":{running}-", pkg, "the redis-server on PATH is not Debian's package")
        self.assertRegex(pkg, r"~deb\d+u\d+$|^\d+:[\d.]+-\d+$", "not a package of the Debian archive")

    def test_planted_departures_are_reported(self):
        plants = [
            (self.codename, "trixie"),
            ("FROM debian:", "FROM ubuntu:"),
            ("COPY LICENSE ", "# COPY LICENSE "),
            ("LICENSE THIRD-PARTY-LICENSES.txt", "LICENSE"),
            ("apt-get update \\\n", "apt-get update \\\n    && echo deb http://packages.redis.io/deb x main > /etc/apt/sources.list.d/r.list \\\n"),
        ]
        for old, new in plants:
            with self.subTest(plant=new):
                self.assertIn(old, self.text)
                self.assertTrue(problems(self.text.replace(old, new), self.codename), new)


if __name__ == "__main__":
    unittest.main()
