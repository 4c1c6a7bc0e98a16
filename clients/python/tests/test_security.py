"""TLS with a private CA and the least-privilege ACL user of docs/security.md §3, against a real
redis-server (Debian's build has TLS).

The PKI is made here with the openssl CLI as in client/tests/security.rs: a CA that signs the
server and client certificates, and another CA that signs nothing the server uses. The server
has no plain port (``--port 0``) and requires client certificates (``--tls-auth-clients yes``).
The elector ACL rules are read from docs/security.md itself, so the documented recipe is the one
tested.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest
import redis
import redis.asyncio as aredis

from redis_lease import Elector, LeaderContext, Role, _wire
from redis_lease import asyncio as lease_asyncio

from .conftest import REPO, free_port

TTL = 2.0  # the first RENEW opens a connection: a TLS handshake within op_timeout on a busy CI host
PASSWORD = "elector-pw"


def elector_rules() -> List[str]:
    """The `elector` recipe of docs/security.md §3, verbatim (the first one: single primary)."""
    doc = (REPO / "docs/security.md").read_text()
    m = re.search(r"^\s*ACL SETUSER elector on >\.\.\. (.*)$", doc, re.M)
    assert m, "docs/security.md has no `ACL SETUSER elector on >... ` line"
    return m.group(1).split()


def openssl(d: Path, *args: str) -> None:
    r = subprocess.run(["openssl", *args], cwd=d, capture_output=True, text=True)
    assert r.returncode == 0, f"openssl {args}: {r.stderr}"


def make_ca(d: Path, name: str) -> None:
    openssl(d, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2", "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")


def make_leaf(d: Path, ca: str, name: str, usage: str) -> None:
    (d / f"{name}.ext").write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        f"extendedKeyUsage={usage}\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
    )
    openssl(d, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
    openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext")


class TlsServer:
    """redis-server with only a TLS port, mutual TLS, and the elector user (password PASSWORD)."""

    def __init__(self, module: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="redis-lease-py-tls-"))
        make_ca(self.dir, "ca")
        make_ca(self.dir, "other-ca")
        make_leaf(self.dir, "ca", "server", "serverAuth")
        make_leaf(self.dir, "ca", "client", "clientAuth")
        self.port = free_port()
        args = [
            "redis-server", "--port", "0", "--tls-port", str(self.port), "--bind", "127.0.0.1",
            "--tls-cert-file", self.path("server.crt"), "--tls-key-file", self.path("server.key"),
            "--tls-ca-cert-file", self.path("ca.crt"), "--tls-auth-clients", "yes",
            "--save", "", "--appendonly", "no", "--dir", str(self.dir),
            "--loadmodule", str(module), "lease.grace-ms", "0",
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                with self.admin() as c:
                    c.ping()
                break
            except redis.exceptions.RedisError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"TLS redis-server on {self.port} did not start")
                time.sleep(0.02)
        with self.admin() as c:
            c.execute_command("ACL", "SETUSER", "elector", "on", f">{PASSWORD}", *elector_rules())

    def path(self, f: str) -> str:
        return str(self.dir / f)

    def tls(self, ca: str = "ca.crt") -> Dict[str, Any]:
        return {"host": "127.0.0.1", "port": self.port, "ssl": True, "ssl_ca_certs": self.path(ca),
                "ssl_certfile": self.path("client.crt"), "ssl_keyfile": self.path("client.key"),
                "socket_timeout": 2}

    def admin(self) -> "redis.Redis[bytes]":
        """The default user (no password), over TLS with the client certificate."""
        return redis.Redis(**self.tls())

    def elector_client(self, ca: str = "ca.crt") -> "redis.Redis[bytes]":
        return redis.Redis(username="elector", password=PASSWORD, **self.tls(ca))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture()
def tls_server(module: Path) -> Iterator[TlsServer]:
    if shutil.which("openssl") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("openssl CLI missing in CI (scripts/setup installs it)")
        pytest.skip("openssl CLI not found (run scripts/setup)")
    s = TlsServer(module)
    try:
        yield s
    finally:
        s.stop()


def poll(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def holder(s: TlsServer, key: str) -> Optional[_wire.LeaseInfo]:
    """LEASE.GET as the admin: the live lease, or None when it is free."""
    with s.admin() as c:
        r = _wire.parse_get(c.execute_command(*_wire.get_cmd(key)))
    assert not isinstance(r, _wire.Failed), r
    return r


def lead_renew_release_sync(s: TlsServer, target: Any, key: str) -> None:
    """Leads, renews past the TTL (the deadline moves), releases on resign: checked on the server."""
    changes: List[Role] = []
    el = Elector(target, key, TTL, on_change=changes.append)
    leases: List[LeaderContext] = []
    started = threading.Event()

    def task(lease: LeaderContext) -> None:
        leases.append(lease)
        started.set()
        lease.stop_event.wait()

    t = threading.Thread(target=el.run, args=(task,), daemon=True)
    t.start()
    try:
        assert started.wait(5), "the elector did not lead over TLS"
        lease = leases[0]
        first = lease.deadline
        assert first is not None
        # Renewals: the deadline moves on and the server still names us after more than a TTL.
        t_lead = time.monotonic()
        poll(lambda: lease.deadline is not None and lease.deadline > first and time.monotonic() - t_lead > 1.5 * TTL,
             5, "a renewal")
        assert lease.is_leader()
        h = holder(s, key)
        assert h is not None and h.token == lease.token, h
    finally:
        el.resign()
        t.join(5)
    assert not t.is_alive()
    assert holder(s, key) is None, "resign must RELEASE the lease"
    assert [c.reason for c in changes] == ["acquired", "resigned"]


def test_sync_elector_leads_renews_and_releases_over_mutual_tls_as_the_acl_user(
    tls_server: TlsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="redis_lease")
    lead_renew_release_sync(tls_server, tls_server.elector_client(), "leases:tls-sync")
    # The recipe grants all the client sends: nothing refused, nothing to warn about.
    noisy = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert noisy == [], noisy


def test_sync_elector_takes_a_rediss_url(tls_server: TlsServer) -> None:
    s = tls_server
    url = (f"rediss://elector:{PASSWORD}@127.0.0.1:{s.port}/?ssl_ca_certs={s.path('ca.crt')}"
           f"&ssl_certfile={s.path('client.crt')}&ssl_keyfile={s.path('client.key')}")
    lead_renew_release_sync(s, url, "leases:tls-url")


def test_asyncio_elector_leads_renews_and_releases_over_mutual_tls_as_the_acl_user(
    tls_server: TlsServer, caplog: pytest.LogCaptureFixture
) -> None:
    s = tls_server
    caplog.set_level(logging.DEBUG, logger="redis_lease")
    key = "leases:tls-async"

    async def main() -> None:
        changes: List[Role] = []
        client = aredis.Redis(username="elector", password=PASSWORD, **s.tls())
        el = lease_asyncio.Elector(client, key, TTL, on_change=changes.append)
        leases: List[lease_asyncio.LeaderContext] = []
        started = asyncio.Event()

        async def task(lease: lease_asyncio.LeaderContext) -> None:
            leases.append(lease)
            started.set()
            while await lease.sleep(0.01):
                pass

        run = asyncio.ensure_future(el.run(task))
        try:
            await asyncio.wait_for(started.wait(), 5)
            lease = leases[0]
            first = lease.deadline
            assert first is not None
            t_lead = time.monotonic()
            end = t_lead + 5
            while not (lease.deadline is not None and lease.deadline > first and time.monotonic() - t_lead > 1.5 * TTL):
                assert time.monotonic() < end, "no renewal"
                await asyncio.sleep(0.005)
            assert lease.is_leader()
            h = await asyncio.to_thread(holder, s, key)
            assert h is not None and h.token == lease.token, h
        finally:
            el.resign()
            await asyncio.wait_for(run, 5)
            await client.aclose()
        assert await asyncio.to_thread(holder, s, key) is None, "resign must RELEASE the lease"
        assert [c.reason for c in changes] == ["acquired", "resigned"]

    asyncio.run(main())
    noisy = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert noisy == [], noisy


def test_a_server_certificate_from_another_ca_is_refused(
    tls_server: TlsServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The negative control of the tests above: trusting the wrong CA, the elector never leads
    and says why (certificate verification), and nothing is written on the server."""
    caplog.set_level(logging.DEBUG, logger="redis_lease")
    el = Elector(tls_server.elector_client(ca="other-ca.crt"), "leases:tls-wrong-ca", TTL)
    led = threading.Event()
    t = threading.Thread(target=el.run, args=(lambda lease: led.set(),), daemon=True)
    t.start()
    try:
        poll(lambda: any("certificate verify failed" in r.getMessage() for r in caplog.records), 5,
             "a log line naming the certificate failure")
        assert not led.is_set()
    finally:
        el.resign()
        t.join(5)
    assert not t.is_alive()
    assert holder(tls_server, "leases:tls-wrong-ca") is None


def test_without_a_grant_of_the_recipe_the_elector_does_not_lead(tls_server: TlsServer) -> None:
    """Negative control for the ACL recipe: the same user minus `+lease.acquire` never leads
    (so the positive tests above really run as the restricted user)."""
    s = tls_server
    with s.admin() as c:
        c.execute_command("ACL", "SETUSER", "elector", "-lease.acquire")
    el = Elector(s.elector_client(), "leases:tls-noacl", TTL)
    led = threading.Event()
    t = threading.Thread(target=el.run, args=(lambda lease: led.set(),), daemon=True)
    t.start()
    try:
        poll(lambda: int(_acl_denials(s)) > 0, 5, "an ACL denial on the server")
        assert not led.is_set()
    finally:
        el.resign()
        t.join(5)
    assert not t.is_alive()
    assert holder(s, "leases:tls-noacl") is None


def _acl_denials(s: TlsServer) -> int:
    with s.admin() as c:
        return len(c.execute_command("ACL", "LOG"))
