"""Real redis-server processes with the module loaded (no mocks for the server).

The module: env LEASE_MODULE, else <repo>/target/debug/libredis_lease.so, else
<repo>/target/release/libredis_lease.so. Without a module or redis-server the integration tests
are skipped locally and FAIL when CI=true.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator, List, Optional

import pytest
import redis

# A shell without job control (a CI job started with `&` or under nohup) starts its jobs with
# SIGINT ignored, and Python then leaves it ignored: the Ctrl-C tests would send SIGINT into
# nothing and wait forever. Give this process Ctrl-C's usual meaning; the children it starts
# get the default action back on exec (a caught signal is reset, an ignored one is not).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


REPO = Path(__file__).resolve().parents[3]


def find_module() -> Optional[Path]:
    env = os.environ.get("LEASE_MODULE")
    if env:
        return Path(env) if Path(env).is_file() else None
    for p in (REPO / "target/debug/libredis_lease.so", REPO / "target/release/libredis_lease.so"):
        if p.is_file():
            return p
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One redis-server with the module, on a free loopback port."""

    def __init__(self, module: Path, extra: Optional[List[str]] = None, grace_ms: int = 0) -> None:
        self.module = module
        self.extra = extra or []
        self.grace_ms = grace_ms
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="redis-lease-py-")
        self.proc: Optional[subprocess.Popen[bytes]] = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/"

    def start(self) -> "RedisServer":
        # grace 0: otherwise the module refuses new grants for max-ttl after start.
        args = [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", self.dir, *self.extra,
            "--loadmodule", str(self.module), "lease.grace-ms", str(self.grace_ms),
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                with redis.Redis(port=self.port, socket_timeout=1) as c:
                    c.ping()
                return self
            except redis.exceptions.RedisError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on {self.port} did not start")
                time.sleep(0.02)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def client(self) -> "redis.Redis[bytes]":
        return redis.Redis(port=self.port, socket_timeout=2)


@pytest.fixture(scope="session")
def module() -> Path:
    m = find_module()
    missing = []
    if m is None:
        missing.append("the module .so (build it: cargo build -p redis-lease, or set LEASE_MODULE)")
    if shutil.which("redis-server") is None:
        missing.append("redis-server")
    if missing:
        msg = "missing " + " and ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    assert m is not None
    return m


@pytest.fixture()
def server(module: Path) -> Iterator[RedisServer]:
    s = RedisServer(module).start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture()
def server_factory(module: Path) -> Iterator[object]:
    made: List[RedisServer] = []

    def make(extra: Optional[List[str]] = None, grace_ms: int = 0) -> RedisServer:
        s = RedisServer(module, extra, grace_ms).start()
        made.append(s)
        return s

    try:
        yield make
    finally:
        for s in made:
            s.stop()
