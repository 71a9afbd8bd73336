"""R2: robots.txt per RFC 9309, replacing Scrapy's ``RobotsTxtMiddleware``.

Status handling (RFC 9309 §2.3.1), stricter than the spec's "SHOULD fail
open" where the RFC says "MUST disallow":

* 2xx: parse at most 500 KiB;
* redirects: followed by Scrapy, at most ``REDIRECT_MAX_TIMES`` (5) hops,
  each hop through the blocklist gate;
* 4xx other than 429: no rules apply (allow all);
* 429, 5xx, timeouts, connection errors, too many redirects: robots.txt is
  unknown, and nothing is sent to the host until it can be fetched. A last
  good copy younger than 30 days is used instead when there is one; else
  the host's targets wait for its next try (exponential backoff with jitter,
  not on every request), within ``WALSH_POLICY_WAIT``, and only then get a
  record (``skipped``, rule R2, with what happened): an unreachable
  robots.txt is not a site's "no".

There is no ``dont_obey_robotstxt`` bypass.

What the 1996 extension proposal adds to the selected group
(:mod:`scrapy_walsh_research.core.robots_policy` reads it), the reading that
protects the site where it and RFC 9309 differ:

* ``Visit-time`` (UTC): outside the window nothing but robots.txt reaches
  the host. A window opening within ``WALSH_VISIT_TIME_WAIT`` is waited
  for, the targets kept aside (:meth:`DocumentWaits.keep_aside`) while
  other hosts go on, then fetched inside it at the host's pace; one further
  away gives each target its record at once (``skipped``, the window and
  when it next opens; the next run tries again). The policy is parsed from
  the stored text, so every worker of a fleet keeps the window;
* ``Comment`` lines, which windows a host sets, and a ``Visit-time`` that
  cannot be read are told to the operator once per robots.txt version
  (INFO; WARNING for the unreadable line, which is ignored), and written to
  the audit log for the host's report;
* ``ACAP-disallow-crawl`` paths of the selected ``ACAP-crawler`` group deny
  as a ``Disallow`` does, their records naming ACAP.

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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.http import Response
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThread

from scrapy_walsh_research._runtime.marks import BLOCKLIST, DIRECT, ROBOTS, SCHEMA
from scrapy_walsh_research.core.contract import PRODUCT_TOKEN
from scrapy_walsh_research.core.outage import Outage
from scrapy_walsh_research.core.robots_policy import MAX_ROBOTS_BYTES, RobotsPolicy, decode_robots
from scrapy_walsh_research.core.timestamps import duration_text, utc_iso
from scrapy_walsh_research.core.urls import origin_of, url_host
from scrapy_walsh_research.core.visit_time import describe, next_opening, open_at
from scrapy_walsh_research.documents.fetch import validators
from scrapy_walsh_research.errors import deny
from scrapy_walsh_research.evidence.purge import is_host, purge
from scrapy_walsh_research.gates.origin_documents import OriginDocuments
from scrapy_walsh_research.settings.check import check_configuration
from scrapy_walsh_research.settings.options import operator_hosts
from scrapy_walsh_research.state import namespaces
from scrapy_walsh_research.state.namespaces import LAST_GOOD_MAX_AGE

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self

logger = logging.getLogger(__name__)

#: where robots.txt answers are stored (state.namespaces says what each holds)
STATE_NAMESPACE = namespaces.ROBOTS
ABSENT_NAMESPACE = namespaces.ROBOTS_4XX
UNREACHABLE_NAMESPACE = namespaces.ROBOTS_UNREACHABLE


@dataclass
class RobotsEntry:
    policy: RobotsPolicy
    expires: float
    #: HTTP status of the last fetch, or None for a network failure.
    status: int | None
    failures: int = 0
    #: sha256 of the robots.txt text in force (None: no text, status rules)
    sha256: str | None = None
    #: robots.txt unknown for now (a transient failure, no last good copy):
    #: complete disallow, and its targets wait for the next try
    outage: Outage | None = None


class RobotsTxtMiddleware(OriginDocuments[RobotsEntry]):
    """Downloader middleware: deny what robots.txt forbids to ``Walsh-Research``.

    The crawler's :class:`~scrapy_walsh_research._runtime.context.RobotsPolicies`:
    the PREF gate reads the selected group's usage preferences from it, the
    sitemaps gate its ``Sitemap:`` lines."""

    kind = "robots"
    document = "robots.txt"
    answer_namespaces = (STATE_NAMESPACE, ABSENT_NAMESPACE)
    body_field = "text"
    unreachable_namespace = UNREACHABLE_NAMESPACE
    log = logger
    rule = "R2"
    while_unknown = (
        "nothing is sent to the host while its robots.txt is unknown (RFC 9309 §2.3.1.4)"
    )
    path = "/robots.txt"
    purpose = ROBOTS
    max_bytes = MAX_ROBOTS_BYTES

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        super().__init__(crawler)
        self.context.robots = self
        self.context.audit.robots_in_force(self.sha256_for)
        self._operator_hosts = operator_hosts(settings)
        #: how long targets wait for their host's Visit-time window to open
        self.visit_wait = self.context.settings.visit_time_wait
        #: (origin, sha256) of the robots.txt versions already told to the operator
        self._told: set[tuple[str, str | None]] = set()
        #: (host, opening) of the Visit-time waits already logged -> that
        #: opening as time.monotonic(): its targets come back in their order
        self._waits_told: dict[tuple[str, float], float] = {}
        # a request that passed this gate may wait for its host's slot or
        # the wire past its window's close, or while a robots.txt that
        # disallows it is read: asked again as it leaves
        self.context.departure_checks.append(self)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        check_configuration(crawler)
        return cls(crawler)

    def cached_policy(self, url: str) -> RobotsPolicy | None:
        """The policy in force for *url*'s origin, when one is cached."""
        entry = self._fresh(origin_of(url))
        return entry.policy if entry is not None else None

    async def policy_for(self, url: str) -> RobotsPolicy:
        """The policy in force for *url*'s origin: cached, stored, or fetched."""
        return (await self.entry_for(url)).policy

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
        entry = await self.entry_or_requeue(request)
        if isinstance(entry, Request):
            return entry  # back to the frontier until its host is ready
        policy = entry.policy
        if not policy.allows(request.url):
            reason = policy.denial_reason(request.url)
            # "disallow-all" is robots.txt unreachable: it passes when it answers
            deny(self.crawler, logger, request, "R2", reason,
                 lasting=policy.group != "disallow-all")  # fmt: skip
        if policy.visit_windows:
            return await self._in_visit_time(request, policy)
        return None

    def _opening(self, policy: RobotsPolicy) -> tuple[float, float | None]:
        """Now (state-store time, the fleet's) and when *policy*'s Visit-time
        windows next open (now while they are open; None: never)."""
        now = self.store.time()
        return now, next_opening(policy.visit_windows, now)

    async def _in_visit_time(self, request: Request, policy: RobotsPolicy) -> Request | None:
        """None inside the host's Visit-time window; a target kept aside
        until it opens when that is within ``WALSH_VISIT_TIME_WAIT``; else
        denied (``skipped``, not requested this run), nothing having been sent."""
        now, opens = self._opening(policy)
        if opens == now:
            return None
        host, windows = url_host(request.url), describe(policy.visit_windows)
        direct = self.marks.purpose(request, quiet=True) in DIRECT
        if opens is not None and opens - now <= self.visit_wait and not direct:
            self.stats.inc_value("walsh/visit_time/kept_aside")
            back = self._waits_told.get((host, opens))
            if back is None:
                back = self._waits_told[host, opens] = time.monotonic() + (opens - now)
                logger.info(
                    "%(host)s asks for visits only within Visit-time %(w)s (robots.txt): its "
                    "targets wait %(in)s for the window to open at %(at)s",
                    {"host": host, "w": windows, "in": duration_text(opens - now),
                     "at": utc_iso(opens)},
                )  # fmt: skip
            return await self.waits.keep_aside(request, opens, monotonic_until=back)
        when = (
            "it never opens (no time of day is inside all of them)"
            if opens is None
            else f"it next opens at {utc_iso(opens)} (in {duration_text(opens - now)})"
        )
        beyond = "" if direct else f", beyond WALSH_VISIT_TIME_WAIT ({self.visit_wait:g} s)"
        reason = (
            f"{_visits_only_within(request.url, windows)}: outside it now, and {when}{beyond}: "
            "not requested this run (tried again next run)"
        )
        deny(self.crawler, logger, request, "R2", reason, outcome="skipped", lasting=False)

    def departure_denial(self, request: Request) -> tuple[str, str] | None:
        """("R2", reason) when the robots.txt in force for *request*'s origin
        now disallows it (read again while the request waited), or its
        Visit-time window is closed now (robots.txt itself excepted), from
        the cached policy."""
        if self._exempt(request):
            return None
        entry = self._cache.get(origin_of(request.url))
        if entry is None:
            return None
        if entry.outage is None and not entry.policy.allows(request.url):
            return "R2", (
                f"{entry.policy.denial_reason(request.url)}: robots.txt read while the request "
                "waited for its turn: not sent"
            )
        if not entry.policy.visit_windows:
            return None
        if open_at(entry.policy.visit_windows, self.store.time()):
            return None
        return "R2", (
            f"{_visits_only_within(request.url, describe(entry.policy.visit_windows))}: it "
            "closed while the request waited for its host's turn: not sent"
        )

    def sha256_for(self, url: str) -> str | None:
        """The sha256 of the robots.txt in force for *url*'s origin."""
        entry = self._cache.get(origin_of(url))
        return entry.sha256 if entry is not None else None

    def would_deny(self, request: Request) -> bool:
        if self._exempt(request):
            return False
        entry = self._fresh(origin_of(request.url))
        if entry is None or (entry.outage is not None and not self._waited_out(entry)):
            return False  # not known yet, or waiting for it: not decided
        policy = entry.policy
        if not policy.allows(request.url):
            return True
        if not policy.visit_windows:
            return False
        now, opens = self._opening(policy)  # a window too far away to wait for
        return opens is None or opens - now > self.visit_wait

    def _read(self, entry: RobotsEntry) -> bool:
        return entry.policy.group != "disallow-all"

    async def _noted(self, origin: str, entry: RobotsEntry) -> None:
        await self.pacer.note_robots(origin, entry.policy, entry.expires)
        await self._tell_operator(origin, entry)

    async def _tell_operator(self, origin: str, entry: RobotsEntry) -> None:
        """What a robots.txt says to the robot's operator (Comment lines, the
        Visit-time windows and any it could not read): logged once per
        version of the file this run, and written to the audit log, where the
        host's report reads it."""
        policy = entry.policy
        if not (policy.comments or policy.visit_windows or policy.malformed_visit_times):
            return
        key = (origin, entry.sha256)
        if key in self._told:
            return
        self._told.add(key)
        host = url_host(origin)
        if policy.visit_windows:
            self.stats.inc_value("walsh/visit_time/hosts")
            logger.info(
                "%(host)s restricts visits to Visit-time %(w)s (%(origin)s/robots.txt): "
                "nothing but robots.txt is sent to it outside that window",
                {"host": host, "w": describe(policy.visit_windows), "origin": origin},
            )
        for value in policy.malformed_visit_times:
            self.stats.inc_value("walsh/visit_time/malformed")
            logger.warning(
                "%(host)s: robots.txt line Visit-time: %(v)r cannot be read (HHMM-HHMM, "
                "UTC): ignored (%(origin)s/robots.txt)",
                {"host": host, "v": value, "origin": origin},
            )
        for comment in policy.comments:
            logger.info(
                "%(host)s says to robot operators (robots.txt Comment): %(c)s",
                {"host": host, "c": comment},
            )
        await self.context.audit.robots_said(
            f"{origin}/robots.txt",
            sha256=entry.sha256,
            comments=list(policy.comments),
            visit_time=[str(w) for w in policy.visit_windows],
            visit_time_unread=list(policy.malformed_visit_times),
        )

    async def _from_saved(self, saved: dict[str, Any], expires: float) -> RobotsEntry:
        status = saved.get("status")
        digest = None
        if saved.get("text") is not None:
            policy, digest = await _parse(str(saved["text"]))
        else:
            policy = RobotsPolicy.allow_all(f"robots.txt answered {status}: no rules apply")
        return RobotsEntry(policy, expires, status, sha256=digest)

    async def _fetch(
        self, origin: str, previous: RobotsEntry | None, max_wait: float | None
    ) -> RobotsEntry:
        url = f"{origin}/robots.txt"
        # one byte past the parse limit is fetched, so truncation is
        # detectable; a larger file is still read up to the limit, never refused
        response = await self._get(origin, previous, max_wait)
        if not isinstance(response, Response):
            return response  # could not be fetched
        status, now = response.status, self.store.time()
        if 200 <= status < 300:
            text, truncated = decode_robots(response.body)
            if truncated:
                self.stats.inc_value("walsh/robots/truncated")
                logger.warning(
                    "robots.txt at %(url)s exceeds 500 KiB; parsed the first 500 KiB only",
                    {"url": url},
                )
            policy, digest = await _parse(text)
            if not policy.allows(f"{origin}/"):
                # before the copy is stored: a crash in between must leave
                # the next run to fetch (and purge) again, not a stored copy
                # that restarts and other workers adopt without purging
                await self._purge(origin, digest)
            copy = {"text": text, "fetched_at": now, "status": status, **validators(response)}
            await self.store.put(STATE_NAMESPACE, origin, copy)
            return RobotsEntry(policy, now + self.ttl, status, sha256=digest)
        if 400 <= status < 500 and status != 429:
            await self.store.put(ABSENT_NAMESPACE, origin, {"fetched_at": now, "status": status})
            policy = RobotsPolicy.allow_all(f"robots.txt answered {status}: no rules apply")
            return RobotsEntry(policy, now + self.ttl, status)
        return await self._unreachable(origin, previous, status, f"answered {status}")

    async def _purge(self, origin: str, digest: str) -> None:
        """The host opted out by robots.txt (``/`` disallowed for our token):
        what was stored about it goes (purge on opt-out)."""
        host = url_host(origin)
        await purge(
            self.store, is_host(host), only=host,
            cause=f"opted out: {origin}/robots.txt disallows {PRODUCT_TOKEN} for / "
            f"(sha256 {digest[:12]})",
            audit=self.context.audit, stats=self.stats,
        )  # fmt: skip

    async def _failed_entry(self, origin: str, outage: Outage) -> RobotsEntry:
        """RFC 9309 §2.3.1.4: complete disallow while robots.txt is
        unreachable, unless a recent good copy exists."""
        now = self.store.time()
        saved = await self.store.get(STATE_NAMESPACE, origin)
        if saved and now - float(saved["fetched_at"]) < LAST_GOOD_MAX_AGE:
            age_h = (now - float(saved["fetched_at"])) / 3600
            logger.warning(
                "%(what)s for %(origin)s; using the last good copy (%(age).1f h old); "
                "next try in %(d).0f s",
                {"what": outage.describe(), "origin": origin, "age": age_h,
                 "d": outage.retry_at - now},
            )  # fmt: skip
            self.stats.inc_value("walsh/robots/last_good_used")
            policy, _ = await _parse(str(saved["text"]))
            return RobotsEntry(policy, outage.retry_at, outage.status, outage.tries)
        if not outage.passing and not outage.no_such_name:
            # the site's own setup: decided now, disallowed
            reason = f"{outage.describe()}: host disallowed (RFC 9309 §2.3.1.4)"
            policy = RobotsPolicy.disallow_all(reason)
            return RobotsEntry(policy, outage.retry_at, outage.status, outage.tries)
        policy = RobotsPolicy.disallow_all(f"{outage.describe()}: {self.while_unknown}")
        return RobotsEntry(policy, outage.retry_at, outage.status, outage.tries, outage=outage)


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


def _visits_only_within(url: str, windows: str) -> str:
    """How a record names the Visit-time windows of *url*'s origin."""
    return f"robots.txt of {origin_of(url)} asks for visits only within Visit-time {windows}"
