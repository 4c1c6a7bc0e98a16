"""A leader process for test_pause.py: records grants, actions and its stop signal.

    python tests/pause_helper.py URL KEY OUT [STEP_S]

Each action is decided by lease.is_leader() and recorded with t0, the monotonic time taken
BEFORE the check: an action whose t0 is after a SIGCONT was decided by a clock read after the
pause. Each step ends with STEP_S seconds of work that does not watch the stop signal (default
0.05 s, well inside the stop budget of 0.2 s): a task that honours its signal within its
budget, but not at the very instant it fires.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from typing import Any

from redis_lease import Elector, LeaderContext


def main() -> None:
    url, key, out = sys.argv[1:4]
    step_s = float(sys.argv[4]) if len(sys.argv) > 4 else 0.05
    f = open(out, "a", encoding="utf-8")
    lock = threading.Lock()

    def rec(ev: str, **kw: Any) -> None:
        with lock:
            f.write(json.dumps({"ev": ev, "t": time.monotonic_ns(), **kw}) + "\n")
            f.flush()

    el = Elector(url, key, 1.0)

    def task(lease: LeaderContext) -> None:
        rec("grant", token=lease.token, deadline=int((lease.deadline or 0) * 1e9))

        def on_stop() -> None:
            lease.stop_event.wait()
            rec("stop_signal", token=lease.token)

        threading.Thread(target=on_stop, daemon=True).start()
        while True:
            t0 = time.monotonic_ns()
            if not lease.is_leader():
                rec("refused", t0=t0, token=lease.token)
                break
            rec("act", t0=t0, token=lease.token, deadline=int((lease.deadline or 0) * 1e9))
            time.sleep(step_s)
        rec("stopped", token=lease.token)

    signal.signal(signal.SIGTERM, lambda *_: el.resign())
    el.run(task)
    rec("exit")


if __name__ == "__main__":
    main()
