"""Conformance elector for the fault harness (docs/conformance.md), on the sync API. Not part
of the shipped package (it drives a private hook for its negative control); conformance.sh
runs it with the venv's installed redis_lease:

    python tests/conformance_elector.py --id e3.1 --redis redis://127.0.0.1:PORT/ \\
        --resource 127.0.0.1:PORT --out history.jsonl --ttl-ms 1000 --key chaos:leader \\
        --mode safe|ignore-deadline|reuse-owner [--api run|oneshot|oneshot-twice]

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
from typing import Any, Dict, List, Optional

from redis_lease import _core
from redis_lease.decide import Config
from redis_lease.sync import Elector, LeaderContext

PREP_S = 0.015  # check -> write window (where a pause turns a write stale)
PERIOD_S = 0.025
LINGER_TTLS = 3
HARD_STOP_S = 600.0


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
    elector = Elector(a.redis if len(a.redis) > 1 else a.redis[0], a.key, config=cfg, owner=owner, membership_id=mid)
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
