"""The elector's clock: CLOCK_BOOTTIME on Linux (counts a host suspend), and every
`is_leader()` and `stop_event.is_set()` reads it (right as the first thing after a pause or a
stalled event loop, before the loop ran)."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import List

import pytest

from redis_lease import Elector, LeaderContext, _core
from redis_lease.asyncio import Elector as AsyncElector
from redis_lease.asyncio import LeaderContext as AsyncLease

from .conftest import RedisServer

TTL = 1.0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="CLOCK_BOOTTIME is Linux's")
def test_deadlines_are_timed_on_clock_boottime(monkeypatch: pytest.MonkeyPatch) -> None:
    real = time.clock_gettime_ns

    def fake(clock: int) -> int:
        # A machine that was suspended for 1000 s: BOOTTIME is ahead of MONOTONIC.
        return real(clock) + (1000 * 10**9 if clock == time.CLOCK_BOOTTIME else 0)

    monkeypatch.setattr(time, "clock_gettime_ns", fake)
    before = real(time.CLOCK_BOOTTIME) // 1000 + 1000 * 10**6
    got = _core.now_us()
    after = real(time.CLOCK_BOOTTIME) // 1000 + 1000 * 10**6
    assert before <= got <= after
    from redis_lease import _clock

    assert _clock.CLOCK_NAME == "CLOCK_BOOTTIME"
    # Public instants stay on time.monotonic(): 2 s ahead on the elector's clock is 2 s ahead.
    assert abs(_core.monotonic_s(got + 2_000_000) - (time.monotonic() + 2.0)) < 0.05


def test_sync_elector_is_leader_reads_the_clock(server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    el = Elector(server.url, "clk", TTL)
    leases: List[LeaderContext] = []
    started = threading.Event()

    def task(lease: LeaderContext) -> None:
        leases.append(lease)
        started.set()
        lease.stop_event.wait()

    t = threading.Thread(target=el.run, args=(task,), daemon=True)
    t.start()
    assert started.wait(5)
    assert el.is_leader()
    real = _core.now_us
    # The clock jumps past the stop point (as after a pause): nothing else has run yet.
    monkeypatch.setattr(_core, "now_us", lambda: real() + 10 * 10**6)
    assert not el.is_leader()
    assert not leases[0].is_leader()
    # The stop signal too (issue 33): it reads the clock, the watchdog thread has not run yet.
    assert leases[0].stop_event.is_set()
    assert leases[0].stop_event.wait(0)
    monkeypatch.undo()
    el.resign()
    t.join(5)


def test_async_objects_after_a_loop_stall_past_the_stop_point(server: RedisServer) -> None:
    """Issue 33: the event loop is stalled (a CPU spin in task code) past the stop point. Right
    after the stall, before the loop ran anything else, every object handed out reads the
    clock: the stop event is set, is_leader() is false on the lease and on the elector. Only
    ``role`` (the last transition, published by the loop) is still the old one."""

    async def main() -> None:
        el = AsyncElector(server.url, "stall", TTL)
        seen = {}

        async def task(lease: AsyncLease) -> None:
            deadline = lease.deadline
            assert deadline is not None and lease.is_leader() and not lease.stop_event.is_set()
            while time.monotonic() < deadline + 0.1:  # stalls the loop past the deadline
                pass
            seen["stop_event.is_set"] = lease.stop_event.is_set()
            seen["lease.is_leader"] = lease.is_leader()
            seen["elector.is_leader"] = el.is_leader()
            seen["role.is_leader"] = el.role.is_leader
            await lease.stop_event.wait()

        t = asyncio.ensure_future(el.run(task))
        while not seen:
            await asyncio.sleep(0.01)
        el.resign()
        await asyncio.wait_for(t, 5)
        print(f"\nafter a loop stall past the deadline: {seen}")
        assert seen == {
            "stop_event.is_set": True,
            "lease.is_leader": False,
            "elector.is_leader": False,
            "role.is_leader": True,
        }

    asyncio.run(main())
