"""The elector's clock: integer microseconds of CLOCK_BOOTTIME on Linux, else of the monotonic
clock (``time.monotonic_ns()``).

Why CLOCK_BOOTTIME: CLOCK_MONOTONIC stops while the machine is suspended, but the server's
TTL does not; after a host suspend a deadline on CLOCK_MONOTONIC would still lie ahead while
the lease has long expired. CLOCK_BOOTTIME keeps counting through a suspend, so the first
clock read after the resume sees the deadline passed. (A frozen VM guest whose clock is
stopped by the hypervisor is not helped by either clock: only fencing protects that case.)

Public instants (``LeaderContext.deadline``, ``Role.deadline``) stay on the ``time.monotonic()``
clock, converted at the moment they are read, so callers compare them with
``time.monotonic()`` as before.
"""

from __future__ import annotations

import time

CLOCK_ID = getattr(time, "CLOCK_BOOTTIME", None)
CLOCK_NAME = "CLOCK_BOOTTIME" if CLOCK_ID is not None else "monotonic"


def now_us() -> int:
    if CLOCK_ID is not None:
        return time.clock_gettime_ns(CLOCK_ID) // 1000
    return time.monotonic_ns() // 1000

