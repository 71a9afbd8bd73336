"""The output record: exactly one per list line, metadata only (R6).

The body is hashed and measured, never kept. :class:`RecordPipeline` commits
each record before the exporters see it: the target's cadence (R8) is
written with its record, and a line fed through Redis is acknowledged only
once its record is stored, atomically, as that line's one record.
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import DropItem

from scrapy_walsh_research.cadence import cadence_of
from scrapy_walsh_research.core.timestamps import utc_iso
from scrapy_walsh_research.evidence.audit import AuditTrail
from scrapy_walsh_research.state import redis_url
from scrapy_walsh_research.state.directory import state_dir

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self

    from scrapy_walsh_research.state.redis.target_queue import RecordCopies

logger = logging.getLogger(__name__)

#: key of a record's feed ticket on its way to :class:`RecordPipeline` (never exported)
TICKET_KEY = "_walsh_ticket"
OUTCOMES = (
    "fetched", "not_modified", "denied", "failed", "duplicate", "skipped", "invalid", "withheld"
)  # fmt: skip
RULES = ("R2", "R3", "R4", "R5", "R6", "R8", "PREF")
#: outcomes of a request that reached the target (its cadence is stamped)
SENT_OUTCOMES = ("fetched", "not_modified", "withheld")


def new_record(
    *, line: int, url: str, canonical_url: str | None, outcome: str, **extra: Any
) -> dict[str, Any]:
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}")
    rule = extra.pop("rule", None)
    if rule is not None and rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}")
    record: dict[str, Any] = {
        "url": url,
        "line": line,
        "canonical_url": canonical_url,
        "outcome": outcome,
        "rule": rule,
        "reason": None,
        "status": None,
        "final_url": None,
        "content_type": None,
        "content_length": None,
        "sha256": None,
        "etag": None,
        "last_modified": None,
        "fetched_at": None,
        "preferences": None,
    }
    record.update(extra)
    return record


def _header(response: Response, name: bytes) -> str | None:
    value = response.headers.get(name)
    return value.decode("latin-1") if value is not None else None


def response_validators(response: Response) -> dict[str, Any]:
    """Status and validators only: what a ``withheld`` record keeps."""
    return {
        "status": response.status,
        "final_url": response.url,
        "etag": _header(response, b"ETag"),
        "last_modified": _header(response, b"Last-Modified"),
        "fetched_at": utc_iso(),
    }


def response_metadata(response: Response) -> dict[str, Any]:
    """HTTP metadata of a response; the body only as its length and digest."""
    body = response.body
    return {
        **response_validators(response),
        "content_type": _header(response, b"Content-Type"),
        "content_length": len(body),
        "sha256": hashlib.sha256(body).hexdigest(),
    }


class RecordPipeline:
    """Commit each record of the ``targets`` spider before any exporter:
    cadence with the record, and for a fed line, the record, its
    acknowledgement and its cadence in one Redis step, first record wins (a
    line delivered twice after a worker died still has one record)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.audit = AuditTrail.for_crawler(crawler)
        #: with Redis, this machine's copy of the fed records (for a Redis that lost them)
        self.copies: RecordCopies | None = None
        if redis_url(crawler):
            # imported only with Redis in use: redis is the optional [redis] extra
            from scrapy_walsh_research.state.redis.connection import RedisConnection
            from scrapy_walsh_research.state.redis.target_queue import RecordCopies

            self.copies = RecordCopies(RedisConnection.for_crawler(crawler), state_dir(crawler))
            crawler.signals.connect(self.copies.close, signal=signals.engine_stopped)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    async def process_item(self, item: Any) -> Any:
        if not isinstance(item, dict) or "outcome" not in item or "line" not in item:
            return item  # not a targets record: a project's own item
        ticket = item.pop(TICKET_KEY, None)
        key = str(item.get("canonical_url") or "")
        fetched = bool(key) and item["outcome"] in SENT_OUTCOMES
        cadence = cadence_of(self.crawler)
        if ticket is None:
            if fetched and cadence is not None:
                await cadence.stamp(key)
            await self._release_claim(key)
            await self.audit.decision(item)
            return item
        # a fed line: Redis in use (the optional [redis] extra, imported only then)
        from scrapy_walsh_research.state.redis.connection import RedisConnection
        from scrapy_walsh_research.state.redis.target_queue import finish

        conn = RedisConnection.for_crawler(self.crawler)
        first, now = await finish(conn, ticket, item, key if fetched else "", key)
        if fetched and cadence is not None:
            await cadence.stamp(key, at=now)
        if first and self.copies is not None:
            self.copies.keep(ticket, item)
        if not first:
            self.stats.inc_value("walsh/records/already_recorded")
            raise DropItem(f"line {item['line']} already has its record (delivered again)")
        await self.audit.decision(item)
        return item

    async def _release_claim(self, key: str) -> None:
        if not key or not redis_url(self.crawler):
            return
        from scrapy_walsh_research.state.redis.connection import RedisConnection

        conn = RedisConnection.for_crawler(self.crawler)
        claims = conn.key("state", "cadence_claims")

        async def release(r: Any) -> None:
            if await r.hget(claims, key) == conn.worker:
                await r.hdel(claims, key)

        await conn.call("release claim", release)
