"""R2: robots.txt per RFC 9309, replacing Scrapy's ``RobotsTxtMiddleware``.

Status handling (RFC 9309 §2.3.1), stricter than the spec's "SHOULD fail
open" where the RFC says "MUST disallow":

* 2xx: parse at most 500 KiB;
* redirects: followed by Scrapy, at most ``REDIRECT_MAX_TIMES`` (5) hops,
  each hop through the blocklist gate;
* 4xx other than 429: no rules apply (allow all);
* 429, 5xx, timeouts, connection errors, too many redirects: the host is
  disallowed until robots.txt can be fetched. The fetch is retried with
  exponential backoff, not on every request. A last good copy younger than
  30 days is used instead when there is one.

There is no ``dont_obey_robotstxt`` bypass.

Fetching robots.txt is itself a request to the host: it is never sent to a
host that is skipped (an interval beyond ``WALSH_MAX_CRAWL_DELAY``, a
Retry-After hold beyond ``WALSH_RETRY_MAX_DELAY``), and when the host is not
ready yet the target goes back to the frontier instead of holding the only
download slot while robots.txt waits for its turn.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThread

from scrapy_walsh_research import defaults
from scrapy_walsh_research.bounds import cache_size
from scrapy_walsh_research.core.contract import PRODUCT_TOKEN
from scrapy_walsh_research.core.robots_policy import MAX_ROBOTS_BYTES, RobotsPolicy, decode_robots
from scrapy_walsh_research.core.urls import origin_of, url_host
from scrapy_walsh_research.errors import deny
from scrapy_walsh_research.internal import (
    BLOCKLIST,
    DIRECT,
    ROBOTS,
    SCHEMA,
    HostBusy,
    Marks,
    internal_fetch,
)
from scrapy_walsh_research.pacing import Pacer
from scrapy_walsh_research.per_crawler import register, registered
from scrapy_walsh_research.preflight import check_configuration, uses_frontier
from scrapy_walsh_research.state import FlightBusy, state_for

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from typing_extensions import Self

logger = logging.getLogger(__name__)

#: the last 2xx robots.txt per origin: reused within WALSH_ROBOTS_TTL by every
#: run and worker (RFC 9309 §2.4 allows caching up to 24 h), and as the last
#: good copy for 30 days when robots.txt is unreachable
STATE_NAMESPACE = "robots"
#: the last 4xx answer per origin (no rules apply), reused the same way
ABSENT_NAMESPACE = "robots_4xx"
#: the last failed fetch per origin and when to try again, so a restart or
#: another worker keeps the backoff instead of fetching at once
UNREACHABLE_NAMESPACE = "robots_unreachable"
LAST_GOOD_MAX_AGE = 30 * 86400.0
#: an origin's documents (robots.txt, tdmrep.json) stay in force at least this
#: many of its host's intervals: their two fetches, then the target
USABLE_INTERVALS = 3
#: how long a robots.txt fetch may wait in place when its target can go back
#: to the frontier instead (a stale view of a shared clock, another origin)
SHORT_WAIT = 2.0


@dataclass
class RobotsEntry:
    policy: RobotsPolicy
    expires: float
    #: HTTP status of the last fetch, or None for a network failure.
    status: int | None
    failures: int = 0
    #: sha256 of the robots.txt text in force (None: no text, status rules)
    sha256: str | None = None


class RobotsTxtMiddleware:
    """Downloader middleware: deny what robots.txt forbids to ``Walsh-Research``."""

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        register(crawler, RobotsTxtMiddleware, self)
        self.crawler = crawler
        self.stats = crawler.stats
        from scrapy_walsh_research.evidence.audit import AuditTrail

        AuditTrail.for_crawler(crawler).robots = self.sha256_for
        self.ttl = settings.getfloat("WALSH_ROBOTS_TTL", defaults.WALSH_ROBOTS_TTL)
        #: how long other workers wait for one worker's fetch of an origin's robots.txt
        self.fetch_ttl = settings.getfloat("DOWNLOAD_TIMEOUT", 180.0) + 30.0
        self.retry_delay = settings.getfloat(
            "WALSH_ROBOTS_RETRY_DELAY", defaults.WALSH_ROBOTS_RETRY_DELAY
        )
        self.store = state_for(crawler)
        self.marks = Marks.for_crawler(crawler)
        self.pacer = Pacer.for_crawler(crawler)
        self.pacer.add_denial_check(self._cached_denial)
        self.requeue = uses_frontier(settings)
        #: parsed answers, least recently used first: an evicted origin's
        #: answer is read back from the state store within its TTL
        self._cache: OrderedDict[str, RobotsEntry] = OrderedDict()
        self.cache_size = cache_size(
            settings, "WALSH_ROBOTS_CACHE_SIZE", defaults.WALSH_ROBOTS_CACHE_SIZE
        )
        self._pending: dict[str, Deferred[None]] = {}
        self._operator_hosts = {
            url_host(settings.get("WALSH_BLOCKLIST_URL") or defaults.WALSH_BLOCKLIST_URL),
            url_host(
                settings.get("WALSH_BLOCKLIST_SCHEMA_URL") or defaults.WALSH_BLOCKLIST_SCHEMA_URL
            ),
        }

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        check_configuration(crawler)
        return cls(crawler)

    @classmethod
    def of(cls, crawler: Crawler) -> RobotsTxtMiddleware | None:
        """The crawler's R2 gate, once built (the PREF gate reads the
        selected group's usage preferences from it)."""
        return registered(crawler, RobotsTxtMiddleware)

    def cached_policy(self, url: str) -> RobotsPolicy | None:
        """The policy in force for *url*'s origin, when one is cached."""
        entry = self._fresh(origin_of(url))
        return entry.policy if entry is not None else None

    def _exempt(self, request: Request) -> bool:
        """The bundle's own fetches of robots.txt (any origin's /robots.txt,
        where a robots.txt redirect may lead) and of the operator's documents
        (on the operator's hosts). A redirect hop of one of them anywhere else
        is an ordinary request to that origin: its robots.txt applies (a
        hostile robots.txt or blocklist URL must not redirect us into another
        site's disallowed path)."""
        purpose = self.marks.purpose(request, quiet=True)
        if purpose == ROBOTS:
            return urlsplit(request.url).path == "/robots.txt" or self._same_origin(request)
        if purpose in (BLOCKLIST, SCHEMA):
            return url_host(request.url) in self._operator_hosts
        return False

    @staticmethod
    def _same_origin(request: Request) -> bool:
        first = (request.meta.get("redirect_urls") or [request.url])[0]
        return origin_of(first) == origin_of(request.url)

    async def process_request(self, request: Request) -> Request | None:
        if self.marks.purpose(request, quiet=True) == ROBOTS and not self._exempt(request):
            # A robots.txt fetch redirected to another origin's other path:
            # not followed (that origin's rules are unknown, and waiting for
            # them could wait on this very fetch). The origin's robots.txt is
            # then unreachable: disallowed, the stricter reading.
            reason = f"robots.txt redirected to {request.url}, another origin's page"
            deny(self.crawler, logger, request, "R2", reason)
        if self._exempt(request):
            return None  # robots.txt itself, the blocklist and its schema
        entry = self._fresh(origin_of(request.url), touch=True)
        if entry is None:
            host = url_host(request.url)
            skip = await self.pacer.skip(host)
            if skip is not None:  # fetching robots.txt would contact the host
                deny(self.crawler, logger, request, skip[0], skip[1], outcome="skipped")
            # The bundle's own tdmrep.json redirected to another origin is
            # fetched from inside a target's chain: it cannot go back to the
            # frontier, so it waits in place (bounded) for that robots.txt.
            direct = self.marks.purpose(request, quiet=True) in DIRECT
            requeue = self.requeue and not direct
            if requeue and self.pacer.ready_at(host) > time.monotonic():
                return self.pacer.requeue(request)
            wait = self.pacer.max_crawl_delay if direct else None
            try:
                entry = await self.entry_for(request.url, max_wait=SHORT_WAIT if requeue else wait)
            except HostBusy as exc:
                if requeue:
                    self.pacer.defer(host, exc.ready_in)
                    return self.pacer.requeue(request)
                reason = f"robots.txt cannot be fetched: {exc}"
                deny(self.crawler, logger, request, "R4", reason, outcome="skipped")
        policy = entry.policy
        if policy.allows(request.url):
            return None
        reason = policy.reason or f"robots.txt ({policy.group} group) disallows this path"
        deny(self.crawler, logger, request, "R2", reason)

    def sha256_for(self, url: str) -> str | None:
        """The sha256 of the robots.txt in force for *url*'s origin."""
        entry = self._cache.get(origin_of(url))
        return entry.sha256 if entry is not None else None

    def _fresh(self, origin: str, touch: bool = False) -> RobotsEntry | None:
        entry = self._cache.get(origin)
        if entry is None or self.store.time() >= entry.expires:
            return None
        if touch:
            self._cache.move_to_end(origin)
        return entry

    def _remember(self, origin: str, entry: RobotsEntry) -> None:
        """Cache *entry*, evicting the least recently used beyond the bound."""
        self._cache[origin] = entry
        self._cache.move_to_end(origin)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
            self.stats.inc_value("walsh/robots/cache_evicted")
        self.stats.max_value("walsh/robots/cache_max", len(self._cache))

    def _cached_denial(self, request: Request) -> bool:
        if self._exempt(request):
            return False
        entry = self._fresh(origin_of(request.url))
        return bool(entry and not entry.policy.allows(request.url))

    async def entry_for(self, url: str, *, max_wait: float | None = None) -> RobotsEntry:
        """The robots.txt answer in force for *url*'s origin: cached, stored
        within the TTL, or fetched (one fetch per origin at a time). A fetch
        that cannot wait *max_wait* for its host raises :class:`HostBusy`."""
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
            await self.pacer.note_robots(origin, entry.policy, entry.expires)
            # An answer outlives the waits its own fetch and the origin's
            # tdmrep.json fetch (usage.py) impose on the host: a TTL shorter
            # than the Crawl-delay would otherwise re-fetch the two in turn
            # forever while the target waits for its turn.
            usable = self.store.time() + USABLE_INTERVALS * self.pacer.interval(url_host(url))
            entry.expires = max(entry.expires, usable)
            self._remember(origin, entry)
        finally:
            del self._pending[origin]
            pending.callback(None)
        return entry

    async def _fetch_once(
        self, origin: str, previous: RobotsEntry | None, max_wait: float | None
    ) -> RobotsEntry:
        """Fetch, or, with shared state, let one worker of the fleet fetch while
        the others wait and adopt what it stored: workers starting together
        send an origin one robots.txt request, not one each."""
        for _ in range(3):
            try:
                release = await self.store.single_flight(
                    f"robots:{origin}", ttl=self.fetch_ttl, max_wait=max_wait
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
                self.stats.inc_value("walsh/robots/adopted_from_worker")
                return stored
        return await self._fetch(origin, previous, max_wait)

    async def _stored_fresh(self, origin: str) -> RobotsEntry | None:
        """The latest answer stored by an earlier run or another worker and
        still in force: a 2xx copy or a 4xx within the TTL, or a failed fetch
        before its next try."""
        answers = [
            a
            for a in (
                await self.store.get(STATE_NAMESPACE, origin),
                await self.store.get(ABSENT_NAMESPACE, origin),
                await self.store.get(UNREACHABLE_NAMESPACE, origin),
            )
            if isinstance(a, dict) and isinstance(a.get("fetched_at"), (int, float))
        ]
        if not answers:
            return None
        saved = max(answers, key=lambda a: float(a["fetched_at"]))
        fetched_at, status = float(saved["fetched_at"]), saved.get("status")
        now = self.store.time()
        if "retry_at" in saved:  # a failed fetch: its backoff still runs
            retry_at = float(saved["retry_at"])
            if not fetched_at <= now < retry_at:
                return None
            self.stats.inc_value("walsh/robots/stored_copy")
            return await self._failed_entry(
                origin, status, str(saved.get("why")), retry_at, int(saved.get("failures", 1))
            )
        if not fetched_at <= now < fetched_at + self.ttl:
            return None
        self.stats.inc_value("walsh/robots/stored_copy")
        digest = None
        if saved.get("text") is not None:
            policy, digest = await _parse(str(saved["text"]))
        else:
            policy = RobotsPolicy.allow_all(f"robots.txt answered {status}: no rules apply")
        return RobotsEntry(policy, fetched_at + self.ttl, status, sha256=digest)

    async def _fetch(
        self, origin: str, previous: RobotsEntry | None, max_wait: float | None
    ) -> RobotsEntry:
        url = f"{origin}/robots.txt"
        try:
            # A little more than the parse limit, so truncation is detectable;
            # a larger file is still read up to that point, never refused.
            response = await internal_fetch(
                self.crawler,
                url,
                ROBOTS,
                max_bytes=MAX_ROBOTS_BYTES + 1,
                maxsize=0,
                max_wait=max_wait,
            )
        except HostBusy:
            raise  # nothing was sent
        except Exception as exc:
            self.stats.inc_value("walsh/robots/fetch")
            return await self._unreachable(
                origin, previous, None, f"robots.txt fetch failed: {exc}"
            )
        status = response.status
        self.stats.inc_value("walsh/robots/fetch")
        self.stats.inc_value(f"walsh/robots/status/{status}")
        now = self.store.time()
        if 200 <= status < 300:
            text, truncated = decode_robots(response.body)
            if truncated:
                self.stats.inc_value("walsh/robots/truncated")
                logger.warning(
                    "robots.txt at %(url)s exceeds 500 KiB; parsed the first 500 KiB only",
                    {"url": url},
                )
            copy = {"text": text, "fetched_at": now, "status": status}
            await self.store.put(STATE_NAMESPACE, origin, copy)
            policy, digest = await _parse(text)
            if not policy.allows(f"{origin}/"):
                await self._purge(origin, digest)
            return RobotsEntry(policy, now + self.ttl, status, sha256=digest)
        if 400 <= status < 500 and status != 429:
            await self.store.put(ABSENT_NAMESPACE, origin, {"fetched_at": now, "status": status})
            policy = RobotsPolicy.allow_all(f"robots.txt answered {status}: no rules apply")
            return RobotsEntry(policy, now + self.ttl, status)
        return await self._unreachable(origin, previous, status, f"robots.txt answered {status}")

    async def _purge(self, origin: str, digest: str) -> None:
        """The host opted out by robots.txt (``/`` disallowed for our token):
        what was stored about it goes (purge on opt-out)."""
        from scrapy_walsh_research.evidence.audit import AuditTrail
        from scrapy_walsh_research.evidence.purge import purge

        host = url_host(origin)
        await purge(
            self.store, lambda h: h == host, only=host,
            cause=f"opted out: {origin}/robots.txt disallows {PRODUCT_TOKEN} for / "
            f"(sha256 {digest[:12]})",
            audit=AuditTrail.for_crawler(self.crawler), stats=self.stats,
        )  # fmt: skip

    async def _unreachable(
        self, origin: str, previous: RobotsEntry | None, status: int | None, why: str
    ) -> RobotsEntry:
        """RFC 9309 §2.3.1.4: assume complete disallow, unless a recent good copy
        exists. The failure is stored, so the backoff holds across restarts and
        workers."""
        self.stats.inc_value("walsh/robots/unreachable")
        failures = (await self._failures_before(origin, previous)) + 1
        delay = min(self.retry_delay * 2 ** (failures - 1), self.ttl)
        now = self.store.time()
        await self.store.put(
            UNREACHABLE_NAMESPACE,
            origin,
            {"fetched_at": now, "retry_at": now + delay, "status": status, "why": why,
             "failures": failures},
        )  # fmt: skip
        return await self._failed_entry(origin, status, why, now + delay, failures)

    async def _failures_before(self, origin: str, previous: RobotsEntry | None) -> int:
        """Failed fetches in a row so far: from the cached answer, or, once
        it was evicted from the cache, from the stored failure when that is
        the latest answer and its backoff ended within the TTL (an eviction
        must not restart the exponential backoff)."""
        if previous is not None:
            return previous.failures
        failed = await self.store.get(UNREACHABLE_NAMESPACE, origin)
        if not isinstance(failed, dict) or not isinstance(failed.get("retry_at"), (int, float)):
            return 0
        others = [await self.store.get(STATE_NAMESPACE, origin),
                  await self.store.get(ABSENT_NAMESPACE, origin)]  # fmt: skip
        latest = max((float(a["fetched_at"]) for a in others
                      if isinstance(a, dict) and isinstance(a.get("fetched_at"), (int, float))),
                     default=float("-inf"))  # fmt: skip
        if float(failed.get("fetched_at", 0)) <= latest:
            return 0
        if self.store.time() - float(failed["retry_at"]) > self.ttl:
            return 0
        return int(failed.get("failures", 0))

    async def _failed_entry(
        self, origin: str, status: int | None, why: str, retry_at: float, failures: int
    ) -> RobotsEntry:
        now = self.store.time()
        delay = retry_at - now
        saved = await self.store.get(STATE_NAMESPACE, origin)
        if saved and now - float(saved["fetched_at"]) < LAST_GOOD_MAX_AGE:
            age_h = (now - float(saved["fetched_at"])) / 3600
            logger.warning(
                "%(why)s for %(origin)s; using the last good copy (%(age).1f h old); "
                "next try in %(d).0f s",
                {"why": why, "origin": origin, "age": age_h, "d": delay},
            )
            self.stats.inc_value("walsh/robots/last_good_used")
            policy, _ = await _parse(str(saved["text"]))
            return RobotsEntry(policy, retry_at, status, failures)
        reason = (
            f"{why}; host disallowed until robots.txt can be fetched "
            f"(RFC 9309 §2.3.1.4; next try in {delay:.0f} s)"
        )
        logger.warning("%(reason)s: %(origin)s", {"reason": reason, "origin": origin})
        return RobotsEntry(RobotsPolicy.disallow_all(reason), retry_at, status, failures)


#: a robots.txt up to this size is parsed inline; a larger one (up to the
#: 500 KiB read) in a worker process: a 500 KiB file takes 0.05-0.2 s to
#: parse, and in a thread that pure-Python work held the GIL often enough to
#: stall the reactor 0.1-0.15 s while 20 such files were parsed. The parsed
#: policy comes back pickled (~70 KB, 3-4 ms to load for a 500 KiB file).
INLINE_PARSE_CHARS = 32 * 1024

_pool: Any = None


def _parse_here(text: str) -> tuple[RobotsPolicy, str]:
    return RobotsPolicy.parse(text, PRODUCT_TOKEN), _sha256(text)


def _parse_pickled(text: str) -> bytes:
    """:func:`_parse_here`, pickled in the worker: the executor's thread then
    passes bytes along, and the reactor thread loads them (3-4 ms). Loaded in
    that thread, the GIL was held there, and a thread preempted by the OS
    while it holds the GIL blocks the reactor for as long."""
    import pickle

    return pickle.dumps(_parse_here(text), protocol=pickle.HIGHEST_PROTOCOL)


def _parser_pool() -> Any:
    """One worker process per crawl process, started at the first large
    robots.txt (spawned, not forked: the reactor process has threads)."""
    global _pool
    if _pool is None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        _pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        atexit.register(_pool.shutdown, wait=False, cancel_futures=True)
    return _pool


async def _parse(text: str) -> tuple[RobotsPolicy, str]:
    """The policy for our product token in *text*, and the text's sha256."""
    global _pool
    if len(text) <= INLINE_PARSE_CHARS:
        return _parse_here(text)
    import pickle
    from concurrent.futures.process import BrokenProcessPool

    from twisted.internet import reactor

    done: Deferred[bytes] = Deferred()

    def finished(future: Any) -> None:
        exc = future.exception()
        if exc is None:
            reactor.callFromThread(done.callback, future.result())
        else:
            reactor.callFromThread(done.errback, exc)

    try:
        _parser_pool().submit(_parse_pickled, text).add_done_callback(finished)
        data = await maybe_deferred_to_future(done)
        loaded: tuple[RobotsPolicy, str] = pickle.loads(data)
        return loaded
    except (BrokenProcessPool, OSError, RuntimeError) as exc:
        # no worker process (it died, or cannot start): parse in a thread
        logger.warning("robots.txt parser process unavailable (%(exc)s); parsing in a thread",
                       {"exc": exc})  # fmt: skip
        _pool = None
        return await maybe_deferred_to_future(deferToThread(_parse_here, text))


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
