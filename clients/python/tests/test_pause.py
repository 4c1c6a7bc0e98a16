"""A leader PROCESS paused (SIGSTOP) past its TTL: after SIGCONT its stop signal fires at once,
is_leader() is false, and it does not act again; meanwhile another elector took over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

from redis_lease import Elector, LeaderContext

from .conftest import RedisServer

HERE = Path(__file__).resolve().parent


def read(path: Path) -> List[Dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a torn last line
    return out


def test_sigstopped_leader_stops_and_never_acts_after_sigcont(server: RedisServer, tmp_path: Path) -> None:
    out = tmp_path / "leader.jsonl"
    env = dict(os.environ, PYTHONPATH=str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    log = tmp_path / "leader.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "pause_helper.py"), server.url, "paused", str(out)], env=env, stderr=err
        )
    follower_started = threading.Event()
    follower_token: List[int] = []
    b = Elector(server.url, "paused", 1.0, owner="follower")
    tb = None
    try:
        end = time.monotonic() + 10
        while not (out.exists() and any(e["ev"] == "grant" for e in read(out))):
            assert time.monotonic() < end, "helper never became leader"
            assert proc.poll() is None, "helper died"
            time.sleep(0.01)

        def follow(lease: LeaderContext) -> None:
            follower_token.append(lease.token)
            follower_started.set()
            lease.stop_event.wait()

        tb = threading.Thread(target=b.run, args=(follow,), daemon=True)
        tb.start()
        time.sleep(0.3)
        assert not follower_started.is_set()
        os.kill(proc.pid, signal.SIGSTOP)
        t_stopped = time.monotonic_ns()
        # Paused for 2.5 TTLs: the server expires the lease, the follower takes over.
        assert follower_started.wait(5), "follower did not take over during the pause"
        time.sleep(max(0.0, 2.5 - (time.monotonic_ns() - t_stopped) / 1e9))
        t_cont = time.monotonic_ns()
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.7)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        b.resign()
        if tb is not None:
            tb.join(5)

    events = read(out)
    grant = next(e for e in events if e["ev"] == "grant")
    acts = [e for e in events if e["ev"] == "act"]
    assert acts, "the leader acted before the pause"
    # No action decided by a clock read after the pause.
    late = [e for e in acts if e["t0"] >= t_cont]
    assert not late, f"acted after SIGCONT: {late[:3]}"
    # The stop signal fired promptly after the resume (frozen processes fire nothing), and the
    # reign ended by the check or the signal, recorded after SIGCONT.
    sig = [e for e in events if e["ev"] == "stop_signal" and e["token"] == grant["token"]]
    assert len(sig) == 1
    assert sig[0]["t"] >= t_cont and (sig[0]["t"] - t_cont) / 1e6 < 500, sig
    # Every action was decided before the local deadline of that moment; the deadline had
    # passed during the pause.
    assert all(0 < e["deadline"] and e["t0"] < e["deadline"] for e in acts)
    assert acts[-1]["deadline"] < t_cont
    assert any(e["ev"] == "stopped" and e["t"] >= t_cont for e in events)
    assert follower_token and follower_token[0] > grant["token"]
    # The task honoured its signal as soon as it could run again: no false overrun (issue 25
    # item 7). Its stop budget counts from the signal, not from a deadline that passed while
    # the whole process was stopped.
    text = log.read_text()
    assert "lost leadership" in text, text
    assert "ignores its stop signal" not in text, text
    print(f"\npaused leader: last action t0 {(t_cont - acts[-1]['t0']) / 1e6:.0f} ms before SIGCONT, "
          f"stop signal {(sig[0]['t'] - t_cont) / 1e6:.1f} ms after it")
