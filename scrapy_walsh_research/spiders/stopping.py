"""The targets spider's lines when its run is stopped: one record each still.

Scrapy's graceful stop (the first Ctrl-C, SIGTERM) or another close ends
the run before every line was fetched. :mod:`~scrapy_walsh_research.scheduling.stop`
stops sending and ends what the scheduler holds; this is the spider's side:

* a line of the list file that ``start()`` had not handed out yet (not read,
  or read and waiting for room in the scheduler) gets its record here, as
  ``start()`` would have decided it: ``invalid``, ``duplicate``, or else
  ``skipped`` with the stop's reason (:meth:`ListStop.unread`);
* a line fed through Redis gets no record: the worker gives the lines it
  holds without one back to the head of the queue when the spider closes,
  and lets go of their R8 claims, so the fleet's other workers (or its next
  run) take them (docs/redis.rst, "one record per line").

Once the spider closes, one WARNING says how many lines were not fetched.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Protocol

from scrapy import signals

from scrapy_walsh_research._runtime.context import CrawlContext
from scrapy_walsh_research._runtime.meta import TARGET_META
from scrapy_walsh_research.core.target_list import read_list
from scrapy_walsh_research.errors import was_refused
from scrapy_walsh_research.scheduling.stop import RunStop

if TYPE_CHECKING:
    from pathlib import Path

    from scrapy import Request
    from scrapy.crawler import Crawler

    from scrapy_walsh_research.core.target_list import ListLine
    from scrapy_walsh_research.state.redis.target_queue import RedisFeed

logger = logging.getLogger(__name__)

#: the list lines read (and, past those handed out, recorded) between two
#: turns of the reactor, as the spider's start() does (START_BURST)
LINES_PER_TURN = 32


class ListSpider(Protocol):
    """What this reads of the targets spider (which builds a :class:`ListStop`)."""

    crawler: Crawler
    list_path: Path | None
    #: canonical URL -> the first line that declared it
    seen: dict[str, int]
    _feed: RedisFeed | None

    def _target_request(
        self, line: ListLine, ticket: dict[str, str] | None
    ) -> tuple[Request | None, str | None]: ...

    def _record(self, **fields: Any) -> dict[str, Any]: ...


class ListStop:
    """What the targets spider owes its lines when the run is stopped."""

    def __init__(self, spider: ListSpider, context: CrawlContext) -> None:
        self.spider = spider
        #: the R8 gate's claims are let go through it
        self.context = context
        self.run = context.service(RunStop)
        #: the number of the list line ``start()`` handed out last
        self.handed_out = 0
        #: canonical URLs of fed lines given back to the queue (their R8 claims go)
        self.given_back: list[str] = []
        self.run.on_stop(self.unread)
        spider.crawler.signals.connect(self.closed, signal=signals.spider_closed)

    @property
    def stopping(self) -> bool:
        return self.run.stopping

    @property
    def stats(self) -> Any:
        return self.spider.crawler.stats  # made after the spider

    def give_back(self, canonical_url: str) -> None:
        """A fed line not sent: no record, it goes back to the queue."""
        self.given_back.append(canonical_url)
        self.stats.inc_value("walsh/stop/given_back")

    async def unread(self, reason: str) -> None:
        """Records for the list lines ``start()`` did not hand out."""
        spider = self.spider
        if spider.list_path is None:
            return
        why = self.run.denial().reason
        for read, line in enumerate(read_list(spider.list_path), 1):
            if read % LINES_PER_TURN == 0:
                await asyncio.sleep(0)  # a long list must not hold the reactor
            if line.number <= self.handed_out:
                continue
            request, invalid = spider._target_request(line, None)  # as start() decides
            if request is None:
                fields: dict[str, Any] = {"canonical_url": None, "outcome": "invalid",
                                          "reason": invalid}  # fmt: skip
            else:
                canon = request.meta[TARGET_META]["canonical_url"]
                first = spider.seen.setdefault(canon, line.number)
                if first != line.number:
                    fields = {"canonical_url": canon, "outcome": "duplicate",
                              "reason": f"same canonical URL as line {first}"}  # fmt: skip
                else:
                    self.stats.inc_value("walsh/stop/skipped")
                    fields = {"canonical_url": canon, "outcome": "skipped", "reason": why}
            await self.run.emit(spider._record(line=line.number, url=line.text, **fields))

    async def closed(self, reason: str) -> None:
        feed = self.spider._feed
        if feed is not None and not was_refused(self.spider.crawler):  # its Redis may refuse
            cadence = self.context.cadence
            if cadence is not None:
                for key in self.given_back:
                    await cadence.release(key)
            back = await feed.give_back()
            if back:
                logger.info(
                    "%(n)d line(s) this worker held without a record went back to the head "
                    "of the queue %(key)r for the fleet to take", {"n": back, "key": feed.key},
                )  # fmt: skip
        skipped = self.stats.get_value("walsh/stop/skipped", 0)
        if self.stopping and skipped:
            logger.warning(
                "%(why)s: %(n)d list line(s) not fetched got a 'skipped' record each; no R8 "
                "cadence is written for them, so the next run takes them again",
                {"why": self.run.cause()[:1].upper() + self.run.cause()[1:], "n": skipped},
            )
