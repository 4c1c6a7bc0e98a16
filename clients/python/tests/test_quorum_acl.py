"""Quorum mode as docs/security.md §3's quorum-mode elector user (the rules read from the file):
the elector leads with one token on every node, renews and releases everywhere, and logs no
warning (INFO for the run_id check, RAISE and RELEASE all granted). Negative control: without
``+lease.raise`` it never leads, and says why in a warning.

Would catch: the recipe missing a command the Python quorum transport sends, the client leading
where it may not RAISE, and a refused RAISE that leaves the elector polling in silence."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Tuple

import pytest

from redis_lease import Elector, LeaderContext, _wire
from redis_lease.decide import Failed

from .conftest import RedisServer

TTL = 2.0
KEY = "leases:py-quorum-acl"
DOC = Path(__file__).resolve().parents[3] / "docs" / "security.md"


def quorum_recipe() -> List[str]:
    for line in DOC.read_text().splitlines():
        rest = line.strip().removeprefix("ACL SETUSER elector on >... ")
        if rest != line.strip() and "+lease.raise" in rest:
            return rest.split()
    raise AssertionError(f"{DOC} has no quorum-mode `ACL SETUSER elector on >... ... +lease.raise` line")


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def held(s: RedisServer) -> Optional[_wire.LeaseInfo]:
    with s.client() as c:
        r = _wire.parse_get(c.execute_command("LEASE.GET", KEY))
    assert not isinstance(r, Failed), r
    return r


class Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture()
def warnings() -> Iterator[Warnings]:
    h = Warnings()
    log = logging.getLogger("redis_lease")
    log.addHandler(h)
    try:
        yield h
    finally:
        log.removeHandler(h)


def acl_nodes(factory: Callable[..., RedisServer], rules: List[str]) -> Tuple[List[RedisServer], List[str]]:
    nodes = [factory() for _ in range(3)]
    for s in nodes:
        with s.client() as c:
            c.execute_command("ACL", "SETUSER", "elector", "on", ">elector-pw", *rules)
    return nodes, [f"redis://elector:elector-pw@127.0.0.1:{s.port}/" for s in nodes]


def campaign(urls: List[str]) -> Tuple[Elector, threading.Thread, List[LeaderContext], threading.Event]:
    el = Elector(urls, KEY, TTL)
    leases: List[LeaderContext] = []
    started = threading.Event()

    def task(lease: LeaderContext) -> None:
        leases.append(lease)
        started.set()
        lease.stop_event.wait()

    t = threading.Thread(target=el.run, args=(task,), daemon=True)
    t.start()
    return el, t, leases, started


def test_the_quorum_recipes_user_leads_renews_and_releases_without_a_warning(
    server_factory: Callable[..., RedisServer], warnings: Warnings
) -> None:
    nodes, urls = acl_nodes(server_factory, quorum_recipe())
    el, t, leases, started = campaign(urls)
    try:
        assert started.wait(10), f"no quorum reign as the recipe's user; warnings {warnings.lines}"
        token = leases[0].token
        for i, s in enumerate(nodes):
            info = held(s)
            assert info is not None and info.token == token, (i, info)
        # A node's pttl only falls between renewals: a rise is a RENEW that ran there.
        prev: List[Optional[int]] = [None] * 3
        renewed = [False] * 3

        def all_renewed() -> bool:
            for i, s in enumerate(nodes):
                info = held(s)
                assert info is not None and info.token == token, (i, info)
                p = prev[i]
                if p is not None and info.pttl_ms > p + 50:
                    renewed[i] = True
                prev[i] = info.pttl_ms
            return all(renewed)

        wait_until(all_renewed, 5, "a renewal on every node")
    finally:
        el.resign()
        t.join(10)
    assert not t.is_alive()
    assert [held(s) for s in nodes] == [None] * 3, "the recipe's user must release everywhere"
    assert warnings.lines == []


def test_without_lease_raise_the_quorum_elector_never_leads_and_says_why(
    server_factory: Callable[..., RedisServer], warnings: Warnings
) -> None:
    rules = [r for r in quorum_recipe() if r != "+lease.raise"]
    _, urls = acl_nodes(server_factory, rules)
    el, t, _, started = campaign(urls)
    try:
        assert not started.wait(3 * TTL / 2), "led without +lease.raise"
        wait_until(lambda: any("LEASE.RAISE" in w and "NOPERM" in w for w in warnings.lines), 5,
                   f"a warning naming the refused RAISE (got {warnings.lines})")
    finally:
        el.resign()
        t.join(10)
    assert not t.is_alive()
