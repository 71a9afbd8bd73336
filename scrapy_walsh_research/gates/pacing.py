"""R4: the pacing gate, just before the R1 gate: every request that reaches
the network (targets, retries, redirects, the bundle's own robots.txt and
blocklist fetches) waits for its host's slot, and every answer is written to
the host's clock before the slot is released.

On the way out it reserves the host's slot from the :class:`Pacer
<scrapy_walsh_research.scheduling.pacer.Pacer>` or, when the host is not
ready, gives a target back to the frontier (another scheduler: it waits in
place a little first) and lets the bundle's own requests wait in place at
most ``meta["walsh_max_wait"]`` (then :class:`HostBusy`). While the run is
stopping nothing is sent: a target is ended (:class:`WalshStopped`), the
bundle's own request is refused as :class:`HostBusy`. A host that must
not be contacted at all (skipped: R4 or R5) denies the target. On the way
back it puts the hold R5 decided for the answer on the host
(:class:`~scrapy_walsh_research.scheduling.backoff.Backoff`), folds the answer into
the host's load and distress, commits when the request left, and writes the
audit entry. Correctness lives here; the frontier only makes it fast.
"""

from __future__ import annotations

import logging
import time
import weakref
from typing import TYPE_CHECKING

from scrapy.exceptions import IgnoreRequest
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import task

from scrapy_walsh_research._runtime.context import InContext
from scrapy_walsh_research._runtime.marks import SITEMAP, HostBusy
from scrapy_walsh_research._runtime.meta import MAX_WAIT_META, WIRE_TIME_META
from scrapy_walsh_research.components import uses_frontier
from scrapy_walsh_research.core.urls import url_host
from scrapy_walsh_research.errors import WalshDenied, deny, failure_reason
from scrapy_walsh_research.scheduling.backoff import Backoff
from scrapy_walsh_research.scheduling.pacer import IN_PLACE_LIMIT, Pacer
from scrapy_walsh_research.scheduling.wire import DepartureRefused
from scrapy_walsh_research.settings.check import check_configuration

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self

logger = logging.getLogger(__name__)


class PacingMiddleware(InContext):
    """Downloader middleware: reserve the host's slot or wait for it; put
    the answer's hold on the host, and the answer in its clock."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        context = self.context
        self.pacer = context.service(Pacer)
        self.backoff = context.service(Backoff)
        self.marks = context.marks
        self.audit = context.audit
        self.audit.pacing_intervals(self.pacer.interval_for)
        # Only the frontier keeps a handed-back request out of the way until
        # its host is ready; another scheduler (scrapy-redis's) would hand it
        # straight back, so with one the gate waits in place.
        self.requeue = uses_frontier(crawler.settings)
        #: when each request in flight reserved its host's slot
        self._reserved: weakref.WeakKeyDictionary[Request, float] = weakref.WeakKeyDictionary()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        check_configuration(crawler)
        return cls(crawler)

    async def process_request(self, request: Request) -> Request | None:
        host = url_host(request.url)
        purpose = self.marks.purpose(request, quiet=True)
        direct = self.marks.is_direct(request)
        stop = self.pacer.stop
        self.pacer.refuse_if_stopping(host, direct=direct)  # nothing goes out any more
        limit = float("inf")
        if direct:
            limit = request.meta.get(MAX_WAIT_META) or max(
                self.pacer.max_crawl_delay, self.pacer.retry_max_delay
            )
        if not direct or purpose == SITEMAP:
            # a sitemap is optional: a host skipped for its Crawl-delay or a
            # Retry-After receives none (it is ignored, the targets revalidated)
            skip = await self.pacer.skip(host)
            if skip is not None and purpose == SITEMAP:
                # not a target's skip (walsh/skipped/... counts those): the
                # sitemaps gate counts and logs it as a sitemap not fetched
                raise WalshDenied(skip[0], skip[1], outcome="skipped")
            if skip is not None:
                deny(self.crawler, logger, request, skip[0], skip[1], outcome="skipped")
        from twisted.internet import reactor

        spent = 0.0
        while True:
            late = self.pacer.departure_denial(request)
            if late is not None:
                # it passed its gates, then waited here or elsewhere, and may
                # no longer leave (the list in force came to block its host,
                # robots.txt to disallow it, its Visit-time window closed)
                if direct:
                    deny(self.crawler, logger, request, late[0], late[1],
                         outcome="skipped", lasting=False)  # fmt: skip
                return self.pacer.requeue(request)  # its gates decide it again
            now = time.monotonic()
            wait = await self.pacer.reserve(host, now)
            if wait <= 0:
                self._reserved[request] = now
                request.meta.pop(WIRE_TIME_META, None)
                self.pacer.granted(request, host)
                return None
            if stop.stopping and not direct:
                raise stop.denial()
            if direct and (wait > limit or stop.stopping):
                # The bundle's own request would hold the only download slot
                # too long: its caller tries again when the host is ready.
                self.stats.inc_value("walsh/pacing/host_busy")
                raise HostBusy(host, wait)
            if self.requeue and not direct:
                # Give the only download slot back: the frontier holds this
                # request until its host is ready and serves other hosts now
                # (kept aside a moment while the host's last request, on the
                # wire, has no answer yet: its clock says ready meanwhile).
                pending = self.pacer.answer_pending(host)
                return self.pacer.requeue(request, until=now + wait if pending else None)
            if not direct and spent >= IN_PLACE_LIMIT:
                # Another scheduler (scrapy-redis's) hands a request back at
                # once, so it waits here a little; past that, it goes back
                # with a lower priority and the slot serves other hosts (a
                # host leased by a dead worker costs that host, not the fleet).
                requeued = self.pacer.requeue(request)
                requeued.priority = request.priority - 1
                return requeued
            # The bundle's own requests (robots.txt) come from inside another
            # request's middleware chain and cannot be requeued: wait here.
            step = wait if direct else min(wait, IN_PLACE_LIMIT - spent)
            self.stats.inc_value("walsh/pacing/waited")
            self.pacer.waiting_in_place += not direct
            try:
                await maybe_deferred_to_future(task.deferLater(reactor, step, lambda: None))
            finally:
                self.pacer.waiting_in_place -= not direct
            spent += step

    async def process_response(self, request: Request, response: Response) -> Response:
        answered = time.monotonic()  # the response is complete
        host = url_host(request.url)
        # The hold that follows this answer (R5 decides it), and what the
        # answer says about the host's load and distress, are written while
        # this request still holds the host's slot, then the slot is
        # released: written after, another worker waiting for the host could
        # take the slot in between (a Retry-After of 20 s once let one in
        # 0.2 s later).
        sent_at = self._sent_at(request)
        hold = self.backoff.after(request, response=response)
        if hold.seconds:
            await self.pacer.hold(host, time.monotonic() + hold.seconds, hold.by, sent_at)
        if sent_at is not None:
            await self.pacer.note_answer(
                host, response_time=answered - sent_at, status=response.status
            )
        await self._commit(request, answered=True)
        await self.audit.answered(
            request, status=response.status, hold=hold.seconds, hold_by=hold.by
        )
        if hold.by == "Retry-After":
            self.stats.inc_value("walsh/pacing/retry_after_hold")
            logger.info(
                "R5: HTTP %(status)d with Retry-After %(s).0f s from %(url)s: holding "
                "%(host)s for that long",
                {"status": response.status, "s": hold.seconds, "url": request.url, "host": host},
            )
        return response

    async def process_exception(self, request: Request, exception: Exception) -> Request | None:
        host = url_host(request.url)
        if isinstance(exception, DepartureRefused) and not self.marks.is_direct(request):
            # nothing left: a gate closed (blocklist, robots.txt, Visit-time)
            # while it waited for the wire; it goes back through its gates,
            # as from the wait here
            self.stats.inc_value("walsh/pacing/refused_as_it_left")
            await self._commit(request, answered=False)
            await self.audit.answered(request, error=failure_reason(exception))
            return self.pacer.requeue(request)
        sent_at = self._sent_at(request)
        hold = self.backoff.after(request, exception=exception)
        if hold.seconds:  # as for a response: the backoff is in force before the slot is free
            await self.pacer.hold(host, time.monotonic() + hold.seconds, hold.by, sent_at)
        if sent_at is not None and not isinstance(exception, IgnoreRequest):
            # only what was sent: a gate's denial, or a request the handler
            # did not send (the run is stopping), says nothing of the host
            await self.pacer.note_answer(host, exception=exception)
        await self._commit(request, answered=False)
        await self.audit.answered(request, error=failure_reason(exception), hold=hold.seconds)
        return None

    def _sent_at(self, request: Request) -> float | None:
        """When *request* left (its wire stamp, else its reservation), or None
        when this gate did not let it through (nothing was sent)."""
        reserved = self._reserved.get(request)
        if reserved is None:
            return None
        wire = request.meta.get(WIRE_TIME_META)
        return wire if wire is not None else reserved

    async def _commit(self, request: Request, *, answered: bool) -> None:
        """The host's slot is free again: its clock counts from when
        *request* left (or, without a wire stamp, from now); *answered*:
        a response came (else a failure)."""
        reserved = self._reserved.pop(request, None)
        if reserved is None:
            return
        host = url_host(request.url)
        self.pacer.note_duration(time.monotonic() - reserved)
        wire = request.meta.get(WIRE_TIME_META)
        # Without a wire stamp (another download handler), the response time
        # is a safe upper bound of when the origin saw the request.
        await self.pacer.commit(host, wire if wire is not None else time.monotonic())
        if wire is None and answered:
            # a response without a stamp: another download handler, paced
            # from the response. A failure without one never went out (its
            # connection failed before the request was handed to it): it is
            # not a request whose wire time was missing.
            self.stats.inc_value("walsh/pacing/no_wire_time")
