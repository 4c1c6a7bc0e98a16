"""The thread-based elector (``redis.Redis``). See :class:`Elector`."""

from __future__ import annotations

import contextlib
import queue
import re
import select
import threading
from typing import Any, Callable, Dict, Generic, Iterator, List, Optional, TypeVar, Union

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from . import _connect, _core, _quorum, _wire
from .decide import Config, ErrorKind, Failed
from .metrics import Metrics, NullMetrics

__all__ = ["Elector", "LeaderContext"]

R = TypeVar("R")
_POLL = 0.05  # how often a blocked read looks at resign() (the reply itself wakes it at once)


class StopEvent(threading.Event):
    """The task's stop signal: a ``threading.Event`` that is also set whenever the reign's stop
    point has passed on the clock. Why: the watchdog thread sets it at the stop point, but
    after a pause (SIGSTOP, GC, VM freeze) the task's thread may run before the watchdog does;
    ``is_set()`` and ``wait()`` read the clock, so they are right as the first thing then."""

    def __init__(self, term: _core.Term) -> None:
        super().__init__()
        self._term = term

    def is_set(self) -> bool:
        return super().is_set() or not self._term.leading()

    def wait(self, timeout: Optional[float] = None) -> bool:
        if self.is_set():
            return True
        return super().wait(timeout) or self.is_set()


class LeaderContext:
    """What the leader task gets: its fencing token and when to stop.

    The task must stop promptly once :attr:`stop_event` is set: it is set ``stop_budget``
    (default ttl/5) before the local deadline, so a task that stops within that budget has
    stopped before leadership can end. :meth:`is_leader` and ``stop_event.is_set()`` read the
    elector's clock, so they are right even as the first thing after the process was paused;
    a flag copied out of them earlier is not. Call :meth:`is_leader` right before every step
    that is not fenced; fenced writes (``LEASE.FENCE``, :meth:`redis_lease.Elector.fence`) are
    refused by the resource either way.
    """

    def __init__(self, term: _core.Term, key: str) -> None:
        self._term = term
        self.key = key
        self.owner = term.owner
        """This reign's owner as the server sees it: the elector's owner, ``#``, the reign
        number (R17), e.g. ``web-7-41873-9f2c41aa#3``."""
        self.stop_event: threading.Event = StopEvent(term)

    @property
    def token(self) -> int:
        """Fencing token of this term: pass it to the resource (e.g. ``LEASE.FENCE``)."""
        return self._term.token

    @property
    def deadline(self) -> Optional[float]:
        """Current local deadline on the ``time.monotonic()`` clock (moves forward with every
        confirmed renewal); None once the reign ended."""
        t = self._term
        return None if t.ended else _core.monotonic_s(t.deadline_us)

    def is_leader(self) -> bool:
        """True only if the stop signal has not fired and the stop point is still ahead on the
        monotonic clock ("check the deadline after every step")."""
        return not self.stop_event.is_set() and self._term.leading()

    def sleep(self, seconds: float) -> bool:
        """Sleep ``seconds`` or until the stop signal; returns :meth:`is_leader` afterwards."""
        self.stop_event.wait(seconds)
        return self.is_leader()


class _TaskBox:
    def __init__(self) -> None:
        self.done = False
        self.value: Any = None
        self.error: Optional[BaseException] = None
        self.thread: Optional[threading.Thread] = None
        self.lease: Optional[LeaderContext] = None


class _Source:
    """Opens the elector's own blocking connections (see ``redis_lease._connect``)."""

    def __init__(self, target: Any, key: str, connect_timeout: float) -> None:
        self._target = target
        self._key = key
        self._connect_timeout = connect_timeout
        self._client: Any = None
        self._refresh_cluster = False

    def client(self) -> Any:
        if self._client is None:
            t = self._target
            if isinstance(t, str):
                self._client = redis.Redis.from_url(t)
            elif hasattr(t, "connection_pool") or _connect.is_cluster(t):
                self._client = t
            elif callable(t):
                self._client = t()
            else:
                raise TypeError(f"redis must be a URL, a client or a factory, not {type(t).__name__}")
        return self._client

    def open(self, read_timeout: float) -> Any:
        c = self.client()
        retry = Retry(NoBackoff(), 0)
        if _connect.is_cluster(c):
            if self._refresh_cluster:
                self._refresh_cluster = False
                c.nodes_manager.initialize()
            pool = c.get_node_from_key(self._key, replica=False).redis_connection.connection_pool
        else:
            pool = c.connection_pool
        kw = _connect.derive_kwargs(pool.connection_kwargs, read_timeout, self._connect_timeout, retry)
        return pool.connection_class(**kw)

    def refresh(self) -> None:
        """After a failure/redirect: resolve again on the next open()."""
        if _connect.is_cluster(self._client):
            self._refresh_cluster = True
        elif callable(self._target) and not isinstance(self._target, str) and not hasattr(
            self._target, "connection_pool"
        ) and not _connect.is_cluster(self._target):
            self._client = None


class _Run:
    """One call of run(): executes the shared loop's operations with threads."""

    def __init__(self, el: "Elector", task: Callable[[LeaderContext], Any], one_shot: bool = False) -> None:
        self.el = el
        self.task = task
        self.quit = threading.Event()
        self.wake = threading.Event()
        self.box: Optional[_TaskBox] = None
        # leadership(): one reign, then stop campaigning (whatever ended the reign).
        self.one_shot = one_shot
        self.reigns = 0

    def request_quit(self) -> None:
        self.quit.set()
        self.wake.set()

    def quit_requested(self) -> bool:
        return self.quit.is_set() or self.el._resigned.is_set() or (self.one_shot and self.reigns > 0)

    def drive(self, loop: _core.Loop) -> Any:
        result: Any = None
        interrupted: Optional[KeyboardInterrupt] = None
        while True:
            try:
                op = loop.send(result)
            except StopIteration as stop:
                if interrupted is not None:
                    raise interrupted
                return stop.value
            try:
                result = self.execute(op)
            except KeyboardInterrupt as e:
                # Ctrl-C: resign (stop the task, wait for it, RELEASE), then re-raise. A second
                # Ctrl-C during that raises at once: the lease then expires on the server.
                if interrupted is not None:
                    raise
                interrupted = e
                self.request_quit()
                result = self.interrupted(op)

    def execute(self, op: _core.Op) -> Any:
        if not isinstance(op, _quorum.Round):
            # The rounds right after a wait are done (or were never sent): its connection
            # can go now (see Elector._wait).
            self.el._close_waited()
        if isinstance(op, _core.Command):
            return self.el._command(op, self.quit)
        if isinstance(op, _quorum.Round):
            return self.el._round(op)
        if isinstance(op, _quorum.Wait):
            return self.el._wait(op, self.quit)
        if isinstance(op, _core.Sleep):
            return self.sleep(op.until_us)
        if isinstance(op, _core.StartTask):
            self.start(op.term)
            return None
        return self.stop(op.until_us)

    def interrupted(self, op: _core.Op) -> Any:
        """The result of an operation a KeyboardInterrupt broke off."""
        if isinstance(op, _core.Command):
            # A reply may be in flight: the connection is never reused.
            self.el._drop(op.channel, False)
            return _core.QUIT if op.interruptible else Failed(ErrorKind.CONNECTION, "interrupted")
        if isinstance(op, _core.StopTask):
            return self.stop(op.until_us)  # still wait for the task (bounded by the deadline)
        if isinstance(op, _quorum.Round):
            return [_quorum.NO_REPLY] * len(op.cmds)  # its commands finish on their own
        if isinstance(op, _quorum.Wait):
            return _quorum.ABANDONED  # its connection was closed on the way out of _wait
        return _core.QUIT if isinstance(op, _core.Sleep) else None

    def sleep(self, until_us: int) -> Any:
        while True:
            if self.quit.is_set():
                return _core.QUIT
            if self.box is not None and self.box.done:
                return _core.TASK_DONE
            left = until_us - _core.now_us()
            if left <= 0:
                return _core.TIMER
            self.wake.wait(left / 1e6)
            self.wake.clear()

    def start(self, term: _core.Term) -> None:
        self.reigns += 1
        el = self.el
        lease = LeaderContext(term, el.key)
        box = self.box = _TaskBox()
        box.lease = lease

        def body() -> None:
            try:
                box.value = self.task(lease)
            except BaseException as e:  # re-raised by run() after the lease is released
                box.error = e
            finally:
                box.done = True
                self.wake.set()

        def watchdog() -> None:
            # Why a thread of its own: the stop signal must fire at the stop point even while
            # the loop's thread is inside a slow connect or read. Renewals only move the stop
            # point later, so waking at the old one just means waiting again.
            # Why waits of at most _POLL: Event.wait times out on CLOCK_MONOTONIC, which stops
            # during a host suspend; the elector's clock (CLOCK_BOOTTIME) does not.
            while not lease.stop_event.is_set():
                left = term.stop_at_us - _core.now_us()
                if term.ended or left <= 0:
                    lease.stop_event.set()
                    return
                lease.stop_event.wait(min(left / 1e6, _POLL))

        box.thread = threading.Thread(target=body, name=f"redis-lease-task[{el.key}]", daemon=True)
        threading.Thread(target=watchdog, name=f"redis-lease-stop[{el.key}]", daemon=True).start()
        box.thread.start()

    def stop(self, until_us: int) -> _core.TaskEnd:
        box = self.box
        assert box is not None and box.lease is not None and box.thread is not None
        box.lease.stop_event.set()
        box.thread.join(max(0.0, (until_us - _core.now_us()) / 1e6))
        self.box = None
        if not box.done:
            return _core.TaskEnd(False)
        return _core.TaskEnd(True, box.value, box.error)


class _QNode:
    """One node of quorum mode: its source, its connection, and a lock held by the one
    command in flight on it (a command the round stopped waiting for finishes on its own,
    bounded by the round's limit, before the next one is sent)."""

    def __init__(self, index: int, source: _Source) -> None:
        self.index = index
        self.source = source
        self.conn: Any = None
        self.lock = threading.Lock()

    def drop(self, refresh: bool) -> None:
        c, self.conn = self.conn, None
        if c is not None:
            with contextlib.suppress(Exception):
                c.disconnect()
        if refresh:
            self.source.refresh()


class Elector:
    """One candidate for one lease key (threads; the asyncio twin is
    ``redis_lease.asyncio.Elector``).

    ``redis``: a URL, a ``redis.Redis`` (also from ``Sentinel.master_for``), a
    ``redis.cluster.RedisCluster``, or a factory returning one (see ``redis_lease._connect``);
    or a list of several URLs / ``redis.Redis`` clients of independent primaries: quorum mode
    (protocol §9a, docs/quorum.md), the lease on a majority of them. A list that names one
    server twice (any spelling; db numbers ignored) raises ``ValueError``.
    ``ttl``: lease TTL in seconds (every other setting is derived from it), or pass a full
    ``config``. ``owner``: the owner base, unique per process incarnation (default
    ``host-pid-random``), 1..=239 bytes; each reign is sent as ``owner#n`` (n = 1, 2, ... one
    more after every step-down), so a late command of an ended reign never matches a new one.
    ``metrics``: e.g. ``redis_lease.metrics.PrometheusMetrics()``. ``on_change``: called with
    a :class:`~redis_lease.Role` on every transition of this elector (from the loop's
    thread; keep it quick). ``membership_id`` (quorum mode): the membership id to send
    (protocol Q9, 16 hex digits) instead of the one computed from the node addresses, for
    electors that reach the same servers under different addresses; all of them set the same.

    Nothing is sent before :meth:`run`; an unusable configuration raises ``ValueError`` here.
    """

    def __init__(
        self,
        redis: Any,
        key: str,
        ttl: Optional[float] = None,
        *,
        config: Optional[Config] = None,
        owner: Optional[str] = None,
        metrics: Optional[Metrics] = None,
        on_change: Optional[Callable[[_core.Role], None]] = None,
        membership_id: Optional[str] = None,
    ) -> None:
        if config is None:
            if ttl is None:
                raise ValueError("give ttl (seconds) or config")
            config = Config.from_ttl(ttl)
        self.key = key
        self.owner = owner if owner is not None else _core.default_owner()
        self.config = config
        targets: List[Any] = list(redis) if isinstance(redis, (list, tuple)) else [redis]
        if not targets:
            raise ValueError("no redis node given")
        membership: Optional[str] = None
        if len(targets) > 1:
            _quorum.check_distinct(targets)  # Q6, before anything is sent
            membership = _quorum.membership_id_of(targets)  # Q9: sent with every ACQUIRE/RENEW/RAISE
            if membership_id is not None:
                # An override: electors that reach the same servers under different
                # addresses (proxies, NAT, a test harness) would each compute their own id.
                if not re.fullmatch(r"[0-9a-f]{16}", membership_id) or int(membership_id, 16) == 0:
                    raise ValueError("membership_id: expected 16 lower-case hex digits, not all zero")
                membership = membership_id
        self._core = _core.Campaign(
            config,
            key,
            self.owner,
            (metrics or NullMetrics()).bind(key),
            on_change,
            nodes=len(targets),
            wait_node=_quorum.wait_node_of(targets),
            membership=membership,
        )
        connect_timeout = max(config.op_timeout_us, 100_000) / 1e6
        self._source = _Source(targets[0], key, connect_timeout)
        self._qnodes: List[_QNode] = (
            [_QNode(i, _Source(t, key, connect_timeout)) for i, t in enumerate(targets)] if len(targets) > 1 else []
        )
        self._conns: Dict[str, Any] = {}
        # Connections of answered Q10 waits, closed after the fresh round (see _wait).
        self._waited: List[Any] = []
        self._runs: List[_Run] = []
        self._lock = threading.Lock()
        self._running = False
        self._resigned = threading.Event()

    # -- public API ------------------------------------------------------------------------------

    @property
    def role(self) -> _core.Role:
        """The last transition the loop published (leader with token and deadline, or follower):
        a snapshot, not re-checked against the clock; use :meth:`is_leader` for that."""
        return self._core.state

    def is_leader(self) -> bool:
        """True while a reign is on and its stop point is ahead. Reads the clock on every call
        (like :meth:`LeaderContext.is_leader`): right even as the first thing after a pause, before
        the loop ran. (:attr:`role` is the last published transition.)"""
        t = self._core.term
        return t is not None and t.leading()

    def run(self, task: Callable[[LeaderContext], R]) -> Optional[R]:
        """Campaign until :meth:`resign`; whenever elected, run ``task(lease)`` in a thread and
        keep the lease renewed while it runs. When leadership is lost the task's stop signal
        fires and the elector campaigns again.

        Returns the task's return value when the task returned by itself (the lease is then
        released), or None after :meth:`resign`. An exception of the task is re-raised (after
        the release). Redis errors are never raised: they are retried, logged and counted.
        """
        return self._run(_Run(self, task))  # type: ignore[no-any-return]

    def _run(self, r: _Run) -> Any:
        with self._lock:
            if self._running:
                raise RuntimeError("run() is already running on this elector")
            self._running = True
            self._runs.append(r)
        try:
            if self._resigned.is_set():
                return None
            try:
                outcome = r.drive(self._core.run(r.quit_requested))
            except KeyboardInterrupt:
                self.close()  # after the resign drive() did (or a second Ctrl-C)
                raise
            resigned, value = outcome
            if resigned:
                self.close()  # final: the elector's own connections are not needed any more
            return None if resigned else value
        finally:
            self._close_waited()
            with self._lock:
                self._running = False
                self._runs.remove(r)

    def resign(self) -> None:
        """Graceful stop: fire the task's stop signal, wait for it to stop, RELEASE (a waiting
        follower takes over at once), and make :meth:`run` return. Final: a resigned elector
        does not campaign again. Safe to call from any thread and from a signal handler."""
        self._resigned.set()
        for r in list(self._runs):
            r.request_quit()

    def current_leader(self) -> Optional[_wire.LeaseInfo]:
        """The current leader as the server sees it (``LEASE.GET``; None = no live lease).
        Uses the given client (its own pool), not the elector's connections."""
        if self._qnodes:
            return self._current_leader_quorum()
        v = self._source.client().execute_command("LEASE.GET", self.key)
        info = _wire.parse_get(v)
        if isinstance(info, Failed):
            raise redis.exceptions.ResponseError(info.message)
        return info

    def fence(self, token: int, *command: Any) -> Any:
        """Run ``command`` (e.g. ``"HSET", "report:state", "step", 7``) through
        ``LEASE.FENCE key token command...`` on the application's client (the one given as
        ``redis``, not the elector's own connections): the server runs it only if ``token`` is
        the live token of this elector's key, atomically with the check. Returns the inner
        command's raw reply; raises :class:`redis_lease.Fenced` if the token is stale (nothing
        was run). Without a command it only checks (replies the remaining ms). Under Cluster
        the command's keys must hash to the lease key's slot (e.g. a ``{tag}``). Not in quorum
        mode (``ValueError``): no single node's check speaks for the majority; fence at the
        resource with the token instead."""
        if self._qnodes:
            raise ValueError("fence() is not available in quorum mode: fence at the resource with lease.token")
        try:
            return self._source.client().execute_command(*_wire.fence_cmd(self.key, token, command))
        except redis.exceptions.ResponseError as e:
            refused = _wire.fence_refusal(e, self.key, token)
            if refused is not None:
                raise refused from e
            raise

    @contextlib.contextmanager
    def leadership(self, timeout: Optional[float] = None) -> Iterator[LeaderContext]:
        """One-shot: campaign until elected (at most ``timeout`` seconds, else ``TimeoutError``),
        keep the lease renewed in the background while the ``with`` body runs, release it after
        the body exited. If leadership is lost meanwhile, ``lease.stop_event`` is set and
        ``lease.is_leader()`` turns false: the body must check them (Python cannot interrupt
        it). The release waits for the body to exit, until the local deadline at most: a body
        still running at the deadline is not released under (the lease expires on the server).
        One reign per ``with``: the elector does not campaign again inside it."""
        handed: "queue.Queue[Optional[LeaderContext]]" = queue.Queue()
        box: Dict[str, BaseException] = {}
        body_done = threading.Event()

        def hold(lease: LeaderContext) -> None:
            handed.put(lease)
            # Why the body's exit and not the stop signal: R13, the lease is released only
            # after the work stopped. The loop waits for this (the task) until the deadline.
            body_done.wait()

        r = _Run(self, hold, one_shot=True)

        def runner() -> None:
            try:
                self._run(r)
            except BaseException as e:
                box["error"] = e
            finally:
                handed.put(None)

        t = threading.Thread(target=runner, name=f"redis-lease-leadership[{self.key}]", daemon=True)
        t.start()
        try:
            lease = handed.get(timeout=timeout)
        except queue.Empty:
            r.request_quit()
            t.join()
            raise TimeoutError(f"not elected for {self.key!r} within {timeout} s") from None
        if lease is None:
            t.join()
            if "error" in box:
                raise box["error"]
            raise RuntimeError("elector resigned before it was elected")
        try:
            yield lease
        finally:
            body_done.set()
            r.request_quit()
            t.join()

    def close(self) -> None:
        """Close the elector's own connections (call after run() returned)."""
        self._close_waited()
        for c in self._conns.values():
            with contextlib.suppress(Exception):
                c.disconnect()
        self._conns.clear()
        for node in self._qnodes:
            with node.lock:
                node.drop(False)

    def _current_leader_quorum(self) -> Optional[_wire.LeaseInfo]:
        """Quorum mode: the lease a majority of the nodes report for one owner (the smallest
        remaining TTL of those), else None. Through each node's given client."""
        seen: List[_wire.LeaseInfo] = []
        for node in self._qnodes:
            with contextlib.suppress(Exception):
                info = _wire.parse_get(node.source.client().execute_command("LEASE.GET", self.key))
                if isinstance(info, _wire.LeaseInfo):
                    seen.append(info)
        return _quorum.majority_view(seen, len(self._qnodes))

    def _round(self, op: _quorum.Round) -> List[Any]:
        """Quorum mode: ``op``'s commands in parallel. Every node with an open, idle connection
        gets its command from this thread, one after the other in the send order, and the
        replies are read as they come (select over the sockets). Why not a thread per node
        (as before, and still for a node that must connect first or is busy): starting a
        thread and handing it the GIL took 0.3..8 ms per node under load, so a round's sends
        were spread over milliseconds, the wait node's RELEASE was not reliably last (Q10),
        and the hand-over was 2..3x one primary's. Sending from one thread costs a write
        each, in order."""
        replies: List[Any] = [_quorum.NO_REPLY] * len(op.cmds)
        q = self._core.quorum
        assert q is not None
        inflight: Dict[int, Any] = {}  # node -> the connection its command was sent on
        threaded: List[int] = []
        for i in op.send_order():
            args = op.cmds[i]
            if args is None:
                continue
            node = self._qnodes[i]
            if node.conn is None or not node.lock.acquire(blocking=False):
                threaded.append(i)  # must connect (INFO first), or a command is still in flight
                continue
            blocked = q.ids.blocked(i)
            if blocked is not None:
                node.lock.release()
                replies[i] = blocked
                continue
            try:
                node.conn.send_command(*args)
                inflight[i] = node.conn
            except Exception as e:  # connection: the connection is not trusted
                node.drop(True)
                node.lock.release()
                replies[i] = _wire.failure(e)
        cv = threading.Condition()
        pending = [len(threaded)]

        def work(node: _QNode, args: _wire.Args) -> None:
            r = self._node_command(node, args, op.until_us)
            with cv:
                replies[node.index] = r
                pending[0] -= 1
                cv.notify_all()

        for i in threaded:
            threading.Thread(
                target=work, args=(self._qnodes[i], op.cmds[i]), name=f"redis-lease-node{i + 1}[{self.key}]", daemon=True
            ).start()
        try:
            while inflight or pending[0] > 0:
                with cv:
                    if op.done(replies):
                        break
                left = op.until_us - _core.now_us()
                if left <= 0:
                    break
                if not inflight:
                    with cv:
                        if pending[0] > 0 and not op.done(replies):
                            cv.wait(min(left / 1e6, _POLL))
                    continue
                # Threads report through cv: look at them at least every few ms meanwhile.
                wait_s = min(left / 1e6, _POLL if pending[0] == 0 else 0.002)
                ready = []
                for i, c in list(inflight.items()):
                    try:
                        if c.can_read(timeout=0):
                            ready.append(i)
                    except Exception as e:  # the connection broke (can_read closed it)
                        del inflight[i]
                        self._qnodes[i].drop(True)
                        self._qnodes[i].lock.release()
                        with cv:
                            replies[i] = _wire.failure(e)
                if not ready and inflight:
                    socks = {c._sock: i for i, c in inflight.items() if c._sock is not None}
                    r, _, _ = select.select(list(socks), [], [], wait_s)
                    ready = [socks[x] for x in r]
                for i in ready:
                    conn = inflight.pop(i)
                    node = self._qnodes[i]
                    try:
                        got: Any = conn.read_response()
                    except redis.exceptions.ResponseError as e:
                        got = _wire.failure(e)
                        if got.code in _wire.RESOLVE_AGAIN:
                            node.drop(True)
                    except Exception as e:  # connection, timeout, protocol: not trusted
                        node.drop(True)
                        got = _wire.failure(e)
                    node.lock.release()
                    with cv:
                        replies[i] = got
        finally:
            # Replies the round no longer waits for: read (and dropped) in the background,
            # bounded by the round's limit, the node locked meanwhile, as for a thread's.
            for i, conn in inflight.items():
                threading.Thread(target=self._finish, args=(self._qnodes[i], conn, op.until_us),
                                 name=f"redis-lease-node{i + 1}[{self.key}]", daemon=True).start()
        with cv:
            return list(replies)

    def _finish(self, node: _QNode, conn: Any, until_us: int) -> None:
        """The reply of a command a round stopped waiting for: read and dropped, so that the
        connection can carry the next command; the node's lock is held until then."""
        try:
            left = until_us - _core.now_us()
            if left <= 0 or not conn.can_read(timeout=left / 1e6):
                node.drop(True)  # a reply may still be in flight: never reused
                return
            conn.read_response()
        except redis.exceptions.ResponseError as e:
            if _wire.failure(e).code in _wire.RESOLVE_AGAIN:
                node.drop(True)
        except Exception:
            node.drop(True)
        finally:
            node.lock.release()

    def _node_command(self, node: _QNode, args: _wire.Args, until_us: int) -> Any:
        """One command on one node within ``until_us``: the raw reply, a Failed, or NO_REPLY."""
        q = self._core.quorum
        assert q is not None
        if not node.lock.acquire(timeout=max(until_us - _core.now_us(), 0) / 1e6):
            return _quorum.NO_REPLY  # the previous command on this node is still in flight
        try:
            blocked = q.ids.blocked(node.index)
            if blocked is not None:
                return blocked
            try:
                if node.conn is None:
                    opened = self._open_node(node, q.step_us / 1e6, until_us)
                    if isinstance(opened, Failed) or opened is _quorum.NO_REPLY:
                        return opened
                    node.conn = opened
                conn = node.conn
                conn.send_command(*args)
                left = until_us - _core.now_us()
                if left <= 0 or not conn.can_read(timeout=left / 1e6):
                    # A reply may be in flight: this connection is never reused.
                    node.drop(True)
                    return _quorum.NO_REPLY
                return conn.read_response()
            except redis.exceptions.ResponseError as e:
                f = _wire.failure(e)
                if node.conn is None or f.code in _wire.RESOLVE_AGAIN:
                    node.drop(True)
                return f
            except Exception as e:  # connection, timeout, protocol: the connection is not trusted
                node.drop(True)
                return _wire.failure(e)
        finally:
            node.lock.release()

    def _open_node(self, node: _QNode, read_timeout: float, until_us: int) -> Any:
        """A new connection to ``node`` whose server identity was checked (Q6/Q7) before it is
        used: the connection, a Failed (identity refused), or NO_REPLY (no INFO reply in time).
        Connection errors raise."""
        q = self._core.quorum
        assert q is not None
        conn = node.source.open(read_timeout)
        try:
            conn.connect()
            conn.send_command(*_quorum.INFO_CMD)
            left = until_us - _core.now_us()
            info = conn.read_response() if left > 0 and conn.can_read(timeout=left / 1e6) else None
        except BaseException:
            with contextlib.suppress(Exception):
                conn.disconnect()
            raise
        refused = _quorum.NO_REPLY if info is None else q.ids.on_connect(node.index, info)
        if refused is not None:
            with contextlib.suppress(Exception):
                conn.disconnect()
            return refused
        return conn

    def _wait(self, op: _quorum.Wait, quit: threading.Event) -> Any:
        """Q10: ``op``'s blocking ACQUIRE on a connection of its own, closed afterwards (which
        withdraws an abandoned wait from the server). -> the raw reply, a Failed, NO_REPLY or
        ABANDONED (resign)."""
        q = self._core.quorum
        assert q is not None
        node = self._qnodes[op.node]
        blocked = q.ids.blocked(node.index)
        if blocked is not None:
            return blocked
        conn: Any = None
        answered = False
        try:
            # Read timeout: the socket must outlast the BLOCK (the reply comes at its end).
            opened = self._open_node(node, max(op.until_us - _core.now_us(), 0) / 1e6 + 1.0, op.until_us)
            if isinstance(opened, Failed) or opened is _quorum.NO_REPLY:
                return opened
            conn = opened
            conn.send_command(*op.args)
            while True:
                if quit.is_set():
                    return _quorum.ABANDONED
                left = op.until_us - _core.now_us()
                if left <= 0:
                    return _quorum.NO_REPLY
                if conn.can_read(timeout=min(left / 1e6, _POLL)):
                    got = conn.read_response()
                    answered = True
                    return got
        except redis.exceptions.ResponseError as e:
            return _wire.failure(e)
        except Exception as e:  # connection, timeout, protocol
            return _wire.failure(e)
        finally:
            if conn is not None and answered:
                # Answered: nothing is pending on it, so it can wait until the fresh round is
                # done (closed before the next operation that is not a round). Why: closing
                # it now (FIN through every hop, the server freeing the client) competes for
                # the CPU with that round, on the wake's critical path.
                self._waited.append(conn)
            elif conn is not None:
                # Abandoned, timed out or failed: closing it is what withdraws the wait.
                with contextlib.suppress(Exception):
                    conn.disconnect()

    def _close_waited(self) -> None:
        while self._waited:
            c = self._waited.pop()
            with contextlib.suppress(Exception):
                c.disconnect()

    # -- I/O --------------------------------------------------------------------------------------

    def _drop(self, channel: str, refresh: bool) -> None:
        c = self._conns.pop(channel, None)
        if c is not None:
            with contextlib.suppress(Exception):
                c.disconnect()
        if refresh:
            self._source.refresh()

    def _command(self, op: _core.Command, quit: threading.Event) -> Union[Any, Failed]:
        conn = self._conns.get(op.channel)
        try:
            if conn is None:
                block = self.config.block_timeout_us if op.channel == "acquire" else None
                from .decide import op_limit_us

                conn = self._source.open(op_limit_us(self.config, block) / 1e6)
                self._conns[op.channel] = conn
                # Explicitly: a Sentinel-managed connection resolves the primary in connect(),
                # which send_command's implicit connect may bypass.
                conn.connect()
            conn.send_command(*op.args)
            while True:
                left = op.until_us - _core.now_us()
                if op.interruptible and quit.is_set():
                    # Abandoned with a reply in flight: this connection is never reused.
                    self._drop(op.channel, False)
                    return _core.QUIT
                if left <= 0:
                    # No reply in time: with a reply in flight the connection is not reused;
                    # resolve the address again (Sentinel/Cluster/factory) on the next open.
                    self._drop(op.channel, True)
                    return Failed(ErrorKind.TIMEOUT, f"no reply within the loop's limit ({' '.join(map(str, op.args[:1]))})")
                if conn.can_read(timeout=min(left / 1e6, _POLL)):
                    break
            return conn.read_response()
        except redis.exceptions.ResponseError as e:
            f = _wire.failure(e)
            if f.code in _wire.RESOLVE_AGAIN:
                self._drop(op.channel, True)
            return f
        except Exception as e:  # connection, timeout, protocol: the connection is not trusted
            self._drop(op.channel, True)
            return _wire.failure(e)
