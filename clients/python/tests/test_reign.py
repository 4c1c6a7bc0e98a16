"""R17 (docs/client-protocol.md): a new reign never starts by refreshing a lease an earlier
reign held. The shared loop (``redis_lease._core``) is driven here without I/O against a small
in-memory model of the module's lease (idempotent refresh by the same owner, RELEASE by owner +
token) and a network that delivers abandoned commands late, in order, like TCP does after the
client gave up on them. This is the scenario of issue 23, step by step:

1. A leads with token T; its RENEWs reach the server late (after A's op timeout) but execute and
   keep the lease alive there.
2. A reaches its stop point, stops its task, sends RELEASE, which times out and is abandoned.
3. A campaigns again. With one owner across reigns its ACQUIRE refreshes the old lease and
   returns T: A leads again.
4. The stale RELEASE executes and frees A's *new* reign while A acts: a follower would be
   granted at once. With ``owner#reign`` the stale RELEASE names the old reign and answers 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

import pytest

from redis_lease import _core
from redis_lease.decide import Config, ErrorKind, Failed
from redis_lease.metrics import NullMetrics

KEY = "job"
BASE = "a-1-9f2c41aa"


@dataclass
class Held:
    owner: str
    token: int
    expires_us: int


class FakeLease:
    """The module's rules for one key, on the test's clock (what the loop relies on)."""

    def __init__(self) -> None:
        self.held: Optional[Held] = None
        self.next_token = 100

    def live(self, now: int) -> Optional[Held]:
        if self.held is not None and now >= self.held.expires_us:
            self.held = None
        return self.held

    def execute(self, args: Tuple[Any, ...], now: int) -> Any:
        cmd = args[0]
        h = self.live(now)
        if cmd == "LEASE.ACQUIRE":
            owner, ttl_ms = str(args[2]), int(args[3])
            if h is not None and h.owner == owner:
                h.expires_us = now + ttl_ms * 1000  # idempotent refresh: same token
                return h.token
            if h is not None:
                return None
            self.next_token += 1
            self.held = Held(owner, self.next_token, now + ttl_ms * 1000)
            return self.next_token
        if cmd == "LEASE.RENEW":
            owner, token, ttl_ms = str(args[2]), int(args[3]), int(args[4])
            if h is not None and (h.owner, h.token) == (owner, token):
                h.expires_us = now + ttl_ms * 1000
                return 1
            return 0
        if cmd == "LEASE.RELEASE":
            owner, token = str(args[2]), int(args[3])
            if h is not None and (h.owner, h.token) == (owner, token):
                self.held = None
                return 1
            return 0
        if cmd == "LEASE.GET":
            return None if h is None else [h.owner.encode(), h.token, max(0, (h.expires_us - now) // 1000)]
        raise AssertionError(f"unexpected command {args!r}")


class Scenario:
    """Drives the loop. After the first grant every ``ctl`` command (RENEW, RELEASE) is late:
    RENEWs execute on the server when sent but their replies never arrive in time; the RELEASE
    is held back and delivered right after the loop starts its next reign."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, reuse_owner: bool) -> None:
        self.now = 0
        monkeypatch.setattr(_core, "now_us", lambda: self.now)
        self.server = FakeLease()
        self.camp = _core.Campaign(Config._of_units(ttl_ms=1000), KEY, BASE, NullMetrics().bind(KEY), None)
        self.camp._reuse_owner = reuse_owner
        self.acquire_owners: List[str] = []
        self.reigns: List[_core.Term] = []
        self.held_back: List[Tuple[Any, ...]] = []
        self.stale_release_reply: Any = "not delivered"

    def command(self, op: _core.Command) -> Any:
        self.now += 1_000  # 1 ms on the wire
        if op.args[0] == "LEASE.ACQUIRE":
            self.acquire_owners.append(str(op.args[2]))
            reply = self.server.execute(op.args, self.now)
            if reply is None and "BLOCK" in op.args:
                # BLOCK: granted as soon as the lease frees, else nil at the block timeout.
                h = self.server.held
                block_end = self.now + int(op.args[5]) * 1000
                if h is not None and h.expires_us <= block_end:
                    self.now = h.expires_us
                    reply = self.server.execute(op.args, self.now)
                else:
                    self.now = block_end
            return reply
        if self.reigns and op.channel == "ctl":
            if op.args[0] == "LEASE.RENEW":
                self.server.execute(op.args, self.now)  # executes; the reply is late
            else:
                self.held_back.append(op.args)  # still in the kernel's send buffer
            self.now = max(self.now, op.until_us)
            return Failed(ErrorKind.TIMEOUT, "no reply within the loop's limit")
        return self.server.execute(op.args, self.now)

    def run(self) -> None:
        loop = self.camp.run(lambda: False)
        result: Any = None
        for _ in range(10_000):
            op = loop.send(result)
            if isinstance(op, _core.Command):
                result = self.command(op)
            elif isinstance(op, _core.Sleep):
                self.now = max(self.now, op.until_us)
                result = _core.TIMER
            elif isinstance(op, _core.StartTask):
                self.reigns.append(op.term)
                result = None
                if len(self.reigns) == 2:
                    # The abandoned RELEASE of reign 1 arrives now, in order after its RENEWs.
                    assert self.held_back, "reign 1 sent no RELEASE"
                    self.stale_release_reply = self.server.execute(self.held_back.pop(0), self.now)
                    return
            else:
                result = _core.TaskEnd(True)  # the task honours its stop signal at once
        raise AssertionError("the loop never led a second time")


def test_a_late_release_of_the_last_reign_cannot_end_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Scenario(monkeypatch, reuse_owner=False)
    s.run()
    first, second = s.reigns
    assert first.owner == f"{BASE}#1" and second.owner == f"{BASE}#2"
    # The stale RELEASE names reign 1: it matches nothing, the new reign keeps its lease.
    assert s.stale_release_reply == 0
    h = s.server.live(s.now)
    assert h is not None and (h.owner, h.token) == (second.owner, second.token)
    # Reign 2 had to wait for reign 1's lease to expire: it got a new, higher token.
    assert second.token > first.token


def test_negative_control_one_owner_across_reigns_loses_the_new_reign(monkeypatch: pytest.MonkeyPatch) -> None:
    """The old behaviour (kept behind the conformance elector's ``--mode reuse-owner``): the
    second reign refreshes the first one's lease, same token, and the stale RELEASE frees it
    while the loop leads on it."""
    s = Scenario(monkeypatch, reuse_owner=True)
    s.run()
    first, second = s.reigns
    assert first.owner == second.owner
    assert second.token == first.token
    assert s.stale_release_reply == 1
    assert s.server.live(s.now) is None, "the new reign's lease was freed while it leads"
    assert not second.ended


def test_the_owner_stays_the_same_within_one_campaign(monkeypatch: pytest.MonkeyPatch) -> None:
    """A late grant (after its own stop point) is re-asked without BLOCK with the same owner,
    so the re-ask refreshes the campaign's own grant (R7)."""
    now = [0]
    monkeypatch.setattr(_core, "now_us", lambda: now[0])
    camp = _core.Campaign(Config._of_units(ttl_ms=1000), KEY, BASE, NullMetrics().bind(KEY), None)
    server = FakeLease()
    loop = camp.run(lambda: False)
    owners: List[Tuple[str, bool]] = []
    result: Any = None
    while True:
        op = loop.send(result)
        if isinstance(op, _core.StartTask):
            break
        assert isinstance(op, _core.Command) and op.args[0] == "LEASE.ACQUIRE"
        owners.append((str(op.args[2]), "BLOCK" in op.args))
        # The first reply comes back 900 ms after it was sent: past its stop point (780 ms).
        now[0] += 900_000 if len(owners) == 1 else 1_000
        result = server.execute(op.args, now[0])
    assert owners == [(f"{BASE}#1", True), (f"{BASE}#1", False)]
    assert op.term.owner == f"{BASE}#1"


def test_a_base_that_leaves_no_room_for_the_reign_is_refused() -> None:
    cfg = Config._of_units(ttl_ms=1000)
    _core.Campaign(cfg, KEY, "x" * 239, NullMetrics().bind(KEY), None)
    with pytest.raises(ValueError, match="owner"):
        _core.Campaign(cfg, KEY, "x" * 240, NullMetrics().bind(KEY), None)
    with pytest.raises(ValueError, match="owner"):
        _core.Campaign(cfg, KEY, "é" * 120, NullMetrics().bind(KEY), None)
