"""The conformance elector's ``redis+sentinel://`` parser (the harness's ``--topology sentinel``
hands every elector such a URL); no server needed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conformance_elector import SentinelURL, parse_sentinel_url

HERE = Path(__file__).parent


def test_sentinels_and_master_name() -> None:
    assert parse_sentinel_url("redis+sentinel://127.0.0.1:26379,127.0.0.1:26380,localhost:26381/leases") == SentinelURL(
        [("127.0.0.1", 26379), ("127.0.0.1", 26380), ("localhost", 26381)], "leases", None, None, None
    )


def test_password_user_and_db_go_to_the_data_nodes() -> None:
    assert parse_sentinel_url("redis+sentinel://:s%40cret@h:1/m/3") == SentinelURL([("h", 1)], "m", None, "s@cret", 3)
    assert parse_sentinel_url("redis+sentinel://app:pw@h:1,[::1]:2/m/") == SentinelURL(
        [("h", 1), ("::1", 2)], "m", "app", "pw", None
    )


def test_other_schemes_are_not_sentinel_urls() -> None:
    for url in ["redis://127.0.0.1:6379/", "rediss://h:1/0", "unix:///tmp/r.sock", "redis+sentinel:/h:1/m"]:
        assert parse_sentinel_url(url) is None


@pytest.mark.parametrize(
    "url, why",
    [
        ("redis+sentinel://h:1", "needs /master-name"),
        ("redis+sentinel://h:1/", "needs a master name"),
        ("redis+sentinel://h:1,h:2//0", "needs a master name"),
        ("redis+sentinel:///m", "names no sentinel"),
        ("redis+sentinel://,/m", "names no sentinel"),
        ("redis+sentinel://:pw@/m", "names no sentinel"),
        ("redis+sentinel://h/m", "needs host:port"),
        ("redis+sentinel://h:x/m", "bad port"),
        ("redis+sentinel://h:70000/m", "bad port"),
        ("redis+sentinel://:1/m", "empty host"),
        ("redis+sentinel://h:1/m/zero", "bad db"),
    ],
)
def test_malformed(url: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_sentinel_url(url)


def elector(*redis: str) -> "subprocess.CompletedProcess[str]":
    # A subprocess with a time limit: an elector that took the URL would campaign forever.
    args = [sys.executable, str(HERE / "conformance_elector.py"), "--id", "e1", "--resource", "127.0.0.1:1"]
    args += ["--out", os.devnull, *(x for r in redis for x in ("--redis", r))]
    return subprocess.run(args, capture_output=True, text=True, timeout=30)


def test_malformed_url_exits_2_with_one_line() -> None:
    r = elector("redis+sentinel://:hunter2@h:1/")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "needs a master name" in r.stderr and "hunter2" not in r.stderr
    r = elector("redis+sentinel://h:1/m", "redis://h:2/")
    assert r.returncode == 2 and "must be the only --redis" in r.stderr
