"""R4: serial, at least max(1 s, Crawl-delay, Request-rate, Retry-After) between
requests to a host as the origin sees them, no wait before a host's first request.
R5's host-wide part lives here too: a valid ``Retry-After`` on any 429/503
(targets, robots.txt, the blocklist, requests that are not retried) holds the
whole host, persisted like its clock.

Two parts share one :class:`Pacer` per crawler:

* :class:`PacingMiddleware`, a downloader middleware just before the R1 gate,
  *enforces* the spacing for every request that reaches the network: targets,
  retries, redirects, and the bundle's own robots.txt/blocklist requests;
* :class:`~scrapy_walsh_research.frontier.FrontierScheduler` keeps the single
  download slot busy by handing out the request whose host is ready soonest.

Correctness lives in the middleware; the scheduler only makes it fast.

A host's interval is the strictest of what its origins' robots.txt files
ask for (Crawl-delay, Request-rate), at least ``WALSH_MIN_DELAY`` (its
floor), and of what its answers say (:mod:`scrapy_walsh_research.adaptive`:
a multiple of its response time, and its distress interval); a
Retry-After or backoff hold comes on top. Every answer to a request this
gate let through (targets, retries, robots.txt, the operator's documents)
is folded into the host's clock before the request's slot is released. A
host whose interval exceeds ``WALSH_MAX_CRAWL_DELAY``, that is held by a
Retry-After beyond ``WALSH_RETRY_MAX_DELAY``, or that was given up for
distress, is skipped: its targets get a ``skipped`` record (rule R4 or R5)
and it receives nothing, not even robots.txt. No request waits long while
holding the only download slot: a target goes back to the frontier, and the
bundle's own requests wait in place at most ``meta["walsh_max_wait"]`` (then
:class:`HostBusy`).
"""

from __future__ import annotations

import logging
import random
import time
import weakref
from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from twisted.internet import task

from scrapy_walsh_research._runtime.marks import HostBusy, Marks
from scrapy_walsh_research._runtime.meta import (
    MAX_WAIT_META,
    PARKED_META,
    REQUEUED_META,
    WIRE_TIME_META,
)
from scrapy_walsh_research.components import uses_frontier
from scrapy_walsh_research.core.retry_after import RATE_LIMIT_CODES, parse_retry_after
from scrapy_walsh_research.core.urls import url_host
from scrapy_walsh_research.errors import WalshConfigurationError, deny, failure_reason
from scrapy_walsh_research.evidence.audit import AuditTrail
from scrapy_walsh_research.per_crawler import per_crawler
from scrapy_walsh_research.scheduling.adaptive import distress_signal
from scrapy_walsh_research.settings import defaults
from scrapy_walsh_research.settings.adaptive import AdaptivePolicy
from scrapy_walsh_research.settings.check import check_configuration, min_delay_problem
from scrapy_walsh_research.state import clock_for
from scrapy_walsh_research.state.hostload import Answer, worth_noting

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self

    from scrapy_walsh_research.core.robots_policy import RobotsPolicy
    from scrapy_walsh_research.state.protocols import HostClock

logger = logging.getLogger(__name__)

#: how long a target may wait in place for its host when the scheduler is not
#: the frontier, before it goes back to the scheduler
IN_PLACE_LIMIT = 1.0


class Pacer:
    """Per-host intervals and the host clock: the one owner of R4/R5 timing."""

    def __init__(self, crawler: Crawler, clock: HostClock | None = None) -> None:
        settings = crawler.settings
        self.stats = crawler.stats
        self.min_delay = settings.getfloat("WALSH_MIN_DELAY", defaults.WALSH_MIN_DELAY)
        too_short = min_delay_problem(self.min_delay)
        if too_short is not None:
            raise WalshConfigurationError(too_short)
        self.max_crawl_delay = settings.getfloat(
            "WALSH_MAX_CRAWL_DELAY", defaults.WALSH_MAX_CRAWL_DELAY
        )
        #: added to every interval: spacing is counted from when the bytes left,
        #: but the origin stamps arrival after its own accept/parse, which can
        #: take longer for one request (a new connection) than for the next
        self.margin = settings.getfloat("WALSH_PACING_MARGIN", defaults.WALSH_PACING_MARGIN)
        if self.margin < 0:
            raise WalshConfigurationError(
                f"WALSH_PACING_MARGIN={self.margin}: it is added to every interval and "
                "cannot be negative."
            )
        self.retry_max_delay = settings.getfloat(
            "WALSH_RETRY_MAX_DELAY", defaults.WALSH_RETRY_MAX_DELAY
        )
        try:
            self.adaptive = AdaptivePolicy.from_settings(settings.get)
        except ValueError as exc:
            raise WalshConfigurationError(f"{exc}.") from None
        self.clock: HostClock = clock or clock_for(crawler)
        #: host -> (the gap an R5 hold imposes after the request it answered,
        #: Retry-After or backoff), until the host's next request is granted
        self._hold_gaps: dict[str, tuple[float, str]] = {}
        #: each granted request -> the interval in force before it, and what set it
        self._granted: weakref.WeakKeyDictionary[Request, tuple[float, str]] = (
            weakref.WeakKeyDictionary()
        )
        #: moving average of dispatch-to-response time, for the frontier's planning
        self.mean_duration: float | None = None
        self._not_before: dict[str, float] = {}
        #: set by the R5 gate: (request, status, exception) -> hold seconds
        self.hold_planner: (
            Callable[[Request, int | None, Exception | None], float | None] | None
        ) = None
        #: when a request last went back to the scheduler because its host was busy
        self.last_requeue = float("-inf")
        #: targets waiting in place for their host (counted in the downloader's
        #: active requests, though nothing of theirs is being sent)
        self.waiting_in_place = 0
        self._denial_checks: list[Callable[[Request], bool]] = [
            lambda r: self.skip_reason(url_host(r.url)) is not None
        ]
        self._warmers: list[Callable[[Request], Awaitable[None]]] = [
            lambda r: self.clock.warm(url_host(r.url))
        ]

    @classmethod
    def for_crawler(cls, crawler: Crawler) -> Pacer:
        return per_crawler(crawler, Pacer, lambda: cls(crawler))

    def add_denial_check(self, check: Callable[[Request], bool]) -> None:
        """Register a gate's cheap, cached-state-only "would deny" test."""
        self._denial_checks.append(check)

    def add_warmer(self, warm: Callable[[Request], Awaitable[None]]) -> None:
        """Register a gate's loader of the stored state *request* will need."""
        self._warmers.append(warm)

    def warm(self, request: Request) -> None:
        """Load stored state for a newly queued request in the background, so
        the scheduler's synchronous checks find it cached (no I/O there)."""
        for warmer in self._warmers:
            d = deferred_from_coro(warmer(request))
            d.addErrback(
                lambda f: logger.debug("state preload failed: %(f)s", {"f": f.getErrorMessage()})
            )

    def will_be_denied(self, request: Request) -> bool:
        """True when a gate will deny *request* without sending anything: it
        need not wait for its host's slot (pacing a denied request is waste)."""
        return any(check(request) for check in self._denial_checks)

    async def note_robots(self, origin: str, policy: RobotsPolicy, expires: float) -> None:
        """Adopt the selected group's Crawl-delay and Request-rate for *origin*
        until *expires* (wall clock); the host keeps the strictest of its origins'."""
        delays = [d for d in (policy.crawl_delay, policy.request_rate_interval) if d]
        await self.clock.note_interval(url_host(origin), origin, max(delays, default=0.0), expires)

    def required(self, host: str) -> float:
        """The interval R4 requires between two requests to *host*, its floor:
        max(1 s or WALSH_MIN_DELAY, its robots.txt Crawl-delay/Request-rate)."""
        return max(self.min_delay, self.clock.robots_interval(host)[0])

    def in_force(self, host: str) -> tuple[float, str]:
        """The interval kept between requests to *host* (without the margin),
        and what set it: ``floor``, ``Crawl-delay``, ``load`` or ``distress``
        (the strictest; the plainer reason when two are equal)."""
        seconds, source = self.min_delay, "floor"
        robots = self.clock.robots_interval(host)[0]
        if robots > seconds:
            seconds, source = robots, "Crawl-delay"
        view = self.clock.host_load(host)
        load = view.load_interval(self.adaptive)
        if load > seconds:
            seconds, source = load, "load"
        if view.distress > seconds:
            seconds, source = view.distress, "distress"
        return seconds, source

    def interval(self, host: str) -> float:
        """What pacing keeps: the interval in force plus its safety margin."""
        return self.in_force(host)[0] + self.margin

    def granted(self, request: Request, host: str) -> None:
        """*request* got its host's slot: remember the interval that held it
        back (the audit entry names it), a hold from the last answer included."""
        seconds, source = self.in_force(host)
        held = self._hold_gaps.pop(host, None)
        if held is not None and held[0] > seconds:
            seconds, source = held
        self._granted[request] = (seconds, source)
        self.stats.inc_value(f"walsh/adaptive/set_by/{source}")
        self.stats.max_value("walsh/adaptive/max_interval", round(seconds, 3))

    def interval_for(self, request: Request) -> tuple[float, str]:
        """The interval in force before *request* and what set it (see :meth:`granted`)."""
        granted = self._granted.get(request)
        return granted if granted is not None else self.in_force(url_host(request.url))

    def skip_reason(self, host: str) -> tuple[str, str] | None:
        """(rule, reason) when *host* must not be contacted at all in this run
        (from cached state; see :meth:`skip`)."""
        seconds, origin, current = self.clock.robots_interval(host)
        # An expired reading may be refreshed once the host is ready again.
        if seconds > self.max_crawl_delay and (current or self.ready_at(host) > time.monotonic()):
            return "R4", (
                f"robots.txt of {origin} asks for {seconds:g} s between requests "
                f"(Crawl-delay / Request-rate), beyond WALSH_MAX_CRAWL_DELAY "
                f"({self.max_crawl_delay:g} s): host skipped"
            )
        now = time.monotonic()
        held = self.clock.held_until(host) - now
        if held > self.retry_max_delay:
            return "R5", (
                f"the host answered Retry-After: it is not to be contacted for another "
                f"{held:.0f} s, beyond WALSH_RETRY_MAX_DELAY ({self.retry_max_delay:g} s): "
                "host skipped"
            )
        load = self.clock.host_load(host)
        if load.gave_up_until > now:
            return "R5", (
                f"the host kept signalling distress ({load.describe()}) with its interval at "
                f"WALSH_ADAPTIVE_MAX_DELAY ({self.adaptive.max_delay:g} s): host given up for "
                f"another {load.gave_up_until - now:.0f} s (WALSH_ADAPTIVE_GIVE_UP)"
            )
        return None

    async def skip(self, host: str) -> tuple[str, str] | None:
        """:meth:`skip_reason` after loading what is stored about *host*."""
        await self.clock.warm(host)
        return self.skip_reason(host)

    def ready_at(self, host: str) -> float:
        ready = self.clock.ready_at(host, self.interval(host))
        deferred = self._not_before.get(host)
        return ready if deferred is None else max(ready, deferred)

    def plan_hold(
        self,
        request: Request,
        *,
        status: int | None = None,
        exception: Exception | None = None,
    ) -> float | None:
        """The backoff hold the R5 gate will put on the host after this
        answer (its planner decides, and keeps to it), or None."""
        if self.hold_planner is None:
            return None
        return self.hold_planner(request, status, exception)

    def defer(self, host: str, seconds: float) -> None:
        """Keep *host* out of the scheduler's way for *seconds* (its
        robots.txt is being fetched by another worker): a local hint only,
        the reservation is what is enforced."""
        self._not_before[host] = time.monotonic() + seconds

    async def reserve(self, host: str, now: float) -> float:
        # loaded first: the interval depends on the host's stored robots.txt
        # readings, which a bounded clock may have evicted
        await self.clock.warm(host)
        return await self.clock.reserve(host, now, self.interval(host))

    async def commit(self, host: str, at: float) -> None:
        await self.clock.commit(host, at, self.interval(host))

    async def hold(
        self, host: str, until: float, source: str = "backoff", sent_at: float | None = None
    ) -> None:
        """No request to *host* before *until* (*source*: ``Retry-After`` or
        ``backoff``); *sent_at*: when the request this answers left, so the
        audit entry of the host's next request can name the gap the hold set."""
        if sent_at is not None:
            gap = until - sent_at
            previous = self._hold_gaps.get(host)
            if previous is None or gap > previous[0]:
                self._hold_gaps[host] = (gap, source)
        await self.clock.hold(host, until)

    async def note_answer(
        self,
        host: str,
        *,
        response_time: float | None = None,
        status: int | None = None,
        exception: Exception | None = None,
    ) -> None:
        """Fold an answer to a request this process sent to *host* into the
        host's load and distress (before its slot is released)."""
        answer = Answer(response_time, distress_signal(status, exception), random.random())
        signal = answer.distress(self.adaptive)
        floor = self.required(host)
        view = self.clock.host_load(host)
        if not worth_noting(view, answer, self.adaptive, floor):
            return
        event = await self.clock.note_answer(host, answer, self.adaptive, floor)
        stats = self.stats
        if signal is not None:
            stats.inc_value("walsh/adaptive/signals")
            stats.inc_value(f"walsh/adaptive/signal/{signal.lower().replace(' ', '_')}")
        if event in ("raised", "eased", "recovered", "gave_up"):
            stats.inc_value(f"walsh/adaptive/{event}")
        view = self.clock.host_load(host)
        if event == "raised":
            logger.info(
                "Distress from %(host)s (%(signal)s): its requests now at least %(s).1f s "
                "apart (signals so far: %(all)s)",
                {"host": host, "signal": signal, "s": view.distress, "all": view.describe()},
            )
        elif event == "gave_up":
            logger.warning(
                "Distress from %(host)s (%(signal)s) with its interval at "
                "WALSH_ADAPTIVE_MAX_DELAY (%(cap)g s): host given up for %(for)g s, its "
                "remaining targets skipped (signals: %(all)s)",
                {"host": host, "signal": signal, "cap": self.adaptive.max_delay,
                 "for": self.adaptive.give_up, "all": view.describe()},
            )  # fmt: skip
        elif event == "recovered":
            logger.info("%(host)s answers normally again: back to its floor pace", {"host": host})

    def grant_valid(self, host: str) -> bool:
        """Whether the slot this process reserved for *host* is still its own
        (a shared clock's lease can run out while Redis is unreachable)."""
        return self.clock.grant_valid(host)

    def note_duration(self, seconds: float) -> None:
        if self.mean_duration is None:
            self.mean_duration = seconds
        else:
            self.mean_duration += 0.2 * (seconds - self.mean_duration)

    def requeue(self, request: Request, *, until: float | None = None) -> Request:
        """*request* given back to the frontier: it keeps its place in its
        host's queue and comes back when the host is ready; with *until*
        (``time.monotonic()``), it is kept aside until then."""
        self.stats.inc_value("walsh/pacing/requeued")
        self.last_requeue = time.monotonic()
        requeued = request.replace(dont_filter=True)
        requeued.meta[REQUEUED_META] = True
        if until is not None:
            requeued.meta[PARKED_META] = until
        return requeued


class PacingMiddleware:
    """Downloader middleware: reserve the host's slot or wait for it; hold
    the host on a Retry-After."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.pacer = Pacer.for_crawler(crawler)
        self.marks = Marks.for_crawler(crawler)
        self.audit = AuditTrail.for_crawler(crawler)
        self.audit.interval = self.pacer.interval_for
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
        direct = self.marks.is_direct(request)
        limit = float("inf")
        if direct:
            limit = request.meta.get(MAX_WAIT_META) or max(
                self.pacer.max_crawl_delay, self.pacer.retry_max_delay
            )
        else:
            skip = await self.pacer.skip(host)
            if skip is not None:
                deny(self.crawler, logger, request, skip[0], skip[1], outcome="skipped")
        from twisted.internet import reactor

        spent = 0.0
        while True:
            now = time.monotonic()
            wait = await self.pacer.reserve(host, now)
            if wait <= 0:
                self._reserved[request] = now
                request.meta.pop(WIRE_TIME_META, None)
                self.pacer.granted(request, host)
                return None
            if direct and wait > limit:
                # The bundle's own request would hold the only download slot
                # too long: its caller tries again when the host is ready.
                self.stats.inc_value("walsh/pacing/host_busy")
                raise HostBusy(host, wait)
            if self.requeue and not direct:
                # Give the only download slot back: the frontier holds this
                # request until its host is ready and serves other hosts now.
                return self.pacer.requeue(request)
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
        seconds = None
        if response.status in RATE_LIMIT_CODES:
            seconds = parse_retry_after(response.headers.get(b"Retry-After"))
        # The hold that follows this answer, and what the answer says about
        # the host's load and distress, are written while this request still
        # holds the host's slot, then the slot is released: written after,
        # another worker waiting for the host could take the slot in between
        # (a Retry-After of 20 s once let one in 0.2 s later).
        sent_at = self._sent_at(request)
        hold = seconds or self.pacer.plan_hold(request, status=response.status)
        hold_by = "Retry-After" if seconds else "backoff"
        if hold:
            await self.pacer.hold(host, time.monotonic() + hold, hold_by, sent_at)
        if sent_at is not None:
            await self.pacer.note_answer(
                host, response_time=answered - sent_at, status=response.status
            )
        await self._commit(request)
        await self.audit.answered(request, status=response.status, hold=hold, hold_by=hold_by)
        if seconds:
            self.stats.inc_value("walsh/pacing/retry_after_hold")
            logger.info(
                "R5: HTTP %(status)d with Retry-After %(s).0f s from %(url)s: holding "
                "%(host)s for that long",
                {"status": response.status, "s": seconds, "url": request.url, "host": host},
            )
        return response

    async def process_exception(self, request: Request, exception: Exception) -> None:
        host = url_host(request.url)
        sent_at = self._sent_at(request)
        hold = self.pacer.plan_hold(request, exception=exception)
        if hold:  # as for a response: the backoff is in force before the slot is free
            await self.pacer.hold(host, time.monotonic() + hold, "backoff", sent_at)
        if sent_at is not None:  # only what was sent: a gate's denial says nothing of the host
            await self.pacer.note_answer(host, exception=exception)
        await self._commit(request)
        await self.audit.answered(request, error=failure_reason(exception), hold=hold)

    def _sent_at(self, request: Request) -> float | None:
        """When *request* left (its wire stamp, else its reservation), or None
        when this gate did not let it through (nothing was sent)."""
        reserved = self._reserved.get(request)
        if reserved is None:
            return None
        wire = request.meta.get(WIRE_TIME_META)
        return wire if wire is not None else reserved

    async def _commit(self, request: Request) -> None:
        reserved = self._reserved.pop(request, None)
        if reserved is None:
            return
        host = url_host(request.url)
        self.pacer.note_duration(time.monotonic() - reserved)
        wire = request.meta.get(WIRE_TIME_META)
        # Without a wire stamp (another download handler), the response time
        # is a safe upper bound of when the origin saw the request.
        await self.pacer.commit(host, wire if wire is not None else time.monotonic())
        if wire is None:
            self.stats.inc_value("walsh/pacing/no_wire_time")
