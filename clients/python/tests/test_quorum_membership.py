"""Quorum mode's membership id (protocol Q9, issue 32 item 1): electors with different node
lists during a rolling node replacement must never lead together.

The reproduction (as ``client/tests/quorum_membership.rs``): some electors use {A, B, C},
others already {A, B, D}. X (old list) reigns on the bare majority {A, C} because B was
frozen during its campaign (a bare majority stays bare for the whole reign); B is free. Y
(new list) then finds B and D free: without the membership id Y reigns on {B, D} while X
still leads on {A, C}. With it, B is bound to the old list since the reign before and
refuses Y, so Y has only D.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from typing import Any, Callable, List, Optional

import pytest

import redis_lease.asyncio as alease
from redis_lease import Config, Elector, LeaderContext
from redis_lease import _quorum
from redis_lease import quorum_decide as qd
from redis_lease.decide import ErrorKind, Failed, classify_error_line

from .conftest import RedisServer

KEY = "q-members"
TTL = 1.0
C = qd.QuorumControl.CORRECT
MISMATCH = classify_error_line("MEMBERSHIP this key is bound to membership 1111222233334444, not 5555666677778888: x")


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def drive(gen: Any, answers: List[List[Any]]) -> Any:
    """Run a round generator, answering its Rounds in order; returns (result, rounds)."""
    seen: List[_quorum.Round] = []
    try:
        op = next(gen)
        while True:
            seen.append(op)
            op = gen.send(answers[len(seen) - 1])
    except StopIteration as stop:
        return stop.value, seen


# -- the decisions and the commands -------------------------------------------------------------


def test_membership_refusal_is_a_refusal_not_an_error() -> None:
    assert MISMATCH.kind is ErrorKind.MEMBERSHIP
    down = Failed(ErrorKind.CONNECTION, "down")
    # Like "held by someone else": not granted (poll again), typed so it is reported.
    assert qd.after_acquire(C, [MISMATCH, qd.REFUSED, 4], 0) == qd.Abort(((2, 4),), qd.MembershipMismatch())
    assert qd.after_acquire(C, [MISMATCH, 8, 4], 0) == qd.Raise(8, (1, 2))
    # Two MEMBERSHIP refusals and one node down: still a refusal, never a backoff.
    assert qd.after_acquire(C, [MISMATCH, MISMATCH, down], 0) == qd.Abort((), qd.MembershipMismatch())
    # In a renewal round like a 0: more than N - M of them lose the lease.
    assert qd.after_renew(C, [True, MISMATCH, MISMATCH]) is qd.AfterRenew.LOST
    assert qd.after_renew(C, [True, True, MISMATCH]) is qd.AfterRenew.RENEWED
    assert qd.after_renew(C, [True, MISMATCH, None]) is qd.AfterRenew.UNKNOWN


def test_every_acquire_renew_and_raise_names_the_membership() -> None:
    q = _quorum.Quorum(3, Config.from_ttl(TTL), membership="00000000000000ab")
    m = ("MEMBERSHIP", "00000000000000ab")
    tok, rounds = drive(q.acquire("k", "o#1", 1000, 10**18), [[10, 30, None], [1, 1, 1]])
    assert tok == 30
    assert rounds[0].cmds[0] == ("LEASE.ACQUIRE", "k", "o#1", 1000, *m)
    assert rounds[1].cmds[:2] == (("LEASE.RAISE", "k", "o#1", 10, 30, *m), ("LEASE.RAISE", "k", "o#1", 30, 30, *m))
    r, rounds = drive(q.renew("k", "o#1", 30, 1000, 10**18), [[1, 1, 1]])
    assert r == 1
    assert rounds[0].cmds[0] == ("LEASE.RENEW", "k", "o#1", 30, 1000, *m)
    # RELEASE takes none: it can only end a lease, so it must work whatever the binding.
    _, rounds = drive(q.release("k", "o#1", 30), [[1, 1, 1]])
    assert rounds[0].cmds[0] == ("LEASE.RELEASE", "k", "o#1", 30)


def test_a_membership_refusal_of_the_raise_is_no_confirmation_not_a_fault() -> None:
    q = _quorum.Quorum(3, Config.from_ttl(TTL), membership="00000000000000ab")
    tok, rounds = drive(q.acquire("k", "o#1", 1000, 10**18), [[4, 9, None], [1, MISMATCH, None], [1, 1, 1]])
    assert tok is None  # not granted: poll again, no backoff
    assert [c[0] if c else None for c in rounds[2].cmds] == ["LEASE.RELEASE", "LEASE.RELEASE", None]
    # ... whereas another server error refusing the raise is reported (the refused-RAISE rule).
    q = _quorum.Quorum(3, Config.from_ttl(TTL), membership="00000000000000ab")
    noperm = classify_error_line("NOPERM User has no permissions to run the 'lease.raise' command")
    tok, _ = drive(q.acquire("k", "o#1", 1000, 10**18), [[4, 9, None], [1, noperm, None], [1, 1, 1]])
    assert isinstance(tok, Failed) and tok.kind is ErrorKind.SERVER


def test_membership_id_of_clients_and_urls() -> None:
    import redis

    a = redis.Redis(host="Node-A.Example.", port=7000, db=2)
    assert _quorum.node_identity(a) == "tcp:node-a.example:7000"
    assert _quorum.node_identity(redis.Redis(unix_socket_path="/run/r.sock")) == "unix:/run/r.sock"
    assert _quorum.membership_id_of([a, "redis://node-b.example:7000", "redis://node-c.example"]) == "93db45cf361ecc72"
    with pytest.raises(ValueError, match="unsupported node URL"):
        _quorum.node_identity("http://x:1")


# -- against real servers: the reproduction -----------------------------------------------------


def cfg() -> Config:
    return Config.from_ttl(TTL)


def task(lease: LeaderContext) -> None:
    while lease.sleep(0.01):
        pass


class Run:
    def __init__(self, urls: List[str], owner: str, membership: bool = True) -> None:
        self.el = Elector(urls, KEY, config=cfg(), owner=owner)
        if not membership:
            # The negative control: the protocol before Q9 (no MEMBERSHIP argument).
            q = self.el._core.quorum
            assert q is not None
            q.membership = None
        self.t = threading.Thread(target=self.el.run, args=(task,), daemon=True)
        self.t.start()

    def stop(self) -> None:
        self.el.resign()
        self.t.join(10)
        assert not self.t.is_alive()


def mixed_lists(nodes: List[RedisServer], membership: bool) -> float:
    """The scenario; returns the longest time X and Y both led (0: never together)."""
    a, b, c, d = nodes
    old = [a.url, b.url, c.url]
    new = [a.url, b.url, d.url]
    # Before the replacement: a reign of the old list on all three nodes, then a hand-over.
    w = Run(old, "w", membership)
    wait_until(w.el.is_leader, 5, "w leads")
    w.stop()
    # X campaigns with B frozen: it reigns on the bare majority {A, C}.
    assert b.proc is not None
    b.proc.send_signal(signal.SIGSTOP)
    try:
        x = Run(old, "x", membership)
        wait_until(x.el.is_leader, 5, "x leads")
    finally:
        b.proc.send_signal(signal.SIGCONT)
    # Y, already moved to the new list, campaigns while X leads.
    y = Run(new, "y", membership)
    end = time.monotonic() + 3.0
    since: Optional[float] = None
    longest = 0.0
    try:
        while time.monotonic() < end:
            both = x.el.is_leader() and y.el.is_leader()
            now = time.monotonic()
            if both:
                since = now if since is None else since
                longest = max(longest, now - since)
            else:
                since = None
            time.sleep(0.002)
    finally:
        x.stop()
        y.stop()
    return longest


def four(server_factory: Callable[..., RedisServer]) -> List[RedisServer]:
    return [server_factory() for _ in range(4)]


def test_electors_with_different_node_lists_never_lead_together(
    server_factory: Callable[..., RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="redis_lease"):
        overlap = mixed_lists(four(server_factory), membership=True)
    assert overlap == 0.0, f"X (old list) and Y (new list) led together for {overlap:.3f} s"
    # Y's rounds were refused for membership every 50..100 ms for 3 s: reported once.
    reported = [r for r in caplog.records if "reason=membership_mismatch" in r.getMessage()]
    assert len(reported) == 1, [r.getMessage() for r in reported]


def test_without_the_membership_id_they_do_lead_together(server_factory: Callable[..., RedisServer]) -> None:
    overlap = mixed_lists(four(server_factory), membership=False)
    assert overlap > 0.5, f"the scenario no longer reproduces issue 32 ({overlap:.3f} s together)"


def asyncio_new_list_leads(nodes: List[RedisServer], membership: bool) -> bool:
    """A key bound by an elector of {A, B, C}; does an asyncio elector of {A, B, D} lead
    within 1.5 s?"""
    a, b, c, d = nodes
    w = Run([a.url, b.url, c.url], "w")
    wait_until(w.el.is_leader, 5, "w leads")
    w.stop()

    async def main() -> bool:
        el = alease.Elector([a.url, b.url, d.url], KEY, config=cfg(), owner="y")
        if not membership:
            q = el._core.quorum
            assert q is not None
            q.membership = None

        async def atask(lease: alease.LeaderContext) -> None:
            while await lease.sleep(0.01):
                pass

        run = asyncio.ensure_future(el.run(atask))
        led = False
        end = time.monotonic() + 1.5
        while time.monotonic() < end and not led:
            led = el.is_leader()
            await asyncio.sleep(0.005)
        el.resign()
        await asyncio.wait_for(run, 10)
        await el.close()
        return led

    return asyncio.run(main())


def test_asyncio_elector_of_another_list_is_refused(server_factory: Callable[..., RedisServer]) -> None:
    assert not asyncio_new_list_leads(four(server_factory), membership=True)


def test_asyncio_without_the_membership_id_leads_on_the_other_list(server_factory: Callable[..., RedisServer]) -> None:
    # The negative control of the test above: A and B are free, D too.
    assert asyncio_new_list_leads(four(server_factory), membership=False)
