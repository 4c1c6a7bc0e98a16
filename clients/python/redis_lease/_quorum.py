"""Quorum mode's transport for the shared loop (protocol §9a; the Rust reference is
``client/src/quorum.rs``), written once for the sync and the asyncio elector.

The election loop (``redis_lease._core``) stays what it is: the deadline counts from the
instant taken before the first send of a round, the stop point, the late grant, the release
after the task stopped, the per-reign owner. What changes is what one "reply" means: a
round over N independent primaries. The rounds here are generators, like the loop: they
yield :class:`Round` (send one command to several nodes in parallel, collect the replies
until a time limit or until the round is decided) and the driver executes it from the loop's
thread, reading the replies with select (``redis_lease.sync``; a thread only for a node that
must connect first or is busy), or with ``asyncio`` tasks (``redis_lease.asyncio``). The decisions are
``redis_lease.quorum_decide``.

Node identity (Q6, Q7): the driver calls :meth:`Identities.on_connect` with the ``INFO
server`` text of every new connection and :meth:`Identities.blocked` before every command.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Generator, List, Optional, Sequence, Tuple, Union

from . import _clock, _wire
from . import quorum_decide as qd
from .decide import Config, ErrorKind, Failed

log = logging.getLogger("redis_lease")

class _NoReply:
    """A node that did not answer before the round's limit (it may or may not have run it)."""

    def __repr__(self) -> str:
        return "NO_REPLY"


NO_REPLY = _NoReply()


@dataclass(frozen=True)
class Round:
    """Send ``cmds[i]`` to node ``i`` (``None``: not to that node) in parallel; wait for each
    until ``until_us`` at most; stop waiting as soon as ``done(replies)`` is true (replies so
    far, :data:`NO_REPLY` where none yet). -> a list, per node: the raw reply, a ``Failed``,
    or :data:`NO_REPLY`. Commands still in flight when the round returns complete (bounded by
    ``until_us``) in the background; their replies no longer matter."""

    cmds: Tuple[Optional[_wire.Args], ...]
    until_us: int
    done: Callable[[Sequence[Any]], bool]
    # The order to send in (node indexes; empty = node order). Only liveness depends on it
    # (Q10: the wait node's RELEASE goes last).
    order: Tuple[int, ...] = ()

    def send_order(self) -> Sequence[int]:
        return self.order or range(len(self.cmds))


@dataclass(frozen=True)
class Wait:
    """Q10: send ``args`` (a blocking ``LEASE.ACQUIRE ... BLOCK``) to node ``node`` alone, on a
    connection of its own, opened for it and closed after it, and wait for the reply until
    ``until_us`` at most. -> the raw reply, a ``Failed``, :data:`NO_REPLY`, or
    :data:`ABANDONED` (resign). Why a connection of its own: a blocked client holds back every
    later command on its connection, so the next round would find this node silent; and
    closing it is what tells the server to stop waiting for us when the wait is abandoned (a
    grant it made just before is found and released by the loop's stray release, as for any
    abandoned acquire)."""

    node: int
    args: _wire.Args
    until_us: int


class _Abandoned:
    """A :class:`Wait` broken off by a resign (its connection closed)."""

    def __repr__(self) -> str:
        return "ABANDONED"


ABANDONED = _Abandoned()


def _never(_: Sequence[Any]) -> bool:
    return False


# -- start-time duplicate check (Q6) ---------------------------------------------------------


def server_addresses(target: Any) -> List[str]:
    """Every address the node ``target`` (a URL or a client with a ``connection_pool``) names:
    every socket address its host resolves to (so ``localhost`` and ``127.0.0.1`` meet), or
    the canonical path of a unix socket. The db number is left out on purpose: db 0 and db 1
    are one server. A name that does not resolve yet is compared as written (the run_id check
    on connect still catches a duplicate)."""
    host: Optional[str] = None
    port = 6379
    path: Optional[str] = None
    if isinstance(target, str):
        u = urllib.parse.urlsplit(target)
        if u.scheme == "unix":
            path = u.path
        elif u.scheme in ("redis", "rediss"):
            host = u.hostname or "localhost"
            port = u.port or 6379
        else:
            raise ValueError(f"quorum: unsupported node URL {target!r} (redis://, rediss://, unix://)")
    else:
        kw = getattr(getattr(target, "connection_pool", None), "connection_kwargs", None)
        if not isinstance(kw, dict):
            return []
        path = kw.get("path")
        host = kw.get("host", "localhost") if path is None else None
        port = int(kw.get("port", 6379))
    if path is not None:
        return [os.path.realpath(path)]
    assert host is not None
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return sorted({f"{i[4][0]!s}:{i[4][1]!s}" for i in infos})
    except OSError:
        return [f"{host}:{port}"]


def node_name(target: Any) -> str:
    """The URL a node is known by for Q10's wait node (the smallest one): a URL as given, or
    for a client ``redis://host:port/db`` (``rediss``, ``unix://path``) from its pool's
    settings. A factory has no name before it is called: "" (only liveness depends on every
    elector picking the same wait node)."""
    if isinstance(target, str):
        return target
    kw = getattr(getattr(target, "connection_pool", None), "connection_kwargs", None)
    if not isinstance(kw, dict):
        return ""
    if kw.get("path") is not None:
        return f"unix://{kw['path']}"
    cls = getattr(target.connection_pool, "connection_class", None)
    scheme = "rediss" if cls is not None and "SSL" in cls.__name__ else "redis"
    return f"{scheme}://{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"


def wait_node_of(targets: Sequence[Any]) -> int:
    """Q10's wait node of a node list (see :func:`node_name`)."""
    return qd.wait_node([node_name(t) for t in targets])


def check_distinct(targets: Sequence[Any]) -> None:
    """Q6: refuse a node list that names one server twice under any spelling."""
    addrs = [server_addresses(t) for t in targets]
    for i in range(len(targets)):
        for j in range(i + 1, len(targets)):
            common = sorted(set(addrs[i]) & set(addrs[j]))
            if common:
                raise ValueError(
                    f"quorum: nodes {i + 1} and {j + 1} are the same server ({common[0]}): "
                    "one server would count twice toward a majority"
                )


# -- the membership id (Q9) ----------------------------------------------------------------------


def node_identity(target: Any) -> str:
    """A node's identity in the membership id (``quorum_decide.tcp_identity``, Q9): from a URL,
    or from a client's ``connection_pool`` (host and port, or the socket path)."""
    if isinstance(target, str):
        u = urllib.parse.urlsplit(target)
        if u.scheme == "unix":
            return qd.unix_identity(u.path)
        if u.scheme in ("redis", "rediss"):
            # urlsplit's hostname is already lower case and without the IPv6 brackets.
            return qd.tcp_identity(u.hostname or "localhost", u.port or 6379)
        raise ValueError(f"quorum: unsupported node URL {target!r} (redis://, rediss://, unix://)")
    kw = getattr(getattr(target, "connection_pool", None), "connection_kwargs", None)
    if not isinstance(kw, dict):
        raise ValueError(f"quorum: no membership identity for the node {target!r} (give a URL)")
    if kw.get("path") is not None:
        return qd.unix_identity(str(kw["path"]))
    return qd.tcp_identity(str(kw.get("host", "localhost")), int(kw.get("port", 6379)))


def membership_id_of(targets: Sequence[Any]) -> str:
    """The membership id of a node list as the wire spells it (16 hex digits, Q9): what an
    operator passes to ``LEASE.MEMBERSHIP key old new`` when the node set changes
    (docs/quorum.md §4.1)."""
    return qd.membership_hex(qd.membership_id([node_identity(t) for t in targets]))


# -- node identity on connect (Q6, Q7) -------------------------------------------------------


class Identities:
    """The server identity (``run_id``) last seen at every node, and each node's quarantine.
    Shared by the connections of all nodes (any thread)."""

    def __init__(self, n: int, quarantine_us: int) -> None:
        self.known: List[Optional[str]] = [None] * n
        self.quarantined_until: List[Optional[int]] = [None] * n
        self.quarantine_us = quarantine_us
        self._lock = threading.Lock()

    def blocked(self, i: int) -> Optional[Failed]:
        """Why node ``i`` must not be used now, if it must not. Checked before anything is
        sent: a quarantined node's reply must not count, and a grant it made would only
        block others for a TTL."""
        until = self.quarantined_until[i]
        if until is not None and _clock.now_us() < until:
            return Failed(ErrorKind.CONNECTION, f"quorum: node {i + 1}: quarantined (its server identity changed)")
        return None

    def on_connect(self, i: int, info: Any) -> Optional[Failed]:
        """A new connection to node ``i`` replied ``info`` to ``INFO server``: None if it may
        be used, else why not (the connection must then be dropped)."""
        text = info.decode("utf-8", "replace") if isinstance(info, bytes) else info
        if isinstance(text, dict):  # redis-py parses INFO into a dict
            rid = text.get("run_id")
            seen = str(rid) if rid else None
        else:
            seen = qd.run_id_of(str(text))
        if seen is None:
            return Failed(ErrorKind.CONNECTION, f"quorum: node {i + 1}: INFO server has no run_id")
        with self._lock:
            c = qd.check_identity(i, seen, self.known)
            if c.kind is qd.IdentityKind.DUPLICATE:
                assert c.of is not None
                return Failed(
                    ErrorKind.CONNECTION,
                    f"quorum: node {i + 1} is the same server as node {c.of + 1} (same run_id); it counts toward nothing",
                )
            self.known[i] = seen
            if c.kind is qd.IdentityKind.CHANGED:
                self.quarantined_until[i] = _clock.now_us() + self.quarantine_us
                return Failed(
                    ErrorKind.CONNECTION,
                    f"quorum: node {i + 1}: another server answers there now (run_id changed); "
                    f"quarantined for {self.quarantine_us // 1000} ms",
                )
        return None


INFO_CMD: _wire.Args = ("INFO", "server")


# -- the rounds ----------------------------------------------------------------------------------

R = Generator[Round, Any, Any]


@dataclass(frozen=True)
class _Refusal:
    """A campaign round refused by enough nodes with nothing released: its replies (Q10)."""

    replies: Tuple[qd.AcquireReply, ...]


def _acquire_reply(raw: Any) -> qd.AcquireReply:
    if raw is NO_REPLY:
        return None
    if isinstance(raw, Failed):
        return None if raw.kind == ErrorKind.TIMEOUT else raw
    t = _wire.parse_token(raw)
    if t is None:
        return qd.REFUSED
    return t


def _flag_reply(cmd: str, raw: Any) -> qd.NodeReply[bool]:
    if raw is NO_REPLY:
        return None
    if isinstance(raw, Failed):
        # A timeout is "no reply": the node may or may not have run it.
        return None if raw.kind == ErrorKind.TIMEOUT else raw
    return _wire.parse_flag(cmd, raw)


class Quorum:
    """The state of the quorum transport of one elector (see the module docs)."""

    def __init__(
        self,
        n: int,
        cfg: Config,
        control: qd.QuorumControl = qd.QuorumControl.CORRECT,
        wait_node: int = 0,
        membership: Optional[str] = None,
    ) -> None:
        if n < 2:
            raise ValueError("quorum: needs at least 2 node URLs (3 or 5 to tolerate 1 or 2 faulty)")
        if cfg.min_replicas > 0:
            # Each node is its own primary; replicas of a node add nothing to the majority
            # argument, and WAIT per node would multiply round trips.
            raise ValueError("quorum: min_replicas is not supported (the majority is the replication)")
        self.n = n
        self.control = control
        # Two steps (acquire, raise) must fit in the loop's op limit of a non-blocking acquire.
        self.step_us = max(cfg.op_timeout_us // 2, 1000)
        self.ids = Identities(n, qd.quarantine_us(cfg.ttl_ms * 1000, cfg.node_quarantine_us, cfg.drift))
        # The token each node holds for us in the current reign (all the reign's token,
        # except under the NO_UNIFY control).
        self.held: List[Optional[int]] = [None] * n
        self.owner = ""
        # A campaign round released partial grants under its owner (see take_retired_owner).
        self.retired = False
        # The node followers wait on with BLOCK (Q10, quorum_decide.wait_node).
        self.wait_node = wait_node
        self.op_timeout_us = cfg.op_timeout_us
        # The longest wait on the wait node (Q10).
        self.renew_interval_us = cfg.renew_interval_us
        # The instant before the sends of the round that produced the last acquire's result,
        # when that round started after a wait (see take_round_start).
        self.round_start: Optional[int] = None
        # ``MEMBERSHIP <id>`` of the node list, sent with every ACQUIRE, RENEW and RAISE (Q9).
        # Why (issue 32): electors with different node lists (a node replacement half done)
        # can find disjoint majorities; binding each key to one list's id keeps them apart.
        # None only in scripted tests and the negative control.
        self.membership = membership
        # The last round's refusal for membership was reported (logged once per change).
        self._membership_reported = False
        self._rng = random.Random()

    def _with_membership(self, cmd: _wire.Args) -> _wire.Args:
        return cmd if self.membership is None else (*cmd, "MEMBERSHIP", self.membership)

    def _report_membership(self, refused: bool) -> None:
        """Logs a round lost to membership refusals once, until a round ends otherwise: only
        an operator can fix it, and the loop polls every 50..100 ms."""
        if refused and not self._membership_reported:
            log.error(
                "quorum: nodes refuse this elector's node list (their lease key is bound to another "
                "membership); electors use different node lists? see docs/quorum.md 4.1 "
                "membership=%s reason=membership_mismatch",
                self.membership,
            )
        self._membership_reported = refused

    def _until(self, loop_until: int) -> int:
        return min(_clock.now_us() + self.step_us, loop_until)

    def take_retired_owner(self) -> bool:
        """Q4 + R17: a round that released partial grants retired its owner; the loop must
        advance the reign so that the next round does not send it again (that round's RELEASE
        may still execute late and would free a node the next round refreshed)."""
        r, self.retired = self.retired, False
        return r

    def take_round_start(self) -> Optional[int]:
        """Q10: the instant before the sends of the round the last acquire's result rests on,
        when that round ran after a wait (once; None otherwise). Every node counted in that
        round set its expiry after this instant, so the loop may measure the deadline from
        it (when it is later than its own ``sent_at``)."""
        r, self.round_start = self.round_start, None
        return r

    def holds_after_rejection(self) -> bool:
        """After a lost renewal: some nodes still hold our lease; they are released only after
        the task stopped (Q5, R13)."""
        return any(h is not None for h in self.held)

    def acquire(
        self, key: str, owner: str, ttl_ms: int, loop_until: int, block_us: Optional[int] = None
    ) -> Generator[Union[Round, Wait], Any, Union[int, None, Failed, _Abandoned]]:
        """Q2-Q4 and Q10: a token to lead on, None (not granted: poll again), a Failed (back
        off), or :data:`ABANDONED` (resigned during a wait). ``block_us``: the loop's BLOCK
        budget (None: no wait, e.g. re-asking for an unconfirmed grant)."""
        self.round_start = None
        first = yield from self._acquire_round(key, owner, ttl_ms, loop_until)
        if not isinstance(first, _Refusal):
            return first
        wait = qd.wait_after_refusal(
            first.replies, self.wait_node, False, block_us, self.op_timeout_us, self.renew_interval_us
        )
        if wait is None:
            return None
        # Q10: wait on the wait node until it is released or expires (it then grants us that
        # one node, which is no reign), and go straight into a fresh round. Why this is safe:
        # the wait node's grant counts for nothing by itself; what counts is the fresh round,
        # whose every counted node set its expiry after `start`, the instant taken before that
        # round's sends, which the loop then measures the deadline from.
        got: Any = yield Wait(
            self.wait_node,
            _wire.acquire_cmd(key, owner, ttl_ms, wait),
            min(_clock.now_us() + wait + self.step_us, loop_until),
        )
        if isinstance(got, _Abandoned):
            return got
        if got is NO_REPLY or isinstance(got, Failed) or not isinstance(_acquire_reply(got), int):
            return None  # timed out (nil), failed, or the node went away: the loop asks again
        start = _clock.now_us()
        second = yield from self._acquire_round(key, owner, ttl_ms, loop_until)
        if isinstance(second, _Refusal):
            # Every node refused, the wait node included (it lost our grant meanwhile, e.g. it
            # restarted): the loop asks again.
            return None
        self.round_start = start
        return second

    def _acquire_round(
        self, key: str, owner: str, ttl_ms: int, loop_until: int
    ) -> Generator[Round, Any, Union[int, None, Failed, "_Refusal"]]:
        """One campaign round (Q2-Q4): a token to lead on, None (not granted, after releasing
        partial grants), a Failed, or a :class:`_Refusal` (refused, nothing released: Q10 may
        wait)."""
        n, need = self.n, self.control.need(self.n)
        self.owner = owner

        def decided(r: Sequence[Any]) -> bool:
            # Decided early only when a majority can no longer grant. Otherwise every node gets
            # the step's time, even after a majority granted: a reign on all N nodes survives
            # more later faults than one on a bare majority.
            # And not before the wait node answered: whether a refused follower waits (Q10)
            # depends on that node's reply; deciding on the others' refusals first would make
            # it poll instead.
            other = sum(1 for x in r if x is not NO_REPLY and not isinstance(_acquire_reply(x), int))
            waited = 0 <= self.wait_node < len(r) and r[self.wait_node] is not NO_REPLY
            return other > n - need and waited

        acq = self._with_membership(_wire.acquire_cmd(key, owner, ttl_ms, None))
        raw = yield Round(tuple(acq for _ in range(n)), self._until(loop_until), decided)
        replies = [_acquire_reply(x) for x in raw]
        a = qd.after_acquire(self.control, replies, self._rng.randrange(1 << 30))
        if isinstance(a, qd.Raise):
            granted = {i: t for i, t in enumerate(replies) if isinstance(t, int) and not isinstance(t, bool)}
            cmds: List[Optional[_wire.Args]] = [None] * n
            for i in a.nodes:
                cmds[i] = self._with_membership(("LEASE.RAISE", key, owner, granted[i], a.target))
            rr = yield Round(tuple(cmds), self._until(loop_until), _never)
            confirmed = [_flag_reply("LEASE.RAISE", x) if cmds[i] is not None else None for i, x in enumerate(rr)]
            if qd.raise_confirmed(self.control, confirmed, n):
                self.held = [a.target if confirmed[i] is True else None for i in range(n)]
                return a.target
            # Not confirmed: the grants (raised or not) must not block anyone for a TTL: a node
            # that confirmed holds the target, the others are released with their own grant
            # (as the Rust reference does).
            pairs = [(i, a.target if confirmed[i] is True else granted[i]) for i in a.nodes]
            self.retired = self.retired or bool(pairs)
            yield from self._release_on(key, owner, pairs)
            # Not leading either way; but a node that refused the raise with a server error
            # (NOPERM: an ACL without +lease.raise) is a fault the operator must see, not a
            # contender: report it (the loop logs, counts and backs off) instead of polling in
            # silence forever. Unreachable nodes are faults of the moment: not reported here.
            # A MEMBERSHIP refusal is no fault either: it counts as no confirmation (Q9).
            for i in a.nodes:
                c = confirmed[i]
                if isinstance(c, Failed) and not c.unreachable and not qd.is_membership(c):
                    return Failed(c.kind, f"quorum: node {i + 1} refused LEASE.RAISE: {c.message}", c.grace_us, c.code)
            return None
        if isinstance(a, qd.ActUnified):
            self.held = list(a.per_node)
            return a.token
        self.retired = self.retired or bool(a.release)
        yield from self._release_on(key, owner, a.release)
        self._report_membership(isinstance(a.outcome, qd.MembershipMismatch))
        if isinstance(a.outcome, Failed):
            o = a.outcome
            return Failed(o.kind, f"quorum: fewer than {need} of {n} nodes could grant ({o.message})", o.grace_us, o.code)
        return None if a.release else _Refusal(tuple(replies))

    def renew(self, key: str, owner: str, token: int, ttl_ms: int, loop_until: int) -> Generator[Round, Any, Union[int, Failed]]:
        """Q5: 1 renewed, 0 lost (step down), a Failed = unknown (keep the deadline); the
        replies of a single-node RENEW, so the loop reads them as it reads those."""
        n, need = self.n, self.control.need(self.n)
        held = list(self.held)

        def decided(r: Sequence[Any]) -> bool:
            f = [_flag_reply("LEASE.RENEW", x) for x in r]
            return sum(1 for x in f if x is True) >= need or sum(1 for x in f if qd.renew_refused(x)) > n - need

        cmds = tuple(self._with_membership(_wire.renew_cmd(key, owner, h if h is not None else token, ttl_ms)) for h in held)
        raw = yield Round(cmds, self._until(loop_until), decided)
        replies = [_flag_reply("LEASE.RENEW", x) for x in raw]
        after = qd.after_renew(self.control, replies)
        if after is qd.AfterRenew.RENEWED:
            return 1
        if after is qd.AfterRenew.LOST:
            if any(qd.is_membership(r) for r in replies):
                # The operator rebound nodes to another list (docs/quorum.md §4.1): this reign
                # ends here, by design.
                log.warning("quorum: renewal refused: nodes are bound to another membership now "
                            "key=%s owner=%s reason=membership_mismatch", key, owner)
            # Stepping down. The nodes that still said 1 are NOT released here: our task has
            # not stopped yet, and such a node can complete another elector's majority with
            # nodes that said 0 (one wiped, one holding that elector's partial grant): a
            # successor would reign while we still act (found by the model check). The loop
            # releases them once the task has stopped (holds_after_rejection, R13).
            self.held = [(h if h is not None else token) if replies[i] is True else None for i, h in enumerate(self.held)]
            return 0
        first = next((r for r in replies if isinstance(r, Failed)), None)
        kind = first.kind if first is not None else ErrorKind.TIMEOUT
        return Failed(kind, f"quorum: renewal not confirmed by {need} of {n} nodes")

    def release(self, key: str, owner: str, token: int) -> Generator[Round, Any, int]:
        """On every node, with the token each holds for us (best effort): 1 if any released.

        Q10: the wait node's RELEASE is sent last (all are sent at once, without waiting for
        replies). Its release wakes the one follower waiting there, whose next round should
        find the other nodes already free: their RELEASEs left before it, and the wake plus
        that round take at least a round trip more. A round that still overtakes one on
        another node is refused there and falls back to polling. Order only affects liveness:
        a release frees, it never grants."""
        pairs = [(i, h if h is not None else token) for i, h in enumerate(self.held)]
        pairs.sort(key=lambda p: p[0] == self.wait_node)
        got = yield from self._release_on(key, owner, pairs)
        self.held = [None] * self.n
        return 1 if got > 0 else 0

    def get(self, key: str, owner: str) -> Generator[Round, Any, Optional[_wire.LeaseInfo]]:
        """Our own holding on any node (after a resign with a round in flight: the loop then
        releases it, on every node with the token each holds)."""
        raw = yield Round(tuple(_wire.get_cmd(key) for _ in range(self.n)), _clock.now_us() + self.step_us, _never)
        found: Optional[_wire.LeaseInfo] = None
        for i, x in enumerate(raw):
            if x is NO_REPLY or isinstance(x, Failed):
                continue
            info = _wire.parse_get(x)
            if isinstance(info, _wire.LeaseInfo) and info.owner == owner:
                # Stray grants may carry different tokens: remember each.
                self.held[i] = info.token
                found = info
        return found

    def _release_on(self, key: str, owner: str, pairs: Sequence[Tuple[int, int]]) -> Generator[Round, Any, int]:
        if not pairs:
            return 0
        cmds: List[Optional[_wire.Args]] = [None] * self.n
        for i, t in pairs:
            cmds[i] = _wire.release_cmd(key, owner, t)
        raw = yield Round(tuple(cmds), _clock.now_us() + self.step_us, _never, tuple(i for i, _ in pairs))
        return sum(1 for i, x in enumerate(raw) if cmds[i] is not None and _flag_reply("LEASE.RELEASE", x) is True)


def majority_view(seen: Sequence[_wire.LeaseInfo], n: int) -> Optional[_wire.LeaseInfo]:
    """``current_leader()`` in quorum mode: the lease a majority of the ``n`` nodes report for one
    owner (the smallest remaining TTL among them), else None."""
    need = qd.majority(n)
    for info in seen:
        same = [x for x in seen if x.owner == info.owner]
        if len(same) >= need:
            return min(same, key=lambda x: x.pttl_ms)
    return None
