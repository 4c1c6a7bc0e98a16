"""Protocol Q2: a quorum round never BLOCKs, so a follower polls "with the loop's jittered
pause" between rounds (at least ``backoff_min``, 50 ms by default), not back to back. A follower
that re-asks at once sends 3 ACQUIREs per round trip to every node for as long as another
elector leads: thousands a second on loopback."""

from __future__ import annotations

import threading
import time
from typing import Callable, List

from prometheus_client import CollectorRegistry

from redis_lease import Elector, LeaderContext
from redis_lease.metrics import PrometheusMetrics

from .conftest import RedisServer

TTL = 2.0
KEY = "py-quorum-pace"


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_a_quorum_follower_pauses_between_rounds(server_factory: Callable[..., RedisServer]) -> None:
    urls = [server_factory().url for _ in range(3)]
    leader = Elector(urls, KEY, TTL)
    reg = CollectorRegistry()
    follower = Elector(urls, KEY, TTL, metrics=PrometheusMetrics(reg))
    led = threading.Event()
    follower_led: List[LeaderContext] = []

    def lead(lease: LeaderContext) -> None:
        led.set()
        lease.stop_event.wait()

    def follow(lease: LeaderContext) -> None:
        follower_led.append(lease)
        lease.stop_event.wait()

    def rounds() -> float:
        v = reg.get_sample_value("lease_acquire_attempts_total", {"key": KEY, "result": "not_granted"})
        return v or 0.0

    ta = threading.Thread(target=leader.run, args=(lead,), daemon=True)
    ta.start()
    tb = None
    try:
        assert led.wait(10), "no leader"
        tb = threading.Thread(target=follower.run, args=(follow,), daemon=True)
        tb.start()
        wait_until(lambda: rounds() >= 1, 10, "the follower's first round")
        n0, t0 = rounds(), time.monotonic()
        time.sleep(1.0)  # the window in which rounds are counted (not a wait for a state)
        n, secs = rounds() - n0, time.monotonic() - t0
        # A pause of at least backoff_min (50 ms) between rounds: at most 20 a second; 40
        # leaves room for rounds that end at once.
        assert 1 <= n <= 40 * secs, f"the follower made {n:.0f} rounds in {secs:.2f} s"
        assert follower_led == [], "two leaders"
    finally:
        follower.resign()
        leader.resign()
        ta.join(10)
        if tb is not None:
            tb.join(10)
