"""The README example is a complete program: run it against a real server, see it lead and
write through the fence, then Ctrl-C (SIGINT) makes it resign: the lease is released at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .conftest import RedisServer
from .readme_example import example_source

CLIENT_DIR = Path(__file__).resolve().parent.parent


def test_readme_example_leads_fences_and_releases_on_ctrl_c(server: RedisServer, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(example_source(), encoding="utf-8")
    env = dict(os.environ, REDIS_URL=server.url, PYTHONPATH=str(CLIENT_DIR))
    log = tmp_path / "example.log"
    c = server.client()
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, str(script)], env=env, stderr=err)
    try:
        end = time.monotonic() + 10
        while c.hget("report:state", "step") is None:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < end, "the example never wrote through the fence"
            time.sleep(0.02)
        info = c.execute_command("LEASE.GET", "report:leader")
        assert info is not None
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    # Released by the resign (a 10 s TTL would still run otherwise).
    assert c.execute_command("LEASE.GET", "report:leader") is None
    assert "released lease" in log.read_text()
