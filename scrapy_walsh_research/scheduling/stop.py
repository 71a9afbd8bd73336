"""A stopped run: every list line not yet fetched still gets its one record.

Scrapy's graceful stop (the first Ctrl-C, SIGTERM), like any other close
(``CloseSpider``, a refusal while the crawl runs), lets the requests on the
wire finish and drops whatever its scheduler holds. Before the spider
closes, while the item pipelines and the feed exports are still open
(:func:`~scrapy_walsh_research.scheduling._engine.before_close`), this
owner:

* marks the run as stopping: from then on no target is sent. The pacing
  gate ends one that reaches it, and a target a gate would give back to the
  frontier to wait (for its host, for a document's next try) is ended
  instead (:meth:`Pacer.requeue <scrapy_walsh_research.scheduling.pacer.Pacer.requeue>`);
* ends what the scheduler holds (:meth:`FrontierScheduler.drain
  <scrapy_walsh_research.scheduling.frontier.FrontierScheduler.drain>`: the
  hosts' queues and the targets parked for a document's next try), and what
  reaches it later (a redirect hop, a retry): each request's errback gets
  :class:`~scrapy_walsh_research.errors.WalshStopped`, and the record it
  gives goes through the item pipelines and feed exports like any other;
* then runs what else must end (:meth:`RunStop.on_stop`: the targets
  spider's list lines not yet read).

Such a record is ``skipped``, with no rule, and its reason says the run was
stopped; the record pipeline writes no R8 cadence for it, so the next run
takes the line again. A line fed through Redis gets none: the targets
spider gives it back to the queue. Only the bundle's records are made here:
a project spider's requests still in the scheduler are dropped, as Scrapy
drops them.

A crawl stopped because where it runs refuses it
(:func:`~scrapy_walsh_research.errors.stop_refused`: its audit store or its
Redis guard) sends nothing more either, but makes no records: they could not
be written. Its lines are taken again by the next run, as below.

A second Ctrl-C forces Scrapy to stop at once: nothing here runs, and the
lines without a record then are taken again by the next run (no cadence was
written for them; a fed line goes back to the queue once its worker's
heartbeat lapses).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import signals
from twisted.python.failure import Failure

from scrapy_walsh_research._runtime.meta import LLMS_RECORD_META, TARGET_META
from scrapy_walsh_research.errors import WalshStopped, was_refused
from scrapy_walsh_research.scheduling._engine import before_close, engine_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy import Request

    from scrapy_walsh_research._runtime.context import CrawlContext

logger = logging.getLogger(__name__)


class RunStop:
    """Whether the run is being stopped, and the ending of what it holds."""

    def __init__(self, context: CrawlContext) -> None:
        crawler = self.crawler = context.crawler
        #: the frontier's requests are ended through it (its WaitingTargets)
        self.context = context
        #: the engine's close reason once the run is stopping (``shutdown``
        #: for Ctrl-C and SIGTERM), else None
        self.reason: str | None = None
        self._then: list[Callable[[str], Awaitable[None]]] = []
        crawler.signals.connect(self._opened, signal=signals.spider_opened)

    @property
    def stopping(self) -> bool:
        return self.reason is not None

    def on_stop(self, callback: Callable[[str], Awaitable[None]]) -> None:
        """Have ``await callback(reason)`` run once the scheduler is drained."""
        self._then.append(callback)

    def cause(self) -> str:
        """What stopped the run, in words."""
        if self.reason == "shutdown":
            return "the run was stopped (Ctrl-C or SIGTERM)"
        return f"the run was closed ({self.reason})"

    def denial(self) -> WalshStopped:
        """What a target not sent because the run is stopping fails with."""
        return WalshStopped(
            f"{self.cause()} before this line was fetched: not requested this run "
            "(tried again next run)"
        )

    def _opened(self) -> None:
        before_close(self.crawler, self._stop)

    async def _stop(self, reason: str) -> None:
        if self.stopping:  # the engine is asked to close again: already done
            return
        self.reason = reason
        if was_refused(self.crawler):
            return  # its records cannot be written: the next run takes its lines
        frontier = self.context.waiting
        for request in frontier.drain() if frontier is not None else ():
            await self.end(request)
        for callback in self._then:
            await callback(reason)

    @staticmethod
    def _ours(request: Request) -> bool:
        """A declared target's request, or an /llms.txt probe's (its record
        waits for it), with the errback that gives the record."""
        return request.errback is not None and (
            TARGET_META in request.meta or LLMS_RECORD_META in request.meta
        )

    def _failure(self, request: Request) -> Failure:
        """:meth:`denial` as the failure of *request*'s download."""
        failure = Failure(self.denial())  # type: ignore[no-untyped-call]
        failure.request = request  # type: ignore[attr-defined]  # as Scrapy sets it
        return failure

    def records(self, request: Request) -> list[Any]:
        """The records *request*'s errback gives for :meth:`denial`: a
        declared target's, or an /llms.txt probe's (its target's); none for a
        request of a project's own spider."""
        errback = request.errback
        if errback is None or not self._ours(request):
            return []
        out = errback(self._failure(request))
        if out is None:
            return []
        return [out] if isinstance(out, dict) else list(out)

    async def end(self, request: Request) -> None:
        """Give *request*'s line its record now."""
        for record in self.records(request):
            await self.emit(record)

    async def emit(self, record: dict[str, Any]) -> None:
        """*record* through the item pipelines and the feed exports, as a
        record a callback gives (the spider is still open)."""
        await engine_of(self.crawler).scraper.start_itemproc_async(record, response=None)

    def end_soon(self, request: Request) -> None:
        """:meth:`end` for a request that reaches the scheduler while the
        engine closes (a redirect hop, a retry of a request that was on the
        wire): handed to the scraper as a download failure is, so the
        scraper counts it at once and closes only once its record is
        processed (the engine may already be closing it)."""
        if not self._ours(request):
            return
        done = engine_of(self.crawler).scraper.enqueue_scrape(self._failure(request), request)
        done.addErrback(_lost)


def _lost(failure: Failure) -> None:
    logger.error("A stopped run's record was lost: %(f)s", {"f": failure.getErrorMessage()})
