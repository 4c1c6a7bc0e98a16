"""Quorum mode's decisions (protocol §9a, docs/quorum.md) as plain functions of the replies of
one round: no I/O, no clock. A port of ``client/src/quorum_decide.rs``.

``redis_lease._quorum`` sends the commands and executes what these return; the single-node
rules (deadline from the instant before the first send, stop point, backoff) stay those of
``redis_lease.decide``, because the quorum transport sits *under* the same election loop.

A node's reply in a round (:data:`NodeReply`) is ``None`` (no reply before the round's limit),
a :class:`~redis_lease.decide.Failed`, or the parsed value (ACQUIRE: the token or ``None``
for nil; RAISE/RENEW/RELEASE: ``True`` for 1, ``False`` for 0).
"""

from __future__ import annotations

import enum
import hashlib
import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, TypeVar, Union

from .decide import ErrorKind, Failed

T = TypeVar("T")
# None = no reply in time; a Failed = an error reply or a broken connection; else the value.
NodeReply = Union[None, Failed, T]


def majority(n: int) -> int:
    """Q1: the smallest number of nodes that is more than half of ``n``. Any two sets of this
    size share a node, which is what both safety arguments rest on (docs/quorum.md §3)."""
    return n // 2 + 1


class QuorumControl(enum.Enum):
    """Deliberately broken variants for negative controls; never use outside a test."""

    CORRECT = "correct"
    # Skip the raise: act on the token of any one granting node (breaks "one token per reign").
    NO_UNIFY = "no-unify"
    # Lead on a single grant (breaks "any two majorities intersect").
    MINORITY = "minority"

    def need(self, n: int) -> int:
        """Grants (and raise confirmations) a round needs on ``n`` nodes."""
        return 1 if self is QuorumControl.MINORITY else majority(n)


# -- node identity (Q6, Q7) -----------------------------------------------------------------


class IdentityKind(enum.Enum):
    FIRST = "first"  # the first identity seen at this node: remember it
    SAME = "same"  # the same server as before (a reconnect)
    # Another server answers at this node's address now (a restart, or a VIP / DNS name /
    # proxy moved to a spare): it has none of the old one's leases, and if it has been up
    # longer than its grace it grants at once. It counts toward nothing for a quarantine.
    CHANGED = "changed"
    # The same server as node ``of`` (one URL twice under another spelling, a unix socket and
    # a TCP port of one server, db 0 and db 1): one server must never count twice.
    DUPLICATE = "duplicate"


@dataclass(frozen=True)
class IdentityCheck:
    kind: IdentityKind
    of: Optional[int] = None  # DUPLICATE: the node whose server this is


def check_identity(me: int, seen: str, known: Sequence[Optional[str]]) -> IdentityCheck:
    """Node ``me``'s new connection reports server identity ``seen`` (``run_id``);
    ``known[i]`` is the identity last seen at node ``i``. A duplicate wins over a change: a
    swapped node that lands on another node's server must not count at all."""
    for i, k in enumerate(known):
        if i != me and k == seen:
            return IdentityCheck(IdentityKind.DUPLICATE, i)
    mine = known[me] if me < len(known) else None
    if mine is None:
        return IdentityCheck(IdentityKind.FIRST)
    if mine == seen:
        return IdentityCheck(IdentityKind.SAME)
    return IdentityCheck(IdentityKind.CHANGED)


def quarantine_us(ttl_us: int, configured_us: int, drift: float) -> int:
    """Q7: how long a node whose identity changed counts toward nothing, on this elector's
    clock: at least the longest TTL any elector may have used on it (``configured``, default
    the module's default ``lease.max-ttl``; never less than this elector's own TTL) of the
    *server's* clock, so stretched by the drift bound: a server duration ``d`` lasts at most
    ``d / (1 - drift)`` on an elector clock within it. Rounded up: longer is the safe side."""
    d = max(ttl_us, configured_us)
    if 0.0 < drift < 1.0:
        return math.ceil(d / (1.0 - drift))
    return d


def run_id_of(info: str) -> Optional[str]:
    """``run_id`` from an ``INFO server`` reply (None if absent or empty)."""
    for line in info.splitlines():
        if line.startswith("run_id:"):
            v = line[len("run_id:"):].strip()
            return v or None
    return None


# -- the membership id (Q9) ----------------------------------------------------------------------


def tcp_identity(host: str, port: int) -> str:
    """A TCP node's identity in the membership id (Q9,
    ``conformance/vectors/quorum/membership_id.json``): ``tcp:<host>:<port>``, the host in
    lower case, an IPv6 address without its brackets, a trailing dot removed. The scheme (TLS
    or not), credentials, db number and query are left out: they do not change which server
    it is."""
    h = host
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    if h.endswith("."):
        h = h[:-1]
    return f"tcp:{h.lower()}:{port}"


def unix_identity(path: str) -> str:
    """A unix socket node's identity (Q9): ``unix:<path>``, the path as written."""
    return f"unix:{path}"


def membership_id(identities: Sequence[str]) -> int:
    """The membership id of a node list (Q9): SHA-256 of the identities sorted by their bytes
    and joined by ``\\n``, the first 8 bytes read big endian; 0 (never seen) becomes 1, because
    the module reserves 0 for "bound to nothing". Sorted, so the list's order does not matter;
    every identity counts, so any change of the set changes the id: electors with different
    node lists (a node replacement half done) are refused by each other's nodes instead of
    forming disjoint majorities (issue 32)."""
    joined = "\n".join(sorted(identities, key=lambda s: s.encode("utf-8")))
    digest = hashlib.sha256(joined.encode("utf-8")).digest()
    return max(int.from_bytes(digest[:8], "big"), 1)


def membership_hex(mid: int) -> str:
    """A membership id as the wire spells it: 16 lower-case hex digits."""
    return f"{mid:016x}"


def is_membership(r: object) -> bool:
    """A node's ``MEMBERSHIP`` refusal (Q9): its key is bound to another node list."""
    return isinstance(r, Failed) and r.kind == ErrorKind.MEMBERSHIP


# -- the campaign round (Q2-Q4) ----------------------------------------------------------------


@dataclass(frozen=True)
class Raise:
    """Enough grants: raise the lease on ``nodes`` to ``target`` (the highest token granted),
    then lead on ``target`` if enough confirm."""

    target: int
    nodes: Tuple[int, ...]


@dataclass(frozen=True)
class ActUnified:
    """Negative control NO_UNIFY: lead at once on ``token``, each node keeping its own."""

    token: int
    per_node: Tuple[Optional[int], ...]


@dataclass(frozen=True)
class NotGranted:
    """Held elsewhere or a split vote: a nil reply to the loop, which polls again soon."""


@dataclass(frozen=True)
class MembershipMismatch:
    """Not granted, and at least one node refused because its key is bound to another
    membership (Q9): to the loop a nil reply like :class:`NotGranted` (polling again is
    harmless, the other list's reign may end), but reported (reason ``membership_mismatch``),
    because only an operator can resolve it (docs/quorum.md §4.1)."""


@dataclass(frozen=True)
class Abort:
    """Not enough grants: release the partial grants ``release`` (node, token), then report
    ``outcome`` to the election loop (:class:`NotGranted`, :class:`MembershipMismatch` or a
    :class:`Failed`)."""

    release: Tuple[Tuple[int, int], ...]
    outcome: Union[NotGranted, MembershipMismatch, Failed]


AfterAcquire = Union[Raise, ActUnified, Abort]


class _Refused:
    """ACQUIRE's nil reply inside a round (``None`` there means "no reply in time")."""

    def __repr__(self) -> str:
        return "REFUSED"


REFUSED = _Refused()


AcquireReply = Union[None, Failed, int, _Refused]


def after_acquire(
    control: QuorumControl, replies: Sequence[Union[None, Failed, int, _Refused]], pick: int
) -> AfterAcquire:
    """Step 1. ``replies[i]`` is node i's ``LEASE.ACQUIRE`` reply: an int = granted that token,
    :data:`REFUSED` = nil (held by someone else), a ``Failed``, or ``None`` = no reply in time.

    Why the maximum: every node of the previous reign's raise-majority has that reign's token
    as its watermark, any majority contains one of them, and that node only grants above it;
    the maximum over our majority is therefore above every earlier reign's token. ``pick``
    only matters for the NO_UNIFY control (which grant it acts on, modulo the count)."""
    n = len(replies)
    need = control.need(n)
    granted = [(i, r) for i, r in enumerate(replies) if isinstance(r, int) and not isinstance(r, bool)]
    if n > 0 and len(granted) >= need:
        if control is QuorumControl.NO_UNIFY:
            per: List[Optional[int]] = [None] * n
            for i, t in granted:
                per[i] = t
            return ActUnified(granted[pick % len(granted)][1], tuple(per))
        return Raise(max(t for _, t in granted), tuple(i for i, _ in granted))
    # A membership refusal (Q9) is a refusal like "held by someone else", not an error: that
    # node will not grant us, whatever we retry.
    wrong_membership = sum(1 for r in replies if is_membership(r))
    refused = wrong_membership + sum(1 for r in replies if r is REFUSED)
    failed = [r for r in replies if isinstance(r, Failed) and not is_membership(r)]
    silent = sum(1 for r in replies if r is None)
    # Why an error only when refusals alone cannot explain it: if enough nodes answered "held
    # by someone else", polling again soon is right; if a majority was out of reach because of
    # errors and silence, backing off is (and GRACE tells the loop how long).
    outcome: Union[NotGranted, MembershipMismatch, Failed]
    if refused + need > n or len(failed) + silent <= n - need:
        outcome = MembershipMismatch() if wrong_membership > 0 else NotGranted()
    else:
        grace = next((f for f in failed if f.kind == ErrorKind.GRACE), None)
        outcome = grace or (failed[0] if failed else Failed(ErrorKind.TIMEOUT, "quorum: no reply in time"))
    return Abort(tuple(granted), outcome)


def raise_confirmed(control: QuorumControl, replies: Sequence[NodeReply[bool]], n: int) -> bool:
    """Step 2: did enough nodes confirm the raise (reply 1) to lead on the target token?
    Why the raise must reach a majority before we act: the next reign's token is above ours
    only because its majority meets a node that *knows* ours (docs/quorum.md §3, step T3)."""
    return sum(1 for r in replies if r is True) >= control.need(n)


class AfterRenew(enum.Enum):
    # A majority extended the lease: the new local deadline counts from this round's send.
    RENEWED = "renewed"
    # So many nodes said "not held" (0) that a majority can no longer confirm: step down now.
    LOST = "lost"
    # Neither yet (errors, silence): keep the old deadline, retry until the stop point.
    UNKNOWN = "unknown"


def renew_refused(r: NodeReply[bool]) -> bool:
    """A renewal reply that means "this node does not renew us": 0, or (Q9) a refusal because
    the node's key is now bound to another membership (the operator moved it)."""
    return r is False or is_membership(r)


def after_renew(control: QuorumControl, replies: Sequence[NodeReply[bool]]) -> AfterRenew:
    """Q5: M replies of 1 renew; more than ``N - M`` replies of 0 (or MEMBERSHIP refusals,
    Q9) lose; else unknown."""
    n = len(replies)
    need = control.need(n)
    ones = sum(1 for r in replies if r is True)
    zeros = sum(1 for r in replies if renew_refused(r))
    if n > 0 and ones >= need:
        return AfterRenew.RENEWED
    if zeros > n - need:
        return AfterRenew.LOST
    return AfterRenew.UNKNOWN


# -- a refused follower's wait (Q10) ------------------------------------------------------------


def wait_node(urls: Sequence[str]) -> int:
    """Q10: the node every follower waits on, the one with the smallest URL, so that every
    elector of one membership (the same node set, in any order) picks the same node. Why one
    node and not all: waiting with ``BLOCK`` on every node would let a release wake a
    *different* follower on each node (each node wakes its own first waiter), a split vote
    every time; on one node exactly one follower wakes, holding that node, and its next round
    meets the other nodes just freed by the same release round."""
    return min(range(len(urls)), key=lambda i: urls[i], default=0)


def wait_after_refusal(
    replies: Sequence[AcquireReply],
    wait_node: int,
    released_any: bool,
    block_us: Optional[int],
    op_timeout_us: int,
    cap_us: int,
) -> Optional[int]:
    """Q10: how long to wait on the wait node after a round that made no reign, or None to
    report "not granted" at once (the loop then pauses and polls, as before Q10).

    Wait only when the round released nothing (a round that released partial grants retired
    its owner: the loop must take the next one first, Q4) and the wait node itself answered
    "held" (someone holds it: its release or expiry is what wakes us; a node that was silent or
    failed would only make us wait for nothing). The wait is the loop's BLOCK budget minus two
    steps: the round before and the round after the wake must fit in the loop's limit for one
    blocking acquire (``block + op_timeout``), and at most ``cap_us`` (the renew interval): only
    the wait node can wake us, so if it stops answering while the other nodes free up (frozen,
    cut off), the next round comes after at most ``cap_us`` instead of the whole BLOCK."""
    if block_us is None:
        return None
    b = min(block_us - op_timeout_us, cap_us)
    held = 0 <= wait_node < len(replies) and replies[wait_node] is REFUSED
    if held and not released_any and b >= 1000:
        return b
    return None
