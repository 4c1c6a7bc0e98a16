"""`with elector.leadership()` (sync and asyncio): the body's exit is what the loop waits for
before RELEASE (R13), bounded by the local deadline; a body still running at the deadline is
never released under (the lease expires on the server instead)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import List

from redis_lease import Elector
from redis_lease.asyncio import Elector as AsyncElector

from .conftest import RedisServer

TTL = 1.0


class GonePoller:
    """Polls LEASE.GET from its own connection; records when the lease first disappeared."""

    def __init__(self, server: RedisServer, key: str) -> None:
        self.key = key
        self.client = server.client()
        self.gone_at = 0.0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.poll, daemon=True)
        self.thread.start()

    def poll(self) -> None:
        while not self.done.is_set():
            if self.client.execute_command("LEASE.GET", self.key) is None:
                self.gone_at = time.monotonic()
                return
            time.sleep(0.002)

    def stop(self) -> None:
        """Give it a bounded time to see the release (it ends once the lease is gone)."""
        self.thread.join(3)
        self.done.set()
        self.thread.join(5)


def released(server: RedisServer) -> int:
    return int(server.client().info("lease")["lease_released"])


def test_sync_leadership_releases_only_after_the_body_exits(server: RedisServer) -> None:
    el = Elector(server.url, "os1", TTL)
    with el.leadership(timeout=5) as lease:
        poller = GonePoller(server, "os1")
        el.resign()  # the stop signal fires: the body finishes its step first
        assert lease.stop_event.wait(2)
        time.sleep(0.3)  # the step in progress (well inside the deadline, 0.98 s)
        body_end = time.monotonic()
    poller.stop()
    assert poller.gone_at > 0, "never released"
    assert poller.gone_at >= body_end, f"released {(body_end - poller.gone_at) * 1000:.0f} ms before the body ended"
    assert released(server) == 1


def test_sync_leadership_body_past_the_deadline_is_not_released(server: RedisServer) -> None:
    el = Elector(server.url, "os2", TTL)
    with el.leadership(timeout=5) as lease:
        deadline = lease.deadline
        assert deadline is not None
        el.resign()
        time.sleep(max(0.0, deadline - time.monotonic()) + 0.3)  # still running at the deadline
    assert released(server) == 0
    stats = server.client().info("lease")
    assert stats["lease_release_rejected"] == 0


def test_async_leadership_releases_only_after_the_body_exits(server: RedisServer) -> None:
    async def main() -> float:
        el = AsyncElector(server.url, "oa1", TTL)
        async with el.leadership(timeout=5) as lease:
            el.resign()
            await asyncio.wait_for(lease.stop_event.wait(), 2)
            await asyncio.sleep(0.3)  # the step in progress; the loop runs meanwhile
            return time.monotonic()

    poller_box: List[GonePoller] = []

    async def with_poller() -> float:
        task = asyncio.ensure_future(main())
        while server.client().execute_command("LEASE.GET", "oa1") is None:
            assert not task.done()
            await asyncio.sleep(0.002)
        poller_box.append(GonePoller(server, "oa1"))
        return await task

    body_end = asyncio.run(with_poller())
    poller = poller_box[0]
    poller.stop()
    assert poller.gone_at > 0, "never released"
    assert poller.gone_at >= body_end, f"released {(body_end - poller.gone_at) * 1000:.0f} ms before the body ended"
    assert released(server) == 1


def test_async_leadership_body_past_the_deadline_is_not_released(server: RedisServer) -> None:
    async def main() -> None:
        el = AsyncElector(server.url, "oa2", TTL)
        async with el.leadership(timeout=5) as lease:
            deadline = lease.deadline
            assert deadline is not None
            el.resign()
            await asyncio.sleep(max(0.0, deadline - time.monotonic()) + 0.3)

    asyncio.run(main())
    assert released(server) == 0
