"""Single-flight locks in Redis: one worker of the fleet does a thing (fetch
a robots.txt, a blocklist) while the others wait and adopt what it stored.

A lock is leased for :data:`LOCK_LEASE_S` and renewed while its holder
lives, so a holder that dies costs the others that long at most.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_from_coro
from twisted.internet import task

from scrapy_walsh_research.state.protocols import FlightBusy
from scrapy_walsh_research.state.redis.connection import RENEWALS_PER_LEASE, RedisConnection
from scrapy_walsh_research.state.redis.scripts import RELEASE_LOCK, RENEW_LOCK

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)

#: a single-flight lock's lease, renewed every third of it by its live holder
LOCK_LEASE_S = 10.0


class RedisLocks:
    """The single-flight locks of one connection (``<prefix>:lock:<name>``)."""

    def __init__(self, conn: RedisConnection) -> None:
        self.conn = conn
        self._renew_lock = conn.client.register_script(RENEW_LOCK)
        self._release_lock = conn.client.register_script(RELEASE_LOCK)

    async def single_flight(
        self, name: str, ttl: float, max_wait: float | None = None
    ) -> Callable[[], Awaitable[None]] | None:
        """Let one worker at a time do *name*: returns a release coroutine if
        this worker should do it now, or None once the worker doing it is
        done. The lock is leased for LOCK_LEASE_S and renewed while its
        holder lives (at most *ttl* seconds), so a holder that dies costs the
        others that long at most, not *ttl*. A waiter that cannot wait
        *max_wait* seconds gets :class:`FlightBusy` (it can serve other work
        and come back)."""
        key = self.conn.key("lock", name)
        token = uuid.uuid4().hex
        lease_ms = int(LOCK_LEASE_S * 1000)
        if await self.conn.call("lock", lambda r: r.set(key, token, nx=True, px=lease_ms)):
            until = time.monotonic() + ttl

            async def renew() -> None:
                if time.monotonic() < until:
                    await self.conn.call(
                        "renew lock",
                        lambda r: self._renew_lock(keys=[key], args=[token, lease_ms], client=r),
                    )

            renewer = task.LoopingCall(lambda: deferred_from_coro(renew()))
            renewer.start(LOCK_LEASE_S / RENEWALS_PER_LEASE, now=False).addErrback(
                lambda f: logger.error("lock renewal stopped: %(f)s", {"f": f.getErrorMessage()})
            )

            async def release() -> None:
                if renewer.running:
                    renewer.stop()

                await self.conn.call(
                    "unlock", lambda r: self._release_lock(keys=[key], args=[token], client=r)
                )

            return release
        waited_since = time.monotonic()
        while await self.conn.call("lock", lambda r: r.exists(key)):
            if max_wait is not None and time.monotonic() - waited_since >= max_wait:
                raise FlightBusy(name)
            await asyncio.sleep(0.1)
        return None
