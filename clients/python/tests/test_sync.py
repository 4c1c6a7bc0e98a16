"""The thread-based elector against real redis-server processes."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, Optional

import pytest
import redis
from prometheus_client import CollectorRegistry

from redis_lease import Config, Elector, LeaderContext, Role, StepDownReason
from redis_lease.metrics import PrometheusMetrics

from .conftest import RedisServer

TTL = 1.0


def metric(reg: CollectorRegistry, name: str, **labels: str) -> float:
    v = reg.get_sample_value(name, labels)
    return 0.0 if v is None else v


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


class Recorder:
    """A task that records when it started and when its stop signal fired."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.lease: Optional[LeaderContext] = None
        self.t_start = 0.0
        self.t_stop = 0.0
        self.deadline_seen = 0.0

    def __call__(self, lease: LeaderContext) -> str:
        self.lease = lease
        self.t_start = time.monotonic()
        self.started.set()
        while lease.sleep(0.01):
            self.deadline_seen = lease.deadline or self.deadline_seen
        self.t_stop = time.monotonic()
        return "done"


def start_run(el: Elector, task: Callable[[LeaderContext], Any]) -> threading.Thread:
    t = threading.Thread(target=el.run, args=(task,), daemon=True)
    t.start()
    return t


def test_leads_renews_and_releases_on_resign(server: RedisServer) -> None:
    reg = CollectorRegistry()
    changes: List[Role] = []
    el = Elector(server.url, "job", TTL, metrics=PrometheusMetrics(reg), on_change=changes.append)
    rec = Recorder()
    t = start_run(el, rec)
    assert rec.started.wait(5)
    assert rec.lease is not None
    first_deadline = rec.lease.deadline
    time.sleep(1.5 * TTL)  # longer than the TTL: only renewals keep it
    lease = rec.lease
    assert lease.is_leader()
    assert lease.deadline is not None and first_deadline is not None and lease.deadline > first_deadline
    info = el.current_leader()
    assert info is not None and info.owner == lease.owner == f"{el.owner}#1" and info.token == lease.token
    assert metric(reg, "lease_renew_total", key="job", result="renewed") >= 3
    assert metric(reg, "lease_is_leader", key="job") == 1
    assert metric(reg, "lease_token", key="job") == lease.token
    el.resign()
    t.join(5)
    assert not t.is_alive()
    assert not lease.is_leader() and lease.stop_event.is_set()
    assert el.current_leader() is None, "resign must RELEASE the lease"
    assert [c.reason for c in changes] == ["acquired", "resigned"]
    assert metric(reg, "lease_transitions_total", key="job", to="follower", reason="resigned") == 1
    assert metric(reg, "lease_is_leader", key="job") == 0


def test_two_electors_hand_over_on_resign(server: RedisServer) -> None:
    reg = CollectorRegistry()
    a = Elector(server.url, "handover", TTL, owner="a")
    b = Elector(server.url, "handover", TTL, owner="b", metrics=PrometheusMetrics(reg))
    ra, rb = Recorder(), Recorder()
    ta = start_run(a, ra)
    assert ra.started.wait(5)
    tb = start_run(b, rb)
    # B waits in BLOCK longer than its stop window (0.78 s): its grant comes back "late" and
    # is confirmed by a non-blocking re-ask (one more round trip, same token).
    time.sleep(1.2)
    assert not rb.started.is_set()
    t0 = time.monotonic()
    a.resign()
    assert rb.started.wait(5)
    handover_ms = (rb.t_start - t0) * 1000
    print(f"\nhand-over on resign (sync): {handover_ms:.2f} ms")
    ta.join(5)
    # Order: A's task had stopped before B's started (A releases only after its task ended).
    assert 0 < ra.t_stop <= rb.t_start
    assert handover_ms < 1000
    assert ra.lease is not None and rb.lease is not None and rb.lease.token > ra.lease.token
    assert metric(reg, "lease_acquire_attempts_total", key="handover", result="late") == 1
    b.resign()
    tb.join(5)


def test_redis_killed_leader_steps_down_before_deadline(server: RedisServer) -> None:
    changes: List[Role] = []
    el = Elector(server.url, "kill", TTL, on_change=changes.append)
    rec = Recorder()
    t = start_run(el, rec)
    assert rec.started.wait(5)
    time.sleep(0.5)
    server.kill()
    t_kill = time.monotonic()
    wait_until(lambda: rec.t_stop > 0, 3, "the stop signal")
    assert rec.lease is not None and not rec.lease.is_leader()
    # The last deadline the task saw was backed by a renewal sent before the kill; the stop
    # signal fired before it (stop_budget = ttl/5 = 200 ms earlier).
    assert rec.t_stop < rec.deadline_seen, (rec.t_stop, rec.deadline_seen)
    assert rec.deadline_seen - rec.t_stop > 0.1
    assert rec.t_stop - t_kill < TTL
    wait_until(lambda: len(changes) >= 2, 3, "the step-down transition")
    assert changes[1] == Role(False, None, None, StepDownReason.DEADLINE)
    el.resign()
    t.join(5)


def test_renew_rejected_steps_down_at_once(server: RedisServer) -> None:
    changes: List[Role] = []
    el = Elector(server.url, "stolen", TTL, on_change=changes.append)
    rec = Recorder()
    t = start_run(el, rec)
    assert rec.started.wait(5)
    server.client().delete("stolen")  # the lease is gone: the next RENEW answers 0
    wait_until(lambda: rec.t_stop > 0, 2, "the stop signal")
    assert [c.reason for c in changes[:2]] == ["acquired", "renew_rejected"]
    el.resign()
    t.join(5)


def test_task_exception_is_raised_after_release(server: RedisServer) -> None:
    el = Elector(server.url, "boom", TTL)

    def task(lease: LeaderContext) -> None:
        raise ValueError("task failed")

    with pytest.raises(ValueError, match="task failed"):
        el.run(task)
    assert el.current_leader() is None


def test_task_return_value_and_release(server: RedisServer) -> None:
    el = Elector(server.url, "once", TTL)
    assert el.run(lambda lease: lease.token) is not None
    assert el.current_leader() is None


def test_leadership_context_manager(server: RedisServer) -> None:
    holder = Elector(server.url, "ctx", TTL)
    with holder.leadership(timeout=5) as lease:
        assert lease.is_leader()
        info = holder.current_leader()
        assert info is not None and info.token == lease.token and info.owner == lease.owner == f"{holder.owner}#1"
        other = Elector(server.url, "ctx", TTL)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            with other.leadership(timeout=0.3):
                pytest.fail("two leaders")
        assert time.monotonic() - t0 < 2
        time.sleep(1.2 * TTL)  # renewed in the background meanwhile
        assert lease.is_leader()
    assert not lease.is_leader()
    assert holder.current_leader() is None
    with other.leadership(timeout=2) as lease2:
        assert lease2.token > lease.token


def test_min_replicas_waits_for_a_replica(server: RedisServer, server_factory: Any) -> None:
    reg = CollectorRegistry()
    cfg = Config.from_ttl(TTL).replace(min_replicas=1, wait_timeout=0.05)
    el = Elector(server.url, "repl", config=cfg, metrics=PrometheusMetrics(reg))
    rec = Recorder()
    t = start_run(el, rec)
    time.sleep(0.6)
    # No replica acknowledges the grant: never lead on it.
    assert not rec.started.is_set()
    assert metric(reg, "lease_acquire_attempts_total", key="repl", result="unconfirmed") >= 2
    server_factory(["--replicaof", "127.0.0.1", str(server.port)])
    assert rec.started.wait(10), "a replica acked: leads"
    el.resign()
    t.join(5)


def test_resp3_and_server_errors_are_classified(server: RedisServer) -> None:
    from redis_lease import _wire

    c3 = redis.Redis(port=server.port, protocol=3)
    el = Elector(c3, "resp3", TTL)
    with el.leadership(timeout=5) as lease:
        info = el.current_leader()  # a map under RESP3
        assert info is not None and info.token == lease.token

    c = server.client()
    c.set("plain", "x")
    errors: Dict[str, str] = {}
    for name, args in {
        "wrongtype": ("LEASE.ACQUIRE", "plain", "o", 1000),
        "ttl": ("LEASE.ACQUIRE", "k", "o", 10**9),
        "fenced": ("LEASE.FENCE", "resp3", 1),
    }.items():
        with pytest.raises(redis.exceptions.ResponseError) as e:
            c.execute_command(*args)
        f = _wire.failure(e.value)
        errors[name] = f.kind
    assert errors == {"wrongtype": "rejected", "ttl": "rejected", "fenced": "fenced"}


def test_grace_error_is_parsed(server_factory: Any) -> None:
    from redis_lease import _wire

    s = server_factory(grace_ms=30_000)
    with pytest.raises(redis.exceptions.ResponseError) as e:
        s.client().execute_command("LEASE.ACQUIRE", "g", "o", 1000)
    f = _wire.failure(e.value)
    assert f.kind == "grace" and f.grace_us is not None and 20_000_000 < f.grace_us <= 30_000_000


def test_invalid_configuration_is_refused_before_sending() -> None:
    with pytest.raises(ValueError, match="stop_window"):
        Elector("redis://127.0.0.1:1/", "k", config=Config.from_ttl(1.0).replace(stop_budget=0.7))
    with pytest.raises(ValueError, match="key"):
        Elector("redis://127.0.0.1:1/", "", 1.0)


def test_each_reign_has_its_own_owner_on_the_server(server: RedisServer) -> None:
    """R17 against a real server: after a step-down the next reign is `owner#2`, so a command
    naming reign 1 (even with the new token) matches nothing."""
    el = Elector(server.url, "reigns", TTL)
    leases: List[LeaderContext] = []
    second = threading.Event()

    def task(lease: LeaderContext) -> None:
        leases.append(lease)
        if len(leases) == 2:
            second.set()
        lease.stop_event.wait()

    t = start_run(el, task)
    wait_until(lambda: len(leases) == 1, 5, "the first reign")
    c = server.client()
    c.delete("reigns")  # the next RENEW answers 0: step down, campaign again
    assert second.wait(5), "no second reign"
    first, again = leases
    assert (first.owner, again.owner) == (f"{el.owner}#1", f"{el.owner}#2")
    assert c.execute_command("LEASE.RELEASE", "reigns", first.owner, again.token) == 0
    info = el.current_leader()
    assert info is not None and (info.owner, info.token) == (again.owner, again.token)
    el.resign()
    t.join(5)
