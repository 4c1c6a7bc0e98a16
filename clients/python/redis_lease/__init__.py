"""Leader election on the redis-lease module (``LEASE.*`` commands) for redis-py.

- :class:`redis_lease.Elector` (threads) and :class:`redis_lease.asyncio.Elector` (asyncio),
  same shape: ``run(task)``, ``resign()``, ``leadership(timeout=...)``, ``current_leader()``,
  ``fence(token, *command)``, ``is_leader()``, ``role`` / ``on_change``.
- :mod:`redis_lease.decide`: the pure decisions (deadlines, what each reply means, backoff),
  tested with the shared vectors.
- :mod:`redis_lease.metrics`: optional Prometheus metrics.
"""

from ._core import Role, RoleChange, default_owner
from ._quorum import membership_id_of
from ._wire import Fenced, LeaseInfo
from .decide import Config, ErrorKind, StepDownReason
from .sync import Elector, LeaderContext

__all__ = [
    "Config",
    "Elector",
    "ErrorKind",
    "Fenced",
    "LeaderContext",
    "LeaseInfo",
    "Role",
    "RoleChange",
    "StepDownReason",
    "default_owner",
    "membership_id_of",
]
__version__ = "0.1.0"
