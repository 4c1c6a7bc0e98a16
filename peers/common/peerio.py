"""The harness side of a Python peer elector (docs/conformance.md): arguments, the JSON-lines
history, the fencing resource's line protocol, the synthetic reign token and the work loop.

Nothing here is the library under test: each peer (peers/redis-py-lock, peers/python-redis-lock)
imports this and campaigns with its library the way that library's docs show.

Synthetic token (peers/README.md, "Tokens"): these libraries hand out no fencing token, so
each reign records ``CLOCK_MONOTONIC`` in microseconds at the instant the library told us we
hold the lock. Every elector process on the machine reads the same clock, so a reign that
began later carries a higher token, whichever process holds it: the checker's token rules
(``acted_after_newer_grant``, ``stale_accepted``, ``token_regression``) then read "a newer
leader exists" exactly as a user would suffer it. The resource runs unfenced (``--no-fence``)
for these peers, because the user's resource has no token to compare.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

PREP_S = 0.015  # check -> write window (where a pause turns a write stale)
PERIOD_S = 0.025


@dataclass(frozen=True)
class PeerArgs:
    id: str
    redis: str
    resource: str
    out: str
    ttl_ms: int
    key: str
    mode: str


def parse_args(prog: str, argv: Optional[List[str]] = None) -> PeerArgs:
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--id", required=True)
    p.add_argument("--redis", required=True, action="append")
    p.add_argument("--resource", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--ttl-ms", type=int, default=2000)
    p.add_argument("--key", default="chaos:leader")
    p.add_argument("--mode", default="safe")
    a = p.parse_args(argv)
    # Only the safe work loop: the negative controls exercise this project's library, and a
    # peer's lock cannot be switched into them without code its docs do not show.
    if a.mode != "safe":
        p.error(f"--mode {a.mode}: a peer elector runs only mode safe")
    if len(a.redis) != 1:
        p.error("a peer elector takes one --redis (no quorum topology)")
    return PeerArgs(a.id, a.redis[0], a.resource, a.out, a.ttl_ms, a.key, a.mode)


def now_ns() -> int:
    return time.monotonic_ns()


def synthetic_token() -> int:
    """CLOCK_MONOTONIC in microseconds: rising across every process of the machine, < 2^53."""
    return time.monotonic_ns() // 1000


class Recorder:
    """The history: one JSON object per line, appended and flushed line by line."""

    def __init__(self, path: str) -> None:
        self._f = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, ev: str, **fields: Any) -> None:
        line = json.dumps({"ev": ev, "t": now_ns(), **fields}, separators=(",", ":"))
        with self._lock:
            try:
                self._f.write(line + "\n")
                self._f.flush()
            except OSError as e:
                print(f"peer: cannot record {line}: {e}", file=sys.stderr)


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
            self.close()
            return False

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        self._sock = None


def work_loop(
    rec: Recorder,
    res: Resource,
    writer: str,
    token: int,
    still_leader: Callable[[], bool],
    deadline_ns: Callable[[], int],
    stop: threading.Event,
) -> str:
    """Steps 1-4 of docs/conformance.md while ``still_leader()`` (the peer's check: whatever its
    library offers, nothing more); returns the ``why`` of the ``stop`` line."""
    seq = 0
    while True:
        if stop.is_set():
            return "cancelled"
        if not still_leader():
            return "not leader at check"
        seq += 1
        rec.write("check", token=token, seq=seq, deadline=deadline_ns())
        time.sleep(PREP_S)
        ok = res.write(token, writer, seq)
        rec.write("ack", token=token, seq=seq, ok=ok)
        if stop.wait(PERIOD_S):
            return "cancelled"
