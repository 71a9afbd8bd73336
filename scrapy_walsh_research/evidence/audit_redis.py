"""A fleet's audit log in Redis, for a short window: one stream per host.

Redis is memory: a busy fleet's 90 days of evidence (about 490 B an entry,
3.4 entries a target) outgrow any instance, so the fleet's long-term audit
is PostgreSQL (``WALSH_AUDIT_URL``, :mod:`.audit_postgres`) and Redis keeps,
without it, only ``WALSH_AUDIT_REDIS_WINDOW``. Each host's entries are a
stream of their own (``<prefix>:audit:h:<host>``, trimmed to the window on
every append and gone a day past the window after its host's last entry),
and the hosts
with a stream are a sorted set by reversed host (``<prefix>:audit:hosts``),
so one host's report reads that host's streams only.

0.3's single stream (``<prefix>:audit``) is no longer written; it is read
as long as it holds entries (the retention trims it), so nothing it holds
is lost on upgrade.

Reads (the report, ``walsh-purge``) do not take the crawl's fail-closed
retry loop: a read Redis does not answer in time is an error that says so
(:class:`~scrapy_walsh_research.errors.WalshAuditUnavailable`).
"""

from __future__ import annotations

import heapq
import json
from typing import TYPE_CHECKING, Any, cast

from scrapy_walsh_research.core.urls import domain_key_range, host_key, in_domain
from scrapy_walsh_research.errors import WalshAuditUnavailable
from scrapy_walsh_research.state.redis.connection import UNAVAILABLE
from scrapy_walsh_research.state.redis.scripts import AUDIT_FORGET_HOSTS

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from redis import asyncio as aioredis

    from scrapy_walsh_research.state.redis.connection import RedisConnection

#: entries read from a stream at a time
PAGE = 1000
#: an idle host's stream is kept this long past the window, then expires
IDLE_S = 86400


class RedisAudit:
    """Every worker's entries, one stream per host, kept *window* seconds
    (never more than *retention*); a write is acknowledged by Redis before
    the request it describes is sent."""

    def __init__(self, conn: RedisConnection, window: float) -> None:
        self.conn = conn
        self.window = window
        self.base = conn.key("audit", "h", "")
        self.hosts_key = conn.key("audit", "hosts")
        #: 0.3's one stream for every host, read until the retention empties it
        self.legacy = conn.key("audit")

    def append(self, entry: dict[str, Any]) -> Awaitable[None]:
        host = entry.get("host") or ""
        key = self.base + host
        data = json.dumps(entry, sort_keys=True)
        floor = int((self.conn.time() - self.window) * 1000)
        expiry = int(self.window) + IDLE_S

        async def add(r: aioredis.Redis) -> None:
            # one transaction: a stream is never left without its expiry,
            # nor a host's stream out of the hosts' index
            pipe = r.pipeline(transaction=True)
            pipe.xadd(key, {"e": data}, minid=floor, approximate=True)
            pipe.expire(key, expiry)
            if host:
                pipe.zadd(self.hosts_key, {host_key(host): 0})
            await pipe.execute()

        return self.conn.call("audit", add)

    async def entries(
        self, host: str | None = None, since: float | None = None, *, subdomains: bool = True
    ) -> AsyncIterator[dict[str, Any]]:
        """The entries of *host* (and its subdomains), or every entry, in
        time order: each stream is read a page at a time and merged."""
        if host is None:
            names = [*(await self.hosts(since)), ""]
        elif subdomains:
            names = await self._domain(host)
        else:
            names = [host]
        # a page per stream that keeps the whole merge within about PAGE
        # entries, however many subdomains a domain has
        page = max(10, PAGE // max(1, len(names)))
        streams = [self._stream(self.base + name, since, page) for name in names]
        legacy = self._legacy(host, since, subdomains)
        async for entry in _merge([*streams, legacy]):
            yield entry

    async def hosts(self, since: float | None = None) -> list[str]:
        """Every host with a stream (an expired one reads as empty)."""
        keys = await self._read(lambda r: r.zrange(self.hosts_key, 0, -1))
        found = {host_key(k) for k in keys}
        async for entry in self._legacy(None, since, True):
            if entry.get("host"):
                found.add(entry["host"])
        return sorted(found)

    async def _members(self, r: aioredis.Redis) -> Any:
        return await r.zrange(self.hosts_key, 0, -1)

    async def _domain(self, domain: str) -> list[str]:
        key, low, high = domain_key_range(domain)
        under = await self._read(
            lambda r: r.zrangebylex(self.hosts_key, f"[{low}", f"({high}")
        )
        return [domain, *(host_key(k) for k in under if k != key)]

    async def _stream(
        self, key: str, since: float | None, page: int = PAGE
    ) -> AsyncIterator[dict[str, Any]]:
        start = str(int((since or 0) * 1000))
        while True:
            rows = cast(
                "list[tuple[str, dict[str, str]]]",
                await self._read(
                    lambda r, s=start: r.xrange(key, min=s, max="+", count=page)  # type: ignore[misc]
                ),
            )
            for _, fields in rows:
                entry = json.loads(fields["e"])
                if since is None or entry.get("t", 0.0) >= since:
                    yield entry
            if len(rows) < page:
                return
            start = "(" + rows[-1][0]

    async def _legacy(
        self, host: str | None, since: float | None, subdomains: bool
    ) -> AsyncIterator[dict[str, Any]]:
        async for entry in self._stream(self.legacy, since):
            h = entry.get("host") or ""
            if host is None or h == host or (subdomains and in_domain(h, host)):
                yield entry

    async def _read(self, fn: Callable[[aioredis.Redis], Awaitable[Any]]) -> Any:
        """One read, answered within the client's timeout or an error that
        says so: a report never waits on a Redis that does not answer."""
        try:
            return await fn(self.conn.client)
        except UNAVAILABLE as exc:
            raise WalshAuditUnavailable(
                f"The audit log in Redis at {self.conn.shown_url} could not be read ({exc!r}): "
                "Redis did not answer in time. Nothing was written; try again once Redis "
                "answers (or read the PostgreSQL audit if WALSH_AUDIT_URL is set)."
            ) from exc

    async def prune(self, before: float) -> None:
        """Past the retention: 0.3's stream is trimmed (each host's stream is
        trimmed to the window on every append), and hosts whose stream has
        expired leave the index."""
        await self.conn.call(
            "audit",
            lambda r: r.xtrim(self.legacy, minid=str(int(before * 1000)), approximate=True),
        )
        # redis-py types a range as any of its reply shapes; members are str here
        keys = cast("list[str]", await self.conn.call("audit", self._members))
        forget = self.conn.client.register_script(AUDIT_FORGET_HOSTS)
        for i in range(0, len(keys), PAGE):
            pairs = [x for k in keys[i : i + PAGE] for x in (k, self.base + host_key(k))]
            await self.conn.call(
                "audit",
                lambda r, pairs=pairs: forget(  # type: ignore[misc]
                    keys=[self.hosts_key], args=pairs, client=r
                ),
            )

    async def close(self) -> None:
        """Nothing: the crawler's Redis connection is closed by its owner."""


async def _merge(
    sources: list[AsyncIterator[dict[str, Any]]],
) -> AsyncIterator[dict[str, Any]]:
    """Entries of several time-ordered sources, in time order, holding one
    entry per source (plus the page each reads ahead)."""
    heap: list[tuple[float, int, dict[str, Any]]] = []
    for i, source in enumerate(sources):
        first = await anext(source, None)
        if first is not None:
            heap.append((first.get("t", 0.0), i, first))
    heapq.heapify(heap)
    while heap:
        _, i, entry = heapq.heappop(heap)
        yield entry
        following = await anext(sources[i], None)
        if following is not None:
            heapq.heappush(heap, (following.get("t", 0.0), i, following))
