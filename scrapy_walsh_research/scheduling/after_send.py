"""Writes an answer leaves that the next request need not wait for.

The crawl is serial: whatever the bundle does between one response and the
next request adds to the crawl's wall time, while the time the next request
is out (30 ms on a fast origin, seconds on a slow one) hides it. A write
that no decision about the next request reads is queued here
(:meth:`AfterSend.defer`) and done, in the order queued, as soon as the next
request's first bytes have left (the wire handler says so:
:meth:`AfterSend.request_left`); when no request leaves, ``FLUSH_AFTER_S``
after it was queued; and in any case before the spider closes (a finished
crawl, ``CloseSpider``, Ctrl-C or SIGTERM), before any store is closed.

Queued: an answer's audit entry (stamped with the answer's time when it is
queued) and the time of a target's last answer (the sitemaps gate's history
for a later run). Not queued: what R4 and R5 rely on (a hold, the host's
clock, a request's own audit entry, durable before it leaves) and anything
a gate reads for the next request. What a crash (the process killed) can
lose is the queued writes: those of the answers since the last request left,
at most ``FLUSH_AFTER_S`` old; before, it was the writes of the answer being
processed.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from twisted.internet.task import deferLater

from scrapy_walsh_research.per_crawler import per_crawler

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: the longest a queued write waits when no request leaves (the crawl's
#: last answer, a wait for a host's next slot)
FLUSH_AFTER_S = 0.05


class AfterSend:
    """The crawler's queue of writes done once the next request has left."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._queued: deque[Callable[[], Awaitable[None] | None]] = deque()
        self._timer: Any = None
        self._running = False
        #: the spider is closing: no request will leave, write at once
        self._closing = False
        crawler.signals.connect(self.flush, signal=signals.spider_closed)

    @classmethod
    def for_crawler(cls, crawler: Crawler) -> AfterSend:
        return per_crawler(crawler, AfterSend, lambda: cls(crawler))

    def __len__(self) -> int:
        return len(self._queued)

    def defer(self, work: Callable[[], Awaitable[None] | None]) -> None:
        """Have ``work()`` (awaited if it returns an awaitable) run after the
        next request leaves, or within ``FLUSH_AFTER_S`` if none does."""
        self._queued.append(work)
        if self._closing:
            self._start()
        elif self._timer is None or not self._timer.active():
            from twisted.internet import reactor

            # one timer at a time, never cancelled: it finds the queue empty
            # when a request left first (cheaper than a timer per answer)
            # (Twisted types its reactor interfaces for the mypy-zope plugin)
            self._timer = reactor.callLater(FLUSH_AFTER_S, self._start)  # type: ignore[arg-type]

    def request_left(self) -> None:
        """A request's bytes have just been handed to its socket: what is
        queued runs now, while the request is out."""
        if self._queued and not self._running:
            self._start()

    def _start(self) -> None:
        if self._queued and not self._running:
            deferred_from_coro(self._run())

    async def _run(self) -> None:
        """Run what is queued, in order, one at a time (a write that waits,
        on Redis say, holds the ones queued after it)."""
        if self._running:
            return
        self._running = True
        try:
            while self._queued:
                work = self._queued.popleft()
                try:
                    done = work()
                    if done is not None:
                        await done
                except Exception:
                    self.crawler.stats.inc_value("walsh/after_send/failed")
                    logger.exception("A write deferred until the next request left failed")
        finally:
            self._running = False

    async def flush(self) -> None:
        """Run everything queued now (the spider is closing); anything
        queued from here on runs at once."""
        self._closing = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        while self._queued or self._running:
            if self._running:  # a run under way awaits a write: let it end
                from twisted.internet import reactor

                await maybe_deferred_to_future(deferLater(reactor, 0.01, lambda: None))
            else:
                await self._run()
