"""The election loop's decisions as plain functions of ``(config, instants, result)``.

No I/O and no clock reads: every instant is passed in (integer microseconds on one monotonic
time line), so each rule is tested with the shared decision vectors in
``conformance/vectors/*.json`` (``tests/test_vectors.py``). The sync and the asyncio loop
(``redis_lease._core``) only execute what these functions return.

This is a port of the Rust reference (``client/src/decide.rs``); the language-neutral rules are
in ``docs/client-protocol.md``. Names of rules, actions, reasons and error kinds are shared with
every other client and with the metrics labels.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any, Dict, Optional, Tuple, Union

__all__ = [
    "Config",
    "config_problem",
    "lead_time_us",
    "deadline_us",
    "stop_at_us",
    "op_limit_us",
    "Wait",
    "wait_for",
    "retry_interval_us",
    "backoff_cap_us",
    "backoff_us",
    "not_granted_pause_us",
    "wire_ms",
    "Label",
    "ErrorKind",
    "UNREACHABLE",
    "classify_error_line",
    "Granted",
    "NotGranted",
    "Renewed",
    "NotHeld",
    "Failed",
    "AcquireResult",
    "RenewResult",
    "Lead",
    "Unconfirmed",
    "UnconfirmedWhy",
    "NotGrantedAction",
    "GraceWait",
    "Backoff",
    "AcquireAction",
    "on_acquire",
    "RenewedAction",
    "StepDown",
    "Retry",
    "RetryWhy",
    "RenewAction",
    "on_renew",
    "must_stop",
    "release_after",
    "StepDownReason",
    "MAX_BASE_BYTES",
    "MAX_REIGN",
    "ReignEvent",
    "reign_owner",
    "next_reign",
]

MS = 1000
"""Microseconds per millisecond."""


def _derived_units(ttl_ms: int) -> Dict[str, Any]:
    """Every setting derived from the TTL, in the vectors' units (durations floored to whole
    microseconds): ``config_defaults.json``."""
    t_us = int(ttl_ms) * MS
    return {
        "ttl_ms": int(ttl_ms),
        "drift": 0.01,
        "margin_us": min(t_us // 100, 50 * MS),
        "stop_budget_us": t_us // 5,
        "renew_interval_us": t_us // 3,
        "op_timeout_us": max(t_us // 5, 50 * MS),
        "block_timeout_us": 5_000 * MS,
        "min_replicas": 0,
        "wait_timeout_us": t_us // 10,
        "backoff_min_us": 50 * MS,
        "backoff_max_us": 5_000 * MS,
        "node_quarantine_us": 30_000 * MS,
    }


_SECONDS = (
    "margin", "stop_budget", "renew_interval", "op_timeout", "block_timeout", "wait_timeout",
    "backoff_min", "backoff_max", "node_quarantine",
)


@dataclass(frozen=True, init=False, repr=False)
class Config:
    """Timing configuration of one elector, in seconds like the elector's ``ttl``:
    ``Config(10.0)`` is every default for a 10 s TTL, ``Config(10.0, min_replicas=1,
    wait_timeout=0.2)`` changes two of them, :meth:`replace` makes a changed copy and the
    properties ``ttl``, ``stop_budget``, ``renew_interval`` ... read them (seconds). A setting
    not given is derived from the TTL ``T`` (``conformance/vectors/config_defaults.json``): renew
    every T/3, drift 1 %, margin min(T/100, 50 ms), stop budget T/5, op timeout max(T/5, 50 ms),
    BLOCK 5 s, no ``min_replicas``, WAIT timeout T/10, reconnect backoff 50 ms .. 5 s, node
    quarantine 30 s (quorum mode). The TTL is rounded to whole milliseconds (as sent to the
    server), the other durations to whole microseconds.

    Inside, the decisions of this module work in the units of the shared vectors: the fields
    ``ttl_ms`` and ``*_us`` (read-only; internal, not a way to configure).
    """

    ttl_ms: int
    drift: float
    margin_us: int
    stop_budget_us: int
    renew_interval_us: int
    op_timeout_us: int
    block_timeout_us: int
    min_replicas: int
    wait_timeout_us: int
    backoff_min_us: int
    backoff_max_us: int
    # Quorum mode (protocol Q7): how long a node whose server identity changed counts toward
    # nothing; at least the TTL. Default 30 s, the module's default ``lease.max-ttl``.
    node_quarantine_us: int

    def __init__(
        self,
        ttl: float,
        *,
        drift: float = 0.01,
        margin: Optional[float] = None,
        stop_budget: Optional[float] = None,
        renew_interval: Optional[float] = None,
        op_timeout: Optional[float] = None,
        block_timeout: Optional[float] = None,
        min_replicas: int = 0,
        wait_timeout: Optional[float] = None,
        backoff_min: Optional[float] = None,
        backoff_max: Optional[float] = None,
        node_quarantine: Optional[float] = None,
    ) -> None:
        units = _derived_units(int(round(ttl * 1000)))
        given = {
            "margin": margin, "stop_budget": stop_budget, "renew_interval": renew_interval,
            "op_timeout": op_timeout, "block_timeout": block_timeout,
            "wait_timeout": wait_timeout, "backoff_min": backoff_min, "backoff_max": backoff_max,
            "node_quarantine": node_quarantine,
        }
        for name, v in given.items():
            if v is not None:
                units[f"{name}_us"] = int(round(v * 1e6))
        units["drift"] = drift
        units["min_replicas"] = min_replicas
        self._set(units)

    def _set(self, units: Dict[str, Any]) -> None:
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, units[f.name])

    @classmethod
    def _of_units(cls, **units: Any) -> "Config":
        """Internal: a configuration in the vectors' units (``ttl_ms``, ``*_us``); a field not
        given is derived from ``ttl_ms``. Unknown names raise ``TypeError``."""
        full = _derived_units(int(units["ttl_ms"]))
        unknown = set(units) - set(full)
        if unknown:
            raise TypeError(f"unknown Config fields {sorted(unknown)}")
        full.update(units)
        c = cls.__new__(cls)
        c._set(full)
        return c

    @classmethod
    def from_ttl(cls, ttl: float) -> "Config":
        """Every default for a TTL given in seconds: the same as ``Config(ttl)``."""
        return cls(ttl)

    def replace(
        self,
        *,
        ttl: Optional[float] = None,
        drift: Optional[float] = None,
        margin: Optional[float] = None,
        stop_budget: Optional[float] = None,
        renew_interval: Optional[float] = None,
        op_timeout: Optional[float] = None,
        block_timeout: Optional[float] = None,
        min_replicas: Optional[int] = None,
        wait_timeout: Optional[float] = None,
        backoff_min: Optional[float] = None,
        backoff_max: Optional[float] = None,
        node_quarantine: Optional[float] = None,
    ) -> "Config":
        """A copy with some settings changed, durations in seconds (e.g.
        ``replace(min_replicas=1, wait_timeout=0.2)``). Nothing is re-derived: changing ``ttl``
        here keeps the other settings (build a new ``Config(ttl)`` for new defaults)."""
        units = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        given = {
            "margin": margin, "stop_budget": stop_budget, "renew_interval": renew_interval,
            "op_timeout": op_timeout, "block_timeout": block_timeout,
            "wait_timeout": wait_timeout, "backoff_min": backoff_min, "backoff_max": backoff_max,
            "node_quarantine": node_quarantine,
        }
        for name, v in given.items():
            if v is not None:
                units[f"{name}_us"] = int(round(v * 1e6))
        if ttl is not None:
            units["ttl_ms"] = int(round(ttl * 1000))
        if drift is not None:
            units["drift"] = drift
        if min_replicas is not None:
            units["min_replicas"] = min_replicas
        return Config._of_units(**units)

    def __repr__(self) -> str:
        names = ("ttl", "drift") + _SECONDS[:5] + ("min_replicas",) + _SECONDS[5:]
        return "Config(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in names) + ")"

    # Settings in seconds (the fields hold whole microseconds / the TTL in ms, as on the wire).

    @property
    def ttl(self) -> float:
        return self.ttl_ms / 1000

    @property
    def margin(self) -> float:
        return self.margin_us / 1e6

    @property
    def stop_budget(self) -> float:
        return self.stop_budget_us / 1e6

    @property
    def renew_interval(self) -> float:
        return self.renew_interval_us / 1e6

    @property
    def op_timeout(self) -> float:
        return self.op_timeout_us / 1e6

    @property
    def block_timeout(self) -> float:
        return self.block_timeout_us / 1e6

    @property
    def wait_timeout(self) -> float:
        return self.wait_timeout_us / 1e6

    @property
    def backoff_min(self) -> float:
        return self.backoff_min_us / 1e6

    @property
    def backoff_max(self) -> float:
        return self.backoff_max_us / 1e6

    @property
    def node_quarantine(self) -> float:
        return self.node_quarantine_us / 1e6


# ---------------------------------------------------------------------------------------------
# Configuration rules


def config_problem(cfg: Config, key: str, owner: str) -> Optional[Tuple[str, str]]:
    """The first rule a configuration breaks, as ``(rule, why)``; None if it is usable.

    Rule names are shared with every client (``config_validate.json``).
    """
    if not key:
        return ("key", "key is empty")
    # Bytes, not characters: the module counts bytes (lease.max-owner-len, default 256). The
    # owner is the base of base#reign (R17): 239 bytes leave room for '#' and 16 digits.
    owner_len = len(owner.encode("utf-8"))
    if owner_len == 0 or owner_len > MAX_BASE_BYTES:
        return ("owner", f"owner must be 1..={MAX_BASE_BYTES} bytes (it is sent as owner#reign)")
    if cfg.ttl_ms < 1:
        return ("ttl", "ttl must be at least 1 ms")
    # Why 2^53: every number on the wire must stay exact in JSON and JavaScript clients.
    if cfg.ttl_ms >= 2**53:
        return ("ttl", "ttl must be below 2^53 ms")
    # Why: a negative drift would push the local deadline past the server's expiry.
    if not (0.0 <= cfg.drift < 0.5):
        return ("drift", "drift must be in [0, 0.5)")
    if cfg.renew_interval_us <= 0:
        return ("renew_interval", "renew_interval must be positive")
    if cfg.block_timeout_us < MS:
        return ("block_timeout", "block_timeout must be at least 1 ms (BLOCK 0 blocks forever)")
    # Why: the task is told to stop at deadline - stop_budget; if that is not after the first
    # renewal, a leader would be stopped before it ever renews.
    if cfg.stop_budget_us + cfg.renew_interval_us >= lead_time_us(cfg):
        return (
            "stop_window",
            "renew_interval + stop_budget must be below ttl*(1-drift)-margin",
        )
    if cfg.op_timeout_us <= 0:
        return ("op_timeout", "op_timeout must be positive")
    if cfg.backoff_min_us <= 0 or cfg.backoff_max_us < cfg.backoff_min_us:
        return ("backoff", "backoff needs 0 < min <= max")
    # Why: WAIT takes whole ms and `WAIT n 0` waits forever.
    if cfg.min_replicas > 0 and cfg.wait_timeout_us < MS:
        return ("wait_timeout", "wait_timeout must be at least 1 ms when min_replicas > 0")
    return None


# ---------------------------------------------------------------------------------------------
# Deadlines


def lead_time_us(cfg: Config) -> int:
    """Usable leadership time per grant/renewal: ``round(ttl*(1-drift)) - margin``, never < 0.

    Why ``(1 - drift)``: the client's clock may run slow relative to the server's by up to
    ``drift``. Why ``- margin``: time passes between checking the deadline and acting on it.
    """
    return max(0, int(round(cfg.ttl_ms * MS * (1.0 - cfg.drift))) - cfg.margin_us)


def deadline_us(cfg: Config, sent_at_us: int) -> int:
    """Local deadline of a grant/renewal whose command was *sent* at ``sent_at_us``.

    Why the send instant (taken before sending) and not the reply time: the server starts the
    TTL when it executes the command, which is after we sent it, so ``sent_at + lead_time`` is
    never later than the server's expiry as long as clock rates agree within ``drift``.
    """
    return sent_at_us + lead_time_us(cfg)


def stop_at_us(cfg: Config, deadline: int) -> int:
    """When the task is told to stop: ``stop_budget`` before the deadline, so that it *has*
    stopped by the deadline."""
    return deadline - cfg.stop_budget_us


def must_stop(cfg: Config, deadline: int, now_us: int) -> bool:
    """Stop leading on the clock alone (checked whenever the loop wakes, e.g. after a pause)."""
    return now_us >= stop_at_us(cfg, deadline)


def op_limit_us(cfg: Config, block_us: Optional[int]) -> int:
    """The loop's own time limit for one command (the server may never answer):
    ``block + op_timeout (+ wait_timeout with min_replicas)``."""
    wait = cfg.wait_timeout_us if cfg.min_replicas > 0 else 0
    return (block_us or 0) + cfg.op_timeout_us + wait


@dataclass(frozen=True)
class Wait:
    """``WAIT replicas timeout_ms``, sent on the same connection right after a write."""

    replicas: int
    timeout_ms: int


def wire_ms(us: int) -> int:
    """A duration as whole milliseconds for the wire: floored, at least 1.

    Why at least 1: ``BLOCK 0`` and ``WAIT n 0`` mean "forever"; the module refuses ttl 0.
    """
    return max(1, us // MS)


def wait_for(cfg: Config) -> Optional[Wait]:
    """The WAIT to send after a grant/renewal, if ``min_replicas`` asks for one."""
    if cfg.min_replicas <= 0:
        return None
    return Wait(replicas=cfg.min_replicas, timeout_ms=wire_ms(cfg.wait_timeout_us))


def retry_interval_us(cfg: Config) -> int:
    """Delay before a failed renewal / unconfirmed grant is retried: renew_interval/4, at least
    10 ms (a dead server is not hammered)."""
    return max(cfg.renew_interval_us // 4, 10 * MS)


# ---------------------------------------------------------------------------------------------
# Backoff


def backoff_cap_us(cfg: Config, attempt: int) -> int:
    """``min(max, min * 2^min(attempt, 20))``: the exponent is clamped first so a long outage
    cannot overflow anything."""
    return min(cfg.backoff_max_us, cfg.backoff_min_us * (1 << min(max(attempt, 0), 20)))


def backoff_us(cfg: Config, attempt: int, unit: float) -> int:
    """Capped exponential backoff with full jitter: ``cap * clamp(unit, 0, 1)``.

    ``unit`` is a uniform draw in [0, 1) passed in so tests are deterministic. Why full jitter:
    50 followers that lost Redis at the same moment must not reconnect in the same millisecond.
    """
    u = min(max(unit, 0.0), 1.0)
    return int(round(backoff_cap_us(cfg, attempt) * u))


def not_granted_pause_us(
    cfg: Config, block_us: Optional[int], sent_at_us: int, now_us: int, unit: float
) -> int:
    """Pause after a nil ACQUIRE reply.

    Why: BLOCK answers nil only after its timeout, so a follower normally asks again at once. A
    BLOCKing ask that came back nil in less than half its timeout means something else is going
    on (a proxy, a server that does not block) and the follower must not spin on it.
    """
    if block_us is not None and 2 * (now_us - sent_at_us) < block_us:
        return backoff_us(cfg, 0, unit) + cfg.backoff_min_us
    return 0


# ---------------------------------------------------------------------------------------------
# Errors


class Label(str, Enum):
    """Base of every typed reason: a ``str`` enum whose ``str()`` and ``format()`` are its value,
    the text of the vectors, the logs and the metrics labels (``StepDownReason.DEADLINE ==
    "deadline"``; ``f"{reason}"`` is ``deadline`` on every Python version)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class ErrorKind(Label):
    """What kind of failure a command hit (also the ``kind`` label of
    ``lease_redis_errors_total``); docs/client-protocol.md §4."""

    CONNECTION = "connection"
    TIMEOUT = "timeout"
    GRACE = "grace"
    READONLY = "readonly"
    NOREPLICAS = "noreplicas"
    LOADING = "loading"
    FENCED = "fenced"
    # Quorum mode only (protocol Q9): that node's key is bound to another node list; a
    # refusal of that node, not an error of the round.
    MEMBERSHIP = "membership"
    REJECTED = "rejected"
    SERVER = "server"
    PROTOCOL = "protocol"


UNREACHABLE = frozenset([ErrorKind.CONNECTION, ErrorKind.TIMEOUT])
"""The kinds that mean the server could not be reached at all (vs. it answered an error)."""


_GRACE_DEFAULT_US = 100 * MS
_GRACE_MS = re.compile(r"^\s*(\d+)")


def classify_error_line(line: str) -> "Failed":
    """Classify a server error line by its first word (its code), e.g. ``GRACE 2345 ms left``."""
    code, _, detail = line.strip().partition(" ")
    if code == "GRACE":
        # The module's contract: `GRACE <ms> ...`. An unparsable number still means grace; wait
        # a short default rather than hammering the server.
        m = _GRACE_MS.match(detail)
        grace = int(m.group(1)) * MS if m else _GRACE_DEFAULT_US
        return Failed(ErrorKind.GRACE, line, grace_us=grace)
    kind = {
        "READONLY": ErrorKind.READONLY,
        "NOREPLICAS": ErrorKind.NOREPLICAS,
        "LOADING": ErrorKind.LOADING,
        "FENCED": ErrorKind.FENCED,
        "MEMBERSHIP": ErrorKind.MEMBERSHIP,
        "ERR": ErrorKind.REJECTED,
        "WRONGTYPE": ErrorKind.REJECTED,
    }.get(code, ErrorKind.SERVER)
    return Failed(kind, line)


# ---------------------------------------------------------------------------------------------
# Results of ACQUIRE / RENEW (already parsed and classified by the transport)


@dataclass(frozen=True)
class Granted:
    """ACQUIRE replied a token; ``acked`` = WAIT's reply (None when no WAIT was sent)."""

    token: int
    acked: Optional[int] = None


@dataclass(frozen=True)
class NotGranted:
    """ACQUIRE replied nil (not granted; a BLOCK timed out)."""


@dataclass(frozen=True)
class Renewed:
    """RENEW replied 1; ``acked`` = WAIT's reply (None when no WAIT was sent)."""

    acked: Optional[int] = None


@dataclass(frozen=True)
class NotHeld:
    """RENEW replied 0: the server says we do not hold the lease."""


@dataclass(frozen=True)
class Failed:
    """Any failure, classified: ``kind`` is an :class:`ErrorKind`; ``grace_us`` only for
    ``grace``; ``code`` is the server's error code when there is one (MOVED, READONLY...)."""

    kind: ErrorKind
    message: str = ""
    grace_us: Optional[int] = None
    code: Optional[str] = None

    @property
    def unreachable(self) -> bool:
        """The server could not be reached at all (vs. it answered with an error)."""
        return self.kind in UNREACHABLE


AcquireResult = Union[Granted, NotGranted, Failed]
RenewResult = Union[Renewed, NotHeld, Failed]


# ---------------------------------------------------------------------------------------------
# What a follower does with an ACQUIRE result


@dataclass(frozen=True)
class Lead:
    """Confirmed grant: lead until ``deadline_us``, renew at ``next_renew_us``."""

    token: int
    deadline_us: int
    next_renew_us: int


class UnconfirmedWhy(Label):
    """Why a grant does not count yet (the ``why`` of ``on_acquire.json``'s ``unconfirmed``)."""

    LATE_REPLY = "late_reply"
    """The reply came after its own stop point (R7)."""
    REPLICAS_NOT_ACKED = "replicas_not_acked"
    """Fewer replicas acknowledged it than ``min_replicas`` (R11)."""


@dataclass(frozen=True)
class Unconfirmed:
    """Granted, but it does not count (``why``). Do not run the task; ask again WITHOUT BLOCK
    after ``retry_in_us`` (same owner: the server refreshes our grant and returns the same
    token)."""

    token: int
    retry_in_us: int
    why: UnconfirmedWhy


@dataclass(frozen=True)
class NotGrantedAction:
    """Not granted: ask again (after :func:`not_granted_pause_us`)."""


@dataclass(frozen=True)
class GraceWait:
    """The server is in its grace period: wait this long."""

    wait_us: int


@dataclass(frozen=True)
class Backoff:
    """An error: back off (capped exponential, full jitter) and retry."""

    kind: ErrorKind


AcquireAction = Union[Lead, Unconfirmed, NotGrantedAction, GraceWait, Backoff]


def on_acquire(cfg: Config, sent_at_us: int, now_us: int, result: AcquireResult) -> AcquireAction:
    """What a follower does with the result of ACQUIRE (+ WAIT)."""
    if isinstance(result, NotGranted):
        return NotGrantedAction()
    if isinstance(result, Failed):
        if result.kind == ErrorKind.GRACE:
            return GraceWait(result.grace_us if result.grace_us is not None else _GRACE_DEFAULT_US)
        return Backoff(result.kind)
    token = result.token
    # Why: with min_replicas, a grant only the primary knows can vanish in a failover to a
    # replica that never saw it, and the new primary would grant it again. Never lead on it.
    if cfg.min_replicas > 0 and (result.acked or 0) < cfg.min_replicas:
        # Why not faster: each retry refreshes our (unused) grant on the primary; replicas
        # catching up take time, there is no point in hammering.
        return Unconfirmed(token, retry_interval_us(cfg), UnconfirmedWhy.REPLICAS_NOT_ACKED)
    deadline = deadline_us(cfg, sent_at_us)
    # Why: a reply so late that the stop point already passed leaves no safe leadership time;
    # starting the task would mean starting it to stop it. Same owner re-asks without BLOCK.
    if now_us >= stop_at_us(cfg, deadline):
        return Unconfirmed(token, 0, UnconfirmedWhy.LATE_REPLY)
    return Lead(token, deadline, sent_at_us + cfg.renew_interval_us)


# ---------------------------------------------------------------------------------------------
# What a leader does with a RENEW result

class StepDownReason(Label):
    """Why a reign ended (also the ``reason`` label of ``lease_transitions_total``)."""

    RENEW_REJECTED = "renew_rejected"
    """``LEASE.RENEW`` answered 0: the server says we do not hold the lease."""
    DEADLINE = "deadline"
    """The stop point came before a renewal confirmed the lease (R3, R9)."""
    RESIGNED = "resigned"
    """``resign()``, cancellation or Ctrl-C."""
    TASK_EXITED = "task_exited"
    """The leader task returned (or raised) by itself."""


@dataclass(frozen=True)
class RenewedAction:
    """Renewed and confirmed: new deadline (never earlier than the old one), next renewal."""

    deadline_us: int
    next_renew_us: int


@dataclass(frozen=True)
class StepDown:
    """Stop leading now (``reason``: ``RENEW_REJECTED`` or ``DEADLINE``)."""

    reason: StepDownReason


class RetryWhy(Label):
    """Why a renewal did not count (the ``why`` of ``on_renew.json``'s ``retry``)."""

    TIMEOUT = "timeout"
    """No reply within the op limit (R5)."""
    ERROR = "error"
    """Any other failure."""
    REPLICAS_NOT_ACKED = "replicas_not_acked"
    """Fewer replicas acknowledged it than ``min_replicas`` (R11)."""


@dataclass(frozen=True)
class Retry:
    """The renewal did not count; keep the OLD deadline and try again at ``at_us``."""

    at_us: int
    why: RetryWhy


RenewAction = Union[RenewedAction, StepDown, Retry]


def on_renew(
    cfg: Config, deadline: int, sent_at_us: int, now_us: int, result: RenewResult
) -> RenewAction:
    """What a leader does with the result of RENEW (+ WAIT)."""
    stop = stop_at_us(cfg, deadline)

    def retry(why: RetryWhy) -> RenewAction:
        # Why: errors and timeouts say nothing about the lease; the last confirmed deadline
        # still holds, so keep leading and retrying until the stop point, then step down.
        if now_us >= stop:
            return StepDown(StepDownReason.DEADLINE)
        return Retry(min(now_us + retry_interval_us(cfg), stop), why)

    if isinstance(result, NotHeld):
        # Why: 0 is the server's word that we no longer hold the lease. The local deadline may
        # still be ahead, but nothing backs it any more: step down at once.
        return StepDown(StepDownReason.RENEW_REJECTED)
    if isinstance(result, Renewed):
        # Why: an unacknowledged renewal may be lost in a failover; the new primary then
        # expires the lease at the OLD expiry, so only the old deadline is backed.
        if cfg.min_replicas > 0 and (result.acked or 0) < cfg.min_replicas:
            return retry(RetryWhy.REPLICAS_NOT_ACKED)
        new_deadline = max(deadline_us(cfg, sent_at_us), deadline)
        if now_us >= stop_at_us(cfg, new_deadline):
            return StepDown(StepDownReason.DEADLINE)
        return RenewedAction(new_deadline, sent_at_us + cfg.renew_interval_us)
    if result.kind == ErrorKind.TIMEOUT:
        return retry(RetryWhy.TIMEOUT)
    return retry(RetryWhy.ERROR)


def release_after(reason: StepDownReason) -> bool:
    """Whether to send RELEASE after the task stopped. Not after ``renew_rejected``: the server
    already said we do not hold it (a release would only cost a round trip)."""
    return StepDownReason(reason) != StepDownReason.RENEW_REJECTED


# ---------------------------------------------------------------------------------------------
# The owner of each reign (R17)

MAX_BASE_BYTES = 239
"""Longest owner base: ``base + '#' + 16 digits`` fits the server's default 256-byte owner."""

MAX_REIGN = 2**53 - 1
"""Largest reign number (exact in every client's number type, like a token)."""

class ReignEvent(Label):
    """What the loop reports to :func:`next_reign` (``next_reign.json``)."""

    GRANTED = "granted"
    UNCONFIRMED = "unconfirmed"
    NOT_GRANTED = "not_granted"
    ERROR = "error"
    STEPPED_DOWN = "stepped_down"


def reign_owner(base: str, reign: int) -> Optional[str]:
    """The owner sent on the wire for reign ``reign``: ``base#reign``; None when the base is
    empty or longer than :data:`MAX_BASE_BYTES` UTF-8 bytes, or the reign is out of
    ``1..=MAX_REIGN`` (refused, never truncated).

    Why a new owner per reign: every command the loop abandons (a RENEW or RELEASE that timed
    out) may still execute later, even after its connection was closed. With the same owner a
    new reign's first ACQUIRE would be an idempotent refresh of the old reign's lease (same
    token), and the old reign's late RELEASE would then free the *new* reign while we act on
    it. With ``base#n`` the late command names ``base#(n-1)`` and matches nothing.
    """
    n = len(base.encode("utf-8"))
    if n == 0 or n > MAX_BASE_BYTES:
        return None
    if isinstance(reign, bool) or reign < 1 or reign > MAX_REIGN:
        return None
    return f"{base}#{reign}"


def next_reign(reign: int, event: ReignEvent) -> int:
    """The reign counter after an event of the loop: only ``stepped_down`` (leaving the leader
    state, whatever the reason) advances it. Why the others keep it: within one campaign the
    R7/R16 re-asks (late grant, timed-out ACQUIRE) must refresh the campaign's *own* grant."""
    return reign + 1 if ReignEvent(event) == ReignEvent.STEPPED_DOWN else reign
