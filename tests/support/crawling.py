"""Crawls against the loopback origin, in this process: the settings that
point a crawl at the sandbox, the crawl itself (a real Scrapy crawler), and
what the tests read from it."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scrapy.crawler import Crawler
from scrapy.settings import Settings
from scrapy.utils.defer import deferred_from_coro

from scrapy_walsh_research.sandbox import Reply, SandboxResolver, SandboxServer
from scrapy_walsh_research.sandbox.crawl import crawl_list
from scrapy_walsh_research.spiders.targets import TargetsSpider

BLOCKLIST_HOST = "operator.test"
BLOCKLIST_PATH = "/.well-known/walsh-research/blocklist.json"
SCHEMA_PATH = "/.well-known/walsh-research/blocklist.schema.json"
#: fetched once per origin after robots.txt, before its first target (PREF)
TDMREP = "/.well-known/tdmrep.json"
SCHEMA_TEXT = (
    Path(__file__).parent.parent.parent / "scrapy_walsh_research/core/blocklist/blocklist.schema.json"
)


def blocklist_doc(*domains: str, refresh: str = "PT6H") -> dict[str, Any]:
    return {
        "contract": "walsh-research-blocklist/v1",
        "updated": "2026-05-23T00:00:00Z",
        "operator": "Test Operator",
        "contact": "ops@example.org",
        "policy": "https://wal.sh/bot/",
        "refresh": refresh,
        "blocked": [{"domain": d, "added": "2026-05-23", "reason": "test"} for d in domains],
    }


def json_reply(doc: Any, status: int = 200) -> Reply:
    return Reply(status, json.dumps(doc), {"Content-Type": "application/json"})


@dataclass
class CrawlResult:
    items: list[dict[str, Any]]
    stats: dict[str, Any]
    crawler: Crawler
    logs: list[str] = field(default_factory=list)

    def by_url(self) -> dict[str, dict[str, Any]]:
        return {i["url"]: i for i in self.items}


def base_settings(server: SandboxServer, state_dir: Path, **overrides: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "ADDONS": {"scrapy_walsh_research.Addon": 0},
        "WALSH_BLOCKLIST_URL": server.url(BLOCKLIST_HOST, BLOCKLIST_PATH),
        "WALSH_BLOCKLIST_SCHEMA_URL": server.url(BLOCKLIST_HOST, SCHEMA_PATH),
        "WALSH_BLOCKLIST_ALLOW_HTTP": True,
        "WALSH_STATE_DIR": str(state_dir),
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
        "DOWNLOAD_TIMEOUT": 10,
        # Tests re-run crawls on one state dir; R8 cadence is tested on its own.
        "WALSH_RUN_INTERVAL": 0,
        # Twisted answers text/html by default, which would probe /llms.txt
        # after every target; R9 tests turn the probe on.
        "WALSH_LLMS_PROBE": False,
    }
    settings.update(overrides)
    return settings


async def crawl(
    settings: dict[str, Any] | Settings,
    lines: list[str],
    tmp_path: Path,
    spidercls: type = TargetsSpider,
) -> CrawlResult:
    # Scrapy awaits asyncio futures: run the crawl as an asyncio task.
    return await deferred_from_coro(crawl_task(settings, lines, tmp_path, spidercls))


def write_list(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "urls.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def gaps(hits: list[Any]) -> list[float]:
    """Seconds between consecutive arrivals, as the origin saw them."""
    times = sorted(h.t for h in hits)
    return [b - a for a, b in itertools.pairwise(times)]


async def crawl_task(
    settings: dict[str, Any] | Settings,
    lines: list[str],
    work: Path,
    spidercls: type = TargetsSpider,
) -> CrawlResult:
    """:func:`crawl` as an asyncio coroutine, to run beside other workers."""
    work.mkdir(parents=True, exist_ok=True)
    items, crawler = await crawl_list(spidercls, settings, lines, work)
    return CrawlResult(items, crawler.stats.get_stats(), crawler)


async def sleep(seconds: float) -> None:
    from twisted.internet import reactor, task

    await task.deferLater(reactor, seconds, lambda: None)


def sandbox_resolver() -> SandboxResolver:
    """The sandbox's resolver the session installed (tests teach it names
    that fail: :meth:`SandboxResolver.teach`)."""
    from twisted.internet import reactor

    resolver = reactor.nameResolver  # type: ignore[attr-defined]
    assert isinstance(resolver, SandboxResolver), resolver
    return resolver
