"""Ctrl-C and cancellation resign: the task is stopped, the lease released, is_leader() false.

- asyncio: cancelling the task that awaits ``run()`` (``Task.cancel()``, Ctrl-C under
  ``asyncio.run``, a TaskGroup) resigns, then re-raises ``CancelledError``;
- sync: ``KeyboardInterrupt`` (SIGINT) inside ``run()`` resigns, then re-raises it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest

from redis_lease import Elector, Lease
from redis_lease.asyncio import Elector as AsyncElector
from redis_lease.asyncio import Lease as AsyncLease

from .conftest import RedisServer

TTL = 1.0


def test_cancelling_async_run_resigns(server: RedisServer) -> None:
    async def main() -> None:
        el = AsyncElector(server.url, "acancel", TTL)
        started = asyncio.Event()
        stopped = asyncio.Event()
        leases = []

        async def task(lease: AsyncLease) -> None:
            leases.append(lease)
            started.set()
            await lease.stop_event.wait()
            stopped.set()

        t = asyncio.ensure_future(el.run(task))
        await asyncio.wait_for(started.wait(), 5)
        assert el.is_leader()
        t0 = time.monotonic()
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        assert time.monotonic() - t0 < TTL
        assert stopped.is_set(), "the task was not stopped"
        assert not el.is_leader() and not leases[0].is_leader()
        assert await el.observe() is None, "cancel must release the lease"
        assert not el._conns, "the elector's own connections are closed"
        await el.close()

    asyncio.run(main())
    assert server.client().info("lease")["lease_released"] == 1


def test_keyboard_interrupt_in_sync_run_resigns(server: RedisServer) -> None:
    el = Elector(server.url, "sigint", TTL)
    stopped = threading.Event()
    started = threading.Event()

    def task(lease: Lease) -> None:
        started.set()
        lease.stop_event.wait()
        stopped.set()

    def interrupt() -> None:
        if started.wait(5):
            time.sleep(0.1)
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: KeyboardInterrupt in the main thread

    assert threading.current_thread() is threading.main_thread()
    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        el.run(task)
    assert stopped.is_set(), "the task was not stopped"
    assert not el.is_leader()
    assert el.observe() is None, "Ctrl-C must release the lease"
    assert not el._conns, "the elector's own connections are closed"
