"""The shared cadence store (R8, a fleet): the fetch times in the shared
state store, and the claim a worker holds on a target while it fetches it.

The claim's Lua is :data:`~scrapy_walsh_research.state.redis.layout_scripts.CADENCE_CLAIM`
(its release ``RELEASE_CLAIM``), on the per-host hashes of
:mod:`scrapy_walsh_research.state.redis.layout`. A line fed through Redis is
finished by one script (:mod:`scrapy_walsh_research.state.redis.target_queue`)
that writes its record, its cadence stamp and the claim's release together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy_walsh_research.state.cadence import StoredCadence
from scrapy_walsh_research.state.namespaces import CADENCE, CADENCE_CLAIMS
from scrapy_walsh_research.state.redis import layout
from scrapy_walsh_research.state.redis.layout_scripts import CADENCE_CLAIM, RELEASE_CLAIM

if TYPE_CHECKING:
    from scrapy_walsh_research.state.protocols import StateStore
    from scrapy_walsh_research.state.redis.connection import RedisConnection


class RedisCadence(StoredCadence):
    """:class:`~scrapy_walsh_research.state.protocols.CadenceStore` of a fleet."""

    def __init__(self, store: StateStore, conn: RedisConnection) -> None:
        super().__init__(store)
        self._conn = conn
        self._claim = conn.client.register_script(CADENCE_CLAIM)
        self._release = conn.client.register_script(RELEASE_CLAIM)

    @property
    def claims(self) -> bool:
        return True

    async def claim(self, key: str, interval: float) -> tuple[str, Any]:
        conn = self._conn
        await conn.announce()
        host = layout.bucket_host(key)
        keys = [
            layout.bucket(conn, CADENCE, host),
            layout.bucket(conn, CADENCE_CLAIMS, host),
            layout.legacy(conn, CADENCE),
            layout.legacy(conn, CADENCE_CLAIMS),
        ]
        args: list[Any] = [
            layout.field(key, host), interval, conn.worker, conn.key("alive", ""), key,
            layout.retention_of(conn)[CADENCE_CLAIMS],
        ]  # fmt: skip
        status, value = await conn.call(
            "claim cadence", lambda r: self._claim(keys=keys, args=args, client=r)
        )
        return status, value

    async def release(self, key: str) -> None:
        conn = self._conn
        host = layout.bucket_host(key)
        keys = [layout.bucket(conn, CADENCE_CLAIMS, host)]
        args = [layout.field(key, host), conn.worker]
        await conn.call(
            "release claim", lambda r: self._release(keys=keys, args=args, client=r)
        )
