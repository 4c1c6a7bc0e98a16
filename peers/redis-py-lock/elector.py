"""Peer elector: redis-py's ``Lock`` (PyPI ``redis`` 8.1.0) with a renew thread, as users
write leader election with it (peers/redis-py-lock/README.md says exactly what it does).

    elector.py --id ID --redis URL --resource HOST:PORT --out PATH --ttl-ms N --key KEY

One reign: ``lock.acquire()`` (blocking, the library's 0.1 s poll) -> leader; a thread calls
``lock.reacquire()`` every TTL/3 (resets the key's TTL to ``timeout``); the first renewal that
fails (``LockNotOwnedError``, or any Redis error) ends the reign. The work loop's check is that
flag and nothing else: redis-py keeps no local deadline, so a renewal waiting on a cut
connection (the client's default socket timeout is 5 s, then it retries) leaves the holder
acting meanwhile.
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
from redis.exceptions import LockError, RedisError  # noqa: E402

import peerio  # noqa: E402

log = logging.getLogger("peer.redis-py-lock")


def renew(lock: "redis.lock.Lock", every_s: float, lost: threading.Event, done: threading.Event) -> None:
    while not done.wait(every_s):
        try:
            lock.reacquire()
        except (LockError, RedisError) as e:
            log.warning("renewal failed, leadership lost: %r", e)
            lost.set()
            return


def campaign(a: peerio.PeerArgs, rec: peerio.Recorder, stop: threading.Event, leading: threading.Event) -> None:
    client = redis.Redis.from_url(a.redis)
    ttl_s = a.ttl_ms / 1000.0
    res = peerio.Resource(a.resource)
    try:
        while not stop.is_set():
            # thread_local=False: the renew thread must see the token acquire() stored (the
            # Lock docstring's own case for turning thread-local storage off).
            lock = client.lock(a.key, timeout=ttl_s, thread_local=False)
            try:
                if not lock.acquire():
                    continue
            except RedisError as e:
                log.warning("acquire failed: %r", e)
                stop.wait(0.1)
                continue
            token = peerio.synthetic_token()
            leading.set()
            rec.write("grant", token=token, deadline=0)
            lost = threading.Event()
            done = threading.Event()
            renewer = threading.Thread(target=renew, args=(lock, ttl_s / 3, lost, done), daemon=True)
            renewer.start()
            why = peerio.work_loop(rec, res, a.id, token, lambda: not lost.is_set(), lambda: 0, stop)
            rec.write("stop", token=token, why=why)
            done.set()
            if not lost.is_set():
                # The `with lock:` exit: release the lock we still believe we hold.
                try:
                    lock.release()
                except (LockError, RedisError) as e:
                    log.warning("release failed: %r", e)
            leading.clear()
    finally:
        leading.clear()


def main() -> int:
    a = peerio.parse_args("redis-py-lock/elector.py")
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
        # A reign ends within one work-loop period and releases; an acquire() blocked on a
        # held lock never returns on its own (blocking_timeout=None), so wait only for a reign.
        deadline = time.monotonic() + 3.0
        while leading.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        why = "resigned"
    rec.write("exit", why=why)
    return 0


if __name__ == "__main__":
    sys.exit(main())
