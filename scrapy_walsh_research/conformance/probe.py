"""The crawls a conformance run makes: the project's own ``targets`` spider
over the sandbox, with the project's effective settings pointed at it, and
an extension that plays another component injecting requests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import Request, signals

from scrapy_walsh_research.conformance.scenario import (
    BLOCKLIST_PATH,
    BLOCKLIST_REFRESH_S,
    FORGED,
    OPERATOR,
    POLICY_WAIT_S,
    ROBOTS_RETRY_S,
    SCHEMA_PATH,
)
from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.evidence.verdicts import CrawlOutcome
from scrapy_walsh_research.sandbox.crawl import crawl_list

if TYPE_CHECKING:
    from pathlib import Path

    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import Settings

    from scrapy_walsh_research.conformance.scenario import Scenario


class InjectionProbe:
    """Conformance-only extension: another component asks for a sub-resource.

    On the links page's response it injects a request for the page's image
    into the engine, as a media pipeline would, and requests that claim to be
    the bundle's own (:data:`~scrapy_walsh_research.conformance.scenario.FORGED`).
    R6 must stop them all.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.done = False
        crawler.signals.connect(self.on_response, signal=signals.response_received)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> InjectionProbe:
        return cls(crawler)

    def on_response(self, response: Response, request: Request, spider: Any) -> None:
        if self.done or not response.url.startswith("http://links.test:"):
            return
        self.done = True
        assert self.crawler.engine is not None
        self.crawler.engine.crawl(Request(response.urljoin("/img.png"), dont_filter=True))
        port = urlsplit(response.url).port
        for host, path, meta in FORGED:
            url = f"http://{host}:{port}{path}"
            self.crawler.engine.crawl(Request(url, meta=dict(meta), dont_filter=True))


@dataclass
class Probe:
    """The project's spider crawling the sandbox with the project's settings
    (*base*), every crawl in *work*, sharing one state directory."""

    spidercls: type
    base: Settings
    scenario: Scenario
    work: Path

    @property
    def state(self) -> Path:
        return self.work / "state"

    def settings(self, state: Path, **extra: Any) -> Settings:
        """*base* pointed at the sandbox's operator, with *state* and *extra*."""
        server = self.scenario.server
        settings = self.base.copy()
        overrides = {
            "WALSH_BLOCKLIST_URL": server.url(OPERATOR, BLOCKLIST_PATH),
            "WALSH_BLOCKLIST_SCHEMA_URL": server.url(OPERATOR, SCHEMA_PATH),
            "WALSH_BLOCKLIST_ALLOW_HTTP": True,
            # the sandbox's list refreshes every second, so restarts meet a due list
            "WALSH_BLOCKLIST_MIN_REFRESH": BLOCKLIST_REFRESH_S,
            # the sandbox's outages last seconds: a robots.txt is tried again
            # after one, and waited for ten (the defaults: a minute, five)
            "WALSH_POLICY_RETRY_DELAY": ROBOTS_RETRY_S,
            "WALSH_POLICY_WAIT": POLICY_WAIT_S,
            "WALSH_STATE_DIR": str(state),
            **extra,
        }
        for name, value in overrides.items():
            settings.set(name, value, priority="cmdline")
        extensions = settings.getdict("EXTENSIONS")
        extensions[f"{__name__}.{InjectionProbe.__name__}"] = 0
        settings.set("EXTENSIONS", extensions, priority="cmdline")
        return settings

    async def crawl(self, lines: list[str], **extra: Any) -> CrawlOutcome:
        """Crawl *lines* with the shared state and *extra* settings."""
        return await self._crawl(self.settings(self.state, **extra), lines)

    async def crawl_with_http_cache(self) -> CrawlOutcome:
        """The project's settings plus ``HTTPCACHE_ENABLED=True``: the start-up check
        must refuse before any request (a cache would serve the blocklist and
        robots.txt from disk and store bodies). Its own state and cache
        directories, so that if it does run, it touches nothing the other runs use."""
        settings = self.settings(
            self.work / "state-http-cache",
            HTTPCACHE_ENABLED=True,
            HTTPCACHE_DIR=str(self.work / "httpcache"),
        )
        return await self._crawl(settings, self.scenario.restart_lines())

    async def _crawl(self, settings: Settings, lines: list[str]) -> CrawlOutcome:
        origin = self.scenario.server.origin
        start = len(origin.hits)
        try:
            records, crawler = await crawl_list(self.spidercls, settings, lines, self.work)
        except WalshConfigurationError as exc:
            return CrawlOutcome([], origin.hits[start:], {}, refused=str(exc))
        assert crawler.stats is not None
        return CrawlOutcome(records, origin.hits[start:], crawler.stats.get_stats())
