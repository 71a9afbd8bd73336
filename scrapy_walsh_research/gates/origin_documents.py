"""The documents an origin publishes about every page of it (robots.txt,
tdmrep.json): read once per origin, before its first target, and shared.

One mechanism for both gates (R2 and PREF), so a fix to one is a fix to the
other:

* an answer is kept in memory (least recently used first, bounded) and in
  the state store, so a restart or another worker reuses it within its TTL;
* one fetch per origin at a time, and with shared state one per fleet: the
  other workers wait for it and adopt what it stored;
* a failed fetch is stored with when to try again, and the tries back off
  exponentially with jitter (``WALSH_POLICY_RETRY_DELAY``, doubling, at most
  the TTL) across evictions, restarts and workers;
* a document a transient failure left unknown (with no last good copy) is
  a wait, not a verdict: its targets go back to the frontier until its next
  try, within ``WALSH_POLICY_WAIT`` (:mod:`scrapy_walsh_research.documents.waits`);
  only the bound gives them a record (``skipped``, no request);
* fetching is itself a request to the host: never sent to a host that is
  skipped, and a target whose host is not ready goes back to the frontier
  instead of holding the only download slot while the document waits.

The stored single-flight fetch itself
(:func:`~scrapy_walsh_research.documents.fetch.fetched_once`) is also the
one each sitemap is read through
(:mod:`~scrapy_walsh_research.documents.sitemap_documents`).

What an answer *means* (a policy, a reservation; what a failure implies)
is each gate's: :meth:`OriginDocuments._fetch`,
:meth:`OriginDocuments._from_saved` and :meth:`OriginDocuments._failed_entry`.
"""

from __future__ import annotations

import logging
import random
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred

from scrapy_walsh_research._runtime.context import InContext
from scrapy_walsh_research._runtime.marks import DIRECT, HostBusy, internal_fetch
from scrapy_walsh_research.components import uses_frontier
from scrapy_walsh_research.core.outage import Outage, retry_delay
from scrapy_walsh_research.core.urls import origin_of, url_host
from scrapy_walsh_research.documents.fetch import (
    NOT_MODIFIED,
    UNUSABLE,
    conditional_headers,
    fetched_once,
    renewed,
    revalidated,
    unusable_why,
)
from scrapy_walsh_research.documents.names import NameLookups
from scrapy_walsh_research.documents.waits import DocumentWaits
from scrapy_walsh_research.errors import WalshDenied, deny, failure_reason
from scrapy_walsh_research.scheduling.pacer import Pacer

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

#: an origin's documents (robots.txt, tdmrep.json) stay in force at least this
#: many of its host's intervals: their two fetches, then the target
USABLE_INTERVALS = 3
#: how long a document's fetch may wait in place when its target can go back
#: to the frontier instead (a stale view of a shared clock, another origin)
SHORT_WAIT = 2.0
#: the longest exception text kept in a failure's description
MAX_WHY = 200
#: a document that failed is tried again with at most this long to answer:
#: each try holds the only download slot, and a host that hangs would
#: otherwise stall every host for DOWNLOAD_TIMEOUT (180 s) per try
RETRY_TIMEOUT = 30.0


class OriginEntry(Protocol):
    """What each gate keeps per origin: until when it holds, how many
    fetches in a row have failed, and, while a transient failure leaves the
    document unknown (no last good copy), that outage."""

    expires: float
    failures: int
    outage: Outage | None


E = TypeVar("E", bound=OriginEntry)
T = TypeVar("T")


class OriginDocuments(InContext, Generic[E]):
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
    #: the field of the 2xx copy that holds the document (a copy without it
    #: is no copy a 304 could keep)
    body_field: ClassVar[str]
    #: where the last failed fetch and its next try live
    unreachable_namespace: ClassVar[str]
    #: the gate's logger (denials are logged by the gate that makes them)
    log: ClassVar[logging.Logger]
    #: the rule a target's record names when the wait for the document ends
    rule: ClassVar[str]
    #: what an unknown document means for its targets, in that record's reason
    while_unknown: ClassVar[str]

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.stats = crawler.stats
        self.ttl = self.context.settings.policy_ttl
        self.retry_delay = self.context.settings.policy_retry_delay
        #: how long other workers wait for one worker's fetch of an origin's document
        self.fetch_ttl = settings.getfloat("DOWNLOAD_TIMEOUT", 180.0) + 30.0
        context = self.context
        self.store = context.store
        self.marks = context.marks
        self.pacer = context.service(Pacer)
        context.would_deny.append(self)
        self.waits = context.service(DocumentWaits)
        self.names = context.service(NameLookups)
        #: origins whose name this run was told does not exist: a stored
        #: "no such name" from an earlier run or another worker is looked up
        #: again (the record promised it), not taken as this run's answer
        self.no_such_name: set[str] = set()
        self.requeue = uses_frontier(settings)
        #: answers, least recently used first: an evicted origin's answer is
        #: read back from the state store within its TTL
        self._cache: OrderedDict[str, E] = OrderedDict()
        self.cache_size = self.context.settings.policy_cache_size
        self._pending: dict[str, Deferred[None]] = {}

    # -- what each gate says ------------------------------------------------------

    def would_deny(self, request: Request) -> bool:
        """Whether cached answers alone already deny *request* (for the frontier)."""
        raise NotImplementedError

    async def _fetch(self, origin: str, previous: E | None, max_wait: float | None) -> E:
        """Fetch the document; a failure goes through :meth:`_unreachable`."""
        raise NotImplementedError

    async def _from_saved(self, saved: dict[str, Any], expires: float) -> E:
        """The entry a stored answer (not a failure) stands for."""
        raise NotImplementedError

    async def _failed_entry(self, origin: str, outage: Outage) -> E:
        """What holds until the next try when the document cannot be
        fetched: a last good copy, or the *outage* (its targets wait)."""
        raise NotImplementedError

    async def _refused(self, origin: str, previous: E | None, exc: WalshDenied) -> E | None:
        """What a gate's refusal of the fetch means; None: a failed fetch."""
        return None

    def _read(self, entry: E) -> bool:
        """Whether *entry* (not unknown) says what the document says, or a
        last good copy of it; False: a failure that decides its targets."""
        return True

    async def _noted(self, origin: str, entry: E) -> None:
        """A new answer is in force (robots.txt tells pacing its Crawl-delay)."""

    # -- the shared mechanism ---------------------------------------------------

    async def entry_or_requeue(self, request: Request) -> E | Request:
        """The answer in force for *request*'s origin, fetched if need be; or
        *request* given back to the frontier while its host is not ready, or
        while the document is unknown (until its next try). Denies the
        request (``skipped``) when fetching would contact a skipped host,
        when the fetch cannot wait for its host, or when the wait for an
        unknown document ends. The bundle's own requests (fetched inside
        another request's chain) cannot wait: they get the entry, and the
        gate refuses them while it is unknown."""
        entry = await self._entry_or_requeue(request)
        if isinstance(entry, Request) or entry.outage is None:
            return entry
        if self.marks.purpose(request, quiet=True) in DIRECT:
            return entry
        if entry.outage.no_such_name:
            # an answer, not an outage: decided now, nothing having been sent
            reason = (
                f"the host name {url_host(request.url)} does not exist (DNS answered no such "
                f"name): {self.document} could not be fetched, so nothing is sent to the host; "
                "not requested this run (tried again next run)"
            )
            deny(self.crawler, self.log, request, self.rule, reason, outcome="skipped",
                 lasting=False)  # fmt: skip
        held = await self.waits.hold(request, entry.outage, entry.expires)
        if held is not None:
            return held
        reason = self.waits.reason(entry.outage, self.while_unknown)
        record = {"unknown": entry.outage.as_record()}
        deny(self.crawler, self.log, request, self.rule, reason, outcome="skipped",
             record=record, lasting=False)  # fmt: skip

    def _waited_out(self, entry: E) -> bool:
        """Whether *entry* is an unknown document whose wait has ended, or
        whose host name does not exist (its targets are decided without
        waiting for their hosts)."""
        return entry.outage is not None and (
            entry.outage.no_such_name or self.waits.gave_up(entry.outage)
        )

    async def _entry_or_requeue(self, request: Request) -> E | Request:
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
            entry = await self._fetch_once(origin, self._cache.get(origin), max_wait)
            await self._noted(origin, entry)
            if entry.outage is None:
                # An answer outlives the waits its own fetch and the origin's
                # other document impose on the host: a TTL shorter than the
                # Crawl-delay would otherwise re-fetch the two in turn forever
                # while the target waits for its turn. (An unknown document
                # holds until its next try, which pacing spaces anyway.)
                usable = self.store.time() + USABLE_INTERVALS * self.pacer.interval(url_host(url))
                entry.expires = max(entry.expires, usable)
                await self.waits.known(self.kind, origin + self.path, read=self._read(entry))
            elif entry.outage.no_such_name:  # an answer: a wait for it is over
                await self.waits.known(self.kind, origin + self.path, read=False)
            self._remember(origin, entry)
        finally:
            del self._pending[origin]
            pending.callback(None)
        return entry

    async def _fetch_once(self, origin: str, previous: E | None, max_wait: float | None) -> E:
        """The stored answer in force, or one fetch per fleet
        (:func:`~scrapy_walsh_research.documents.fetch.fetched_once`)."""
        looked = False

        async def stored() -> E | None:
            nonlocal looked
            entry = await self._stored_fresh(origin)
            if entry is not None and looked:  # stored while this worker waited
                self.stats.inc_value(f"walsh/{self.kind}/adopted_from_worker")
            looked = True
            return entry

        entry, _ = await fetched_once(
            self.store, f"{self.kind}:{origin}", host=url_host(origin), ttl=self.fetch_ttl,
            max_wait=max_wait, stored=stored,
            fetch=lambda: self._fetch(origin, previous, max_wait),
        )  # fmt: skip
        return entry

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
            if not fetched_at <= now < float(saved["retry_at"]):
                return None
            if saved.get("no_such_name") and origin not in self.no_such_name:
                return None
            self.stats.inc_value(f"walsh/{self.kind}/stored_copy")
            return await self._failed_entry(origin, self._outage(origin, saved))
        if not fetched_at <= now < fetched_at + self.ttl:
            return None
        self.stats.inc_value(f"walsh/{self.kind}/stored_copy")
        return await self._from_saved(saved, fetched_at + self.ttl)

    async def _get(self, origin: str, previous: E | None, max_wait: float | None) -> Response | E:
        """The document's response (any status but 304), or the entry a
        failure to get one stands for, or the stored copy a 304 confirmed.
        The fetch is conditional on the stored copy (its validators), if
        any. :class:`HostBusy` when nothing was sent."""
        sent = conditional_headers(await self._stored_copy(origin))
        try:
            response = await internal_fetch(
                self.marks,
                origin + self.path,
                self.purpose,
                max_bytes=self.max_bytes + 1,
                maxsize=0,
                max_wait=max_wait,
                timeout=RETRY_TIMEOUT if previous is not None and previous.failures else None,
                headers=sent or None,
            )
        except HostBusy:
            raise  # nothing was sent
        except Exception as exc:
            if isinstance(exc, WalshDenied):  # a gate refused the fetch
                refused = await self._refused(origin, previous, exc)
                if refused is not None:
                    return refused
            self.stats.inc_value(f"walsh/{self.kind}/fetch")
            if isinstance(exc, WalshDenied):  # nothing was sent
                why = f"was not fetched ({str(exc)[:MAX_WHY]})"
            else:
                why = f"fetch failed ({failure_reason(exc)[:MAX_WHY]})"
            # a network failure passes; a refusal the site's setup causes
            # (too many redirects, a hop into a blocked host) does not,
            # unless a gate says it passes by itself
            passing = not isinstance(exc, IgnoreRequest) or (
                isinstance(exc, WalshDenied) and (not exc.lasting or exc.outcome == "skipped")
            )
            # a name the resolver says does not exist is an answer, decided
            # now; one it could not resolve for now is a wait, like any other
            unresolved = await self.names.why(url_host(origin), exc)
            if unresolved is not None:
                why = f"fetch failed ({unresolved.text})"
                if unresolved.no_such_name:
                    self.log.warning(
                        "%(what)s: %(text)s; its targets get their records now, without a "
                        "request (tried again next run)",
                        {"what": f"{origin}{self.path}", "text": unresolved.text},
                    )
                    return await self._unreachable(
                        origin, previous, None, why, passing=False, no_such_name=True
                    )
            return await self._unreachable(origin, previous, None, why, passing=passing)
        self.stats.inc_value(f"walsh/{self.kind}/fetch")
        self.stats.inc_value(f"walsh/{self.kind}/status/{response.status}")
        copy = await self._stored_copy(origin) if response.status == 304 else None
        how = revalidated(response, sent, copy, kind=self.kind, stats=self.stats)
        if how == NOT_MODIFIED and copy is not None:
            # the site says the stored copy is current: it stays in force as
            # stored, fresh from now
            now = self.store.time()
            kept = renewed(copy, response, fetched_at=now)
            await self.store.put(self.answer_namespaces[0], origin, kept)
            return await self._from_saved(kept, now + self.ttl)
        if how == UNUSABLE:  # nothing to read, so an unusable answer, not an empty one
            why = unusable_why(sent)
            return await self._unreachable(origin, previous, response.status, why)
        return response

    async def _stored_copy(self, origin: str) -> dict[str, Any] | None:
        """The stored 2xx copy of the document, if it is the latest answer
        stored (not a failure: a last good copy stays one): what a 304 to a
        refetch would keep. None when there is none or a later answer (a
        4xx) replaced it."""
        copy = await self.store.get(self.answer_namespaces[0], origin)
        if not isinstance(copy, dict) or not isinstance(copy.get(self.body_field), str):
            return None
        if not isinstance(copy.get("fetched_at"), (int, float)):
            return None
        others = await self._stored_answers(origin, self.answer_namespaces[1:])
        if any(float(a["fetched_at"]) > float(copy["fetched_at"]) for a in others):
            return None
        return copy

    async def _unreachable(
        self,
        origin: str,
        previous: E | None,
        status: int | None,
        why: str,
        *,
        passing: bool = True,
        no_such_name: bool = False,
    ) -> E:
        """The document could not be fetched (*why*: what happened, after its
        name: ``answered 503``; *passing*: a failure worth waiting out): the
        failure is stored with its streak and its next try, so the backoff
        holds across restarts and workers."""
        self.stats.inc_value(f"walsh/{self.kind}/unreachable")
        streak = await self._streak(origin, previous)
        now = self.store.time()
        failures = int(streak.get("failures", 0)) + 1 if streak else 1
        delay = retry_delay(self.retry_delay, failures, self.ttl, random.random())
        failed = {
            "fetched_at": now, "retry_at": now + delay, "status": status, "why": why,
            "failures": failures,
            "since": float(streak.get("since") or streak["fetched_at"]) if streak else now,
            "mixed": bool(streak and (streak.get("mixed") or streak.get("why") != why)),
            "passing": passing, "no_such_name": no_such_name,
        }  # fmt: skip
        if no_such_name:
            self.no_such_name.add(origin)
        else:  # (a name that does not exist is an answer: no wait, no last try within one)
            # a last try just before the wait's bound rather than none within it
            failed["retry_at"] = self.waits.last_try(self._outage(origin, failed), self.retry_delay)
        await self.store.put(self.unreachable_namespace, origin, failed)
        return await self._failed_entry(origin, self._outage(origin, failed))

    def _outage(self, origin: str, failed: dict[str, Any]) -> Outage:
        """The outage a stored failed fetch stands for."""
        fetched_at = float(failed["fetched_at"])
        status = failed.get("status")
        return Outage(
            kind=self.kind,
            document=self.document,
            url=origin + self.path,
            # (a failure stored by 0.2 named the document first)
            why=str(failed.get("why")).removeprefix(f"{self.document} "),
            tries=int(failed.get("failures", 1)),
            since=float(failed.get("since") or fetched_at),
            last=fetched_at,
            retry_at=float(failed["retry_at"]),
            mixed=bool(failed.get("mixed")),
            status=status if isinstance(status, int) else None,
            passing=bool(failed.get("passing", True)),
            no_such_name=bool(failed.get("no_such_name", False)),
        )

    async def _streak(self, origin: str, previous: E | None) -> dict[str, Any] | None:
        """The stored failed fetch this failure continues, or None when it
        starts a new streak: from the cached answer, or, once it was evicted
        from the cache, from the stored failure when that is the latest
        answer and its backoff ended within the TTL (an eviction must not
        restart the exponential backoff)."""
        if previous is not None and previous.failures == 0:
            return None
        failed = await self.store.get(self.unreachable_namespace, origin)
        if not isinstance(failed, dict) or not isinstance(failed.get("retry_at"), (int, float)):
            if previous is None:
                return None
            # cached, but the store lost it: the streak goes on from here
            return {"failures": previous.failures, "fetched_at": self.store.time()}
        if previous is not None:
            return failed
        others = await self._stored_answers(origin, self.answer_namespaces)
        latest = max((float(a["fetched_at"]) for a in others), default=float("-inf"))
        if float(failed.get("fetched_at", 0)) <= latest:
            return None
        if self.store.time() - float(failed["retry_at"]) > self.ttl:
            return None
        return failed
