"""Leader election on the redis-lease module (``LEASE.*`` commands) for redis-py.

- :class:`redis_lease.Elector` (threads) and :class:`redis_lease.asyncio.Elector` (asyncio),
  same shape: ``run(task)``, ``resign()``, ``leadership(timeout=...)``, ``observe()``,
  ``fence(token, *command)``, ``is_leader()``, ``state`` / ``on_change``.
- :mod:`redis_lease.decide`: the pure decisions (deadlines, what each reply means, backoff),
  tested with the shared vectors.
- :mod:`redis_lease.metrics`: optional Prometheus metrics.
"""

from ._core import Leadership, default_owner
from ._wire import Fenced, LeaseInfo
from .decide import Config
from .sync import Elector, Lease

__all__ = ["Config", "Elector", "Fenced", "Lease", "Leadership", "LeaseInfo", "default_owner"]
__version__ = "0.1.0"
