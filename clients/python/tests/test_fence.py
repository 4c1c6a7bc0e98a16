"""The fencing helper: `elector.fence(token, *command)` runs LEASE.FENCE on the application's
client; a stale token is refused with the typed `Fenced` and the write is not applied."""

from __future__ import annotations

import asyncio

import pytest
import redis

from redis_lease import Config, Elector, Fenced
from redis_lease.asyncio import Elector as AsyncElector

from .conftest import RedisServer

TTL = 1.0


def test_a_stale_token_is_refused_and_the_write_not_applied(server: RedisServer) -> None:
    app = redis.Redis(port=server.port)  # the application's own client, shared with the elector
    old = Elector(app, "fjob", TTL)
    with old.leadership(timeout=5) as lease:
        stale = lease.token
        assert old.fence(stale, "SET", "fjob:data", "v1") == b"OK"
        assert isinstance(old.fence(stale), int)  # check only: the remaining ms
    new = Elector(app, "fjob", TTL)
    with new.leadership(timeout=5) as lease2:
        assert lease2.token > stale
        with pytest.raises(Fenced) as e:
            old.fence(stale, "SET", "fjob:data", "stale write")
        assert e.value.token == stale and e.value.key == "fjob"
        assert str(e.value).startswith("FENCED")
        assert isinstance(e.value, redis.exceptions.ResponseError)
        assert app.get("fjob:data") == b"v1", "the stale write was applied"
        assert new.fence(lease2.token, "SET", "fjob:data", "v2") == b"OK"
    assert app.get("fjob:data") == b"v2"
    # Other errors of the inner command stay redis-py's own (not Fenced).
    with new.leadership(timeout=5) as lease3:
        with pytest.raises(redis.exceptions.ResponseError) as e2:
            new.fence(lease3.token, "INCR", "fjob:data")
        assert not isinstance(e2.value, Fenced)


def test_async_fence(server: RedisServer) -> None:
    async def main() -> None:
        el = AsyncElector(server.url, "afjob", TTL)
        async with el.leadership(timeout=5) as lease:
            token = lease.token
            assert await el.fence(token, "HSET", "afjob:h", "step", 1) == 1
        other = AsyncElector(server.url, "afjob", TTL)
        async with other.leadership(timeout=5):
            with pytest.raises(Fenced):
                await el.fence(token, "HSET", "afjob:h", "step", 2)
        assert server.client().hget("afjob:h", "step") == b"1"
        await el.close()
        await other.close()

    asyncio.run(main())


def test_config_in_seconds() -> None:
    c = Config.from_ttl(10.0)
    assert (c.ttl, c.renew_interval, c.stop_budget, c.op_timeout) == (10.0, 3.333333, 2.0, 2.0)
    d = c.replace(min_replicas=1, wait_timeout=0.2, block_timeout=1.5)
    assert (d.wait_timeout_us, d.block_timeout_us, d.min_replicas) == (200_000, 1_500_000, 1)
    assert (d.wait_timeout, d.block_timeout) == (0.2, 1.5)
    assert c.replace(ttl=2.5).ttl_ms == 2500
    assert Config(10.0) == c and Config(10.0, min_replicas=1, wait_timeout=0.2, block_timeout=1.5) == d
    assert repr(Config(1.0)).startswith("Config(ttl=1.0, drift=0.01, margin=0.01, stop_budget=0.2,")
    with pytest.raises(TypeError):  # the internal units are not a way to configure
        c.replace(op_timeout_us=7)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Config(ttl_ms=10_000)  # type: ignore[call-arg]
