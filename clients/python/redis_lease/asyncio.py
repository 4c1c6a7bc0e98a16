"""The asyncio elector (``redis.asyncio``), same shape as ``redis_lease.Elector``.

Nothing here blocks the event loop: every command is awaited on the elector's own
``redis.asyncio`` connection with a time limit, sleeps are ``asyncio.wait`` with timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Literal, Optional, Set, TypeVar, Union

import redis.asyncio as aredis
import redis.exceptions as rex
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from . import _connect, _core, _quorum, _wire
from .decide import Config, ErrorKind, Failed, op_limit_us
from .metrics import Metrics, NullMetrics

__all__ = ["Elector", "LeaderContext"]

R = TypeVar("R")


class StopEvent(asyncio.Event):
    """The task's stop signal: an ``asyncio.Event`` that is also set whenever the reign's stop
    point has passed on the clock. Why: the loop sets it from a timer, and a timer cannot fire
    while the event loop is stalled (CPU-bound code, a blocking call, SIGSTOP); right after the
    stall, task code may run before the timer does. ``is_set()`` reads the clock, and a
    ``wait()`` started after the stop point returns at once. (A ``wait()`` already pending
    when the stall began wakes when the loop sets the event, one loop iteration after the stall;
    nothing can act while it waits.)"""

    def __init__(self, term: _core.Term) -> None:
        super().__init__()
        self._term = term

    def is_set(self) -> bool:
        return super().is_set() or not self._term.leading()

    async def wait(self) -> Literal[True]:
        if self.is_set():
            return True
        return await super().wait()


class LeaderContext:
    """What the leader task (a coroutine) gets: its fencing token and when to stop.

    :attr:`stop_event` (an ``asyncio.Event``, see :class:`StopEvent`) is set ``stop_budget``
    before the local deadline; a task still running at the deadline is cancelled.
    :meth:`is_leader` and ``stop_event.is_set()`` read the clock on every call, so they are
    right even right after the event loop was stalled; a flag copied out of them earlier, and
    ``Elector.role``, are not. Call :meth:`is_leader` right before every step that is not
    fenced; fenced writes are refused by the resource either way.
    """

    def __init__(self, term: _core.Term, key: str) -> None:
        self._term = term
        self.key = key
        self.owner = term.owner
        """This reign's owner as the server sees it: the elector's owner, ``#``, the reign
        number (R17), e.g. ``web-7-41873-9f2c41aa#3``."""
        self.stop_event: asyncio.Event = StopEvent(term)

    @property
    def token(self) -> int:
        """Fencing token of this term: pass it to the resource (e.g. ``LEASE.FENCE``)."""
        return self._term.token

    @property
    def deadline(self) -> Optional[float]:
        """Current local deadline on the ``time.monotonic()`` clock; None once the reign ended."""
        t = self._term
        return None if t.ended else _core.monotonic_s(t.deadline_us)

    def is_leader(self) -> bool:
        return not self.stop_event.is_set() and self._term.leading()

    async def sleep(self, seconds: float) -> bool:
        """Sleep ``seconds`` or until the stop signal; returns :meth:`is_leader` afterwards."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.stop_event.wait(), seconds)
        return self.is_leader()


class _Source:
    def __init__(self, target: Any, key: str, connect_timeout: float) -> None:
        self._target = target
        self._key = key
        self._connect_timeout = connect_timeout
        self._client: Any = None
        self._refresh_cluster = False

    def _is_factory(self) -> bool:
        t = self._target
        return callable(t) and not isinstance(t, str) and not hasattr(t, "connection_pool") and not _connect.is_cluster(t)

    async def client(self) -> Any:
        if self._client is None:
            t = self._target
            if isinstance(t, str):
                self._client = aredis.Redis.from_url(t)
            elif self._is_factory():
                c = t()
                self._client = await c if asyncio.iscoroutine(c) else c
            else:
                self._client = t
        return self._client

    async def open(self, read_timeout: float) -> Any:
        c = await self.client()
        retry = Retry(NoBackoff(), 0)
        if _connect.is_cluster(c):
            if self._refresh_cluster or not getattr(c.nodes_manager, "slots_cache", None):
                self._refresh_cluster = False
                await c.nodes_manager.initialize()
            node = c.get_node_from_key(self._key, replica=False)
            cls, kwargs = node.connection_class, node.connection_kwargs
        else:
            cls, kwargs = c.connection_pool.connection_class, c.connection_pool.connection_kwargs
        return cls(**_connect.derive_kwargs(kwargs, read_timeout, self._connect_timeout, retry))

    async def close(self) -> None:
        if isinstance(self._target, str) and self._client is not None:
            c, self._client = self._client, None
            closer = getattr(c, "aclose", None) or getattr(c, "close")
            with contextlib.suppress(Exception):
                await closer()

    def refresh(self) -> None:
        if _connect.is_cluster(self._client):
            self._refresh_cluster = True
        elif self._is_factory():
            self._client = None


class _Run:
    def __init__(self, el: "Elector", task: Callable[[LeaderContext], Awaitable[Any]], one_shot: bool = False) -> None:
        self.el = el
        self.task = task
        self.quit = asyncio.Event()
        self.user_task: Optional["asyncio.Future[Any]"] = None
        self.lease: Optional[LeaderContext] = None
        # leadership(): one reign, then stop campaigning (whatever ended the reign).
        self.one_shot = one_shot
        self.reigns = 0

    def request_quit(self) -> None:
        self.quit.set()

    def quit_requested(self) -> bool:
        return self.quit.is_set() or self.el._resigned or (self.one_shot and self.reigns > 0)

    async def drive(self, loop: _core.Loop) -> Any:
        result: Any = None
        cancelled: Optional[asyncio.CancelledError] = None
        while True:
            try:
                op = loop.send(result)
            except StopIteration as stop:
                if cancelled is not None:
                    raise cancelled
                return stop.value
            try:
                result = await self.execute(op)
            except asyncio.CancelledError as e:
                # run() was cancelled (Task.cancel(), Ctrl-C under asyncio.run, a TaskGroup):
                # resign - stop the task, wait for it, RELEASE - then re-raise. A second
                # cancellation during that is obeyed at once (the lease then expires).
                if cancelled is not None:
                    raise
                cancelled = e
                self.request_quit()
                result = await self.interrupted(op)

    async def execute(self, op: _core.Op) -> Any:
        if not isinstance(op, _quorum.Round):
            # The rounds right after a wait are done (or were never sent): its connection
            # can go now (see Elector._wait).
            await self.el._close_waited()
        if isinstance(op, _core.Command):
            return await self.el._command(op, self.quit)
        if isinstance(op, _quorum.Round):
            return await self.el._round(op)
        if isinstance(op, _quorum.Wait):
            return await self.el._wait(op, self.quit)
        if isinstance(op, _core.Sleep):
            return await self.sleep(op.until_us)
        if isinstance(op, _core.StartTask):
            self.reigns += 1
            self.lease = LeaderContext(op.term, self.el.key)
            self.user_task = asyncio.ensure_future(self.task(self.lease))
            return None
        return await self.stop(op.until_us)

    async def interrupted(self, op: _core.Op) -> Any:
        """The result of an operation a cancellation broke off (its connection, if any, was
        already dropped by _command)."""
        if isinstance(op, _core.Command):
            return _core.QUIT if op.interruptible else Failed(ErrorKind.CONNECTION, "cancelled")
        if isinstance(op, _core.StopTask):
            return await self.stop(op.until_us)  # still wait for the task (until the deadline)
        if isinstance(op, _quorum.Round):
            return [_quorum.NO_REPLY] * len(op.cmds)  # its commands finish on their own
        if isinstance(op, _quorum.Wait):
            return _quorum.ABANDONED  # its connection was closed on the way out of _wait
        return _core.QUIT if isinstance(op, _core.Sleep) else None

    async def sleep(self, until_us: int) -> Any:
        q = asyncio.ensure_future(self.quit.wait())
        try:
            while True:
                if self.quit.is_set():
                    return _core.QUIT
                if self.user_task is not None and self.user_task.done():
                    return _core.TASK_DONE
                left = until_us - _core.now_us()
                if left <= 0:
                    return _core.TIMER
                waiters: Set["asyncio.Future[Any]"] = {q}
                if self.user_task is not None:
                    waiters.add(self.user_task)
                await asyncio.wait(waiters, timeout=left / 1e6, return_when=asyncio.FIRST_COMPLETED)
        finally:
            q.cancel()

    async def stop(self, until_us: int) -> _core.TaskEnd:
        t, lease = self.user_task, self.lease
        assert t is not None and lease is not None
        lease.stop_event.set()
        left = max(0.0, (until_us - _core.now_us()) / 1e6)
        if not t.done():
            await asyncio.wait({t}, timeout=left)
        self.user_task = None  # only now: a cancelled wait above is waited again
        if not t.done():
            # Past the deadline: cancellation is the last word (the lease is not released).
            t.cancel()
            return _core.TaskEnd(False)
        if t.cancelled():
            return _core.TaskEnd(True, None, asyncio.CancelledError())
        return _core.TaskEnd(True, None if t.exception() else t.result(), t.exception())


class _QNode:
    """One node of quorum mode: its source, its connection, and a lock held by the one
    command in flight on it (a command the round stopped waiting for finishes on its own,
    bounded by the round's limit, before the next one is sent)."""

    def __init__(self, index: int, source: _Source) -> None:
        self.index = index
        self.source = source
        self.conn: Any = None
        self.lock = asyncio.Lock()

    async def drop(self, refresh: bool) -> None:
        c, self.conn = self.conn, None
        if c is not None:
            with contextlib.suppress(Exception):
                await c.disconnect()
        if refresh:
            self.source.refresh()


class Elector:
    """One candidate for one lease key, on asyncio. Same arguments and verbs as
    ``redis_lease.Elector``; ``redis`` is a URL, a ``redis.asyncio.Redis`` (also from
    ``redis.asyncio.sentinel.Sentinel.master_for``), a ``redis.asyncio.cluster.RedisCluster``,
    or a factory returning one; or a list of several URLs / ``redis.asyncio.Redis`` clients of
    independent primaries (quorum mode, see ``redis_lease.Elector``). The task is a coroutine
    function ``async def task(lease)``.
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
        # Quorum commands a round stopped waiting for (kept referenced until they finish).
        self._stragglers: Set["asyncio.Future[Any]"] = set()
        self._conns: Dict[str, Any] = {}
        # Connections of answered Q10 waits, closed after the fresh round (see _wait).
        self._waited: List[Any] = []
        self._runs: List[_Run] = []
        self._running = False
        self._resigned = False
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    @property
    def role(self) -> _core.Role:
        """The last transition the loop published: a snapshot (see :meth:`is_leader`)."""
        return self._core.state

    def is_leader(self) -> bool:
        """True while a reign is on and its stop point is ahead; reads the clock on every call,
        so it is right as the first thing after a stalled event loop (``role`` is the last
        transition the loop published)."""
        t = self._core.term
        return t is not None and t.leading()

    async def run(self, task: Callable[[LeaderContext], Awaitable[R]]) -> Optional[R]:
        """Campaign until :meth:`resign`; whenever elected, run ``await task(lease)`` as an
        asyncio task while keeping the lease renewed. Returns the task's value when it returned
        by itself (lease released), None after resign; re-raises the task's exception."""
        return await self._run(_Run(self, task))  # type: ignore[no-any-return]

    async def _run(self, r: _Run) -> Any:
        if self._running:
            raise RuntimeError("run() is already running on this elector")
        self._running = True
        self._loop = asyncio.get_running_loop()
        self._runs.append(r)
        try:
            if self._resigned:
                return None
            try:
                resigned, value = await r.drive(self._core.run(r.quit_requested))
            except asyncio.CancelledError:
                await self._close_conns()  # after the resign drive() did (or a second cancel)
                raise
            if resigned:
                await self._close_conns()  # final: the elector's own connections are done
            return None if resigned else value
        finally:
            await self._close_waited()
            self._running = False
            self._runs.remove(r)

    def resign(self) -> None:
        """Graceful stop (see ``redis_lease.Elector.resign``). Callable from the loop or, via
        ``loop.call_soon_threadsafe``, from any other thread (done for you)."""
        self._resigned = True
        loop = self._loop
        if loop is not None and not loop.is_closed() and _other_thread(loop):
            loop.call_soon_threadsafe(self._quit_all)
        else:
            self._quit_all()

    def _quit_all(self) -> None:
        for r in list(self._runs):
            r.request_quit()

    async def current_leader(self) -> Optional[_wire.LeaseInfo]:
        """The current leader as the server sees it (``LEASE.GET``; None = no live lease; in
        quorum mode the lease a majority of the nodes report for one owner)."""
        if self._qnodes:
            seen: List[_wire.LeaseInfo] = []
            for node in self._qnodes:
                with contextlib.suppress(Exception):
                    c = await node.source.client()
                    got = _wire.parse_get(await c.execute_command("LEASE.GET", self.key))
                    if isinstance(got, _wire.LeaseInfo):
                        seen.append(got)
            return _quorum.majority_view(seen, len(self._qnodes))
        c = await self._source.client()
        info = _wire.parse_get(await c.execute_command("LEASE.GET", self.key))
        if isinstance(info, Failed):
            raise rex.ResponseError(info.message)
        return info

    async def fence(self, token: int, *command: Any) -> Any:
        """``await`` twin of ``redis_lease.Elector.fence``: ``LEASE.FENCE key token command...``
        on the application's client; the inner reply, or :class:`redis_lease.Fenced`. Not in
        quorum mode (``ValueError``)."""
        if self._qnodes:
            raise ValueError("fence() is not available in quorum mode: fence at the resource with lease.token")
        c = await self._source.client()
        try:
            return await c.execute_command(*_wire.fence_cmd(self.key, token, command))
        except rex.ResponseError as e:
            refused = _wire.fence_refusal(e, self.key, token)
            if refused is not None:
                raise refused from e
            raise

    @contextlib.asynccontextmanager
    async def leadership(self, timeout: Optional[float] = None) -> AsyncIterator[LeaderContext]:
        """One-shot ``async with``: see ``redis_lease.Elector.leadership``. If leadership is
        lost while the body runs, ``lease.stop_event`` is set (the body is not cancelled). The
        release waits for the body to exit, until the local deadline at most; a body still
        running at the deadline is not released under. One reign per ``async with``."""
        got: "asyncio.Future[LeaderContext]" = asyncio.get_running_loop().create_future()
        body_done = asyncio.Event()

        async def hold(lease: LeaderContext) -> None:
            if not got.done():
                got.set_result(lease)
            # Why the body's exit and not the stop signal: R13, the lease is released only
            # after the work stopped. The loop waits for this (the task) until the deadline.
            await body_done.wait()

        r = _Run(self, hold, one_shot=True)
        runner = asyncio.ensure_future(self._run(r))
        try:
            done, _ = await asyncio.wait({got, runner}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            r.request_quit()
            await asyncio.gather(runner, return_exceptions=True)
            raise
        if got not in done:
            r.request_quit()
            await asyncio.gather(runner, return_exceptions=True)
            if runner in done:  # run() ended before a grant: resigned, or it failed
                err = runner.exception() if not runner.cancelled() else None
                if err is not None:
                    raise err
                raise RuntimeError("elector resigned before it was elected")
            raise TimeoutError(f"not elected for {self.key!r} within {timeout} s")
        lease = got.result()
        try:
            yield lease
        finally:
            body_done.set()
            r.request_quit()
            await runner

    async def close(self) -> None:
        """Close the elector's own connections, and the client it made from a URL."""
        await self._close_waited()
        await self._close_conns()
        await self._source.close()
        for node in self._qnodes:
            await node.source.close()

    async def _close_conns(self) -> None:
        for c in self._conns.values():
            with contextlib.suppress(Exception):
                await c.disconnect()
        self._conns.clear()
        for node in self._qnodes:
            async with node.lock:
                await node.drop(False)

    async def _round(self, op: _quorum.Round) -> List[Any]:
        """Quorum mode: ``op``'s commands in parallel, one asyncio task per node."""
        replies: List[Any] = [_quorum.NO_REPLY] * len(op.cmds)

        async def one(node: _QNode, args: _wire.Args) -> None:
            replies[node.index] = await self._node_command(node, args, op.until_us)

        # Scheduled in the send order: asyncio runs the tasks (up to their first send) in it.
        pending: Set["asyncio.Future[Any]"] = set()
        for i in op.send_order():
            a = op.cmds[i]
            if a is not None:
                pending.add(asyncio.ensure_future(one(self._qnodes[i], a)))
        try:
            while pending and not op.done(replies):
                left = (op.until_us - _core.now_us()) / 1e6
                if left <= 0:
                    break
                _, pending = await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # The rest finish on their own (bounded by until_us): cancelling a command half
            # sent would gain nothing, and their replies no longer matter.
            for f in pending:
                self._stragglers.add(f)
                f.add_done_callback(self._stragglers.discard)
        return list(replies)

    async def _node_command(self, node: _QNode, args: _wire.Args, until_us: int) -> Any:
        """One command on one node within ``until_us``: the raw reply, a Failed, or NO_REPLY."""
        q = self._core.quorum
        assert q is not None
        got = asyncio.ensure_future(node.lock.acquire())
        await asyncio.wait({got}, timeout=max(until_us - _core.now_us(), 0) / 1e6)
        if not got.done():
            got.cancel()
            await asyncio.gather(got, return_exceptions=True)
            # Why look again: the acquire may have completed while being cancelled.
            if got.cancelled() or got.exception() is not None:
                return _quorum.NO_REPLY  # the previous command on this node is still in flight
        try:
            blocked = q.ids.blocked(node.index)
            if blocked is not None:
                return blocked

            async def exchange() -> Any:
                if node.conn is None:
                    opened = await self._open_node(node, q.step_us / 1e6)
                    if isinstance(opened, Failed):
                        return opened
                    node.conn = opened
                await node.conn.send_command(*args)
                return await node.conn.read_response()

            try:
                return await asyncio.wait_for(exchange(), max(until_us - _core.now_us(), 0) / 1e6)
            except asyncio.TimeoutError:
                # A reply may be in flight: this connection is never reused.
                await node.drop(True)
                return _quorum.NO_REPLY
            except rex.ResponseError as e:
                f = _wire.failure(e)
                if node.conn is None or f.code in _wire.RESOLVE_AGAIN:
                    await node.drop(True)
                return f
            except Exception as e:  # connection, protocol: the connection is not trusted
                await node.drop(True)
                return _wire.failure(e)
        finally:
            node.lock.release()

    async def _open_node(self, node: _QNode, read_timeout: float) -> Any:
        """A new connection to ``node`` whose server identity was checked (Q6/Q7) before it is
        used: the connection, or a Failed (identity refused). Connection errors raise; the
        caller bounds the time."""
        q = self._core.quorum
        assert q is not None
        conn = await node.source.open(read_timeout)
        try:
            await conn.connect()
            await conn.send_command(*_quorum.INFO_CMD)
            info = await conn.read_response()
        except BaseException:
            with contextlib.suppress(Exception):
                await conn.disconnect()
            raise
        refused = q.ids.on_connect(node.index, info)
        if refused is not None:
            with contextlib.suppress(Exception):
                await conn.disconnect()
            return refused
        return conn

    async def _wait(self, op: _quorum.Wait, quit: asyncio.Event) -> Any:
        """Q10: ``op``'s blocking ACQUIRE on a connection of its own, closed afterwards (which
        withdraws an abandoned wait from the server). -> the raw reply, a Failed, NO_REPLY or
        ABANDONED (resign)."""
        q = self._core.quorum
        assert q is not None
        node = self._qnodes[op.node]
        blocked = q.ids.blocked(node.index)
        if blocked is not None:
            return blocked
        conns: List[Any] = []

        async def exchange() -> Any:
            # Read timeout: the socket must outlast the BLOCK (the reply comes at its end).
            opened = await self._open_node(node, max(op.until_us - _core.now_us(), 0) / 1e6 + 1.0)
            if isinstance(opened, Failed):
                return opened
            conns.append(opened)
            await opened.send_command(*op.args)
            return await opened.read_response()

        call = asyncio.ensure_future(exchange())
        stop = asyncio.ensure_future(quit.wait())
        try:
            left = max(op.until_us - _core.now_us(), 0) / 1e6
            await asyncio.wait({call, stop}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not call.done():
                call.cancel()
                await asyncio.gather(call, return_exceptions=True)
            if not call.cancelled() and call.exception() is None:
                # Answered: nothing is pending on it, so it can wait until the fresh round is
                # done (closed before the next operation that is not a round). Why: closing
                # it now (FIN through every hop, the server freeing the client) competes for
                # the CPU with that round, on the wake's critical path.
                self._waited.extend(conns)
            else:
                # Abandoned, timed out or failed: closing it is what withdraws the wait.
                for c in conns:
                    with contextlib.suppress(Exception):
                        await c.disconnect()
        if call.cancelled():
            return _quorum.ABANDONED if quit.is_set() else _quorum.NO_REPLY
        e = call.exception()
        if e is None:
            return call.result()
        return _wire.failure(e)

    async def _close_waited(self) -> None:
        while self._waited:
            c = self._waited.pop()
            with contextlib.suppress(Exception):
                await c.disconnect()

    # -- I/O ---------------------------------------------------------------------------------

    async def _drop(self, channel: str, refresh: bool) -> None:
        c = self._conns.pop(channel, None)
        if c is not None:
            with contextlib.suppress(Exception):
                await c.disconnect()
        if refresh:
            self._source.refresh()

    async def _command(self, op: _core.Command, quit: asyncio.Event) -> Union[Any, Failed]:
        async def exchange() -> Any:
            conn = self._conns.get(op.channel)
            if conn is None:
                block = self.config.block_timeout_us if op.channel == "acquire" else None
                conn = await self._source.open(op_limit_us(self.config, block) / 1e6)
                self._conns[op.channel] = conn
                # Explicitly: a Sentinel-managed connection resolves the primary in connect(),
                # which send_command's implicit connect may bypass.
                await conn.connect()
            await conn.send_command(*op.args)
            return await conn.read_response()

        left = (op.until_us - _core.now_us()) / 1e6
        call = asyncio.ensure_future(exchange())
        q = asyncio.ensure_future(quit.wait()) if op.interruptible else None
        waiters: Set["asyncio.Future[Any]"] = {call} if q is None else {call, q}
        try:
            await asyncio.wait(waiters, timeout=max(left, 0.0), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            call.cancel()
            await self._drop(op.channel, False)
            raise
        finally:
            if q is not None:
                q.cancel()
        if not call.done():
            # Abandoned with a reply in flight: this connection is never reused.
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
            if quit.is_set() and op.interruptible:
                await self._drop(op.channel, False)
                return _core.QUIT
            await self._drop(op.channel, True)  # no reply in time: resolve again next time
            return Failed(ErrorKind.TIMEOUT, f"no reply within the loop's limit ({op.args[0]})")
        e = call.exception()
        if e is None:
            return call.result()
        if isinstance(e, rex.ResponseError):
            f = _wire.failure(e)
            if f.code in _wire.RESOLVE_AGAIN:
                await self._drop(op.channel, True)
            return f
        await self._drop(op.channel, True)
        return _wire.failure(e)


def _other_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is not loop
    except RuntimeError:  # no loop running in this thread: another thread (or a signal handler)
        return True
