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
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred

from scrapy_walsh_research.errors import deny
from scrapy_walsh_research.identity import PRODUCT_TOKEN
from scrapy_walsh_research.internal import ROBOTS, internal_fetch, is_direct
from scrapy_walsh_research.pacing import Pacer
from scrapy_walsh_research.preflight import check_configuration
from scrapy_walsh_research.robotstxt import MAX_ROBOTS_BYTES, RobotsPolicy, decode_robots
from scrapy_walsh_research.state import state_for
from scrapy_walsh_research.urls import origin_of, url_host

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
LAST_GOOD_MAX_AGE = 30 * 86400.0


@dataclass
class RobotsEntry:
    policy: RobotsPolicy
    expires: float
    #: HTTP status of the last fetch, or None for a network failure.
    status: int | None
    failures: int = 0


class RobotsTxtMiddleware:
    """Downloader middleware: deny what robots.txt forbids to ``Walsh-Research``."""

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.stats = crawler.stats
        self.ttl = settings.getfloat("WALSH_ROBOTS_TTL", 86400.0)
        self.retry_delay = settings.getfloat("WALSH_ROBOTS_RETRY_DELAY", 60.0)
        self.store = state_for(crawler)
        self.pacer = Pacer.for_crawler(crawler)
        self.pacer.add_denial_check(self._cached_denial)
        self._cache: dict[str, RobotsEntry] = {}
        self._pending: dict[str, Deferred[RobotsEntry]] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        check_configuration(crawler)
        return cls(crawler)

    async def process_request(self, request: Request) -> None:
        if is_direct(request):
            return  # robots.txt itself, the blocklist and its schema
        entry = await self.entry_for(request.url)
        policy = entry.policy
        if policy.allows(request.url):
            return
        reason = policy.reason or f"robots.txt ({policy.group} group) disallows this path"
        deny(self.crawler, logger, request, "R2", reason)

    def _cached_denial(self, request: Request) -> bool:
        if is_direct(request):
            return False
        entry = self._cache.get(origin_of(request.url))
        return bool(entry and time.time() < entry.expires and not entry.policy.allows(request.url))

    async def entry_for(self, url: str) -> RobotsEntry:
        origin = origin_of(url)
        entry = self._cache.get(origin)
        if entry is not None and time.time() < entry.expires:
            return entry
        pending = self._pending.get(origin)
        if pending is not None:
            return await maybe_deferred_to_future(pending)
        pending = self._pending[origin] = Deferred()
        try:
            entry = await self._stored_fresh(origin) or await self._fetch(origin, entry)
        finally:
            del self._pending[origin]
        self._cache[origin] = entry
        self.pacer.note_robots(url_host(url), entry.policy)
        pending.callback(entry)
        return entry

    async def _stored_fresh(self, origin: str) -> RobotsEntry | None:
        """The latest answer (2xx copy or 4xx) stored within the TTL by an
        earlier run or another worker."""
        answers = [
            a
            for a in (
                await self.store.get(STATE_NAMESPACE, origin),
                await self.store.get(ABSENT_NAMESPACE, origin),
            )
            if a
        ]
        if not answers:
            return None
        saved = max(answers, key=lambda a: float(a["fetched_at"]))
        fetched_at, status = float(saved["fetched_at"]), int(saved.get("status", 200))
        if not fetched_at <= time.time() < fetched_at + self.ttl:
            return None
        self.stats.inc_value("walsh/robots/stored_copy")
        if saved.get("text") is not None:
            policy = RobotsPolicy.parse(saved["text"], PRODUCT_TOKEN)
        else:
            policy = RobotsPolicy.allow_all(f"robots.txt answered {status}: no rules apply")
        return RobotsEntry(policy, fetched_at + self.ttl, status)

    async def _fetch(self, origin: str, previous: RobotsEntry | None) -> RobotsEntry:
        url = f"{origin}/robots.txt"
        self.stats.inc_value("walsh/robots/fetch")
        try:
            # A little more than the parse limit, so truncation is detectable.
            response = await internal_fetch(
                self.crawler, url, ROBOTS, max_bytes=MAX_ROBOTS_BYTES + 1
            )
        except Exception as exc:
            return await self._unreachable(
                origin, previous, None, f"robots.txt fetch failed: {exc}"
            )
        status = response.status
        self.stats.inc_value(f"walsh/robots/status/{status}")
        now = time.time()
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
            return RobotsEntry(RobotsPolicy.parse(text, PRODUCT_TOKEN), now + self.ttl, status)
        if 400 <= status < 500 and status != 429:
            await self.store.put(ABSENT_NAMESPACE, origin, {"fetched_at": now, "status": status})
            policy = RobotsPolicy.allow_all(f"robots.txt answered {status}: no rules apply")
            return RobotsEntry(policy, now + self.ttl, status)
        return await self._unreachable(origin, previous, status, f"robots.txt answered {status}")

    async def _unreachable(
        self, origin: str, previous: RobotsEntry | None, status: int | None, why: str
    ) -> RobotsEntry:
        """RFC 9309 §2.3.1.4: assume complete disallow, unless a recent good copy exists."""
        self.stats.inc_value("walsh/robots/unreachable")
        failures = (previous.failures if previous else 0) + 1
        delay = min(self.retry_delay * 2 ** (failures - 1), self.ttl)
        now = time.time()
        saved = await self.store.get(STATE_NAMESPACE, origin)
        if saved and now - float(saved["fetched_at"]) < LAST_GOOD_MAX_AGE:
            age_h = (now - float(saved["fetched_at"])) / 3600
            logger.warning(
                "%(why)s for %(origin)s; using the last good copy (%(age).1f h old); "
                "next try in %(d).0f s",
                {"why": why, "origin": origin, "age": age_h, "d": delay},
            )
            self.stats.inc_value("walsh/robots/last_good_used")
            policy = RobotsPolicy.parse(saved["text"], PRODUCT_TOKEN)
            return RobotsEntry(policy, now + delay, status, failures)
        reason = (
            f"{why}; host disallowed until robots.txt can be fetched "
            f"(RFC 9309 §2.3.1.4; next try in {delay:.0f} s)"
        )
        logger.warning("%(reason)s: %(origin)s", {"reason": reason, "origin": origin})
        return RobotsEntry(RobotsPolicy.disallow_all(reason), now + delay, status, failures)
