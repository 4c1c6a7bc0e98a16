"""Conformance elector for the fault harness (docs/conformance.md), on the sync API. Not part
of the shipped package (it drives a private hook for its negative control); conformance.sh
runs it with the venv's installed redis_lease:

    python tests/conformance_elector.py --id e3.1 --redis redis://127.0.0.1:PORT/ \\
        --resource 127.0.0.1:PORT --out history.jsonl --ttl-ms 1000 --key chaos:leader \\
        --mode safe|ignore-deadline|reuse-owner [--api run|oneshot|oneshot-twice]

``--redis`` is a URL redis-py takes (``redis://``, ``rediss://``, ``unix://``), given once per
node in quorum mode, or one ``redis+sentinel://[[user]:password@]host:port[,host:port...]/
master-name[/db]`` (the scheme of the Rust client, client/src/sentinel.rs, which the harness's
``--topology sentinel`` hands every elector): the elector then gets
``Sentinel([...]).master_for(name)``, whose pool asks the Sentinels for the primary on every
connect. As in Rust, credentials and db apply to the data nodes, not the Sentinels.

History: JSON lines on CLOCK_MONOTONIC nanoseconds (``time.monotonic_ns()``), appended and
flushed line by line. Library logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import socket
import sys
import threading
import time
from typing import Any, Dict, List, NamedTuple, Optional, Tuple
from urllib.parse import unquote

from redis.sentinel import Sentinel
from redis_lease import _core
from redis_lease.decide import Config
from redis_lease.sync import Elector, LeaderContext

PREP_S = 0.015  # check -> write window (where a pause turns a write stale)
PERIOD_S = 0.025
LINGER_TTLS = 3
HARD_STOP_S = 600.0


SENTINEL_SCHEME = "redis+sentinel://"


class SentinelURL(NamedTuple):
    sentinels: List[Tuple[str, int]]
    master: str
    username: Optional[str]
    password: Optional[str]
    db: Optional[int]


def parse_sentinel_url(url: str) -> Optional[SentinelURL]:
    """``redis+sentinel://[[user]:password@]host:port[,host:port...]/master-name[/db]`` (the Rust
    client's grammar, client/src/sentinel.rs); None for a URL of any other scheme, which goes to
    the library unchanged. Raises ValueError (a message without the password) when malformed."""
    if not url.startswith(SENTINEL_SCHEME):
        return None
    rest = url[len(SENTINEL_SCHEME) :]
    authority, slash, path = rest.partition("/")
    if not slash:
        raise ValueError(f"sentinel url needs /master-name after the hosts ({SENTINEL_SCHEME}h:p,h:p/name)")
    userinfo, at, hosts = authority.rpartition("@")
    username: Optional[str] = None
    password: Optional[str] = None
    if at:
        # As redis:// URLs: "user:password", ":password" or "user"; percent-encoded.
        user, colon, pw = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(pw) if colon else None
    sentinels: List[Tuple[str, int]] = []
    for h in hosts.split(","):
        if not h:
            continue
        host, colon, port = h.rpartition(":")
        if not colon:
            raise ValueError(f"sentinel address {h!r} needs host:port")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"sentinel address {h!r}: bad port")
        host = host.removeprefix("[").removesuffix("]")  # [::1]:26379
        if not host:
            raise ValueError(f"sentinel address {h!r}: empty host")
        sentinels.append((host, int(port)))
    if not sentinels:
        raise ValueError("sentinel url names no sentinel")
    master, _, db_s = path.rstrip("/").partition("/")
    if not master:
        raise ValueError("sentinel url needs a master name")
    db: Optional[int] = None
    if db_s:
        if not db_s.isdigit():
            raise ValueError(f"bad db {db_s!r}")
        db = int(db_s)
    return SentinelURL(sentinels, master, username, password, db)


def sentinel_client(s: SentinelURL, lookup_timeout: float) -> Any:
    """The client the Python client documents for Sentinel: ``master_for``'s ``redis.Redis``.
    The elector makes its own data-node connections from that pool's settings (its own
    timeouts), but the Sentinel lookups inside them run with the Sentinel connections' timeouts,
    unbounded by default: bounded here so that a Sentinel that stops answering cannot hold the
    election loop for longer than one lookup."""
    data: Dict[str, Any] = {}
    if s.username is not None:
        data["username"] = s.username
    if s.password is not None:
        data["password"] = s.password
    if s.db is not None:
        data["db"] = s.db
    # redis-py's Sentinel API carries no annotations (mypy --strict: no-untyped-call).
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        s.sentinels,
        sentinel_kwargs={"socket_timeout": lookup_timeout, "socket_connect_timeout": lookup_timeout},
        **data,
    )
    return sentinel.master_for(s.master)  # type: ignore[no-untyped-call]


class Recorder:
    def __init__(self, path: str) -> None:
        self._f = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, ev: str, **fields: Any) -> None:
        line = json.dumps({"ev": ev, **fields}, separators=(",", ":"))
        with self._lock:
            try:
                self._f.write(line + "\n")
                self._f.flush()
            except OSError as e:
                print(f"elector: cannot record {line}: {e}", file=sys.stderr)


class Resource:
    """Client of the fencing resource: ``W <token> <writer> <seq>`` -> ``OK`` | ``FENCED n``."""

    def __init__(self, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        self._addr = (host or "127.0.0.1", int(port))
        self._sock: Optional[socket.socket] = None
        self._buf = b""

    def write(self, token: int, writer: str, seq: int) -> bool:
        try:
            if self._sock is None:
                self._sock = socket.create_connection(self._addr, timeout=2.0)
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._buf = b""
            self._sock.sendall(f"W {token} {writer} {seq}\n".encode())
            while b"\n" not in self._buf:
                chunk = self._sock.recv(4096)
                if not chunk:
                    raise ConnectionError("resource closed the connection")
                self._buf += chunk
            line, _, self._buf = self._buf.partition(b"\n")
            return line.strip() == b"OK"
        except OSError:
            # Broken: not ok, and reconnect on the next write.
            if self._sock is not None:
                try:
                    self._sock.close()
                except OSError:
                    pass
            self._sock = None
            return False


def deadline_ns(lease: LeaderContext) -> int:
    # The library's deadline is on time.monotonic() (CLOCK_MONOTONIC): same base as t.
    d = lease.deadline
    return 0 if d is None else int(d * 1e9)


class Work:
    def __init__(self, elector_id: str, resource: str, rec: Recorder, ttl_s: float, unsafe: bool) -> None:
        self.id = elector_id
        self.resource = resource
        self.rec = rec
        self.ttl_s = ttl_s
        self.unsafe = unsafe

    def reign(self, lease: LeaderContext, call: Optional[int] = None) -> None:
        token = lease.token
        # `call`: the one-shot call this reign runs in (the checker allows one reign per call);
        # run()-style reigns record none.
        extra: Dict[str, Any] = {} if call is None else {"call": call}
        # The reign's deadline even when the task starts after it passed (a pause between the
        # client's decision and this record): the checker needs when its right to act ended.
        reign_deadline = int(_core.monotonic_s(lease._term.deadline_us) * 1e9)
        self.rec.write("grant", t=time.monotonic_ns(), token=token, deadline=reign_deadline, **extra)
        if self.unsafe:
            # The bug under test: work detached from the lease's lifetime.
            threading.Thread(target=self.unsafe_loop, args=(lease,), daemon=True).start()
            lease.stop_event.wait()
            return
        res = Resource(self.resource)
        seq = 0
        while True:
            # The check: decided here, on the monotonic clock, right before acting.
            if not lease.is_leader():
                why = "not leader at check"
                break
            seq += 1
            self.rec.write("check", t=time.monotonic_ns(), token=token, seq=seq, deadline=deadline_ns(lease))
            time.sleep(PREP_S)
            ok = res.write(token, self.id, seq)
            self.rec.write("ack", t=time.monotonic_ns(), token=token, seq=seq, ok=ok)
            if lease.stop_event.wait(PERIOD_S):
                why = "cancelled"
                break
        self.rec.write("stop", t=time.monotonic_ns(), token=token, why=why)

    def unsafe_loop(self, lease: LeaderContext) -> None:
        token = lease.token
        res = Resource(self.resource)
        seq = 0
        stop_after: Optional[float] = None
        hard_stop = time.monotonic() + HARD_STOP_S
        while time.monotonic() < hard_stop:
            if lease.stop_event.is_set() and stop_after is None:
                stop_after = time.monotonic() + self.ttl_s * LINGER_TTLS
            if stop_after is not None and time.monotonic() >= stop_after:
                break
            seq += 1
            self.rec.write("check", t=time.monotonic_ns(), token=token, seq=seq, deadline=deadline_ns(lease))
            time.sleep(PREP_S)
            ok = res.write(token, self.id, seq)
            self.rec.write("ack", t=time.monotonic_ns(), token=token, seq=seq, ok=ok)
            time.sleep(PERIOD_S)
        self.rec.write("stop", t=time.monotonic_ns(), token=token, why="unsafe linger over")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="conformance_elector.py")
    p.add_argument("--id", required=True)
    # Once per node: several = quorum mode (docs/conformance.md, "Quorum topologies").
    p.add_argument("--redis", required=True, action="append")
    p.add_argument("--resource", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--ttl-ms", type=int, default=1000)
    p.add_argument("--key", default="chaos:leader")
    # reuse-owner: the negative control of R17 (docs/client-protocol.md), the safe work loop on
    # an elector that keeps one owner across reigns; a late RELEASE can then end a new reign.
    p.add_argument("--mode", choices=["safe", "ignore-deadline", "reuse-owner"], default="safe")
    # oneshot: the same work loop inside `with elector.leadership()`, called again after each
    # reign (one reign per call), instead of run(); each grant records its call's number.
    # oneshot-twice: the negative control of the checker's reigns_per_call: run(), which
    # campaigns again after a lost term, with every reign recorded as call 1 (a one-shot API
    # that runs its body again after a lost term, as Node's withLeadership did).
    p.add_argument("--api", choices=["run", "oneshot", "oneshot-twice"], default="run")
    a = p.parse_args(argv)
    redis_arg: Any = a.redis if len(a.redis) > 1 else a.redis[0]
    try:
        sentinel_urls = [s for s in map(parse_sentinel_url, a.redis) if s is not None]
    except ValueError as e:
        print(f"conformance_elector.py: --redis: {e}", file=sys.stderr)
        return 2
    if sentinel_urls:
        if len(a.redis) > 1:
            # Quorum mode takes independent primaries (a failover could hand a node's grants to
            # a replica that never had them); the Go client refuses a failover client there too.
            print("conformance_elector.py: --redis: a redis+sentinel:// URL must be the only --redis", file=sys.stderr)
            return 2

    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO").upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    rec = Recorder(a.out)
    # The owner starts with our id, so the orchestrator can map LEASE.GET's owner to us.
    owner = f"{a.id}-{os.getpid()}-{random.getrandbits(32):08x}"
    rec.write("start", t=time.monotonic_ns(), elector=a.id, pid=os.getpid(), owner=owner, mode=a.mode)
    cfg = Config(a.ttl_ms / 1000)
    # Reconnect backoff capped at one TTL (library default 5 s): the harness measures
    # "Redis back -> next grant", which the cap bounds.
    cfg = cfg.replace(backoff_max=max(a.ttl_ms / 1000, cfg.backoff_min))
    # Quorum campaigns (as the built-in elector): every elector uses this one TTL, so the
    # longest lease a restarted or wiped node can have lost is one TTL; that is the quarantine
    # of a node whose identity changed (protocol Q7, docs/quorum.md §4.1).
    cfg = cfg.replace(node_quarantine=a.ttl_ms / 1000)
    # Quorum campaigns: the id of the real node list (our URLs name our own proxies;
    # docs/conformance.md).
    mid = os.environ.get("LEASE_HARNESS_MEMBERSHIP_ID") or None
    if sentinel_urls:
        # A Sentinel lookup gets what one command gets: the op timeout (TTL/5, >= 50 ms).
        redis_arg = sentinel_client(sentinel_urls[0], cfg.op_timeout)
    elector = Elector(redis_arg, a.key, config=cfg, owner=owner, membership_id=mid)
    if a.mode == "reuse-owner":
        elector._core._reuse_owner = True  # private hook: the behaviour R17 forbids
    work = Work(a.id, a.resource, rec, a.ttl_ms / 1000.0, a.mode == "ignore-deadline")

    def on_term(signum: int, frame: Any) -> None:
        rec.write("resign", t=time.monotonic_ns())
        elector.resign()

    signal.signal(signal.SIGTERM, on_term)
    why: str
    try:
        if a.api == "run":
            elector.run(work.reign)
        elif a.api == "oneshot-twice":
            elector.run(lambda lease: work.reign(lease, call=1))
        else:
            call = 0
            while True:
                call += 1
                try:
                    with elector.leadership() as lease:
                        work.reign(lease, call=call)
                except RuntimeError:  # resigned before the next grant
                    break
        why = "resigned"
    except Exception as e:  # the task failed; run() released the lease first
        why = f"error: {e!r}"
    rec.write("exit", t=time.monotonic_ns(), why=why)
    elector.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
