"""Exact commands and reply parsing, shared by the sync and the asyncio transport (no I/O).

Replies are parsed strictly: a reply of an unexpected shape is a ``protocol`` failure (module /
client version mismatch), never guessed at. Error replies and redis-py exceptions are turned
into :class:`redis_lease.decide.Failed` by the shared classification of the error line.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple, Union

from redis import exceptions as rex

from .decide import ErrorKind, Failed, Wait, classify_error_line, wire_ms

Args = Tuple[Union[str, int], ...]


@dataclass(frozen=True)
class LeaseInfo:
    """``LEASE.GET``: the live lease's owner, token and remaining server-side TTL (ms)."""

    owner: str
    token: int
    pttl_ms: int


def acquire_cmd(key: str, owner: str, ttl_ms: int, block_us: Optional[int]) -> Args:
    if block_us is None:
        return ("LEASE.ACQUIRE", key, owner, ttl_ms)
    return ("LEASE.ACQUIRE", key, owner, ttl_ms, "BLOCK", wire_ms(block_us))


def renew_cmd(key: str, owner: str, token: int, ttl_ms: int) -> Args:
    return ("LEASE.RENEW", key, owner, token, ttl_ms)


def release_cmd(key: str, owner: str, token: int) -> Args:
    return ("LEASE.RELEASE", key, owner, token)


def get_cmd(key: str) -> Args:
    return ("LEASE.GET", key)


def fence_cmd(key: str, token: int, command: Sequence[Any]) -> Tuple[Any, ...]:
    """``LEASE.FENCE key token [command arg ...]``: run ``command`` only if ``token`` is the
    live lease's token (without a command: check only, replies the remaining ms)."""
    return ("LEASE.FENCE", key, token, *command)


class Fenced(rex.ResponseError):
    """``LEASE.FENCE`` refused: ``token`` is not the live lease's token (the lease expired or a
    newer reign holds it). The command was not run. A subclass of redis-py's
    ``ResponseError``, so code catching that still catches it."""

    def __init__(self, key: str, token: int, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.token = token


def fence_refusal(e: rex.ResponseError, key: str, token: int) -> Optional[Fenced]:
    """The typed error for a FENCED reply, None for any other error."""
    f = failure(e)
    if f.kind != ErrorKind.FENCED:
        return None
    return Fenced(key, token, f.message)


def wait_cmd(w: Wait) -> Args:
    # Never 0: `WAIT n 0` waits forever (wire_ms already floors at 1).
    return ("WAIT", w.replicas, w.timeout_ms)


def _int(v: Any) -> Optional[int]:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    return None


def parse_token(v: Any) -> Union[int, None, Failed]:
    """ACQUIRE: a positive integer token, or nil."""
    if v is None:
        return None
    t = _int(v)
    # Tokens are positive and below 2^53 (safe in every client's number type).
    if t is None or t <= 0 or t >= 2**53:
        return Failed(ErrorKind.PROTOCOL, f"LEASE.ACQUIRE replied {v!r}")
    return t


def parse_flag(cmd: str, v: Any) -> Union[bool, Failed]:
    """RENEW / RELEASE: 1 or 0."""
    t = _int(v)
    if t == 1:
        return True
    if t == 0:
        return False
    return Failed(ErrorKind.PROTOCOL, f"{cmd} replied {v!r}")


def parse_acks(v: Any) -> Union[int, Failed]:
    t = _int(v)
    if t is None or t < 0:
        return Failed(ErrorKind.PROTOCOL, f"WAIT replied {v!r}")
    return t


def _text(v: Any) -> Optional[str]:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, str):
        return v
    return None


def parse_get(v: Any) -> Union[LeaseInfo, None, Failed]:
    """``LEASE.GET``: nil, ``[owner, token, pttl]`` (RESP2) or a map owner/token/pttl (RESP3)."""
    if v is None:
        return None
    fields: Sequence[Any]
    if isinstance(v, dict):
        by_name = {_text(k): x for k, x in v.items()}
        fields = [by_name.get("owner"), by_name.get("token"), by_name.get("pttl")]
    elif isinstance(v, (list, tuple)):
        fields = list(v)
    else:
        return Failed(ErrorKind.PROTOCOL, f"LEASE.GET replied {v!r}")
    if len(fields) == 3:
        owner, token, pttl = _text(fields[0]), _int(fields[1]), _int(fields[2])
        if owner is not None and token is not None and token > 0 and pttl is not None and pttl >= 0:
            return LeaseInfo(owner, token, pttl)
    return Failed(ErrorKind.PROTOCOL, f"LEASE.GET replied {v!r}")


# redis-py strips the code of the error replies it knows and raises a class per code; put the
# code back so that one classification (decide.classify_error_line) decides on the line.
_CODE_OF_CLASS: List[Tuple[type, str]] = [
    (rex.BusyLoadingError, "LOADING"),  # a ConnectionError subclass: test it first
    (rex.ReadOnlyError, "READONLY"),
    (rex.NoPermissionError, "NOPERM"),
    (rex.OutOfMemoryError, "OOM"),
    (rex.ExecAbortError, "EXECABORT"),
    (rex.NoScriptError, "NOSCRIPT"),
    (rex.MovedError, "MOVED"),  # before AskError (its base)
    (rex.AskError, "ASK"),
    (rex.TryAgainError, "TRYAGAIN"),
    (rex.MasterDownError, "MASTERDOWN"),  # before ClusterDownError (its base)
    (rex.ClusterDownError, "CLUSTERDOWN"),
    (rex.ClusterCrossSlotError, "CROSSSLOT"),
]
_CODE_WORD = re.compile(r"^[A-Z]{2,}$")


def error_line(e: rex.ResponseError) -> str:
    """The server's error line (``CODE message``) of a redis-py ResponseError."""
    msg = str(e.args[0]) if e.args else str(e)
    for cls, code in _CODE_OF_CLASS:
        if isinstance(e, cls):
            return f"{code} {msg}"
    status: Any = getattr(e, "status_code", None)  # recent redis-py keeps the code
    if isinstance(status, str) and status and not msg.startswith(status + " "):
        return f"{status} {msg}"
    first = msg.split(" ", 1)[0]
    # Unknown codes (GRACE, FENCED, WRONGTYPE, NOREPLICAS, BUSY...) are left in the message by
    # redis-py; a message starting with no upper-case code word was an `ERR ...` reply.
    if _CODE_WORD.match(first):
        return msg
    return f"ERR {msg}"


def failure(e: BaseException) -> Failed:
    """Classify anything a redis-py call raised."""
    if isinstance(e, rex.BusyLoadingError):
        return Failed(ErrorKind.LOADING, str(e), code="LOADING")
    if isinstance(e, rex.ResponseError):
        line = error_line(e)
        f = classify_error_line(line)
        return Failed(f.kind, line, grace_us=f.grace_us, code=line.split(" ", 1)[0])
    if isinstance(e, (rex.TimeoutError, socket.timeout, TimeoutError)):
        return Failed(ErrorKind.TIMEOUT, str(e) or "timeout")
    if isinstance(e, (rex.ConnectionError, OSError, EOFError)):
        return Failed(ErrorKind.CONNECTION, str(e) or type(e).__name__)
    return Failed(ErrorKind.PROTOCOL, f"{type(e).__name__}: {e}")


# Error codes after which the connection is dropped, so the next command resolves the address
# again (Sentinel: the new primary after a failover; Cluster: the slot's new owner).
RESOLVE_AGAIN = frozenset(["READONLY", "MOVED", "ASK", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "LOADING"])
