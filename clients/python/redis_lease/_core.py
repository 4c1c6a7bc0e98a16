"""The election loop, written once for the sync and the asyncio elector.

The loop is a generator that *yields* the I/O it needs (:class:`Command`, :class:`Sleep`,
:class:`StartTask`, :class:`StopTask`) and is *sent* the outcome. The sync driver
(``redis_lease.sync``) executes these with threads and blocking sockets, the asyncio driver
(``redis_lease.asyncio``) with ``redis.asyncio`` and tasks. Everything else - which command,
when, what a reply means (``redis_lease.decide``), logs, metrics, published state - lives here,
so the two APIs cannot drift apart.

Times are integer microseconds of the elector's clock (``redis_lease._clock``: CLOCK_BOOTTIME
on Linux, which keeps counting through a host suspend, else the monotonic clock); instants
handed to users are converted to the ``time.monotonic()`` clock when they are read.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Generator, Optional, Tuple, Union

from . import _clock, _quorum, _wire, decide
from . import quorum_decide as qd
from .decide import Config, Failed, RetryWhy, StepDownReason, UnconfirmedWhy
from .metrics import KeyMetrics

log = logging.getLogger("redis_lease")


def now_us() -> int:
    return _clock.now_us()


def monotonic_s(at_us: int) -> float:
    """An instant of :func:`now_us` as ``time.monotonic()`` seconds."""
    return time.monotonic() + (at_us - now_us()) / 1e6


def default_owner() -> str:
    """``host-pid-random``: unique per process incarnation, so a restarted process never
    inherits (and silently "refreshes") the lease of its previous life."""
    host = socket.gethostname() or "unknown"
    return f"{host}-{os.getpid()}-{random.getrandbits(32):08x}"


# ---------------------------------------------------------------------------------------------
# State shared with the task and observers


class Term:
    """One reign: token, current local deadline and stop point (updated by renewals), and
    whether it ended. Written by the loop only; read from any thread (attribute reads and
    writes of ints/bools are atomic in CPython)."""

    __slots__ = ("token", "owner", "deadline_us", "stop_at_us", "ended")

    def __init__(self, token: int, owner: str, deadline_us: int, stop_at_us: int) -> None:
        self.token = token
        self.owner = owner
        self.deadline_us = deadline_us
        self.stop_at_us = stop_at_us
        self.ended = False

    def leading(self) -> bool:
        # Reads the clock on every call: right even as the first instruction after a pause.
        return not self.ended and now_us() < self.stop_at_us


class RoleChange(decide.Label):
    """Why the role is what it is, when it is not a step-down (:class:`Role`'s ``reason``)."""

    START = "start"
    """Nothing happened yet: a follower that has not led."""
    ACQUIRED = "acquired"
    """A new reign started."""
    RENEWED = "renewed"
    """A renewal moved the deadline."""


@dataclass(frozen=True)
class Role:
    """Leader or follower, as the loop last published it (passed to ``on_change`` on every
    transition; :attr:`Elector.role`). A snapshot: it does not re-check the clock.

    ``deadline`` is the local deadline on the ``time.monotonic()`` clock (None as follower);
    ``reason`` is a :class:`RoleChange` (``acquired`` for a new reign) or, as a follower after
    a reign, the :class:`~redis_lease.decide.StepDownReason`."""

    is_leader: bool
    token: Optional[int] = None
    deadline: Optional[float] = None
    reason: Union[RoleChange, StepDownReason] = RoleChange.START


FOLLOWER = Role(False)

# ---------------------------------------------------------------------------------------------
# What the loop asks its driver to do


class _Quit:
    """Sent back instead of a result when resign() interrupted the operation."""

    def __repr__(self) -> str:
        return "QUIT"


QUIT = _Quit()
TIMER = "timer"
TASK_DONE = "task"


@dataclass(frozen=True)
class Command:
    """Send ``args`` on ``channel``'s connection and read one reply, within ``until_us``.

    Channels: ``acquire`` (the follower's connection: BLOCK replies take up to the block
    timeout, so its read timeout is longer than the block) and ``ctl`` (RENEW, RELEASE, GET).
    The driver returns the raw reply, a :class:`Failed`, or QUIT (only if ``interruptible``).
    An abandoned command (time limit, resign) discards its connection: a late reply must never
    be read as the reply to a later command."""

    channel: str
    args: _wire.Args
    until_us: int
    interruptible: bool = True


@dataclass(frozen=True)
class Sleep:
    """Sleep until ``until_us``; wake early on resign (-> QUIT) or when the running task
    returned (-> TASK_DONE). Else -> TIMER."""

    until_us: int


@dataclass(frozen=True)
class StartTask:
    """Start the user's task for this reign (thread / asyncio task)."""

    term: Term


@dataclass(frozen=True)
class StopTask:
    """Fire the task's stop signal, then wait for it until ``until_us``. -> :class:`TaskEnd`."""

    until_us: int


@dataclass
class TaskEnd:
    done: bool
    value: Any = None
    error: Optional[BaseException] = None


Op = Union[Command, Sleep, StartTask, StopTask, _quorum.Round, _quorum.Wait]
Loop = Generator[Op, Any, Tuple[bool, Any]]


class Resigned(Exception):
    """Internal: ends the loop after resign()."""


# ---------------------------------------------------------------------------------------------


class Campaign:
    """The state of one elector's loop (shared by all its runs)."""

    def __init__(
        self,
        cfg: Config,
        key: str,
        owner: str,
        metrics: KeyMetrics,
        on_change: Optional[Callable[[Role], None]],
        channels_ready: Callable[[], None] = lambda: None,
        nodes: int = 1,
        control: qd.QuorumControl = qd.QuorumControl.CORRECT,
        wait_node: int = 0,
        membership: Optional[str] = None,
    ) -> None:
        problem = decide.config_problem(cfg, key, owner)
        if problem is None and decide.reign_owner(owner, 1) is None:
            # R17: the base must leave room for '#' and any reign number.
            problem = ("owner", f"owner must be 1..={decide.MAX_BASE_BYTES} bytes (it is sent as owner#reign)")
        if problem is not None:
            raise ValueError(f"invalid configuration: {problem[0]}: {problem[1]}")
        # Quorum mode (protocol §9a) with several nodes: the rounds replace the single commands
        # below, every rule of the loop stays as it is.
        self.quorum: Optional[_quorum.Quorum] = (
            _quorum.Quorum(nodes, cfg, control, wait_node, membership) if nodes > 1 else None
        )
        self.cfg = cfg
        self.key = key
        self.base = owner
        self.reign = 1
        # The negative control of the conformance campaigns only (clients/python/tests/conformance_elector.py
        # --mode reuse-owner): keep one owner across reigns, the behaviour R17 forbids.
        self._reuse_owner = False
        self.owner = self._wire_owner()
        self.metrics = metrics
        self.on_change = on_change
        self.state: Role = FOLLOWER
        # The current reign (None as follower): is_leader() reads the clock against it.
        self.term: Optional[Term] = None
        self.redis_up: Optional[bool] = None
        self._rng = random.Random()
        self._lock = threading.Lock()

    # -- logging / metrics / publishing ------------------------------------------------------

    def _ctx(self, token: Optional[int], reason: str, owner: Optional[str] = None) -> dict[str, Any]:
        # str(): a typed reason (a str Enum) is logged as its text, the label of the metrics.
        return {"key": self.key, "owner": owner or self.owner, "token": token, "reason": str(reason)}

    def publish(self, s: Role) -> None:
        self.state = s
        if self.on_change is not None:
            try:
                self.on_change(s)
            except Exception:  # an observer's bug must not break the election loop
                log.exception("on_change callback failed key=%s owner=%s", self.key, self.owner)

    def observe(self, op: str, res: object) -> None:
        """Count errors; log when Redis becomes unreachable and when it is back."""
        if isinstance(res, Failed):
            self.metrics.redis_error(op, res.kind)
            up = not res.unreachable
            if up and res.kind != decide.ErrorKind.GRACE:
                log.warning(
                    "redis error key=%s owner=%s op=%s kind=%s error=%s",
                    self.key, self.owner, op, res.kind, res.message,
                    extra=self._ctx(None, res.kind),
                )
        else:
            up = True
        if self.redis_up is not up:
            if up and self.redis_up is False:
                log.info("redis reachable again key=%s owner=%s", self.key, self.owner,
                         extra=self._ctx(None, "reachable"))
            elif not up and isinstance(res, Failed):
                log.warning("redis unreachable key=%s owner=%s op=%s error=%s",
                            self.key, self.owner, op, res.message, extra=self._ctx(None, res.kind))
            self.redis_up = up
            self.metrics.redis_up(up)

    def _wire_owner(self) -> str:
        owner = decide.reign_owner(self.base, self.reign)
        if owner is None:  # 2^53 reigns: not reachable in practice, refused rather than wrapped
            raise RuntimeError(f"reign counter exhausted for owner {self.base!r}")
        return owner

    def _next_reign(self) -> None:
        """R17: after every step-down the next campaign uses a new owner, so that a RENEW or
        RELEASE of the reign that just ended, abandoned but still executing later, can never
        match (and refresh or free) the next reign's lease."""
        if self._reuse_owner:
            return
        self.reign = decide.next_reign(self.reign, decide.ReignEvent.STEPPED_DOWN)
        self.owner = self._wire_owner()

    def unit(self) -> float:
        return self._rng.random()

    # -- the loop ------------------------------------------------------------------------------

    def run(self, quit_requested: Callable[[], bool]) -> Loop:
        """Campaign; lead while elected. Returns ``(resigned, task_value)``; re-raises the
        task's exception (after releasing the lease)."""
        cfg = self.cfg
        attempt = 0
        # A grant the server gave us that we may not use yet (not acked by replicas, or too
        # late). We hold it on the server, so we re-ask without BLOCK; same owner = refresh.
        unconfirmed: Optional[int] = None
        while True:
            if quit_requested():
                yield from self._release_stray(unconfirmed is not None)
                return (True, None)
            # In quorum mode the rounds never BLOCK (Q2: no node knows when a majority frees
            # up); the BLOCK budget is that of the wait on one node after a refusal (Q10); the not-granted
            # pause is judged against it, so a fast refusal is followed by a pause, never an
            # immediate re-ask (tests/test_quorum_pace.py).
            block = None if unconfirmed is not None else cfg.block_timeout_us
            # Why before sending: the deadline must count from a point no later than the
            # moment the server starts the TTL (in quorum mode: before the round's first send).
            sent_at = now_us()
            until = sent_at + decide.op_limit_us(cfg, block)
            raw: Any
            if self.quorum is not None:
                raw = yield from self.quorum.acquire(self.key, self.owner, cfg.ttl_ms, until, block)
                if raw is _quorum.ABANDONED:
                    raw = QUIT
            else:
                raw = yield Command("acquire", _wire.acquire_cmd(self.key, self.owner, cfg.ttl_ms, block), until)
            if raw is QUIT:
                # The abandoned ACQUIRE may still have been granted on the server.
                yield from self._release_stray(True)
                return (True, None)
            res: decide.AcquireResult
            tok = raw if isinstance(raw, Failed) else _wire.parse_token(raw)
            if isinstance(tok, Failed):
                res = tok
            elif tok is None:
                res = decide.NotGranted()
            else:
                res = decide.Granted(tok, None)
                wait = decide.wait_for(cfg)
                if wait is not None:
                    # WAIT counts acks of this connection's writes: same channel, right after.
                    w = yield Command("acquire", _wire.wait_cmd(wait), until)
                    if w is QUIT:
                        yield from self._release_stray(True)
                        return (True, None)
                    a = w if isinstance(w, Failed) else _wire.parse_acks(w)
                    res = a if isinstance(a, Failed) else decide.Granted(tok, a)
            now = now_us()
            if self.quorum is not None:
                # Q10: a quorum grant made by a round that started after a wait is measured
                # from that round's start (never earlier than our own sent_at).
                start = self.quorum.take_round_start()
                if start is not None and start > sent_at:
                    sent_at = start
            self.observe("acquire", res)
            if self.quorum is not None and self.quorum.take_retired_owner():
                # Q4 + R17: that round released partial grants; its RELEASE may still execute
                # late, so its owner is never sent again.
                self._next_reign()
            action = decide.on_acquire(cfg, sent_at, now, res)
            if isinstance(action, decide.Lead):
                attempt = 0
                unconfirmed = None
                self.metrics.acquire("granted")
                outcome = yield from self._lead(action, quit_requested)
                if outcome is not None:
                    return outcome
            elif isinstance(action, decide.Unconfirmed):
                attempt = 0
                unconfirmed = action.token
                if action.why == UnconfirmedWhy.LATE_REPLY:
                    # Normal after a BLOCK that waited longer than the stop window: re-ask at
                    # once without BLOCK (the server refreshes our grant, same token).
                    self.metrics.acquire("late")
                    log.debug("late grant; re-asking without BLOCK key=%s owner=%s token=%s reason=%s",
                              self.key, self.owner, action.token, action.why,
                              extra=self._ctx(action.token, action.why))
                else:
                    self.metrics.acquire("unconfirmed")
                    log.warning("grant not confirmed; not leading on it key=%s owner=%s token=%s reason=%s",
                                self.key, self.owner, action.token, action.why,
                                extra=self._ctx(action.token, action.why))
                if action.retry_in_us > 0 and (yield Sleep(now_us() + action.retry_in_us)) is QUIT:
                    continue
            elif isinstance(action, decide.NotGrantedAction):
                attempt = 0
                unconfirmed = None
                self.metrics.acquire("not_granted")
                pause = decide.not_granted_pause_us(cfg, block, sent_at, now, self.unit())
                if pause > 0:
                    yield Sleep(now_us() + pause)
            elif isinstance(action, decide.GraceWait):
                self.metrics.acquire("grace")
                log.info("server in grace period; waiting key=%s owner=%s grace_ms=%d",
                         self.key, self.owner, action.wait_us // 1000, extra=self._ctx(None, "grace"))
                yield Sleep(now_us() + action.wait_us)
            else:
                self.metrics.acquire("error")
                pause = decide.backoff_us(cfg, attempt, self.unit())
                attempt += 1
                log.debug("acquire failed; backing off key=%s owner=%s kind=%s backoff_ms=%d attempt=%d",
                          self.key, self.owner, action.kind, pause // 1000, attempt,
                          extra=self._ctx(None, action.kind))
                yield Sleep(now_us() + pause)

    def _lead(self, grant: decide.Lead, quit_requested: Callable[[], bool]) -> Generator[Op, Any, Optional[Tuple[bool, Any]]]:
        cfg = self.cfg
        token = grant.token
        owner = self.owner  # this reign's owner (R17): renewals and the release name it
        term = Term(token, owner, grant.deadline_us, decide.stop_at_us(cfg, grant.deadline_us))
        next_renew = grant.next_renew_us
        deadline_s = monotonic_s(grant.deadline_us)
        self.term = term
        self.metrics.leader(token, deadline_s)
        self.publish(Role(True, token, deadline_s, RoleChange.ACQUIRED))
        log.info("became leader key=%s owner=%s token=%s reason=acquired lead_ms=%d",
                 self.key, owner, token, (grant.deadline_us - now_us()) // 1000,
                 extra=self._ctx(token, owner=owner, reason="acquired"))
        yield StartTask(term)
        reason: StepDownReason
        while True:
            stop = term.stop_at_us
            now = now_us()
            # Why first: past the stop point nothing else matters, not even a renewal that
            # could still succeed (the task would be running on an unbacked lease).
            if now >= stop:
                reason = StepDownReason.DEADLINE
                break
            if now < next_renew:
                woke = yield Sleep(min(stop, next_renew))
                if now_us() >= term.stop_at_us:
                    reason = StepDownReason.DEADLINE
                    break
                if woke is QUIT:
                    reason = StepDownReason.RESIGNED
                    break
                if woke == TASK_DONE:
                    reason = StepDownReason.TASK_EXITED
                    break
                continue
            sent_at = now_us()
            # Why: this may be the first instruction after a long pause (SIGSTOP, GC, VM
            # freeze); re-check the clock before trusting the leadership we think we have.
            if decide.must_stop(cfg, term.deadline_us, sent_at):
                reason = StepDownReason.DEADLINE
                break
            # The renewal is bounded by the stop point too: past it nothing it says matters.
            until = min(sent_at + decide.op_limit_us(cfg, None), stop)
            raw: Any
            if self.quorum is not None:
                raw = yield from self.quorum.renew(self.key, owner, token, cfg.ttl_ms, until)
            else:
                raw = yield Command("ctl", _wire.renew_cmd(self.key, owner, token, cfg.ttl_ms), until)
            if raw is QUIT:
                reason = StepDownReason.RESIGNED
                break
            res: decide.RenewResult
            flag = raw if isinstance(raw, Failed) else _wire.parse_flag("LEASE.RENEW", raw)
            if isinstance(flag, Failed):
                res = flag
            elif not flag:
                res = decide.NotHeld()
            else:
                res = decide.Renewed(None)
                wait = decide.wait_for(cfg)
                if wait is not None:
                    w = yield Command("ctl", _wire.wait_cmd(wait), until)
                    if w is QUIT:
                        reason = StepDownReason.RESIGNED
                        break
                    a = w if isinstance(w, Failed) else _wire.parse_acks(w)
                    res = a if isinstance(a, Failed) else decide.Renewed(a)
            now = now_us()
            self.observe("renew", res)
            latency = (now - sent_at) / 1e6
            action = decide.on_renew(cfg, term.deadline_us, sent_at, now, res)
            if isinstance(action, decide.RenewedAction):
                self.metrics.renew("renewed", latency)
                term.deadline_us = action.deadline_us
                term.stop_at_us = decide.stop_at_us(cfg, action.deadline_us)
                next_renew = action.next_renew_us
                deadline_s = monotonic_s(action.deadline_us)
                self.metrics.deadline(deadline_s)
                self.state = Role(True, token, deadline_s, RoleChange.RENEWED)
            elif isinstance(action, decide.StepDown):
                self.metrics.renew("rejected" if action.reason == StepDownReason.RENEW_REJECTED else "error", latency)
                reason = action.reason
                break
            else:
                self.metrics.renew("unconfirmed" if action.why == RetryWhy.REPLICAS_NOT_ACKED else "error", latency)
                log.debug("renewal did not count; retrying key=%s owner=%s token=%s reason=%s",
                          self.key, owner, token, action.why, extra=self._ctx(token, owner=owner, reason=action.why))
                next_renew = action.at_us

        # Step down. Why end the term before the task has stopped: nobody (observers, the
        # task's own is_leader() checks) may believe we lead past this point.
        term.ended = True
        self.term = None
        self._next_reign()
        self.metrics.follower(reason)
        self.publish(Role(False, None, None, reason))
        if reason in (StepDownReason.RENEW_REJECTED, StepDownReason.DEADLINE):
            log.warning("lost leadership key=%s owner=%s token=%s reason=%s",
                        self.key, owner, token, reason, extra=self._ctx(token, owner=owner, reason=reason))
        else:
            log.info("stepping down key=%s owner=%s token=%s reason=%s",
                     self.key, owner, token, reason, extra=self._ctx(token, owner=owner, reason=reason))
        # The task is told now (normally at the stop point) and has until the deadline. Why at
        # least stop_budget from now: after a pause (SIGSTOP, a stalled loop) the deadline may
        # already be behind us when the signal fires; a task that honours its signal still
        # needs its budget to see it. Only a task that had its whole budget "ignores" it.
        end: TaskEnd = yield StopTask(max(term.deadline_us, now_us() + cfg.stop_budget_us))
        if not end.done:
            self.metrics.task_overrun()
            log.error("leader task still running at the local deadline; it ignores its stop signal "
                      "key=%s owner=%s token=%s reason=%s (not releasing: the lease expires on the server)",
                      self.key, owner, token, "task_overrun", extra=self._ctx(token, owner=owner, reason="task_overrun"))
        # Why release only now, after the task stopped: the lease must stay ours until our task
        # has stopped, otherwise the next leader could start while we still work. Why not after
        # an overrun: the task still runs; letting the lease expire is all that is left.
        elif decide.release_after(reason) or (self.quorum is not None and self.quorum.holds_after_rejection()):
            # Quorum mode after a lost renewal: the nodes that still said 1 (Q5).
            yield from self._release(token, owner)
        if reason == StepDownReason.TASK_EXITED:
            if end.error is not None:
                raise end.error
            return (False, end.value)
        if reason == StepDownReason.RESIGNED:
            return (True, None)
        return None

    def _release(self, token: int, owner: str) -> Generator[Op, Any, None]:
        """Best-effort RELEASE (bounded by op_timeout); if it fails the lease expires."""
        until = now_us() + self.cfg.op_timeout_us
        raw: Any
        if self.quorum is not None:
            raw = yield from self.quorum.release(self.key, owner, token)
        else:
            raw = yield Command("ctl", _wire.release_cmd(self.key, owner, token), until, interruptible=False)
        r = raw if isinstance(raw, Failed) else _wire.parse_flag("LEASE.RELEASE", raw)
        self.observe("release", r)
        if isinstance(r, Failed):
            log.warning("release failed; the lease will expire on the server key=%s owner=%s token=%s error=%s",
                        self.key, owner, token, r.message, extra=self._ctx(token, "release_failed", owner))
        else:
            log.info("released lease key=%s owner=%s token=%s released=%s",
                     self.key, owner, token, r, extra=self._ctx(token, "released", owner))

    def _release_stray(self, maybe_granted: bool) -> Generator[Op, Any, None]:
        """After resigning as a follower: an abandoned ACQUIRE may have been granted after all
        (or we held an unconfirmed grant). Look, and release it if it is ours."""
        if not maybe_granted:
            return
        if self.quorum is not None:
            mine = yield from self.quorum.get(self.key, self.owner)
            if mine is not None:
                yield from self._release(mine.token, self.owner)
            return
        until = now_us() + self.cfg.op_timeout_us
        raw = yield Command("ctl", _wire.get_cmd(self.key), until, interruptible=False)
        info = raw if isinstance(raw, Failed) else _wire.parse_get(raw)
        if isinstance(info, _wire.LeaseInfo) and info.owner == self.owner:
            yield from self._release(info.token, self.owner)
