"""Peer elector: python-redis-lock 4.0.1 (``redis_lock.Lock`` with ``auto_renewal=True``) on
redis-py 8.1.0, as its README shows a lock (peers/python-redis-lock/README.md says exactly what
it does).

    elector.py --id ID --redis URL --resource HOST:PORT --out PATH --ttl-ms N --key KEY

One reign: ``with redis_lock.Lock(conn, key, expire=TTL s, auto_renewal=True):`` -> leader until
the body ends. The library renews from its own thread every ``expire*2/3`` and tells the holder
nothing when a renewal fails (the thread ends with the exception), so the body has no check to
make: the work loop acts until SIGTERM.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import sys
import threading
import time
from types import FrameType
from typing import Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))

import redis  # noqa: E402
import redis_lock  # type: ignore[import-untyped]  # noqa: E402  (the package ships no types)

import peerio  # noqa: E402

log = logging.getLogger("peer.python-redis-lock")


def campaign(a: peerio.PeerArgs, rec: peerio.Recorder, stop: threading.Event, leading: threading.Event) -> None:
    conn = redis.Redis.from_url(a.redis)
    # `expire` is whole seconds in this library (it calls int() on it).
    expire = max(1, a.ttl_ms // 1000)
    res = peerio.Resource(a.resource)
    while not stop.is_set():
        try:
            with redis_lock.Lock(conn, a.key, expire=expire, auto_renewal=True):
                leading.set()
                token = peerio.synthetic_token()
                rec.write("grant", token=token, deadline=0)
                why = peerio.work_loop(rec, res, a.id, token, lambda: True, lambda: 0, stop)
                rec.write("stop", token=token, why=why)
        except Exception as e:  # the with-exit's release (NotAcquired) or a Redis error
            log.warning("lock: %r", e)
            stop.wait(0.1)
        finally:
            leading.clear()


def main() -> int:
    a = peerio.parse_args("python-redis-lock/elector.py")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    rec = peerio.Recorder(a.out)
    owner = f"{a.id}-{os.getpid()}-{random.getrandbits(32):08x}"
    rec.write("start", elector=a.id, pid=os.getpid(), owner=owner, mode=a.mode)
    stop = threading.Event()
    leading = threading.Event()
    term = threading.Event()

    def on_term(signum: int, frame: Optional[FrameType]) -> None:
        term.set()

    signal.signal(signal.SIGTERM, on_term)
    t = threading.Thread(target=campaign, args=(a, rec, stop, leading), daemon=True)
    t.start()
    while not term.wait(0.5) and t.is_alive():
        pass
    why = "campaign thread ended"
    if term.is_set():
        rec.write("resign")
        stop.set()
        # A reign ends within one work-loop period and releases; an acquire() blocked in
        # BLPOP on a held lock does not return on its own, so wait only for a reign.
        deadline = time.monotonic() + 3.0
        while leading.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        why = "resigned"
    rec.write("exit", why=why)
    return 0


if __name__ == "__main__":
    sys.exit(main())
