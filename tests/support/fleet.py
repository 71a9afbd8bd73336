"""A fleet in the tests: the settings that give a crawl its own keys in the
session's Redis, and a worker reading a Redis feed, in this process."""

from __future__ import annotations

import itertools
from typing import Any

from scrapy_walsh_research.sandbox.crawl import crawl_spider
from scrapy_walsh_research.spiders.targets import TargetsSpider
from tests.support.crawling import CrawlResult

_prefixes = itertools.count()


def redis_settings(redis_server: Any, **overrides: Any) -> dict[str, Any]:
    """Settings that put every piece of politeness state in the test's own Redis keys."""
    settings = {
        "WALSH_REDIS_URL": redis_server.url,
        "WALSH_REDIS_PREFIX": f"t{next(_prefixes)}-{id(redis_server)}",
    }
    settings.update(overrides)
    return settings


async def crawl_feed(
    settings: dict[str, Any], key: str, spidercls: type = TargetsSpider
) -> CrawlResult:
    """A worker: the targets spider reading its lines from the Redis feed *key*."""
    items, crawler = await crawl_spider(spidercls, settings, redis_key=key)
    return CrawlResult(items, crawler.stats.get_stats(), crawler)


def stored_state(redis_server: Any, prefix: str, namespace: str) -> dict[str, str]:
    """What the fleet's Redis holds in a per-host *namespace* (each host's
    hash, ``<prefix>:state:<namespace>:<host>``): key -> value as JSON."""
    from scrapy_walsh_research.state.redis.layout import key_of, unstamped

    r = redis_server.client()
    base = f"{prefix}:state:{namespace}:"
    out: dict[str, str] = {}
    try:
        for name in r.scan_iter(f"{base}*"):
            host = name[len(base) :]
            for field, raw in r.hgetall(name).items():
                key = key_of(field, host)
                if key is not None:
                    out[key] = unstamped(raw)[1]
    finally:
        r.close()
    return out
