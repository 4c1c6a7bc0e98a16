"""Optional Prometheus metrics (``pip install 'redis-lease[prometheus]'``).

Same names, labels and buckets as the Rust client (``client/src/metrics.rs``); every series
carries the label ``key`` (the lease key), so several electors can share one registry:

==================================  =========  ======================================
metric                              type       labels
==================================  =========  ======================================
``lease_is_leader``                 gauge 0/1  key
``lease_token``                     gauge      key (current token, 0 when not leading)
``lease_transitions_total``         counter    key, to (leader/follower), reason
``lease_acquire_attempts_total``    counter    key, result (granted, not_granted, late,
                                               unconfirmed, grace, error)
``lease_renew_total``               counter    key, result (renewed, rejected,
                                               unconfirmed, error)
``lease_renew_latency_seconds``     histogram  key
``lease_deadline_seconds``          gauge      key (seconds to the local deadline)
``lease_redis_errors_total``        counter    key, op, kind
``lease_redis_up``                  gauge 0/1  key (the last command reached Redis)
``lease_task_overrun_total``        counter    key (task still running at the deadline)
==================================  =========  ======================================

``prometheus_client`` is imported only when :class:`PrometheusMetrics` is created; without it
the elector records nothing (:class:`NullMetrics`).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, Optional

from .decide import ErrorKind, StepDownReason

try:  # Protocol is in typing from 3.8 on; kept explicit for readers.
    from typing import Protocol
except ImportError:  # pragma: no cover
    from typing_extensions import Protocol  # type: ignore[assignment]

__all__ = ["KeyMetrics", "Metrics", "NullMetrics", "PrometheusMetrics"]

RENEW_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class KeyMetrics(Protocol):
    """What the election loop records for one lease key."""

    def leader(self, token: int, deadline: float) -> None: ...
    def follower(self, reason: StepDownReason) -> None: ...
    def deadline(self, deadline: Optional[float]) -> None: ...
    def acquire(self, result: str) -> None: ...
    def renew(self, result: str, latency: float) -> None: ...
    def redis_error(self, op: str, kind: ErrorKind) -> None: ...
    def redis_up(self, up: bool) -> None: ...
    def task_overrun(self) -> None: ...


class Metrics(Protocol):
    """A metrics backend: gives the recorder of one lease key."""

    def bind(self, key: str) -> KeyMetrics: ...


class _NullKey:
    def leader(self, token: int, deadline: float) -> None:
        pass

    def follower(self, reason: StepDownReason) -> None:
        pass

    def deadline(self, deadline: Optional[float]) -> None:
        pass

    def acquire(self, result: str) -> None:
        pass

    def renew(self, result: str, latency: float) -> None:
        pass

    def redis_error(self, op: str, kind: ErrorKind) -> None:
        pass

    def redis_up(self, up: bool) -> None:
        pass

    def task_overrun(self) -> None:
        pass


class NullMetrics:
    """Records nothing (the default)."""

    def bind(self, key: str) -> KeyMetrics:
        return _NullKey()


# One set of collectors per registry: registering a name twice in one registry is an error.
_FAMILIES: Dict[int, Dict[str, Any]] = {}
_FAMILIES_LOCK = threading.Lock()


def _families(registry: Any) -> Dict[str, Any]:
    from prometheus_client import Counter, Gauge, Histogram

    with _FAMILIES_LOCK:
        fam = _FAMILIES.get(id(registry))
        if fam is not None:
            return fam
        r = registry
        fam = {
            "is_leader": Gauge("lease_is_leader", "1 while this instance leads", ["key"], registry=r),
            "token": Gauge("lease_token", "Current fencing token (0 when not leading)", ["key"], registry=r),
            "transitions": Counter(
                "lease_transitions", "Leadership transitions", ["key", "to", "reason"], registry=r
            ),
            "acquire": Counter(
                "lease_acquire_attempts", "LEASE.ACQUIRE attempts by result", ["key", "result"], registry=r
            ),
            "renew": Counter("lease_renew", "LEASE.RENEW attempts by result", ["key", "result"], registry=r),
            "renew_latency": Histogram(
                "lease_renew_latency_seconds",
                "LEASE.RENEW round trip (incl. WAIT)",
                ["key"],
                buckets=RENEW_BUCKETS,
                registry=r,
            ),
            "deadline": Gauge(
                "lease_deadline_seconds", "Seconds to the local leadership deadline", ["key"], registry=r
            ),
            "redis_errors": Counter(
                "lease_redis_errors", "Failed Redis commands", ["key", "op", "kind"], registry=r
            ),
            "redis_up": Gauge("lease_redis_up", "1 if the last command reached Redis", ["key"], registry=r),
            "task_overrun": Counter(
                "lease_task_overrun",
                "Leader task still running at the local deadline",
                ["key"],
                registry=r,
            ),
        }
        _FAMILIES[id(registry)] = fam
        return fam


class _PromKey:
    def __init__(self, fam: Dict[str, Any], key: str) -> None:
        self._f = fam
        self._key = key
        self._deadline: Optional[float] = None
        # lease_deadline_seconds is computed at scrape time from the current local deadline.
        fam["deadline"].labels(key=key).set_function(self._seconds_left)

    def _seconds_left(self) -> float:
        d = self._deadline
        return 0.0 if d is None else max(0.0, d - time.monotonic())

    def leader(self, token: int, deadline: float) -> None:
        self._f["is_leader"].labels(key=self._key).set(1)
        self._f["token"].labels(key=self._key).set(token)
        self._f["transitions"].labels(key=self._key, to="leader", reason="acquired").inc()
        self._deadline = deadline

    def follower(self, reason: StepDownReason) -> None:
        self._f["is_leader"].labels(key=self._key).set(0)
        self._f["token"].labels(key=self._key).set(0)
        self._f["transitions"].labels(key=self._key, to="follower", reason=str(reason)).inc()
        self._deadline = None

    def deadline(self, deadline: Optional[float]) -> None:
        self._deadline = deadline

    def acquire(self, result: str) -> None:
        self._f["acquire"].labels(key=self._key, result=result).inc()

    def renew(self, result: str, latency: float) -> None:
        self._f["renew"].labels(key=self._key, result=result).inc()
        self._f["renew_latency"].labels(key=self._key).observe(latency)

    def redis_error(self, op: str, kind: ErrorKind) -> None:
        self._f["redis_errors"].labels(key=self._key, op=op, kind=str(kind)).inc()

    def redis_up(self, up: bool) -> None:
        self._f["redis_up"].labels(key=self._key).set(1 if up else 0)

    def task_overrun(self) -> None:
        self._f["task_overrun"].labels(key=self._key).inc()


class PrometheusMetrics:
    """Metrics in a ``prometheus_client`` registry (default: the global ``REGISTRY``).

    Expose them the usual way, e.g. ``prometheus_client.start_http_server(9464)``.
    """

    def __init__(self, registry: Any = None) -> None:
        import prometheus_client

        self.registry = prometheus_client.REGISTRY if registry is None else registry
        self._fam = _families(self.registry)

    def bind(self, key: str) -> KeyMetrics:
        return _PromKey(self._fam, key)
