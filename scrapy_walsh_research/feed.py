"""Targets fed through Redis: any number of workers share one declared list.

``scrapy walsh-enqueue urls.txt`` pushes every line of a list onto a Redis
list (``WALSH_REDIS_TARGETS_KEY``); each worker running
``scrapy crawl targets -a redis_key=...`` pops lines one at a time, so a line
is fetched by exactly one worker and the work spreads by itself. Scrapy pulls
start requests only while its download slot is free, so a worker never
hoards lines the others could be fetching.

Lines keep their number in the list, and canonical-URL dedup is shared
within one enqueued list (a *batch*): the first worker to claim a canonical
URL fetches it, the others record a duplicate naming the line that won. The
same list enqueued again tomorrow is a new batch, fetched again (R8 cadence
decides, not the dedup).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

    from scrapy_walsh_research.state.redis import RedisConnection

DEFAULT_TARGETS_KEY = "targets"
#: how long a batch's canonical-URL claims are kept once its last line is taken
CLAIMS_TTL_S = 7 * 86400


def list_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) for every line that is not blank or a ``#`` comment."""
    with path.open(encoding="utf-8", errors="replace") as lines:
        for lineno, raw in enumerate(lines, 1):
            text = raw.strip()
            if text and not text.startswith("#"):
                yield lineno, text


def enqueue(url: str, key: str, path: Path, *, prefix: str = "walsh") -> int:
    """Push the list at *path* onto the Redis list *key*; returns the lines pushed.

    Synchronous on purpose: it runs from a command, with no reactor to block.
    """
    import redis

    client = redis.Redis.from_url(url)
    batch = uuid.uuid4().hex
    items = [
        json.dumps({"line": n, "url": text, "list": str(path), "batch": batch})
        for n, text in list_lines(path)
    ]
    try:
        for i in range(0, len(items), 1000):
            client.rpush(f"{prefix}:{key}", *items[i : i + 1000])
    finally:
        client.close()
    return len(items)


class RedisFeed:
    """A worker's view of the shared list: pop the next line, claim a URL."""

    def __init__(self, conn: RedisConnection, key: str) -> None:
        self.conn = conn
        self.key = key
        self.queue = conn.key(key)

    async def pop(self) -> dict[str, Any] | None:
        raw = await self.conn.call("pop target", lambda r: r.lpop(self.queue))
        return None if raw is None else json.loads(raw)

    async def claim(self, batch: str, canonical: str, line: int) -> int | None:
        """None if this worker is first with *canonical* in *batch*, else the
        line that was."""
        claims = self.conn.key(self.key, "canonical", batch)

        async def claim(r: Any) -> int | None:
            if await r.hsetnx(claims, canonical, line):
                await r.expire(claims, CLAIMS_TTL_S)
                return None
            return int(await r.hget(claims, canonical))

        return await self.conn.call("claim target", claim)
