"""R7 with sitemaps: a due target whose sitemap says it has not changed since
this bundle last fetched it is not requested, once the sitemap has earned
that trust on its origin in this run.

For a due target with a past answer (2xx or 304, kept per canonical URL in
:data:`~scrapy_walsh_research.state.namespaces.ANSWERED`), on an origin
whose robots.txt declares sitemaps (``Sitemap:`` lines, read by the R2 gate):

* **cost first**: the origin's sitemaps are fetched only when at least
  ``WALSH_SITEMAP_MIN_TARGETS`` of its targets waiting in the frontier have
  a past answer (for a worker on a fleet's shared feed, or that many
  answered in its last run; never on a first run), at
  most one sitemap document per two of those targets (an index's children
  count), each a conditional GET
  (:mod:`~scrapy_walsh_research.documents.sitemap_documents`);
* **trust is earned**: before any target is skipped, one the sitemap calls
  unchanged, with stored validators, is sent as usual (a conditional GET:
  the *probe*). A 304, or a
  200 with the validators stored before it, earns the sitemap this run's
  trust; a 200 with other validators contradicts it: the sitemap is dropped
  for this run and for ``WALSH_SITEMAP_DISTRUST`` after (kept in the state
  store, so the next run and every worker know);
* **skipped**: a trusted claim (``lastmod_end`` no later than the target's
  last answer) gives the target its one record, outcome ``not_modified``,
  rule R7, with ``sitemap: {url, lastmod, answered_at}``; no request is
  sent, and R8 stamps it as checked (the record pipeline);
* a sitemap whose every claim of change (3 at least) was answered by a 304
  says "changed" about everything: it is not fetched for
  ``WALSH_SITEMAP_STALE``.

A sitemap that cannot be fetched or read is ignored with one log line, and
its targets are revalidated as usual; a target never waits on a sitemap
longer than :data:`LOAD_LIMIT`. ``WALSH_SITEMAPS=False`` turns all of it off.

The rules themselves (what a target meets, what a probe's answer means) are
a pure state machine, :mod:`~scrapy_walsh_research.core.sitemap_trust`; this
gate reads and keeps state, fetches, logs and denies by what it says.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from twisted.internet.defer import Deferred

from scrapy_walsh_research._runtime.context import InContext
from scrapy_walsh_research._runtime.marks import HostBusy, target_key
from scrapy_walsh_research._runtime.meta import WIRE_TIME_META
from scrapy_walsh_research.components import uses_frontier
from scrapy_walsh_research.core import sitemap_trust as rules
from scrapy_walsh_research.core.sitemap_trust import Claim, ProbeAnswer, Reading, Step
from scrapy_walsh_research.core.timestamps import utc_iso
from scrapy_walsh_research.core.urls import origin_of, url_host
from scrapy_walsh_research.documents.sitemap_documents import SitemapDocuments
from scrapy_walsh_research.errors import deny
from scrapy_walsh_research.gates.origin_documents import SHORT_WAIT
from scrapy_walsh_research.scheduling.pacer import Pacer
from scrapy_walsh_research.settings.check import check_configuration
from scrapy_walsh_research.state.namespaces import ANSWERED, VALIDATORS
from scrapy_walsh_research.state.namespaces import SITEMAP_HISTORY as HISTORY
from scrapy_walsh_research.state.namespaces import SITEMAP_TRUST as TRUST

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self

logger = logging.getLogger(__name__)

#: a target waits at most this long (seconds) for its origin's sitemaps to be
#: read or checked; then the origin's targets are revalidated as usual
LOAD_LIMIT = 120.0
#: how long an origin's first target is kept aside while its other lines,
#: counted in the list, are not yet in the frontier (the engine takes the
#: next requests while the list is still being read), and for how long in all
#: before the origin is decided on what the frontier holds
LIST_CATCH_UP = 0.05
LIST_CATCH_UP_LIMIT = 0.5
#: how long a target claimed unchanged is kept aside while the probe is out
#: (or while another target fetches a sitemap): the R4 floor, so a slow
#: probe costs each waiting target at most one pass of the chain per second
PROBE_PARK = 1.0


@dataclass
class SitemapLoad:
    """The reading of one origin's sitemaps while it is under way."""

    #: the documents still to read, and how many more may be fetched
    pending: list[str]
    budget: int
    started: float = field(default_factory=time.monotonic)
    #: a target fetching one of them (the origin's other targets wait aside)
    busy: Deferred[None] | None = None


@dataclass
class OriginSitemaps:
    """What this run knows of one origin's sitemaps: the two machines of
    :mod:`~scrapy_walsh_research.core.sitemap_trust` and what they act on."""

    reading: Reading
    why: str = ""
    load: SitemapLoad | None = None
    claims: dict[str, Claim] = field(default_factory=dict)
    #: past answers of the targets waiting when it was decided (for the frontier)
    answered: dict[str, float] = field(default_factory=dict)
    trust: rules.TrustState = field(default_factory=rules.TrustState)
    changes: rules.ClaimsOfChange = field(default_factory=rules.ClaimsOfChange)


class SitemapsMiddleware(InContext):
    """Downloader middleware: skip what a checked sitemap says has not changed."""

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.crawler = crawler
        context = self.context
        self.stats = crawler.stats
        walsh = context.settings
        self.enabled = walsh.sitemaps
        self.min_targets = walsh.sitemap_min_targets
        self.distrust = walsh.sitemap_distrust
        self.stale = walsh.sitemap_stale
        self.store = context.store
        self.marks = context.marks
        self.pacer = context.service(Pacer)
        self.documents = SitemapDocuments(context)
        self.audit = context.audit
        self.requeue = uses_frontier(settings)
        self._origins: dict[str, OriginSitemaps] = {}
        #: origins whose first target waits for the list to be read: since when
        self._catching_up: dict[str, float] = {}
        #: targets that answered in this run, per origin (HISTORY, at the end)
        self._answered: Counter[str] = Counter()
        if self.enabled:
            context.would_deny.append(self)
            crawler.signals.connect(self._closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        check_configuration(crawler)
        return cls(crawler)

    # -- on the way out -------------------------------------------------------------

    async def process_request(self, request: Request) -> Request | None:
        key = self._looked_at(request)
        if key is None:
            return None
        answered = await self.store.get(ANSWERED, key)
        if not isinstance(answered, (int, float)):
            return None  # never answered: nothing to compare a lastmod with
        site = await self._site(origin_of(key), request)
        if isinstance(site, Request):
            return site  # aside while the origin's sitemaps are read
        return await self._take_step(site, request, key, float(answered))

    async def _take_step(
        self, site: OriginSitemaps, request: Request, key: str, answered: float
    ) -> Request | None:
        """Do what the trust rules say of the due target *key*
        (:func:`~scrapy_walsh_research.core.sitemap_trust.step_for`)."""
        origin = origin_of(key)
        step = self._step(site, key, answered)
        if step is Step.OVERDUE:
            self._inconclusive(origin, site, "no answer in time")
            step = self._step(site, key, answered)
        if step is Step.CHANGE:
            site.changes.sent(key)  # a claim of change: checked by the answer
        elif step is Step.SKIP and not await self._contradicted_elsewhere(origin, site):
            self._skip(request, site.claims[key], answered)
        elif step is Step.PARK:
            return self._aside(request, PROBE_PARK)
        elif step is Step.PROBE:
            # this target is the probe, sent as usual (a conditional GET); one
            # without stored validators could not tell "unchanged" from a 200
            validators = await self.store.get(VALIDATORS, key)
            if isinstance(validators, dict):
                site.trust = rules.probe_sent(site.trust, key, validators, time.monotonic())
        return None

    def _looked_at(self, request: Request) -> str | None:
        """The target key of a request this gate may skip; None for the
        rest: not a target, a hop or a retry (its target was not skipped),
        or an origin decided for this run (no state read on the hot path)."""
        if not self.enabled or not self.marks.is_target(request):
            return None
        if request.meta.get("redirect_times") or request.meta.get("retry_times"):
            return None
        key = target_key(request)
        site = self._origins.get(origin_of(key))
        return None if site is not None and site.reading is Reading.OFF else key

    async def _site(self, origin: str, request: Request) -> OriginSitemaps | Request:
        """What this run knows of *origin*'s sitemaps, decided and read on its
        first due target; or *request* set aside while they are read."""
        site = self._origins.get(origin)
        if site is None:
            decided = await self._decide(origin, request)
            if decided is None:
                return self._aside(request, LIST_CATCH_UP)
            site = self._origins.setdefault(origin, decided)
        if site.reading is Reading.LOADING:
            waiting = await self._load(origin, site, request)
            if waiting is not None:
                return waiting
        return site

    def _step(self, site: OriginSitemaps, key: str, answered: float) -> Step:
        claim = site.claims.get(key)
        now = time.monotonic()
        return rules.step_for(site.reading, site.trust, key, claim, answered, now=now,
                              limit=LOAD_LIMIT)  # fmt: skip

    async def _contradicted_elsewhere(self, origin: str, site: OriginSitemaps) -> bool:
        """In a fleet, whether another worker's probe has contradicted the
        sitemap since this worker's checked out: one lie drops it for every
        worker, at once (a read per target skipped, against the request it
        saves). Alone, this worker's own verdict is all there is."""
        if not self.store.shared:
            return False
        saved = await self.store.get(TRUST, origin)
        if not isinstance(saved, dict) or saved.get("why") != "contradicted":
            return False
        if float(saved.get("until") or 0) <= self.store.time():
            return False
        site.trust = rules.contradicted_elsewhere(site.trust)
        logger.warning(
            "Sitemaps of %(origin)s contradicted by another worker's probe (%(probe)s): not "
            "used from now on, its targets revalidated as usual",
            {"origin": origin, "probe": saved.get("probe")},
        )
        return True

    def _aside(self, request: Request, seconds: float) -> Request:
        return self.pacer.requeue(request, until=time.monotonic() + seconds)

    def _skip(self, request: Request, claim: Claim, answered: float) -> None:
        self.stats.inc_value("walsh/sitemaps/requests_saved")
        reason = (
            f"not requested: {claim.sitemap} gives <lastmod> {claim.lastmod}, no later than "
            f"this bundle's last answer from it ({utc_iso(answered)}); the sitemap's claims "
            "checked out on this origin in this run"
        )
        record = {"sitemap": {"url": claim.sitemap, "lastmod": claim.lastmod,
                              "answered_at": utc_iso(answered)}}  # fmt: skip
        deny(self.crawler, logger, request, "R7", reason, outcome="not_modified", record=record)

    def would_deny(self, request: Request) -> bool:
        """What a checked sitemap says has not changed, as cached (``WouldDeny``)."""
        return self._would_skip(request)

    def _would_skip(self, request: Request) -> bool:
        """For the frontier, from this run's state only: a target that will
        be skipped need not wait for its host's turn."""
        if not self.marks.is_target(request):
            return False
        site = self._origins.get(origin_of(request.url))
        if site is None:
            return False
        key = target_key(request)
        answered = site.answered.get(key)
        if answered is None:
            return False
        return self._step(site, key, answered) is Step.SKIP

    def _lines_still_coming(self, origin: str, queued: int, host: str) -> bool:
        """Whether more of *host*'s lines are in the list than the frontier
        holds (*queued*, this request included), while the list is still
        being read: worth a moment, at most :data:`LIST_CATCH_UP_LIMIT` an
        origin, before counting them."""
        source = self.context.targets
        left = source.host_left if source is not None and not source.reads_shared_feed else None
        if left is None or queued >= left.get(host, 0):
            return False
        first = self._catching_up.setdefault(origin, time.monotonic())
        return time.monotonic() - first < LIST_CATCH_UP_LIMIT

    async def _decide(self, origin: str, request: Request) -> OriginSitemaps | None:
        """Whether this origin's sitemaps are worth reading in this run; None
        while its lines are still being read into the frontier."""
        saved = await self.store.get(TRUST, origin)
        if isinstance(saved, dict) and float(saved.get("until") or 0) > self.store.time():
            self.stats.inc_value(f"walsh/sitemaps/{saved.get('why')}")
            why = f"{saved.get('why')} until {utc_iso(saved['until'])}"
            return OriginSitemaps(Reading.OFF, why)
        robots = self.context.robots
        policy = robots.cached_policy(request.url) if robots is not None else None
        urls = policy.sitemap_urls(origin + "/robots.txt") if policy is not None else ()
        if not urls:
            return OriginSitemaps(Reading.OFF, "robots.txt declares no sitemap")
        waiting = self.context.waiting
        if waiting is None or not self.requeue:
            return OriginSitemaps(Reading.OFF, "needs the frontier scheduler")
        keys = {target_key(request)}
        host = url_host(request.url)
        waiting_here = [queued for queued in waiting.queued(host) if self.marks.is_target(queued)]
        if self._lines_still_coming(origin, len(waiting_here) + 1, host):
            return None
        for queued in waiting_here:
            if origin_of(queued.url) == origin:
                keys.add(target_key(queued))
        answered = await self.store.get_many(ANSWERED, sorted(keys))
        # A worker reading a shared feed holds about one line per host: what
        # its frontier holds undercounts; the origin's last run says more.
        # Read from a list, the frontier holds what this run has of it (a
        # list of one line of the origin is one request, not a sitemap too).
        due = len(answered)
        source = self.context.targets
        if source is not None and source.reads_shared_feed:
            last_run = await self.store.get(HISTORY, origin)
            before = int(last_run.get("targets") or 0) if isinstance(last_run, dict) else 0
            due = max(due, before)
        if due < self.min_targets:
            self.stats.inc_value("walsh/sitemaps/too_few_targets")
            why = f"{due} due targets with a past answer, fewer than WALSH_SITEMAP_MIN_TARGETS"
            # once per origin and run (decided once): a user whose robots.txt
            # declares a sitemap sees why it was not read, not only a stat
            logger.info(
                "Sitemaps of %(origin)s not read in this run: %(due)d of its due targets have "
                "a past answer, fewer than WALSH_SITEMAP_MIN_TARGETS=%(min)d, too few for the "
                "sitemap requests to pay; its targets are revalidated as usual",
                {"origin": origin, "due": due, "min": self.min_targets},
            )
            return OriginSitemaps(Reading.OFF, why)
        load = SitemapLoad(pending=list(urls), budget=max(1, due // 2))
        return OriginSitemaps(Reading.LOADING, load=load,
                              answered={k: float(v) for k, v in answered.items()})  # fmt: skip

    async def _load(self, origin: str, site: OriginSitemaps, request: Request) -> Request | None:
        """Fetch the origin's next sitemap document, in this target's chain
        while its host is ready; else the target goes back to the frontier
        (it is not held waiting). None once every document is read."""
        load = site.load
        while load is not None and load.pending and site.reading is Reading.LOADING:
            left = LOAD_LIMIT - (time.monotonic() - load.started)
            if left <= 0:
                self._off(site, f"not read within {LOAD_LIMIT:g} s")
                break
            if load.busy is not None:
                return self._aside(request, PROBE_PARK)
            if load.budget <= 0:  # robots.txt may declare dozens: the budget is for all
                self.stats.inc_value("walsh/sitemaps/over_budget", len(load.pending))
                load.pending.clear()
                break
            aside = self._not_ready(load, request)
            if aside is not None:
                return aside
            load.busy = Deferred()
            try:
                # the target fetching it waits no longer than the limit either
                # (nor do its host's other targets, which wait for it)
                await self._read_next(site, load, origin, left)
            except HostBusy as exc:
                self.pacer.defer(url_host(load.pending[0]), exc.ready_in)
                return self.pacer.requeue(request)
            finally:
                busy, load.busy = load.busy, None
                busy.callback(None)
        if site.reading is Reading.LOADING:
            site.reading, site.load = rules.reading_done(site.claims), None
            site.why = f"{len(site.claims)} targets claimed"
            logger.info("Sitemaps of %(origin)s: %(why)s", {"origin": origin, "why": site.why})
        return None

    def _not_ready(self, load: SitemapLoad, request: Request) -> Request | None:
        """*request* back to the frontier while the next document's host is
        not ready; None when it is."""
        host = url_host(load.pending[0])
        ready = self.pacer.ready_at(host)
        if ready <= time.monotonic():
            return None
        if host == url_host(request.url):
            return self.pacer.requeue(request)  # back when its host is ready
        # aside no longer than the limit: a sitemap host's Crawl-delay (or
        # hold) may be far longer, and nothing else would end the wait
        return self.pacer.requeue(request, until=min(ready, load.started + LOAD_LIMIT))

    async def _read_next(
        self, site: OriginSitemaps, load: SitemapLoad, origin: str, left: float
    ) -> None:
        """Read the next pending document into *site*'s claims; an index's
        sitemaps join the pending ones, as far as the budget goes."""
        url = load.pending[0]
        doc = await self.documents.get(origin, url, max_wait=SHORT_WAIT, timeout=left)
        load.pending.pop(0)
        load.budget -= doc.how != "adopted"  # a request, whatever it answered
        if doc.error is None:
            room = max(0, load.budget - len(load.pending))
            load.pending += [c for c in doc.children if c != url][:room]
            site.claims = rules.claims_read(site.claims, url, doc.claims)

    def _off(self, site: OriginSitemaps, why: str) -> None:
        site.reading, site.why, site.load = Reading.OFF, why, None
        logger.warning("Sitemaps not used: %(why)s; targets revalidated as usual", {"why": why})

    # -- on the way back ------------------------------------------------------------

    async def process_response(self, request: Request, response: Response) -> Response:
        if not self.enabled or not self.marks.is_target(request):
            return response
        key = target_key(request)
        status = response.status
        origin = origin_of(key)
        # Only the target's own 2xx or 304 is a copy a <lastmod> can be
        # compared with: an error says the copy held is no longer what the
        # site serves, and an answer through a redirect is another URL's
        # copy (the sitemap dates that URL, not the target). Either way the
        # target has no past answer, so a later run revalidates it.
        own = not request.meta.get("redirect_urls")
        if own and (200 <= status < 300 or status == 304):
            await self.store.put(ANSWERED, key, self._answered_at(request, response))
            self._answered[origin] += 1
        else:
            await self.store.delete(ANSWERED, key)
        site = self._origins.get(origin)
        if site is not None and site.trust.probing(key):
            await self._probed(origin, site, response, redirected=not own)
        elif site is not None and site.changes.answered(key, status):
            self.stats.inc_value("walsh/sitemaps/claims_checked")
        return response

    def _answered_at(self, request: Request, response: Response) -> float:
        """When the copy this answer carries can be said to be from: no later
        than the moment the request left (the page may change while the
        answer is on its way), nor than the site's own clock (``Date``, a
        second early for its rounding), so a lastmod the site stamps after
        serving it is always later, however its clock is set."""
        now = self.store.time()
        wire = request.meta.get(WIRE_TIME_META)
        if isinstance(wire, (int, float)):
            at = now - max(0.0, time.monotonic() - wire)
        else:  # no wire stamp: the answer's latency, and a second for the body
            at = now - float(request.meta.get("download_latency") or 0.0) - 1.0
        date = response.headers.get(b"Date")
        if date:
            try:
                said = parsedate_to_datetime(date.decode("latin-1")).timestamp() - 1.0
            except (TypeError, ValueError, OverflowError, IndexError):
                said = at
            at = min(at, said)
        return at

    async def process_exception(self, request: Request, exception: Exception) -> None:
        if self.enabled and self.marks.is_target(request):
            key = target_key(request)
            site = self._origins.get(origin_of(key))
            if site is not None and site.trust.probing(key):
                self._inconclusive(origin_of(key), site, f"{type(exception).__name__}")

    async def _probed(
        self, origin: str, site: OriginSitemaps, response: Response, *, redirected: bool
    ) -> None:
        """The probe's answer: the sitemap's claim that it is unchanged, checked."""
        status = response.status
        etag = response.headers.get(b"ETag")
        modified = response.headers.get(b"Last-Modified")
        answer = rules.probe_answer(
            status, redirected=redirected, stored=site.trust.validators,
            etag=etag.decode("latin-1") if etag is not None else None,
            last_modified=modified.decode("latin-1") if modified is not None else None,
        )  # fmt: skip
        if answer is ProbeAnswer.INCONCLUSIVE:
            why = f"redirected, then answered {status}" if redirected else f"answered {status}"
            self._inconclusive(origin, site, why)
            return
        self.stats.inc_value("walsh/sitemaps/claims_checked")
        probe = str(site.trust.probe)
        site.trust = rules.probe_answered(site.trust, answer)
        sitemaps = sorted({claim.sitemap for claim in site.claims.values()})
        if answer is ProbeAnswer.UNCHANGED:
            await self.audit.sitemap(probe, state="trusted", sitemaps=sitemaps)
            logger.info("Sitemaps of %(origin)s checked out on %(probe)s: trusted in this run",
                        {"origin": origin, "probe": probe})  # fmt: skip
            return
        self.stats.inc_value("walsh/sitemaps/contradicted")
        until = self.store.time() + self.distrust
        verdict = {"until": until, "why": "contradicted", "probe": probe}
        await self.store.put(TRUST, origin, {**verdict, "at": self.store.time()})
        await self.audit.sitemap(probe, state="contradicted", sitemaps=sitemaps,
                                 why=f"answered {status} with new validators")  # fmt: skip
        logger.warning(
            "Sitemaps of %(origin)s contradicted: %(probe)s, claimed unchanged, answered %(s)d "
            "with new validators; not used until %(until)s (WALSH_SITEMAP_DISTRUST), its "
            "targets revalidated as usual",
            {"origin": origin, "probe": probe, "s": status, "until": utc_iso(until)},
        )

    def _inconclusive(self, origin: str, site: OriginSitemaps, why: str) -> None:
        site.trust = rules.probe_answered(site.trust, ProbeAnswer.INCONCLUSIVE)
        if site.trust.trust is rules.Trust.DROPPED:
            logger.warning(
                "Sitemaps of %(origin)s not checked (%(why)s, %(n)d tries): not used in this run",
                {"origin": origin, "why": why, "n": rules.PROBE_TRIES},
            )

    async def _closed(self, spider: Any) -> None:
        """How many targets of each origin answered (the next run's count of
        its due targets: a fleet's workers keep the largest share, never
        more than one run's); and a sitemap whose every claim of change was
        answered by a 304 is not fetched again for WALSH_SITEMAP_STALE."""
        for origin, n in self._answered.items():
            saved = await self.store.get(HISTORY, origin)
            if isinstance(saved, dict) and float(saved.get("at") or 0) >= self.documents.started:
                n = max(n, int(saved.get("targets") or 0))  # another worker of this run
            await self.store.put(HISTORY, origin, {"targets": n, "at": self.store.time()})
        for origin, site in self._origins.items():
            if site.changes.stale:
                self.stats.inc_value("walsh/sitemaps/stale")
                until = self.store.time() + self.stale
                verdict = {"until": until, "why": "stale", "at": self.store.time()}
                await self.store.put(TRUST, origin, verdict)
                why = f"{site.changes.unchanged} claims of change, each answered 304"
                await self.audit.sitemap(origin + "/", state="stale", why=why)
                logger.warning(
                    "Sitemaps of %(origin)s claimed %(n)d changes and every one answered 304: "
                    "not fetched until %(until)s (WALSH_SITEMAP_STALE)",
                    {"origin": origin, "n": site.changes.unchanged, "until": utc_iso(until)},
                )
