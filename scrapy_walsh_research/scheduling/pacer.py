"""The Pacer: each host's interval over its clock, one per crawler, the one
owner of R4/R5 timing.

R4: serial, at least max(1 s, Crawl-delay, Request-rate) between requests to
a host as the origin sees them, no wait before a host's first request. R5's
host-wide part: the hold an answer puts on its host (a valid Retry-After on
any 429/503, or the backoff of a retried request), persisted like the clock.

Three kinds of caller share it:

* the pacing gate (:mod:`scrapy_walsh_research.gates.pacing`) *enforces* the
  spacing for every request that reaches the network: it reserves the host's
  slot, writes the hold R5 decided for the answer (:meth:`Pacer.hold`, the
  only writer of holds), folds the answer into the host's load and distress
  (:meth:`Pacer.note_answer`), then commits;
* the frontier (:mod:`scrapy_walsh_research.scheduling.frontier`) keeps the
  single download slot busy by asking when each host is ready;
* the gates offer it, through the crawler's context, what they would deny
  from cached state (``WouldDeny``) and what stored state a queued request
  needs (``LoadsAhead``), so the frontier lets a request a gate will deny go
  without waiting for its host, and asks no gate itself.

Correctness lives in the pacing gate; the frontier only makes it fast.

A host's interval is the strictest of what its origins' robots.txt files
ask for (Crawl-delay, Request-rate), at least ``WALSH_MIN_DELAY`` (its
floor), and of what its answers say (:mod:`scrapy_walsh_research.state.hostload`:
a multiple of its response time, and its distress interval); a hold comes on
top. A host whose interval exceeds ``WALSH_MAX_CRAWL_DELAY``, that is held by
a Retry-After beyond ``WALSH_RETRY_MAX_DELAY``, or that was given up for
distress, is skipped (:meth:`Pacer.skip_reason`): its targets get a
``skipped`` record (rule R4 or R5) and it receives nothing, not even
robots.txt. No request waits long while holding the only download slot: a
target goes back to the frontier (:meth:`Pacer.requeue`), and the bundle's
own requests wait in place at most ``meta["walsh_max_wait"]``.
"""

from __future__ import annotations

import logging
import random
import sys
import time
import weakref
from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_from_coro

from scrapy_walsh_research._runtime.marks import HostBusy
from scrapy_walsh_research._runtime.meta import (
    PARKED_META,
    REQUEUED_META,
)
from scrapy_walsh_research.core.urls import url_host
from scrapy_walsh_research.scheduling.adaptive import distress_signal, fold_answer
from scrapy_walsh_research.scheduling.stop import RunStop
from scrapy_walsh_research.settings.adaptive import AdaptivePolicy
from scrapy_walsh_research.state import clock_for
from scrapy_walsh_research.state.hostload import Answer

if TYPE_CHECKING:
    from scrapy import Request

    from scrapy_walsh_research._runtime.context import CrawlContext
    from scrapy_walsh_research.core.robots_policy import RobotsPolicy
    from scrapy_walsh_research.state.protocols import HostClock

logger = logging.getLogger(__name__)

#: how soon a host whose last request has not yet been answered is asked
#: about again (its answer, and any hold it brings, comes first)
OPEN_POLL = 0.05
#: how long a target may wait in place for its host when the scheduler is not
#: the frontier, before it goes back to the scheduler
IN_PLACE_LIMIT = 1.0


class Pacer:
    """Per-host intervals and the host clock: the one owner of R4/R5 timing."""

    def __init__(self, context: CrawlContext, clock: HostClock | None = None) -> None:
        crawler = context.crawler
        settings = crawler.settings
        self.stats = crawler.stats
        walsh = context.settings
        # every value below was checked as the typed settings were read
        self.min_delay = walsh.min_delay
        self.max_crawl_delay = walsh.max_crawl_delay
        #: added to every interval: spacing is counted from when the bytes left,
        #: but the origin stamps arrival after its own accept/parse, which can
        #: take longer for one request (a new connection) than for the next
        self.margin = walsh.pacing_margin
        self.retry_max_delay = walsh.retry_max_delay
        self.adaptive = AdaptivePolicy.from_settings(settings.get)
        self.clock: HostClock = clock or clock_for(crawler)
        self.stop = context.service(RunStop)
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
        #: hosts with a request granted and not yet answered (committed): the
        #: engine takes the next request while one is on the wire, and no
        #: second request to the same host passes pacing before the first's
        #: answer (and the hold R5 decides for it) is in the host's clock
        #: (a request dropped unanswered, collected, leaves no host open)
        self._open: dict[str, weakref.ref[Request]] = {}
        #: when a request last went back to the scheduler because its host was busy
        self.last_requeue = float("-inf")
        #: targets waiting in place for their host (counted in the downloader's
        #: active requests, though nothing of theirs is being sent)
        self.waiting_in_place = 0
        #: the gates that offer what they would deny, and what they load ahead
        self._would_deny = context.would_deny
        self._loads_ahead = context.loads_ahead
        #: the gates that say whether a request may still leave now
        self._departure_checks = context.departure_checks

    def departure_denial(self, request: Request) -> tuple[str, str] | None:
        """(rule, reason) when a gate says *request* may not leave now, though
        it passed that gate before it waited for its host's slot (a robots.txt
        Visit-time window that closed meanwhile); None when it may."""
        for gate in self._departure_checks:
            denial = gate.departure_denial(request)
            if denial is not None:
                return denial
        return None

    def warm(self, request: Request) -> None:
        """Load stored state for a newly queued request in the background, so
        the scheduler's synchronous checks find it cached (no I/O there): the
        host's clock, and what each gate that offers it loads ahead."""
        loads = [self.clock.warm(url_host(request.url))]
        loads += [gate.load_ahead(request) for gate in self._loads_ahead]
        for load in loads:
            d = deferred_from_coro(load)
            d.addErrback(
                lambda f: logger.debug("state preload failed: %(f)s", {"f": f.getErrorMessage()})
            )

    def will_be_denied(self, request: Request) -> bool:
        """True when R4 skips the host or a gate will deny *request* without
        sending anything (``WouldDeny``, asked of the gates that offer
        it): it need not wait for its host's slot (pacing a denied request is
        waste)."""
        if self.skip_reason(url_host(request.url)) is not None:
            return True
        return any(gate.would_deny(request) for gate in self._would_deny)

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
        self._open[host] = weakref.ref(request)
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
            # a Request-rate of no document ("0/1h"), or too slow for a float
            asks = (
                "no request at all"
                if seconds >= sys.float_info.max
                else f"{seconds:g} s between requests"
            )
            return "R4", (
                f"robots.txt of {origin} asks for {asks} "
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

    def defer(self, host: str, seconds: float) -> None:
        """Keep *host* out of the scheduler's way for *seconds* (its
        robots.txt is being fetched by another worker): a local hint only,
        the reservation is what is enforced."""
        self._not_before[host] = time.monotonic() + seconds

    def answer_pending(self, host: str) -> bool:
        """Whether a request granted for *host* still waits for its answer."""
        ref = self._open.get(host)
        if ref is None:
            return False
        if ref() is None:
            del self._open[host]
            return False
        return True

    async def reserve(self, host: str, now: float) -> float:
        """0 when *host*'s slot is taken for a request now, else the seconds
        to wait: at least :data:`OPEN_POLL` while the host's last request
        is not yet answered, whatever its interval says."""
        # loaded first: the interval depends on the host's stored robots.txt
        # readings, which a bounded clock may have evicted
        await self.clock.warm(host)
        if self.answer_pending(host):
            return max(OPEN_POLL, self.ready_at(host) - now)
        # the caller says :meth:`granted` with no await after a 0 (the
        # clock's reservation is atomic: no second 0 within the interval)
        return await self.clock.reserve(host, now, self.interval(host))

    async def commit(self, host: str, at: float) -> None:
        try:
            await self.clock.commit(host, at, self.interval(host))
        finally:
            self._open.pop(host, None)

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
        await fold_answer(self.clock, self.adaptive, self.stats, host, self.required(host), answer)

    def grant_valid(self, host: str) -> bool:
        """Whether the slot this process reserved for *host* is still its own
        (a shared clock's lease can run out while Redis is unreachable)."""
        return self.clock.grant_valid(host)

    def note_duration(self, seconds: float) -> None:
        if self.mean_duration is None:
            self.mean_duration = seconds
        else:
            self.mean_duration += 0.2 * (seconds - self.mean_duration)

    def refuse_if_stopping(self, host: str, *, direct: bool) -> None:
        """While the run is stopping nothing is sent: a target is ended
        (:class:`~scrapy_walsh_research.errors.WalshStopped`), the bundle's
        own request (*direct*) is refused as :class:`HostBusy` (its caller
        ends the target that needed it)."""
        if not self.stop.stopping:
            return
        if not direct:
            raise self.stop.denial()
        self.stats.inc_value("walsh/pacing/host_busy")
        raise HostBusy(host, 1.0)

    def requeue(self, request: Request, *, until: float | None = None) -> Request:
        """*request* given back to the frontier: it keeps its place in its
        host's queue and comes back when the host is ready; with *until*
        (``time.monotonic()``), it is kept aside until then. While the run
        is stopping it waits for nothing: :class:`WalshStopped` ends it."""
        if self.stop.stopping:
            raise self.stop.denial()
        self.stats.inc_value("walsh/pacing/requeued")
        self.last_requeue = time.monotonic()
        requeued = request.replace(dont_filter=True)
        requeued.meta[REQUEUED_META] = True
        if until is not None:
            requeued.meta[PARKED_META] = until
        return requeued
