"""Through Redis Sentinel (``redis-server --sentinel``, the same binary): the elector finds the
primary via ``Sentinel.master_for`` and follows a failover (the old primary answers READONLY,
the connection is dropped and the primary looked up again)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator, List

import pytest
import redis
from redis.sentinel import Sentinel

from redis_lease import Elector, LeaderContext, Role, _wire

from .conftest import RedisServer, free_port


class SentinelProc:
    def __init__(self, primary_port: int) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="redis-lease-sentinel-")
        conf = Path(self.dir) / "sentinel.conf"
        conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n"
            f"sentinel monitor leases 127.0.0.1 {primary_port} 1\n"
            "sentinel down-after-milliseconds leases 1000\n"
            "sentinel failover-timeout leases 10000\n"
        )
        self.proc = subprocess.Popen(
            ["redis-server", str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        end = time.monotonic() + 10
        while True:
            try:
                with redis.Redis(port=self.port, socket_timeout=1) as c:
                    if c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "leases"):
                        return
            except redis.exceptions.RedisError:
                pass
            if self.proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError("sentinel did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture()
def topology(server: RedisServer, server_factory: Any) -> Iterator[List[Any]]:
    replica = server_factory(["--replicaof", "127.0.0.1", str(server.port)])
    end = time.monotonic() + 10
    while replica.client().info("replication").get("master_link_status") != "up":
        assert time.monotonic() < end, "replica never synced"
        time.sleep(0.05)
    s = SentinelProc(server.port)
    try:
        yield [server, replica, s]
    finally:
        s.stop()


def test_leads_through_sentinel_and_follows_a_failover(topology: List[Any]) -> None:
    primary, replica, sentinel_proc = topology
    sentinel = Sentinel([("127.0.0.1", sentinel_proc.port)], socket_timeout=1)
    changes: List[Role] = []
    el = Elector(sentinel.master_for("leases"), "sentinel-job", 2.0, on_change=changes.append)
    started = threading.Event()
    leases: List[LeaderContext] = []

    def task(lease: LeaderContext) -> None:
        leases.append(lease)
        started.set()
        lease.stop_event.wait()

    t = threading.Thread(target=el.run, args=(task,), daemon=True)
    t.start()
    try:
        assert started.wait(10)
        assert el.current_leader() is not None
        # Promote the replica; the old primary becomes its replica (READONLY for writes).
        # Sentinel needs a moment to discover the replica and see it healthy (NOGOODSLAVE).
        end = time.monotonic() + 25
        with redis.Redis(port=sentinel_proc.port) as s:
            while True:
                try:
                    s.execute_command("SENTINEL", "FAILOVER", "leases")
                    break
                except redis.exceptions.ResponseError as e:
                    assert "NOGOODSLAVE" in str(e) and time.monotonic() < end, e
                    time.sleep(0.2)
        t_failover = time.monotonic()
        end = time.monotonic() + 20
        while sentinel.discover_master("leases")[1] != replica.port:
            assert time.monotonic() < end, "no failover"
            time.sleep(0.05)
        t_promoted = time.monotonic()
        # The elector leads on the new primary: a renewal (or a new grant) SENT after the
        # promotion backs its deadline (lead time 1.96 s for ttl 2 s), and the lease is there.
        end = time.monotonic() + 20
        while True:
            info = _wire.parse_get(redis.Redis(port=replica.port).execute_command("LEASE.GET", "sentinel-job"))
            st = el.role
            if (
                isinstance(info, _wire.LeaseInfo)
                and info.owner.rsplit("#", 1)[0] == el.owner
                and st.is_leader
                and st.deadline is not None
                and st.deadline > t_promoted + 1.9
            ):
                break
            assert time.monotonic() < end, f"not leading on the new primary: {info} {changes}"
            time.sleep(0.05)
        print(f"\nsentinel failover: leading on the new primary {time.monotonic() - t_failover:.2f} s "
              f"after SENTINEL FAILOVER; transitions {[c.reason for c in changes]}")
    finally:
        el.resign()
        t.join(10)
    assert not t.is_alive()


def test_asyncio_leads_through_sentinel(topology: List[Any]) -> None:
    from redis.asyncio.sentinel import Sentinel as ASentinel

    from redis_lease.asyncio import Elector as AElector

    _, _, sentinel_proc = topology

    async def main() -> None:
        sentinel = ASentinel([("127.0.0.1", sentinel_proc.port)], socket_timeout=1)
        el = AElector(sentinel.master_for("leases"), "sentinel-async", 1.0)
        async with el.leadership(timeout=10) as lease:
            info = await el.current_leader()
            assert info is not None and info.token == lease.token
        assert await el.current_leader() is None

    asyncio.run(main())
