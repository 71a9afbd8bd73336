"""The embedded cadence store (R8): each target's last fetch, kept in the
state store under the ``cadence`` namespace
(:mod:`scrapy_walsh_research.state.namespaces`), by its key. One process
fetches each target once, so nothing is claimed; the shared backend
(:mod:`scrapy_walsh_research.state.redis.cadence`) adds the fleet's claims.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy_walsh_research.state.namespaces import CADENCE

if TYPE_CHECKING:
    from scrapy_walsh_research.state.protocols import StateStore


class StoredCadence:
    """:class:`~scrapy_walsh_research.state.protocols.CadenceStore` over a
    :class:`~scrapy_walsh_research.state.protocols.StateStore`."""

    def __init__(self, store: StateStore) -> None:
        self.store = store

    @property
    def claims(self) -> bool:
        return False

    def time(self) -> float:
        return self.store.time()

    async def last_fetch(self, key: str) -> float | None:
        last = await self.store.get(CADENCE, key)
        return float(last) if isinstance(last, (int, float)) else None

    async def note_fetch(self, key: str, at: float) -> None:
        await self.store.put(CADENCE, key, at)

    async def claim(self, key: str, interval: float) -> tuple[str, Any]:
        return "granted", None

    async def release(self, key: str) -> None:
        return None
