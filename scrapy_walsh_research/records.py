"""The record pipeline: each record of the ``targets`` spider committed
before any exporter sees it.

The target's cadence (R8) is written with its record (the R8 gate stamps
it), and a line fed through Redis is acknowledged only once its record is
stored, atomically, as that line's one record. The record itself (fields,
outcomes, what a response gives it) is :mod:`scrapy_walsh_research.core.records`.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import DropItem

from scrapy_walsh_research._runtime.context import InContext
from scrapy_walsh_research.core.records import SENT_OUTCOMES, TICKET_KEY
from scrapy_walsh_research.core.timestamps import parse_utc_iso
from scrapy_walsh_research.state.directory import state_dir

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self

    from scrapy_walsh_research.state.redis.target_queue import RecordCopies

logger = logging.getLogger(__name__)


class RecordPipeline(InContext):
    """Commit each record of the ``targets`` spider before any exporter:
    cadence with the record, and for a fed line, the record, its
    acknowledgement and its cadence in one Redis step, first record wins (a
    line delivered twice after a worker died still has one record)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        #: the R8 gate's stamps are asked of the context (None: no R8 gate)
        self.stats = crawler.stats
        self.audit = self.context.audit
        #: with Redis, this machine's copy of the fed records (for a Redis that lost them)
        self.copies: RecordCopies | None = None
        redis = self.context.redis
        if redis is not None:
            # imported only with Redis in use: redis is the optional [redis] extra
            from scrapy_walsh_research.state.redis.target_queue import RecordCopies

            self.copies = RecordCopies(redis, state_dir(self.context.settings))
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
        # the cadence counts from when the answer came, as the record says
        # (committed later: a record waits for its llms.txt probe), so an R8
        # skip names the time the record gives; None (a sitemap's skip): now
        answered = parse_utc_iso(item.get("fetched_at")) if fetched else None
        cadence = self.context.cadence
        if ticket is None:
            if cadence is not None:
                if fetched:
                    await cadence.stamp(key, answered)
                if key:
                    await cadence.release(key)
            await self.audit.decision(item)
            return item
        # a fed line: Redis in use (the optional [redis] extra, imported only then)
        from scrapy_walsh_research.state.redis.target_queue import finish

        conn = self.context.redis
        assert conn is not None  # a ticket comes only from a fed line
        # on the fleet's clock (Redis's): as long before its now as the answer
        # came before this worker's
        age = max(0.0, time.time() - answered) if answered is not None else 0.0
        first, at = await finish(conn, ticket, item, key if fetched else "", key, age)
        if fetched and cadence is not None:
            await cadence.stamp(key, at, written=True)
        if first and self.copies is not None:
            self.copies.keep(ticket, item)
        if not first:
            self.stats.inc_value("walsh/records/already_recorded")
            raise DropItem(f"line {item['line']} already has its record (delivered again)")
        await self.audit.decision(item)
        return item
