"""Through Redis Cluster (redis-py ``RedisCluster``): three primaries with the module, the
elector leads on its key's slot owner, keeps leading while that slot migrates to another
primary (MOVED: the client re-resolves the slot) and releases on the new owner."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import pytest
import redis
from redis.cluster import RedisCluster

from redis_lease import Elector, Fenced, LeaderContext, Role, _wire

from .conftest import RedisServer, free_port

TTL = 2.0
KEY = "{py-cluster}:leader"
DATA = "{py-cluster}:data"


def poll(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def node_id(s: RedisServer) -> str:
    with s.client() as c:
        return str(c.execute_command("CLUSTER", "MYID").decode())


def held(s: RedisServer, key: str) -> Optional[_wire.LeaseInfo]:
    with s.client() as c:
        r = _wire.parse_get(c.execute_command("LEASE.GET", key))
    assert not isinstance(r, _wire.Failed), r
    return r


def cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) exists and is free too."""
    while True:
        p = free_port()
        if p + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p + 10000))
            except OSError:
                continue
        return p


@pytest.fixture()
def cluster(module: Path) -> Iterator[List[RedisServer]]:
    nodes: List[RedisServer] = []
    try:
        for _ in range(3):
            s = RedisServer(module, ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
            s.port = cluster_port()
            nodes.append(s)
            s.start()
        yield from _joined(nodes)
    finally:
        for s in nodes:
            s.stop()


def _joined(nodes: List[RedisServer]) -> Iterator[List[RedisServer]]:
    ranges = [(0, 5460), (5461, 10922), (10923, 16383)]
    for i, (s, (lo, hi)) in enumerate(zip(nodes, ranges)):
        with s.client() as c:
            # Distinct config epochs before MEET (as redis-cli --cluster create): left at 0,
            # the gossip resolving the collision can undo a migration made meanwhile (the old
            # owner's bumped epoch takes the slot back from the importing node).
            c.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
            c.execute_command("CLUSTER", "ADDSLOTSRANGE", lo, hi)
    with nodes[0].client() as c:
        for s in nodes[1:]:
            c.execute_command("CLUSTER", "MEET", "127.0.0.1", s.port)

    def ready() -> bool:
        for s in nodes:
            with s.client() as c:
                if b"cluster_state:ok" not in c.execute_command("CLUSTER", "INFO"):
                    return False
                if len(c.execute_command("CLUSTER", "SLOTS")) != 3:
                    return False
        return True

    poll(ready, 20, "a 3-primary cluster with every slot known on every node")
    yield nodes


def test_leads_on_the_slot_owner_and_follows_a_slot_migration(cluster: List[RedisServer]) -> None:
    with cluster[0].client() as c:
        slot = int(c.execute_command("CLUSTER", "KEYSLOT", KEY))
    owners: Dict[int, RedisServer] = {}
    for s, (lo, hi) in zip(cluster, [(0, 5460), (5461, 10922), (10923, 16383)]):
        if lo <= slot <= hi:
            owners[slot] = s
    src = owners[slot]
    dst = next(s for s in cluster if s is not src)
    # Start from a node that does NOT own the slot: the client must route by slot.
    entry = dst
    rc = RedisCluster(host="127.0.0.1", port=entry.port, socket_timeout=2)
    changes: List[Role] = []
    el = Elector(rc, KEY, TTL, on_change=changes.append)
    leases: List[LeaderContext] = []
    started = threading.Event()

    def task(lease: LeaderContext) -> None:
        leases.append(lease)
        started.set()
        lease.stop_event.wait()

    t = threading.Thread(target=el.run, args=(task,), daemon=True)
    t.start()
    try:
        assert started.wait(10), "did not lead through RedisCluster"
        lease = leases[0]
        info = held(src, KEY)
        assert info is not None and info.token == lease.token, info
        for s in cluster:
            if s is not src:
                with s.client() as c:
                    with pytest.raises(redis.exceptions.MovedError):
                        c.execute_command("LEASE.GET", KEY)
        # Migrate the lease key's slot src -> dst (the redis-cli --cluster reshard steps).
        src_id, dst_id = node_id(src), node_id(dst)
        with dst.client() as d, src.client() as s:
            d.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
            s.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
            s.execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", KEY)
            d.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
            s.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        for n in cluster:
            if n is not src and n is not dst:
                with n.client() as c:
                    c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        migrated = time.monotonic()
        d0 = lease.deadline
        assert d0 is not None
        moved = held(dst, KEY)
        # MIGRATE carried the lease; the module holds a restored lease for its max TTL (safe:
        # never shorter than the holder's), so a pttl within our TTL proves a RENEW ran on dst.
        assert moved is not None and moved.token == lease.token and moved.pttl_ms > TTL * 1000, moved

        # Still the leader of the same term, now on dst: a renewal sent after the migration
        # ran on dst (pttl back within our TTL) and moved our deadline.
        def renewed_on_dst() -> bool:
            info = held(dst, KEY)
            d = lease.deadline
            return (info is not None and info.token == lease.token and info.pttl_ms <= TTL * 1000
                    and lease.is_leader() and d is not None and d > d0 and d > migrated + 0.9 * TTL)

        poll(renewed_on_dst, 10, "a renewal on the slot's new owner")
        assert [c.reason for c in changes] == ["acquired"], "the migration must not end the term"
        # The fencing helper through RedisCluster, routed by the lease key to the new owner: the
        # live token writes; a stale one is refused (Fenced) and its write not applied.
        got = el.fence(lease.token, "SET", DATA, "live")
        assert got == b"OK", got
        with pytest.raises(Fenced):
            el.fence(lease.token - 1, "SET", DATA, "stale")
        with dst.client() as c:
            assert c.get(DATA) == b"live"
    finally:
        el.resign()
        t.join(10)
        rc.close()
    assert not t.is_alive()
    assert held(dst, KEY) is None, "resign must RELEASE on the slot's new owner"
