"""An unknown is a wait: targets whose policy document a transient failure
left unknown go back to the frontier until its next try.

robots.txt, tdmrep.json and the operator's blocklist (before any list is in
force) are read before a target. When one cannot be read for a passing
reason (5xx, 429, a timeout, a refused or reset connection, a failed DNS
lookup) and no last good copy stands in, nothing is sent to the host (RFC
9309 §2.3.1.4: complete disallow *while* robots.txt is unreachable), but
the target is not decided either: it goes back to the frontier, its host
held until the document's next try (the document's backoff, and at least
the host's own interval, which its distress may have raised), while every
other host goes on at its pace. When a try succeeds, the targets proceed in
the same run.

The wait is bounded by ``WALSH_POLICY_WAIT``, counted from the first failure
this run met (a fleet's first failure when it came after this worker
started, so workers started together share the bound). Once the next try
would come after the bound, each waiting target gets its one record from its
gate: still no request, and a reason that says what happened, not what the
site never said. Such records are not stamped for R8, so the next run tries
again.

One owner per crawler (``context.service(DocumentWaits)``): the gates ask it
whether to hold a target, and tell it when a document is known again; the
progress log reads which hosts wait (:meth:`DocumentWaits.waiting`).
Correctness lives in the gates (nothing is sent while a document is
unknown); this module only decides how long their targets wait for it.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, NamedTuple

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import task

from scrapy_walsh_research.components import uses_frontier
from scrapy_walsh_research.core.timestamps import duration_text, utc_iso
from scrapy_walsh_research.core.urls import url_host
from scrapy_walsh_research.scheduling.pacer import IN_PLACE_LIMIT, Pacer

if TYPE_CHECKING:
    from scrapy import Request

    from scrapy_walsh_research._runtime.context import CrawlContext
    from scrapy_walsh_research.core.outage import Outage

logger = logging.getLogger(__name__)

#: a last try is made this long before the bound (so that it comes within it)
LAST_TRY_MARGIN = 1.0


class Waiting(NamedTuple):
    """What one host's targets wait for."""

    #: the document's name (``robots.txt``, ``the operator blocklist``)
    document: str
    url: str
    #: its next try, as ``time.monotonic()``
    next_try: float


class DocumentWaits:
    """Which targets wait for which unknown document, and until when."""

    def __init__(self, context: CrawlContext) -> None:
        crawler = self.crawler = context.crawler
        self.stats = crawler.stats
        self.bound = context.settings.policy_wait
        self.store = context.store
        self.pacer = context.service(Pacer)
        self.audit = context.audit
        #: only the frontier keeps a handed-back request until its host is ready
        self.requeue = uses_frontier(crawler.settings)
        #: when this run started (state-store time): an outage that began
        #: before it (an earlier run's) starts this run's wait when first met
        self.started = self.store.time()
        #: document URL -> when this process first found it unknown
        self._first_met: dict[str, float] = {}
        #: document URL -> the next try already announced (one log line and
        #: audit entry per failed try, not per target)
        self._announced: dict[str, float] = {}
        #: document URLs whose wait ended at the bound, until read again
        self._gave_up: set[str] = set()
        #: host -> what its targets wait for
        self._waiting: dict[str, Waiting] = {}

    def deadline(self, outage: Outage) -> float:
        """When waiting for *outage*'s document ends (state-store time)."""
        first = self._first_met.setdefault(outage.url, self.store.time())
        start = outage.since if outage.since >= self.started else first
        return start + self.bound

    def last_try(self, outage: Outage, spacing: float) -> float:
        """When *outage*'s document is tried next: its backoff's next try,
        or, when that falls after the bound while the bound leaves room for
        one more try (at least *spacing* after this one), a last try just
        before the bound, so a host that heals within it is caught."""
        deadline = self.deadline(outage)
        if outage.retry_at >= deadline and deadline - LAST_TRY_MARGIN - outage.last >= spacing:
            return deadline - LAST_TRY_MARGIN
        return outage.retry_at

    def gave_up(self, outage: Outage) -> bool:
        """Whether the wait for *outage*'s document already ended (the
        frontier may then hand out its targets at once: they are decided)."""
        return outage.url in self._gave_up

    def waive(self, outage: Outage) -> None:
        """Let *outage*'s targets go without waiting for its document: its
        gate knows a wait for it was already made (an earlier run waited
        out a first blocklist that never answered)."""
        if outage.url in self._gave_up:
            return
        self._gave_up.add(outage.url)
        self.stats.inc_value(f"walsh/wait/{outage.kind}/waived")

    async def hold(
        self, request: Request, outage: Outage, next_try: float, *, quiet: bool = False
    ) -> Request | None:
        """*request* given back to wait until its document's next try (at
        *next_try*, state-store time, or later when its host is not ready
        then); None when that try would come after the bound: the caller
        decides the target (its record), nothing having been sent. *quiet*:
        the gate says at WARNING what the wait does, so each try is logged
        at INFO."""
        if outage.url in self._gave_up:
            return None
        host = url_host(request.url)
        now = self.store.time()
        host_ready = now + max(0.0, self.pacer.ready_at(host) - time.monotonic())
        next_try = max(next_try, host_ready)
        deadline = self.deadline(outage)
        level = logging.INFO if quiet else logging.WARNING
        if next_try >= deadline:
            await self._end(outage, host, now, deadline, level)
            return None
        await self._announce(outage, host, next_try, deadline, level)
        until = time.monotonic() + (next_try - now)
        self._waiting[host] = Waiting(outage.document, outage.url, until)
        self.stats.inc_value("walsh/wait/requeued")
        self.stats.max_value("walsh/wait/max_hosts", len(self._waiting))
        return await self.keep_aside(request, next_try)

    async def keep_aside(
        self, request: Request, until: float, *, monotonic_until: float | None = None
    ) -> Request:
        """*request* given back, kept aside until *until* (state-store time;
        *monotonic_until*: the same instant as ``time.monotonic()``, so that
        targets kept aside for one instant come back in their order): for a
        document's next try, or for its host's Visit-time window to open.
        Other hosts go on meanwhile."""
        now = self.store.time()
        next_try = until
        if not self.requeue:
            # Another scheduler (scrapy-redis's) hands a request back at
            # once: it waits here a little, then goes back behind others.
            # (counted as waiting in place, not as sending: a worker fed
            # through Redis takes its next line meanwhile)
            delay = min(IN_PLACE_LIMIT, next_try - now)
            from twisted.internet import reactor  # the running one (importing installs one)

            self.pacer.waiting_in_place += 1
            try:
                await maybe_deferred_to_future(task.deferLater(reactor, delay, lambda: None))
            finally:
                self.pacer.waiting_in_place -= 1
            requeued = self.pacer.requeue(request)
            requeued.priority = request.priority - 1
            return requeued
        # kept aside until the next try: the host's other origins go on
        if monotonic_until is None:
            monotonic_until = time.monotonic() + (until - now)
        return self.pacer.requeue(request, until=monotonic_until)

    def reason(self, outage: Outage, consequence: str) -> str:
        """The record's reason once the wait ended: what happened, what it
        means (*consequence*), and that the next run tries again."""
        waited = duration_text(self.store.time() - (self.deadline(outage) - self.bound))
        return (
            f"{outage.describe()}; {consequence}, and no try was left within "
            f"WALSH_POLICY_WAIT ({self.bound:g} s, waited {waited}): not requested this run "
            "(tried again next run)"
        )

    async def known(self, kind: str, url: str, *, read: bool = True) -> None:
        """The document at *url* is unknown no more: read (or a last good
        copy stands in), so the targets that waited for it go on; or, not
        *read*, decided by an answer that does not pass (a redirect loop, a
        404 for a first blocklist), which decides them."""
        first = self._first_met.pop(url, None)
        self._announced.pop(url, None)
        self._gave_up.discard(url)
        for host, waiting in list(self._waiting.items()):
            if waiting.url == url:
                del self._waiting[host]
        if first is None:
            return
        waited = self.store.time() - first
        if read:
            self.stats.inc_value(f"walsh/wait/{kind}/recovered")
            logger.info(
                "%(url)s read after %(w)s of waiting: the targets that waited for it go on",
                {"url": url, "w": duration_text(waited)},
            )
        else:
            self.stats.inc_value(f"walsh/wait/{kind}/decided")
            logger.info(
                "%(url)s answered after %(w)s of waiting, in a way that decides its targets",
                {"url": url, "w": duration_text(waited)},
            )
        await self.audit.wait(url, state="known" if read else "decided", waited=round(waited, 3))

    def waiting(self) -> dict[str, Waiting]:
        """Host -> what its targets wait for, for the progress log."""
        return dict(self._waiting)

    async def _announce(
        self, outage: Outage, host: str, next_try: float, deadline: float, level: int
    ) -> None:
        if self._announced.get(outage.url) == outage.retry_at:
            return
        started = outage.url not in self._announced
        self._announced[outage.url] = outage.retry_at
        if started:
            self.stats.inc_value(f"walsh/wait/{outage.kind}/started")
        in_s = next_try - self.store.time()
        logger.log(
            level,
            "%(what)s: no request to %(host)s while it is unknown; its targets wait for the "
            "next try in %(in)s (until %(until)s at most, WALSH_POLICY_WAIT)",
            {"what": outage.describe(), "host": host, "in": duration_text(in_s),
             "until": utc_iso(deadline)},
        )  # fmt: skip
        await self.audit.wait(
            outage.url, state="waiting", answer=outage.why, tries=outage.tries,
            first_try=utc_iso(outage.since), next_try=utc_iso(next_try),
            wait_until=utc_iso(deadline),
        )  # fmt: skip

    async def _end(
        self, outage: Outage, host: str, now: float, deadline: float, level: int
    ) -> None:
        self._gave_up.add(outage.url)
        self._waiting.pop(host, None)
        self.stats.inc_value(f"walsh/wait/{outage.kind}/gave_up")
        logger.log(
            level,
            "%(what)s; the wait for it ends (WALSH_POLICY_WAIT %(bound)gs, until %(until)s): "
            "the targets that need it get their records, without a request",
            {"what": outage.describe(), "bound": self.bound, "until": utc_iso(deadline)},
        )
        await self.audit.wait(
            outage.url, state="gave_up", answer=outage.why, tries=outage.tries,
            first_try=utc_iso(outage.since), wait_until=utc_iso(deadline),
        )  # fmt: skip
