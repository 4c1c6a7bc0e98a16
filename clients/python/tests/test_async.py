"""The asyncio elector against real redis-server processes."""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable, List, Optional, TypeVar

import pytest
from prometheus_client import CollectorRegistry

from redis_lease import Role
from redis_lease.asyncio import Elector, LeaderContext
from redis_lease.metrics import PrometheusMetrics

from .conftest import RedisServer

TTL = 1.0
T = TypeVar("T")


def arun(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


class Recorder:
    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.lease: Optional[LeaderContext] = None
        self.t_start = 0.0
        self.t_stop = 0.0
        self.deadline_seen = 0.0

    async def __call__(self, lease: LeaderContext) -> str:
        self.lease = lease
        self.t_start = time.monotonic()
        self.started.set()
        while await lease.sleep(0.01):
            self.deadline_seen = lease.deadline or self.deadline_seen
        self.t_stop = time.monotonic()
        return "done"


async def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.002)


def test_handover_and_the_event_loop_is_never_blocked(server: RedisServer) -> None:
    async def main() -> None:
        ticks: List[float] = []

        async def heartbeat() -> None:
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        hb = asyncio.ensure_future(heartbeat())
        a = Elector(server.url, "ahandover", TTL, owner="a")
        b = Elector(server.url, "ahandover", TTL, owner="b")
        ra, rb = Recorder(), Recorder()
        ta = asyncio.ensure_future(a.run(ra))
        await asyncio.wait_for(ra.started.wait(), 5)
        tb = asyncio.ensure_future(b.run(rb))
        await asyncio.sleep(1.5)  # A renews, B sits in a BLOCKing ACQUIRE: the loop ticks on
        assert not rb.started.is_set()
        t0 = time.monotonic()
        a.resign()
        await asyncio.wait_for(rb.started.wait(), 5)
        handover_ms = (rb.t_start - t0) * 1000
        await ta
        assert 0 < ra.t_stop <= rb.t_start
        assert ra.lease is not None and rb.lease is not None and rb.lease.token > ra.lease.token
        b.resign()
        await tb
        hb.cancel()
        gaps = [y - x for x, y in zip(ticks, ticks[1:])]
        print(f"\nhand-over on resign (asyncio): {handover_ms:.2f} ms; heartbeat max gap "
              f"{max(gaps) * 1000:.1f} ms over {len(ticks)} ticks")
        assert handover_ms < 1000
        # A 10 ms heartbeat never starved: nothing in the elector blocks the loop (generous
        # bound for a busy 2-core CI machine; a blocking 5 s BLOCK read would show as ~5 s).
        assert max(gaps) < 0.5
        assert len(ticks) > 50

    arun(main())


def test_redis_killed_leader_steps_down_before_deadline(server: RedisServer) -> None:
    async def main() -> None:
        changes: List[Role] = []
        el = Elector(server.url, "akill", TTL, on_change=changes.append)
        rec = Recorder()
        t = asyncio.ensure_future(el.run(rec))
        await asyncio.wait_for(rec.started.wait(), 5)
        await asyncio.sleep(0.5)
        server.kill()
        await wait_until(lambda: rec.t_stop > 0, 3, "the stop signal")
        assert rec.t_stop < rec.deadline_seen
        assert rec.deadline_seen - rec.t_stop > 0.1
        assert [c.reason for c in changes] == ["acquired", "deadline"]
        el.resign()
        await asyncio.wait_for(t, 5)

    arun(main())


def test_leadership_context_manager_and_timeout(server: RedisServer) -> None:
    async def main() -> None:
        holder = Elector(server.url, "actx", TTL)
        async with holder.leadership(timeout=5) as lease:
            assert lease.is_leader()
            info = await holder.current_leader()
            assert info is not None and info.token == lease.token
            other = Elector(server.url, "actx", TTL)
            with pytest.raises(TimeoutError):
                async with other.leadership(timeout=0.3):
                    pytest.fail("two leaders")
            await asyncio.sleep(1.2 * TTL)
            assert lease.is_leader()
        assert not lease.is_leader()
        assert await holder.current_leader() is None

    arun(main())


def test_task_ignoring_its_stop_signal_is_cancelled_at_the_deadline(server: RedisServer) -> None:
    async def main() -> None:
        reg = CollectorRegistry()
        el = Elector(server.url, "astubborn", TTL, metrics=PrometheusMetrics(reg))
        seen: List[str] = []
        started = asyncio.Event()

        async def stubborn(lease: LeaderContext) -> None:
            started.set()
            try:
                await asyncio.sleep(60)  # ignores lease.stop_event
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise

        t = asyncio.ensure_future(el.run(stubborn))
        await asyncio.wait_for(started.wait(), 5)
        t0 = time.monotonic()
        el.resign()
        await asyncio.wait_for(t, 5)
        # Waited until the local deadline (< 1 s after resign), then cancelled the task.
        assert time.monotonic() - t0 < TTL
        await asyncio.sleep(0.01)
        assert seen == ["cancelled"]
        assert reg.get_sample_value("lease_task_overrun_total", {"key": "astubborn"}) == 1
        # Not released: the task may still have been running; the lease expires instead.
        stats = server.client().info("lease")
        assert stats["lease_released"] == 0 and stats["lease_release_rejected"] == 0

    arun(main())


def test_task_exception_is_raised_after_release(server: RedisServer) -> None:
    async def main() -> None:
        el = Elector(server.url, "aboom", TTL)

        async def task(lease: LeaderContext) -> None:
            raise ValueError("task failed")

        with pytest.raises(ValueError, match="task failed"):
            await el.run(task)
        assert await el.current_leader() is None

    arun(main())


def test_resign_from_another_thread_interrupts_a_blocking_acquire(server: RedisServer) -> None:
    async def main() -> None:
        holder = Elector(server.url, "athread", TTL)
        async with holder.leadership(timeout=5):
            follower = Elector(server.url, "athread", TTL)

            async def never(lease: LeaderContext) -> None:
                pytest.fail("must not lead")

            t = asyncio.ensure_future(follower.run(never))
            await asyncio.sleep(0.2)
            t0 = time.monotonic()
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, follower.resign)
            assert await asyncio.wait_for(t, 2) is None
            assert time.monotonic() - t0 < 1.0  # not the 5 s BLOCK

    arun(main())


