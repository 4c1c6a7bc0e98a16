"""Where the elector's own connections come from (shared by the sync and asyncio APIs).

The elector never sends its commands through the user's connection pool: it opens its own
connections with the pool's settings (address, auth, TLS, RESP version, Sentinel resolution)
but its own timeouts, because

- a BLOCKing ACQUIRE occupies its connection for up to the block timeout, so that connection
  needs a read timeout LONGER than the block (op_limit), unlike the user's;
- a connection whose reply was abandoned (time limit, resign) must be discarded, never handed
  back to a pool where a late reply could be read as the reply to a later command;
- ``WAIT`` counts acknowledgements of the writes of *its own* connection, so it must follow
  the write on the same connection.

Accepted sources (``redis`` argument of ``Elector``):

- a ``redis://`` / ``rediss://`` / ``unix://`` URL;
- a client object: ``redis.Redis`` (also ``Sentinel(...).master_for(name)``, whose pool
  resolves the current primary on every connect, so a failover is followed) or
  ``redis.cluster.RedisCluster`` (the connection goes to the key's slot owner, re-resolved
  after MOVED/ASK/CLUSTERDOWN); the asyncio API takes the ``redis.asyncio`` equivalents;
- a factory: a callable with no arguments returning such a client; it is called again after a
  connection failure or a redirect, e.g. to look the primary up again.
"""

from __future__ import annotations

from typing import Any, Dict

# Pool kwargs that must not be copied: they describe the pool's own timeout bookkeeping.
_DROP = ("orig_socket_timeout", "orig_socket_connect_timeout", "orig_host_address")


def derive_kwargs(kwargs: Dict[str, Any], read_timeout: float, connect_timeout: float, retry: Any) -> Dict[str, Any]:
    """Connection kwargs of a pool/node with the elector's timeouts.

    No retries inside redis-py (the loop has its own backoff and time limits) and no health
    check PINGs (they would add a round trip to a command with a time limit)."""
    kw = {k: v for k, v in kwargs.items() if k not in _DROP}
    kw["socket_timeout"] = read_timeout
    kw["socket_connect_timeout"] = connect_timeout
    kw["retry"] = retry
    kw["retry_on_timeout"] = False
    kw["retry_on_error"] = []
    kw["health_check_interval"] = 0
    return kw


def is_cluster(client: Any) -> bool:
    return hasattr(client, "get_node_from_key") and hasattr(client, "nodes_manager")
