"""The shared :class:`~scrapy_walsh_research.state.protocols.StateStore`:
the stores (blocklist, robots copies, validators, cadence, first-seen) in
Redis, for every worker of the fleet."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

from scrapy_walsh_research.state.redis.connection import RedisConnection
from scrapy_walsh_research.state.redis.lock import RedisLocks
from scrapy_walsh_research.state.redis.scripts import glob_escape
from scrapy_walsh_research.state.redis.target_queue import purge_records

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from redis import asyncio as aioredis
    from redis.typing import EncodableT, FieldT
    from scrapy.crawler import Crawler
    from typing_extensions import Self


class RedisStateStore:
    """The :class:`~scrapy_walsh_research.state.protocols.StateStore` in Redis:
    one hash per namespace, values as JSON. A write returns once Redis has
    it; durability beyond that is Redis's persistence (run it with AOF)."""

    #: every worker of the fleet reads and writes it
    shared = True

    def __init__(self, conn: RedisConnection) -> None:
        self.conn = conn
        self.locks = RedisLocks(conn)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(RedisConnection.for_crawler(crawler))

    def _hash(self, namespace: str) -> str:
        return self.conn.key("state", namespace)

    async def get(self, namespace: str, key: str) -> Any | None:
        raw = await self.conn.call(f"get {namespace}", lambda r: r.hget(self._hash(namespace), key))
        return json.loads(raw) if raw is not None else None

    async def put(self, namespace: str, key: str, value: Any) -> None:
        data = json.dumps(value, sort_keys=True)
        await self.conn.call(f"put {namespace}", lambda r: r.hset(self._hash(namespace), key, data))

    async def get_many(self, namespace: str, keys: list[str]) -> dict[str, Any]:
        if not keys:
            return {}
        raws = await self.conn.call(
            f"get {namespace}", lambda r: r.hmget(self._hash(namespace), keys)
        )
        return {k: json.loads(v) for k, v in zip(keys, raws, strict=True) if v is not None}

    async def put_many(self, namespace: str, values: dict[str, Any]) -> None:
        if not values:
            return
        mapping: dict[FieldT, EncodableT] = {
            k: json.dumps(v, sort_keys=True) for k, v in values.items()
        }
        # one HSET: all fields or none
        await self.conn.call(
            f"put {namespace}", lambda r: r.hset(self._hash(namespace), mapping=mapping)
        )

    async def put_blob(self, name: str, data: bytes) -> None:
        key = self.conn.key("blob", name)
        await self.conn.call("put blob", lambda r: r.set(key, data))

    async def get_blob(self, name: str) -> bytes | None:
        key = self.conn.key("blob", name)
        raw = await self.conn.call("get blob", lambda r: r.get(key))
        return raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else raw

    async def delete_blob(self, name: str) -> None:
        key = self.conn.key("blob", name)
        await self.conn.call("delete blob", lambda r: r.delete(key))

    async def put_if_absent(self, namespace: str, key: str, value: Any) -> Any:
        data = json.dumps(value, sort_keys=True)
        name = self._hash(namespace)

        async def put(r: aioredis.Redis) -> str:
            await r.hsetnx(name, key, data)
            # a str (decode_responses), the one just written or the first one
            return cast("str", await r.hget(name, key))

        return json.loads(await self.conn.call(f"put {namespace}", put))

    async def delete(self, namespace: str, key: str) -> None:
        await self.conn.call(f"delete {namespace}", lambda r: r.hdel(self._hash(namespace), key))

    async def keys(self, namespace: str, prefix: str = "") -> list[str]:
        pattern = glob_escape(prefix) + "*"

        async def scan(r: aioredis.Redis) -> list[str]:
            # HSCAN (not HKEYS): a large hash is read in steps, not in one
            # blocking call; NOVALUES needs Redis 7.4, so values come too
            return [
                k async for k, _ in r.hscan_iter(self._hash(namespace), match=pattern, count=1000)
            ]

        return await self.conn.call(f"keys {namespace}", scan)

    async def delete_many(self, namespace: str, keys: list[str]) -> None:
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]

            async def drop(r: aioredis.Redis, c: list[str] = chunk) -> int:
                return await r.hdel(self._hash(namespace), *c)

            await self.conn.call(f"delete {namespace}", drop)

    async def history_complete(self) -> bool:
        return await self.conn.guard.history_complete()

    def on_history_lost(self, callback: Callable[[], Awaitable[None]]) -> None:
        self.conn.guard.on_history_lost(callback)

    def time(self) -> float:
        return self.conn.time()

    async def single_flight(
        self, name: str, ttl: float, max_wait: float | None = None
    ) -> Callable[[], Awaitable[None]] | None:
        return await self.locks.single_flight(name, ttl, max_wait)

    async def purge_records(
        self,
        matches: Callable[[str], bool],
        cause: Callable[[str], str],
        now: str,
        host: str | None = None,
    ) -> dict[str, dict[str, int]]:
        return await purge_records(self.conn, matches, cause, now, host)

    async def close(self) -> None:
        await self.conn.close()
