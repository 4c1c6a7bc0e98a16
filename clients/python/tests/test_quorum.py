"""Quorum mode (protocol §9a): the pure decisions, the rounds with scripted replies, and the
sync and asyncio electors against 3 real redis-server processes with the module."""

from __future__ import annotations

import asyncio
import select
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Tuple

import pytest
import redis

import redis_lease.asyncio as alease
from redis_lease import Config, Elector, LeaderContext
from redis_lease import _core, _quorum
from redis_lease import quorum_decide as qd
from redis_lease.decide import ErrorKind, Failed

from .conftest import RedisServer

TTL = 1.0
C = qd.QuorumControl.CORRECT
BUSY = qd.REFUSED
DOWN = Failed(ErrorKind.CONNECTION, "down")
GRACE = Failed(ErrorKind.GRACE, "GRACE 700", grace_us=700_000)


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


# -- pure decisions (the tables of client/src/quorum_decide.rs) ---------------------------------


def test_majority_and_need() -> None:
    assert [qd.majority(n) for n in range(1, 8)] == [1, 2, 2, 3, 3, 4, 4]
    assert qd.QuorumControl.MINORITY.need(5) == 1
    assert qd.QuorumControl.NO_UNIFY.need(5) == 3


@pytest.mark.parametrize(
    "name,control,replies,want",
    [
        ("all grant: raise all to the maximum", C, [10, 30, 20], qd.Raise(30, (0, 1, 2))),
        ("bare majority, one silent", C, [10, None, 20], qd.Raise(20, (0, 2))),
        ("split vote -> release, poll again", C, [10, BUSY, DOWN], qd.Abort(((0, 10),), qd.NotGranted())),
        ("held elsewhere on a majority", C, [BUSY, BUSY, 5], qd.Abort(((2, 5),), qd.NotGranted())),
        ("majority unreachable: error, back off", C, [10, DOWN, None], qd.Abort(((0, 10),), DOWN)),
        ("grace in the way: the loop learns how long", C, [DOWN, GRACE, 3], qd.Abort(((2, 3),), GRACE)),
        ("5 nodes, 3 grants", C, [1, BUSY, 9, DOWN, 4], qd.Raise(9, (0, 2, 4))),
        ("5 nodes, 2 grants", C, [1, BUSY, 9, BUSY, BUSY], qd.Abort(((0, 1), (2, 9)), qd.NotGranted())),
        ("control minority: one grant leads", qd.QuorumControl.MINORITY, [BUSY, 7, BUSY], qd.Raise(7, (1,))),
        ("control no-unify: the picked grant", qd.QuorumControl.NO_UNIFY, [None, 50, 20], qd.ActUnified(20, (None, 50, 20))),
    ],
)
def test_after_acquire(name: str, control: qd.QuorumControl, replies: List[qd.AcquireReply], want: qd.AfterAcquire) -> None:
    assert qd.after_acquire(control, replies, 7) == want, name


def test_raise_and_renew() -> None:
    e = Failed(ErrorKind.TIMEOUT, "t")
    assert qd.raise_confirmed(C, [True, True, False], 3)
    assert not qd.raise_confirmed(C, [True, None, False], 3)
    assert qd.raise_confirmed(qd.QuorumControl.MINORITY, [True, None, None], 3)
    R, L, U = qd.AfterRenew.RENEWED, qd.AfterRenew.LOST, qd.AfterRenew.UNKNOWN
    for replies, want in [
        ([True, True, True], R),
        ([True, False, True], R),
        ([True, False, False], L),
        ([True, False, None], U),
        ([e, e, True], U),
        ([True, True, False, False, False], L),
        ([True, True, False, False, None], U),
    ]:
        assert qd.after_renew(C, replies) == want, replies


def test_identity_first_same_changed_duplicate() -> None:
    known = ["a", None, "c"]
    assert qd.check_identity(1, "b", known).kind is qd.IdentityKind.FIRST
    assert qd.check_identity(0, "a", known).kind is qd.IdentityKind.SAME
    assert qd.check_identity(2, "s", known).kind is qd.IdentityKind.CHANGED
    # Node 1 turns out to be node 0's server: it must not count a second time; a swapped node
    # that lands on another node's server is a duplicate, not a change.
    assert qd.check_identity(1, "a", known) == qd.IdentityCheck(qd.IdentityKind.DUPLICATE, 0)
    assert qd.check_identity(2, "a", known) == qd.IdentityCheck(qd.IdentityKind.DUPLICATE, 0)
    assert qd.quarantine_us(1_000_000, 30_000_000, 0.0) == 30_000_000
    assert qd.quarantine_us(45_000_000, 30_000_000, 0.0) == 45_000_000
    # Q7: a duration of the server's clock, stretched by the drift bound (rounded up).
    assert qd.quarantine_us(1_000_000, 30_000_000, 0.01) == 30_303_031
    assert qd.run_id_of("# Server\r\nredis_version:7.0.15\r\nrun_id:4f1c0d\r\n") == "4f1c0d"
    assert qd.run_id_of("# Server\r\nredis_version:7\r\n") is None


# -- the rounds, driven with scripted replies ----------------------------------------------------


def drive(gen: Any, answers: List[List[Any]]) -> Tuple[Any, List[_quorum.Round]]:
    """Run a round generator, answering its Rounds in order; returns (result, rounds)."""
    seen: List[_quorum.Round] = []
    try:
        op = next(gen)
        while True:
            seen.append(op)
            op = gen.send(answers[len(seen) - 1])
    except StopIteration as stop:
        return stop.value, seen


def quorum(n: int = 3) -> _quorum.Quorum:
    return _quorum.Quorum(n, Config.from_ttl(TTL))


def test_round_raises_to_the_maximum_and_renews_each_node() -> None:
    q = quorum()
    tok, rounds = drive(q.acquire("k", "o#1", 1000, 10**18), [[10, 30, None], [1, 1, 1]])
    assert tok == 30
    assert rounds[1].cmds == (("LEASE.RAISE", "k", "o#1", 10, 30), ("LEASE.RAISE", "k", "o#1", 30, 30), None)
    assert not q.take_retired_owner()
    r, rounds = drive(q.renew("k", "o#1", 30, 1000, 10**18), [[1, 0, _quorum.NO_REPLY]])
    assert r == 0 or r == 1 or isinstance(r, Failed)
    assert isinstance(r, Failed)  # one 1, one 0, one silent: unknown, keep the deadline
    assert rounds[0].cmds[2] == ("LEASE.RENEW", "k", "o#1", 30, 1000)


def test_partial_grants_are_released_and_the_owner_retired() -> None:
    q = quorum()
    down = Failed(ErrorKind.CONNECTION, "refused")
    tok, rounds = drive(q.acquire("k", "o#1", 1000, 10**18), [[None, 5, down], [1, 1, 1]])
    assert tok is None  # not granted: poll again
    assert rounds[1].cmds == (None, ("LEASE.RELEASE", "k", "o#1", 5), None)
    # Q4: that round's owner is never sent again (its RELEASE may execute late).
    assert q.take_retired_owner()
    assert not q.take_retired_owner()


def test_unconfirmed_raise_releases_what_it_granted() -> None:
    q = quorum()
    tok, rounds = drive(q.acquire("k", "o#1", 1000, 10**18), [[4, 9, None], [1, _quorum.NO_REPLY, None], [1, 1, 1]])
    assert tok is None
    assert rounds[2].cmds == (("LEASE.RELEASE", "k", "o#1", 9), ("LEASE.RELEASE", "k", "o#1", 9), None)
    assert q.take_retired_owner()


def test_lost_renewal_keeps_the_nodes_that_said_1_for_after_the_task() -> None:
    q = quorum()
    drive(q.acquire("k", "o#1", 1000, 10**18), [[7, 7, 7], [1, 1, 1]])
    r, _ = drive(q.renew("k", "o#1", 7, 1000, 10**18), [[1, 0, 0]])
    assert r == 0
    # Q5: not released inside the round; the loop releases them after the task stopped.
    assert q.holds_after_rejection()
    released, rounds = drive(q.release("k", "o#1", 7), [[1, _quorum.NO_REPLY, _quorum.NO_REPLY]])
    assert rounds[0].cmds[0] == ("LEASE.RELEASE", "k", "o#1", 7)
    assert released == 1 and not q.holds_after_rejection()


# -- against real servers --------------------------------------------------------------------------


@pytest.fixture()
def nodes(server_factory: Callable[..., RedisServer]) -> List[RedisServer]:
    return [server_factory() for _ in range(3)]


def leases(ss: List[RedisServer]) -> List[Optional[Tuple[str, int]]]:
    out: List[Optional[Tuple[str, int]]] = []
    for s in ss:
        try:
            v = s.client().execute_command("LEASE.GET", "k")
        except redis.exceptions.RedisError:
            out.append(None)
            continue
        if v is None:
            out.append(None)
        elif isinstance(v, dict):
            out.append((v[b"owner"].decode(), int(v[b"token"])))
        else:
            out.append((v[0].decode(), int(v[1])))
    return out


class Recorder:
    """Records every reign: (token, start, stop) on the monotonic clock."""

    def __init__(self, log: Optional[List[Tuple[str, int, float, float]]] = None, name: str = "") -> None:
        self.log = log if log is not None else []
        self.name = name
        self.leading = threading.Event()
        self.lease: Optional[LeaderContext] = None

    def __call__(self, lease: LeaderContext) -> None:
        self.lease = lease
        t0 = time.monotonic()
        self.leading.set()
        while lease.sleep(0.01):
            pass
        self.leading.clear()
        self.log.append((self.name, lease.token, t0, time.monotonic()))


def start(el: Elector, task: Callable[[LeaderContext], Any]) -> threading.Thread:
    t = threading.Thread(target=el.run, args=(task,), daemon=True)
    t.start()
    return t


@pytest.fixture()
def electors() -> Iterator[List[Tuple[Elector, threading.Thread]]]:
    made: List[Tuple[Elector, threading.Thread]] = []
    yield made
    for el, t in made:
        el.resign()
    for el, t in made:
        t.join(10)


def test_token_unified_on_every_node(nodes: List[RedisServer], electors: List[Tuple[Elector, threading.Thread]]) -> None:
    # Make node 1's watermark the highest: a fresh grant there is above the other nodes'.
    c = nodes[1].client()
    for _ in range(3):
        t = c.execute_command("LEASE.ACQUIRE", "k", "bump", 20_000)
        c.execute_command("LEASE.RELEASE", "k", "bump", t)
    el = Elector([s.url for s in nodes], "k", TTL)
    rec = Recorder()
    electors.append((el, start(el, rec)))
    assert rec.leading.wait(5)
    assert rec.lease is not None
    got = leases(nodes)
    assert [g[1] if g else None for g in got] == [rec.lease.token] * 3, got
    assert rec.lease.token > t  # above everything node 1 ever issued
    assert len({g[0] for g in got if g}) == 1
    info = el.current_leader()
    assert info is not None and info.token == rec.lease.token


def test_survives_one_node_down_and_steps_down_without_a_majority(
    nodes: List[RedisServer], electors: List[Tuple[Elector, threading.Thread]]
) -> None:
    el = Elector([s.url for s in nodes], "k", TTL)
    rec = Recorder()
    electors.append((el, start(el, rec)))
    assert rec.leading.wait(5) and rec.lease is not None
    token = rec.lease.token
    d0 = rec.lease.deadline
    nodes[2].kill()
    # Still leading on the majority {0, 1}: the deadline keeps moving for 3 TTLs.
    end = time.monotonic() + 3 * TTL
    while time.monotonic() < end:
        assert rec.lease.is_leader() and rec.lease.token == token
        time.sleep(0.05)
    assert (rec.lease.deadline or 0) > (d0 or 0) + 2 * TTL
    nodes[1].kill()
    # Only node 0 is left: no renewal can be confirmed, the task is stopped by the deadline.
    wait_until(lambda: not rec.leading.is_set(), 3 * TTL, "the step-down without a majority")
    assert not el.is_leader()
    time.sleep(2 * TTL)  # a bounded look: it must not lead again on one node
    assert not rec.leading.is_set()


def test_two_electors_never_lead_together(nodes: List[RedisServer], electors: List[Tuple[Elector, threading.Thread]]) -> None:
    log: List[Tuple[str, int, float, float]] = []
    recs = [Recorder(log, f"e{i}") for i in range(2)]
    els = [Elector([s.url for s in nodes], "k", TTL) for _ in range(2)]
    for el, rec in zip(els, recs):
        electors.append((el, start(el, rec)))
    wait_until(lambda: any(r.leading.is_set() for r in recs), 5, "a leader")
    first = 0 if recs[0].leading.is_set() else 1
    # One node down does not change who leads, as long as the leader keeps a majority. With
    # two electors campaigning at once the reign may stand on a bare majority (the other
    # elector held the third node during the round): then the node to stop is the one the
    # leader does not hold. Stopping one of its two would rightly end the reign (Q5).
    held = leases(nodes)
    owners = [h[0] for h in held if h is not None]
    leader_owner = max(set(owners), key=owners.count)
    victim = next((i for i, h in enumerate(held) if h is None or h[0] != leader_owner), 2)
    nodes[victim].kill()
    time.sleep(TTL)
    assert recs[first].leading.is_set()
    els[first].resign()
    wait_until(lambda: recs[1 - first].leading.is_set(), 5, "the hand-over")
    els[1 - first].resign()
    for _, t in electors:
        t.join(10)
    assert len(log) == 2
    (_, ta, a0, a1), (_, tb, b0, b1) = sorted(log, key=lambda x: x[2])
    assert a1 <= b0, f"reigns overlap: {log}"
    assert tb > ta


def test_partial_grants_released_owner_retired(nodes: List[RedisServer], electors: List[Tuple[Elector, threading.Thread]]) -> None:
    # Node 0 is held by someone else, node 1 is frozen (silent until the step's limit): every
    # round gets one grant (node 2), cannot make a majority, and must release that grant at
    # once, under an owner it never uses again (Q4).
    nodes[0].client().execute_command("LEASE.ACQUIRE", "k", "other", 20_000)
    assert nodes[1].proc is not None
    nodes[1].proc.send_signal(signal.SIGSTOP)
    try:
        el = Elector([s.url for s in nodes], "k", TTL)
        rec = Recorder()
        electors.append((el, start(el, rec)))
        wait_until(lambda: el._core.reign >= 3, 5, "three retired owners")
        # Between rounds node 2 holds nothing: its partial grant was released.
        wait_until(lambda: leases(nodes[2:])[0] is None, 2, "node 2 free")
        assert not rec.leading.is_set()
        el.resign()
        electors[0][1].join(10)
        wait_until(lambda: leases(nodes[2:])[0] is None, 2, "node 2 free after the resign")
        held0 = leases(nodes[:1])[0]
        assert held0 is not None and held0[0] == "other"
    finally:
        nodes[1].proc.send_signal(signal.SIGCONT)


def test_one_server_listed_twice_is_refused(nodes: List[RedisServer]) -> None:
    p = nodes[0].port
    for urls, why in [
        ([nodes[0].url, nodes[0].url, nodes[1].url], "same URL"),
        ([f"redis://localhost:{p}/", f"redis://127.0.0.1:{p}/", nodes[1].url], "name and address"),
        ([f"redis://127.0.0.1:{p}/0", f"redis://127.0.0.1:{p}/1", nodes[1].url], "db 0 and db 1"),
    ]:
        with pytest.raises(ValueError, match="are the same server"):
            Elector(urls, "k", TTL)
        with pytest.raises(ValueError, match="are the same server"):
            alease.Elector(urls, "k", TTL)


def test_one_server_under_two_addresses_counts_once(
    server_factory: Callable[..., RedisServer], tmp_path: Path, electors: List[Tuple[Elector, threading.Thread]]
) -> None:
    # A TCP port and a unix socket of one server: the start check cannot tell, the run_id
    # check on connect must. With the third server down, only that one server is up: it
    # would be "2 of 3" if it counted twice.
    sock = str(tmp_path / "r.sock")
    a = server_factory(extra=["--unixsocket", sock])
    b = server_factory()
    b.kill()
    el = Elector([a.url, f"unix://{sock}", b.url], "k", TTL)
    rec = Recorder()
    electors.append((el, start(el, rec)))
    q = el._core.quorum
    assert q is not None
    wait_until(lambda: q.ids.known[0] is not None or q.ids.known[1] is not None, 5, "a connection")
    time.sleep(3 * TTL)  # a bounded look: it must never lead on one server
    assert not rec.leading.is_set()
    assert leases([a])[0] is None or not el.is_leader()


def test_changed_identity_is_quarantined(nodes: List[RedisServer], electors: List[Tuple[Elector, threading.Thread]]) -> None:
    # Node 0 is replaced by an empty server on the same address (grace 0: it grants at once).
    # Without the quarantine it would grant, and with node 2 make a "majority" that ignores
    # whatever reign the old node 0 was part of.
    cfg = Config.from_ttl(TTL).replace(node_quarantine=30.0)
    el = Elector([s.url for s in nodes], "k", config=cfg)
    rec = Recorder()
    electors.append((el, start(el, rec)))
    assert rec.leading.wait(5)
    q = el._core.quorum
    assert q is not None
    first_id = q.ids.known[0]
    nodes[0].kill()
    nodes[0].start()  # same port, new run_id, no state
    wait_until(lambda: q.ids.known[0] not in (None, first_id), 5 * TTL, "the new identity seen")
    assert q.ids.blocked(0) is not None
    nodes[1].kill()
    # Left: node 2 and the quarantined node 0, which counts toward nothing.
    wait_until(lambda: not rec.leading.is_set(), 3 * TTL, "the step-down")
    time.sleep(2 * TTL)
    assert not rec.leading.is_set()
    got = leases(nodes)
    assert got[0] is None, f"the quarantined node was sent a grant: {got}"


def test_asyncio_elector_leads_on_a_majority(nodes: List[RedisServer]) -> None:
    async def main() -> Tuple[int, List[Optional[Tuple[str, int]]], List[Optional[Tuple[str, int]]]]:
        el = alease.Elector([s.url for s in nodes], "k", TTL)
        got: "asyncio.Future[int]" = asyncio.get_running_loop().create_future()

        async def task(lease: alease.LeaderContext) -> None:
            got.set_result(lease.token)
            while await lease.sleep(0.02):
                pass

        runner = asyncio.ensure_future(el.run(task))
        token = await asyncio.wait_for(got, 5)
        nodes[2].kill()
        await asyncio.sleep(2 * TTL)
        assert el.is_leader()
        during = leases(nodes[:2])
        el.resign()
        await asyncio.wait_for(runner, 5)
        await el.close()
        return token, during, leases(nodes[:2])

    token, during, after = asyncio.run(main())
    assert [d[1] if d else None for d in during] == [token, token]
    assert after == [None, None]


# -- Q10: a refused follower waits on one node -------------------------------------------------


def test_wait_node_and_when_to_wait() -> None:
    urls = ["redis://c:1", "redis://a:1", "redis://b:1"]
    assert urls[qd.wait_node(urls)] == "redis://a:1"
    rev = list(reversed(urls))
    assert rev[qd.wait_node(rev)] == "redis://a:1"  # every order of one node set agrees
    assert qd.wait_node([]) == 0
    held: List[qd.AcquireReply] = [BUSY, BUSY, None]
    assert qd.wait_after_refusal(held, 0, False, 5_000_000, 200_000, 9_000_000) == 4_800_000
    # At most the cap: a wait node that stops answering must not hold us for the BLOCK.
    assert qd.wait_after_refusal(held, 0, False, 5_000_000, 200_000, 333_000) == 333_000
    assert qd.wait_after_refusal(held, 2, False, 5_000_000, 200_000, 9_000_000) is None  # wait node silent
    assert qd.wait_after_refusal([DOWN, BUSY, BUSY], 0, False, 5_000_000, 200_000, 9_000_000) is None
    assert qd.wait_after_refusal(held, 0, True, 5_000_000, 200_000, 9_000_000) is None  # owner retired (Q4)
    assert qd.wait_after_refusal([7, BUSY, BUSY], 0, False, 5_000_000, 200_000, 9_000_000) is None
    assert qd.wait_after_refusal(held, 0, False, None, 200_000, 9_000_000) is None
    assert qd.wait_after_refusal(held, 0, False, 200_000, 200_000, 9_000_000) is None


def test_refused_round_waits_on_the_wait_node_then_runs_a_fresh_round() -> None:
    q = _quorum.Quorum(3, Config.from_ttl(TTL), wait_node=1)
    gen = q.acquire("k", "o#1", 1000, 10**18, 5_000_000)
    op = next(gen)
    assert isinstance(op, _quorum.Round)
    op = gen.send([None, None, None])  # refused everywhere
    assert isinstance(op, _quorum.Wait) and op.node == 1
    assert op.args[:4] == ("LEASE.ACQUIRE", "k", "o#1", 1000) and op.args[4] == "BLOCK"
    op = gen.send(3)  # the wait node granted: a fresh round
    assert isinstance(op, _quorum.Round)
    before = _quorum._clock.now_us()
    op = gen.send([4, 3, 4])
    assert isinstance(op, _quorum.Round) and op.cmds[0] == ("LEASE.RAISE", "k", "o#1", 4, 4)
    with pytest.raises(StopIteration) as stop:
        gen.send([1, 1, 1])
    assert stop.value.value == 4
    start = q.take_round_start()
    assert start is not None and start <= before  # taken before the fresh round's sends
    assert q.take_round_start() is None
    # A resign during the wait: the loop is told, to look for a stray grant.
    gen = q.acquire("k", "o#2", 1000, 10**18, 5_000_000)
    next(gen)
    assert isinstance(gen.send([None, None, None]), _quorum.Wait)
    with pytest.raises(StopIteration) as stop:
        gen.send(_quorum.ABANDONED)
    assert stop.value.value is _quorum.ABANDONED
    # No BLOCK budget (an unconfirmed grant's re-ask): no wait.
    tok, rounds = drive(q.acquire("k", "o#2", 1000, 10**18, None), [[None, None, None]])
    assert tok is None and len(rounds) == 1


def test_release_sends_the_wait_node_last() -> None:
    q = _quorum.Quorum(3, Config.from_ttl(TTL), wait_node=0)
    drive(q.acquire("k", "o#1", 1000, 10**18), [[7, 7, 7], [1, 1, 1]])
    _, rounds = drive(q.release("k", "o#1", 7), [[1, 1, 1]])
    assert rounds[0].send_order() == (1, 2, 0)


def acquire_calls(s: RedisServer) -> int:
    """``LEASE.ACQUIRE`` calls a node has served (``INFO commandstats``)."""
    stats = s.client().info("commandstats")
    return int(stats.get("cmdstat_lease.acquire", {}).get("calls", 0))


def run_async_elector(el: alease.Elector, rec: Recorder) -> threading.Thread:
    """The asyncio elector on a loop of its own thread; ``rec`` records its reigns."""

    async def task(lease: alease.Lease) -> None:
        rec.leading.set()
        while await lease.sleep(0.01):
            pass
        rec.leading.clear()

    def body() -> None:
        async def main() -> None:
            await el.run(task)
            await el.close()

        asyncio.run(main())

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_refused_follower_waits_on_one_node_and_takes_over_on_release(
    flavour: str, nodes: List[RedisServer], electors: List[Tuple[Elector, threading.Thread]]
) -> None:
    # Q10. Would catch: a follower polling every node (about 15 rounds in 1.5 s at the 50..100 ms
    # pause of a not-granted round, so about 15 ACQUIREs on every node), a wait that never
    # wakes (it would time out only after the renew interval), or a wake that does not lead.
    for s in nodes:
        s.client().execute_command("LEASE.ACQUIRE", "k", "holder", 20_000)
    before = [acquire_calls(s) for s in nodes]
    urls = [s.url for s in nodes]
    rec = Recorder()
    a_el: Optional[alease.Elector] = None
    if flavour == "sync":
        el = Elector(urls, "k", 3.0, owner="q-a")
        electors.append((el, start(el, rec)))
    else:
        a_el = alease.Elector(urls, "k", 3.0, owner="q-a")
        t = run_async_elector(a_el, rec)
    try:
        time.sleep(1.5)
        assert not rec.leading.is_set(), "led while another held every node"
        for i, s in enumerate(nodes):
            calls = acquire_calls(s) - before[i]
            # One round, then the wait (one more call on the wait node only).
            # TTL 3 s: the wait is capped at the renew interval (1 s): a round and the wait, once
            # more after the cap (4 on the wait node), plus the odd round that ended on two
            # refusals before the wait node answered and so polls once: at most 7; polling:
            # about 15.
            assert calls <= 7, f"node {i}: {calls} ACQUIREs in 1.5 s: the follower polls"
            assert calls >= 1, f"node {i}: never asked"
        # The holder lets go, the wait node last (as a resigning leader does): the waiting
        # follower leads at once, long before its wait or the holder's 20 s lease would end.
        order = sorted(range(len(nodes)), key=lambda i: urls[i])
        order = order[1:] + order[:1]
        for i in order:
            held = leases([nodes[i]])[0]
            assert held is not None and held[0] == "holder"
            assert nodes[i].client().execute_command("LEASE.RELEASE", "k", "holder", held[1]) == 1
        released = time.monotonic()
        assert rec.leading.wait(2), "no take-over within 2 s of the release"
        took = time.monotonic() - released
        got = leases(nodes)
        assert all(g is not None and g[0].startswith("q-a#") for g in got), got
        assert len({g[1] for g in got if g is not None}) == 1, got
        assert took < 2
    finally:
        if a_el is not None:
            a_el.resign()
            t.join(10)


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_resign_during_the_wait_withdraws_it(
    flavour: str, nodes: List[RedisServer], electors: List[Tuple[Elector, threading.Thread]]
) -> None:
    # Q10: a resign during the wait ends it at once: run() returns promptly and the wait's own
    # connection is gone (no client left blocked on the wait node).
    for s in nodes:
        s.client().execute_command("LEASE.ACQUIRE", "k", "holder", 20_000)

    def blocked() -> int:
        return sum(int(s.client().info("clients").get("blocked_clients", 0)) for s in nodes)

    urls = [s.url for s in nodes]
    rec = Recorder()
    if flavour == "sync":
        el = Elector(urls, "k", 0.6)
        t = start(el, rec)
        resign: Callable[[], None] = el.resign
    else:
        a_el = alease.Elector(urls, "k", 0.6)
        t = run_async_elector(a_el, rec)
        resign = a_el.resign
    wait_until(lambda: blocked() == 1, 5, "a follower blocked on one node")
    t0 = time.monotonic()
    resign()
    t.join(5)
    assert not t.is_alive() and time.monotonic() - t0 < 1.0, "the wait held the resign up"
    wait_until(lambda: blocked() == 0, 2, "no client blocked after the resign")


class FakeConn:
    """A node connection whose replies come from a socketpair (so select() sees them); it
    records which thread sent what, in which order."""

    def __init__(self, i: int, log: List[Tuple[int, str, str]]) -> None:
        self.i, self.log = i, log
        self._sock, self._peer = socket.socketpair()
        self.disconnected = False

    def send_command(self, *args: Any) -> None:
        self.log.append((self.i, str(args[0]), threading.current_thread().name))
        self._peer.send(b"x")  # the "reply"

    def can_read(self, timeout: float = 0) -> bool:
        r, _, _ = select.select([self._sock], [], [], timeout)
        return bool(r)

    def read_response(self) -> Any:
        self._sock.recv(1)
        return 1

    def disconnect(self) -> None:
        self.disconnected = True


def fake_elector(log: List[Tuple[int, str, str]]) -> Tuple[Elector, List[FakeConn]]:
    el = Elector(["redis://127.0.0.1:7201/0", "redis://127.0.0.1:7202/0", "redis://127.0.0.1:7203/0"], "k", TTL)
    conns = [FakeConn(i, log) for i in range(3)]
    for node, c in zip(el._qnodes, conns):
        node.conn = c
    return el, conns


def test_sync_round_sends_from_the_calling_thread_in_the_send_order() -> None:
    # Would catch: a thread per node (as before): the sends then left from three other threads
    # in whatever order they got the GIL, spread over milliseconds under load, and the wait
    # node's RELEASE (Q10: last) was not reliably last.
    log: List[Tuple[int, str, str]] = []
    el, _ = fake_elector(log)
    for _ in range(20):
        log.clear()
        op = _quorum.Round(tuple(("LEASE.RELEASE", "k", "o", 1) for _ in range(3)),
                           _core.now_us() + 1_000_000, lambda r: False, (1, 2, 0))
        got = el._round(op)
        assert got == [1, 1, 1]
        assert [i for i, _, _ in log] == [1, 2, 0]
        assert {t for _, _, t in log} == {threading.current_thread().name}


def test_an_answered_wait_keeps_its_connection_until_the_fresh_round_is_done() -> None:
    # Would catch: closing the wait's connection before the fresh round (as before: its close
    # competed with that round for the CPU, on the hand-over's critical path), or never.
    log: List[Tuple[int, str, str]] = []
    el, conns = fake_elector(log)
    waited = FakeConn(0, log)
    el._open_node = lambda node, read_timeout, until_us: waited  # type: ignore[method-assign]
    run = el_run(el)
    got = run.execute(_quorum.Wait(0, ("LEASE.ACQUIRE", "k", "o", 1000, "BLOCK", 100), _core.now_us() + 1_000_000))
    assert got == 1 and not waited.disconnected
    run.execute(_quorum.Round(tuple(("LEASE.ACQUIRE", "k", "o", 1000) for _ in range(3)),
                              _core.now_us() + 1_000_000, lambda r: False))
    assert not waited.disconnected, "closed before the fresh round was done"
    run.execute(_core.Sleep(_core.now_us()))
    assert waited.disconnected
    # Abandoned (resign): closed at once, which withdraws the wait from the server.
    silent = FakeConn(0, log)
    silent.send_command = lambda *a: None
    el._open_node = lambda node, read_timeout, until_us: silent
    run.quit.set()
    got = run.execute(_quorum.Wait(0, ("LEASE.ACQUIRE", "k", "o", 1000, "BLOCK", 100), _core.now_us() + 1_000_000))
    assert got is _quorum.ABANDONED and silent.disconnected


def el_run(el: Elector) -> Any:
    from redis_lease.sync import _Run

    return _Run(el, lambda lease: None)
