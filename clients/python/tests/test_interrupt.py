"""Ctrl-C and cancellation resign: the task is stopped, the lease released, is_leader() false.

- asyncio: cancelling the task that awaits ``run()`` (``Task.cancel()``, Ctrl-C under
  ``asyncio.run``, a TaskGroup) resigns, then re-raises ``CancelledError``;
- sync: ``KeyboardInterrupt`` (SIGINT) inside ``run()`` resigns, then re-raises it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from redis_lease import Elector, LeaderContext
from redis_lease.asyncio import Elector as AsyncElector
from redis_lease.asyncio import LeaderContext as AsyncLease

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
        assert await el.current_leader() is None, "cancel must release the lease"
        assert not el._conns, "the elector's own connections are closed"
        await el.close()

    asyncio.run(main())
    assert server.client().info("lease")["lease_released"] == 1


def test_keyboard_interrupt_in_sync_run_resigns(server: RedisServer) -> None:
    el = Elector(server.url, "sigint", TTL)
    stopped = threading.Event()
    started = threading.Event()

    def task(lease: LeaderContext) -> None:
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
    assert el.current_leader() is None, "Ctrl-C must release the lease"
    assert not el._conns, "the elector's own connections are closed"


CTRL_C_UNDER_ASYNCIO_RUN = """
import asyncio, sys
from redis_lease.asyncio import Elector

async def main() -> None:
    el = Elector(sys.argv[1], "actrlc", 10.0)

    async def task(lease) -> None:
        print("leading", flush=True)
        await lease.stop_event.wait()
        print("stopped", flush=True)

    await el.run(task)

asyncio.run(main())
"""


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.run cancels the main task on Ctrl-C from 3.11 on")
def test_ctrl_c_under_asyncio_run_resigns(server: RedisServer, tmp_path: Path) -> None:
    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C_UNDER_ASYNCIO_RUN)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    proc = subprocess.Popen([sys.executable, str(script), server.url], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "leading"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert "stopped" in out, err
    assert "KeyboardInterrupt" in err  # asyncio.run re-raises it after the resign
    # A 10 s TTL: only the release explains the lease being gone at once.
    assert server.client().execute_command("LEASE.GET", "actrlc") is None
    assert server.client().info("lease")["lease_released"] == 1
