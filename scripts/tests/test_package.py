"""scripts/package: builds the release tarball (a release cargo build), then checks its name,
contents, checksums and INSTALL.md, and loads the packaged module into every server the suite
runs on, once through the redis.conf lines INSTALL.md prints and once by MODULE LOAD
(refused without `enable-module-command`, as INSTALL.md says).
Run: python3 -m unittest discover -s scripts/tests"""

import hashlib
import os
import platform
import re
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def cargo_version():
    section = None
    with open(os.path.join(ROOT, "Cargo.toml"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("["):
                section = line.strip()
            m = re.match(r'version\s*=\s*"([^"]+)"', line)
            if section == "[package]" and m:
                return m.group(1)
    raise AssertionError("no [package] version in Cargo.toml")


def server_bins():
    """(label, path) of the servers scripts/test runs on, found the way it finds them."""
    out = [("redis-server", shutil.which("redis-server"))]
    for script in ("newer-redis-server", "valkey-server"):
        path = subprocess.run([os.path.join(ROOT, "scripts", script)], check=True,
                              capture_output=True, text=True).stdout.strip()
        out.append((script, path))
    for label, path in out:
        assert path and os.access(path, os.X_OK), f"{label} not found (scripts/setup installs it)"
    return out


def server_version(path):
    line = subprocess.run([path, "--version"], check=True, capture_output=True, text=True).stdout
    m = re.match(r"(Redis|Valkey) server v=(\S+)", line)
    assert m, line
    return f"{m.group(1)} {m.group(2)}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(port, *args):
    """One command over RESP2; returns the reply's first line (enough for nil / +OK / -ERR)."""
    payload = f"*{len(args)}\r\n".encode()
    for a in args:
        b = a.encode()
        payload += b"$%d\r\n%s\r\n" % (len(b), b)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(payload)
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n", 1)[0].decode()


class Package(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="package-test.")
        cls.version = cargo_version()
        run = subprocess.run([os.path.join(ROOT, "scripts", "package"), "--out", os.path.join(cls.tmp, "dist")],
                             cwd=ROOT, capture_output=True, text=True)
        if run.returncode != 0:
            raise AssertionError(f"scripts/package failed ({run.returncode}):\n{run.stderr[-3000:]}")
        cls.tarball = run.stdout.strip().splitlines()[-1]
        cls.name = f"redis-lease-{cls.version}-{platform.system().lower()}-{platform.machine()}"
        cls.files = os.path.join(cls.tmp, "x")
        with tarfile.open(cls.tarball) as t:
            cls.members = {m.name: m for m in t.getmembers()}
            if hasattr(tarfile, "data_filter"):  # refuses absolute paths, links out, devices
                t.extractall(cls.files, filter="data")
            else:
                t.extractall(cls.files)
        cls.dir = os.path.join(cls.files, cls.name)
        with open(os.path.join(cls.dir, "INSTALL.md"), encoding="utf-8") as f:
            cls.install = f.read()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_name_and_members(self):
        self.assertEqual(os.path.basename(self.tarball), self.name + ".tar.gz")
        want = {self.name} | {f"{self.name}/{f}" for f in
                              ("libredis_lease.so", "lease-run", "LICENSE", "THIRD-PARTY-LICENSES.txt",
                                        "INSTALL.md", "SHA256SUMS")}
        self.assertEqual(set(self.members), want)
        for exe in ("libredis_lease.so", "lease-run"):
            self.assertTrue(self.members[f"{self.name}/{exe}"].mode & 0o111, exe)
        for m in self.members.values():
            self.assertEqual((m.uid, m.gid), (0, 0), m.name)

    def test_checksums(self):
        with open(self.tarball + ".sha256", encoding="utf-8") as f:
            digest, fname = f.read().split()
        self.assertEqual(fname, self.name + ".tar.gz")
        self.assertEqual(digest, sha256(self.tarball))
        sums = {}
        with open(os.path.join(self.dir, "SHA256SUMS"), encoding="utf-8") as f:
            for line in f:
                d, fn = line.split()
                sums[fn] = d
        self.assertEqual(set(sums), {"libredis_lease.so", "lease-run", "LICENSE", "THIRD-PARTY-LICENSES.txt", "INSTALL.md"})
        for fn, d in sums.items():
            self.assertEqual(d, sha256(os.path.join(self.dir, fn)), fn)
        # The format sha256sum -c reads, as INSTALL.md tells the user to run it.
        subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=self.dir, check=True)

    def test_licenses_are_the_repositorys(self):
        for f in ("LICENSE", "THIRD-PARTY-LICENSES.txt"):
            self.assertEqual(sha256(os.path.join(self.dir, f)), sha256(os.path.join(ROOT, f)), f)

    def test_lease_run_version(self):
        out = subprocess.run([os.path.join(self.dir, "lease-run"), "--version"],
                             check=True, capture_output=True, text=True).stdout.strip()
        self.assertEqual(out, f"lease-run {self.version}")

    def test_install_names_the_servers_the_suite_runs_on(self):
        for _, path in server_bins():
            self.assertIn(server_version(path), self.install)
        self.assertIn("enable-module-command yes", self.install)
        self.assertRegex(self.install, r"glibc \d+\.\d+")

    def redis_conf(self, so):
        """INSTALL.md's redis.conf block (the indented lines after 'in redis.conf:'), its
        module path replaced by where this test unpacked the tarball."""
        lines = self.install.split("in redis.conf:\n\n", 1)[1].splitlines()
        block = []
        for ln in lines:
            if not ln.startswith("    "):
                break
            block.append(ln.split("#", 1)[0].strip())
        self.assertTrue(block and block[0].startswith("loadmodule "), block)
        path = block[0].split()[1]
        self.assertEqual(os.path.basename(path), "libredis_lease.so")
        return [ln.replace(path, so) for ln in block if ln]

    def start(self, binary, conf_lines):
        port = free_port()
        d = tempfile.mkdtemp(dir=self.tmp)
        conf = os.path.join(d, "redis.conf")
        with open(conf, "w", encoding="utf-8") as f:
            # The test's own lines first: INSTALL.md's (after them) win where they overlap.
            f.write("\n".join([f"port {port}", "bind 127.0.0.1", f"dir {d}", 'save ""'] + conf_lines) + "\n")
        proc = subprocess.Popen([binary, conf], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

        def stop():
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        self.addCleanup(stop)
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                self.fail(f"{binary} exited {proc.returncode}:\n{proc.stdout.read().decode(errors='replace')[-2000:]}")
            try:
                if command(port, "PING") == "+PONG":
                    return port
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.fail(f"{binary} did not answer PING within 10 s")
            time.sleep(0.05)

    def test_install_redis_conf_loads_into_every_server(self):
        so = os.path.join(self.dir, "libredis_lease.so")
        conf = self.redis_conf(so)
        for label, binary in server_bins():
            with self.subTest(server=label):
                # INSTALL.md's lines, as they stand (AOF on, in this test's own folder).
                port = self.start(binary, conf)
                self.assertEqual(command(port, "LEASE.GET", "k"), "$-1")
                self.assertEqual(command(port, "CONFIG", "GET", "lease.max-ttl"), "*2")

    def test_module_load_needs_enable_module_command(self):
        so = os.path.join(self.dir, "libredis_lease.so")
        binary = shutil.which("redis-server")
        refused = self.start(binary, [])
        self.assertTrue(command(refused, "MODULE", "LOAD", so).startswith("-ERR"))
        port = self.start(binary, ["enable-module-command yes"])
        self.assertEqual(command(port, "MODULE", "LOAD", so), "+OK")
        self.assertEqual(command(port, "LEASE.GET", "k"), "$-1")


if __name__ == "__main__":
    unittest.main()
