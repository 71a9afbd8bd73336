"""The documents an origin publishes about every page of it (robots.txt,
tdmrep.json): read once per origin, before its first target, and shared.

One mechanism for both gates (R2 and PREF), so a fix to one is a fix to the
other:

* an answer is kept in memory (least recently used first, bounded) and in
  the state store, so a restart or another worker reuses it within its TTL;
* one fetch per origin at a time, and with shared state one per fleet: the
  other workers wait for it and adopt what it stored;
* a failed fetch is stored with when to try again, and the tries back off
  exponentially (``WALSH_ROBOTS_RETRY_DELAY``, doubling, at most the TTL)
  across evictions, restarts and workers;
* fetching is itself a request to the host: never sent to a host that is
  skipped, and a target whose host is not ready goes back to the frontier
  instead of holding the only download slot while the document waits.

What an answer *means* (a policy, a reservation; what a failure implies)
is each gate's: :meth:`OriginDocuments._fetch`,
:meth:`OriginDocuments._from_saved` and :meth:`OriginDocuments._failed_entry`.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from scrapy import Request
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred

from scrapy_walsh_research import defaults
from scrapy_walsh_research.bounds import cache_size
from scrapy_walsh_research.components import uses_frontier
from scrapy_walsh_research.core.urls import origin_of, url_host
from scrapy_walsh_research.errors import WalshDenied, deny, failure_reason
from scrapy_walsh_research.internal import DIRECT, HostBusy, Marks, internal_fetch
from scrapy_walsh_research.pacing import Pacer
from scrapy_walsh_research.state import FlightBusy, state_for

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

#: a last good answer is used for this long when the document is unreachable
LAST_GOOD_MAX_AGE = 30 * 86400.0
#: an origin's documents (robots.txt, tdmrep.json) stay in force at least this
#: many of its host's intervals: their two fetches, then the target
USABLE_INTERVALS = 3
#: how long a document's fetch may wait in place when its target can go back
#: to the frontier instead (a stale view of a shared clock, another origin)
SHORT_WAIT = 2.0


class OriginEntry(Protocol):
    """What each gate keeps per origin: until when it holds, and how many
    fetches in a row have failed."""

    expires: float
    failures: int


E = TypeVar("E", bound=OriginEntry)


class OriginDocuments(Generic[E]):
    """Base of the gates that read a per-origin document before a target."""

    #: ``walsh/<kind>/...`` stats, and the fleet's fetch lock ``<kind>:<origin>``
    kind: ClassVar[str]
    #: the document's name in messages (``robots.txt``)
    document: ClassVar[str]
    #: where it is (``/robots.txt``), the mark its fetch carries, and how much
    #: of it is read (one byte more is fetched, so a larger one is noticed)
    path: ClassVar[str]
    purpose: ClassVar[str]
    max_bytes: ClassVar[int]
    #: where stored answers that are not failures live, the 2xx copy first
    answer_namespaces: ClassVar[tuple[str, ...]]
    #: where the last failed fetch and its next try live
    unreachable_namespace: ClassVar[str]
    #: the gate's logger (denials are logged by the gate that makes them)
    log: ClassVar[logging.Logger]

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.stats = crawler.stats
        self.ttl = settings.getfloat("WALSH_ROBOTS_TTL", defaults.WALSH_ROBOTS_TTL)
        self.retry_delay = settings.getfloat(
            "WALSH_ROBOTS_RETRY_DELAY", defaults.WALSH_ROBOTS_RETRY_DELAY
        )
        #: how long other workers wait for one worker's fetch of an origin's document
        self.fetch_ttl = settings.getfloat("DOWNLOAD_TIMEOUT", 180.0) + 30.0
        self.store = state_for(crawler)
        self.marks = Marks.for_crawler(crawler)
        self.pacer = Pacer.for_crawler(crawler)
        self.pacer.add_denial_check(self._cached_denial)
        self.requeue = uses_frontier(settings)
        #: answers, least recently used first: an evicted origin's answer is
        #: read back from the state store within its TTL
        self._cache: OrderedDict[str, E] = OrderedDict()
        self.cache_size = cache_size(
            settings, "WALSH_ROBOTS_CACHE_SIZE", defaults.WALSH_ROBOTS_CACHE_SIZE
        )
        self._pending: dict[str, Deferred[None]] = {}

    # -- what each gate says ------------------------------------------------------

    def _cached_denial(self, request: Request) -> bool:
        """Whether cached answers alone already deny *request* (for the frontier)."""
        raise NotImplementedError

    async def _fetch(self, origin: str, previous: E | None, max_wait: float | None) -> E:
        """Fetch the document; a failure goes through :meth:`_unreachable`."""
        raise NotImplementedError

    async def _from_saved(self, saved: dict[str, Any], expires: float) -> E:
        """The entry a stored answer (not a failure) stands for."""
        raise NotImplementedError

    async def _failed_entry(
        self, origin: str, status: int | None, why: str, retry_at: float, failures: int
    ) -> E:
        """What holds until *retry_at* when the document cannot be fetched."""
        raise NotImplementedError

    async def _refused(self, origin: str, previous: E | None, exc: WalshDenied) -> E | None:
        """What a gate's refusal of the fetch means; None: a failed fetch."""
        return None

    async def _noted(self, origin: str, entry: E) -> None:
        """A new answer is in force (robots.txt tells pacing its Crawl-delay)."""

    # -- the shared mechanism ---------------------------------------------------

    async def entry_or_requeue(self, request: Request) -> E | Request:
        """The answer in force for *request*'s origin, fetched if need be; or
        *request* given back to the frontier while its host is not ready.
        Denies the request (``skipped``) when fetching would contact a
        skipped host, or when the fetch cannot wait for its host."""
        entry = self._fresh(origin_of(request.url), touch=True)
        if entry is not None:
            return entry
        host = url_host(request.url)
        skip = await self.pacer.skip(host)
        if skip is not None:  # fetching the document would contact the host
            deny(self.crawler, self.log, request, skip[0], skip[1], outcome="skipped")
        # The bundle's own tdmrep.json redirected to another origin is
        # fetched from inside a target's chain: it cannot go back to the
        # frontier, so it waits in place (bounded) for that origin's document.
        direct = self.marks.purpose(request, quiet=True) in DIRECT
        requeue = self.requeue and not direct
        if requeue and self.pacer.ready_at(host) > time.monotonic():
            return self.pacer.requeue(request)
        wait = self.pacer.max_crawl_delay if direct else None
        try:
            return await self.entry_for(request.url, max_wait=SHORT_WAIT if requeue else wait)
        except HostBusy as exc:
            if requeue:
                self.pacer.defer(host, exc.ready_in)
                return self.pacer.requeue(request)
            reason = f"{self.document} cannot be fetched: {exc}"
            deny(self.crawler, self.log, request, "R4", reason, outcome="skipped")

    def _fresh(self, origin: str, touch: bool = False) -> E | None:
        entry = self._cache.get(origin)
        if entry is None or self.store.time() >= entry.expires:
            return None
        if touch:
            self._cache.move_to_end(origin)
        return entry

    def _remember(self, origin: str, entry: E) -> None:
        """Cache *entry*, evicting the least recently used beyond the bound."""
        self._cache[origin] = entry
        self._cache.move_to_end(origin)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
            self.stats.inc_value(f"walsh/{self.kind}/cache_evicted")
        self.stats.max_value(f"walsh/{self.kind}/cache_max", len(self._cache))

    async def entry_for(self, url: str, *, max_wait: float | None = None) -> E:
        """The answer in force for *url*'s origin: cached, stored within the
        TTL, or fetched (one fetch per origin at a time, and with shared
        state one per fleet). :class:`HostBusy` when the fetch cannot wait
        *max_wait* for its host (nothing was sent)."""
        origin = origin_of(url)
        while True:
            entry = self._fresh(origin)
            if entry is not None:
                return entry
            pending = self._pending.get(origin)
            if pending is None:
                break
            await maybe_deferred_to_future(pending)  # then look again
        pending = self._pending[origin] = Deferred()
        try:
            entry = await self._stored_fresh(origin) or await self._fetch_once(
                origin, self._cache.get(origin), max_wait
            )
            await self._noted(origin, entry)
            # An answer outlives the waits its own fetch and the origin's
            # other document impose on the host: a TTL shorter than the
            # Crawl-delay would otherwise re-fetch the two in turn forever
            # while the target waits for its turn.
            usable = self.store.time() + USABLE_INTERVALS * self.pacer.interval(url_host(url))
            entry.expires = max(entry.expires, usable)
            self._remember(origin, entry)
        finally:
            del self._pending[origin]
            pending.callback(None)
        return entry

    async def _fetch_once(self, origin: str, previous: E | None, max_wait: float | None) -> E:
        """Fetch, or, with shared state, let one worker of the fleet fetch while
        the others wait and adopt what it stored: workers starting together
        send an origin one request for the document, not one each."""
        for _ in range(3):
            try:
                release = await self.store.single_flight(
                    f"{self.kind}:{origin}", ttl=self.fetch_ttl, max_wait=max_wait
                )
            except FlightBusy:
                # another worker's fetch is still out: serve other hosts
                # meanwhile rather than hold the only download slot
                raise HostBusy(url_host(origin), 1.0) from None
            if release is not None:
                try:
                    return await self._fetch(origin, previous, max_wait)
                finally:
                    await release()
            stored = await self._stored_fresh(origin)
            if stored is not None:
                self.stats.inc_value(f"walsh/{self.kind}/adopted_from_worker")
                return stored
        return await self._fetch(origin, previous, max_wait)

    async def _stored_answers(
        self, origin: str, namespaces: tuple[str, ...]
    ) -> list[dict[str, Any]]:
        answers = [await self.store.get(namespace, origin) for namespace in namespaces]
        return [
            a
            for a in answers
            if isinstance(a, dict) and isinstance(a.get("fetched_at"), (int, float))
        ]

    async def _stored_fresh(self, origin: str) -> E | None:
        """The latest answer stored by an earlier run or another worker and
        still in force: a copy within the TTL, or a failed fetch before its
        next try."""
        answers = await self._stored_answers(
            origin, (*self.answer_namespaces, self.unreachable_namespace)
        )
        if not answers:
            return None
        saved = max(answers, key=lambda a: float(a["fetched_at"]))
        fetched_at, now = float(saved["fetched_at"]), self.store.time()
        if "retry_at" in saved:  # a failed fetch: its backoff still runs
            retry_at = float(saved["retry_at"])
            if not fetched_at <= now < retry_at:
                return None
            self.stats.inc_value(f"walsh/{self.kind}/stored_copy")
            return await self._failed_entry(
                origin,
                saved.get("status"),
                str(saved.get("why")),
                retry_at,
                int(saved.get("failures", 1)),
            )
        if not fetched_at <= now < fetched_at + self.ttl:
            return None
        self.stats.inc_value(f"walsh/{self.kind}/stored_copy")
        return await self._from_saved(saved, fetched_at + self.ttl)

    async def _get(self, origin: str, previous: E | None, max_wait: float | None) -> Response | E:
        """The document's response (any status), or the entry a failure to get
        one stands for. :class:`HostBusy` when nothing was sent."""
        try:
            response = await internal_fetch(
                self.crawler,
                origin + self.path,
                self.purpose,
                max_bytes=self.max_bytes + 1,
                maxsize=0,
                max_wait=max_wait,
            )
        except HostBusy:
            raise  # nothing was sent
        except Exception as exc:
            if isinstance(exc, WalshDenied):  # a gate refused the fetch
                refused = await self._refused(origin, previous, exc)
                if refused is not None:
                    return refused
            self.stats.inc_value(f"walsh/{self.kind}/fetch")
            why = f"{self.document} fetch failed: {failure_reason(exc)}"
            return await self._unreachable(origin, previous, None, why)
        self.stats.inc_value(f"walsh/{self.kind}/fetch")
        self.stats.inc_value(f"walsh/{self.kind}/status/{response.status}")
        return response

    async def _unreachable(
        self, origin: str, previous: E | None, status: int | None, why: str
    ) -> E:
        """The document could not be fetched: the failure is stored, so the
        backoff holds across restarts and workers."""
        self.stats.inc_value(f"walsh/{self.kind}/unreachable")
        failures = (await self._failures_before(origin, previous)) + 1
        delay = min(self.retry_delay * 2 ** (failures - 1), self.ttl)
        now = self.store.time()
        await self.store.put(
            self.unreachable_namespace,
            origin,
            {"fetched_at": now, "retry_at": now + delay, "status": status, "why": why,
             "failures": failures},
        )  # fmt: skip
        return await self._failed_entry(origin, status, why, now + delay, failures)

    async def _failures_before(self, origin: str, previous: E | None) -> int:
        """Failed fetches in a row so far: from the cached answer, or, once
        it was evicted from the cache, from the stored failure when that is
        the latest answer and its backoff ended within the TTL (an eviction
        must not restart the exponential backoff)."""
        if previous is not None:
            return previous.failures
        failed = await self.store.get(self.unreachable_namespace, origin)
        if not isinstance(failed, dict) or not isinstance(failed.get("retry_at"), (int, float)):
            return 0
        others = await self._stored_answers(origin, self.answer_namespaces)
        latest = max((float(a["fetched_at"]) for a in others), default=float("-inf"))
        if float(failed.get("fetched_at", 0)) <= latest:
            return 0
        if self.store.time() - float(failed["retry_at"]) > self.ttl:
            return 0
        return int(failed.get("failures", 0))
