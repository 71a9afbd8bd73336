"""R6: a project that turns Scrapy's HTTP cache on is refused at start-up,
before any request (a cache would serve the blocklist and robots.txt from
disk and store bodies)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy_walsh_research.conformance.checks.base import Judgement, Observed

HTTP_CACHE_ROW = "HTTP cache setting refused"


def http_cache(j: Judgement, seen: Observed) -> None:
    """The row for the crawl with the HTTP cache turned on (a MUST)."""
    title, cache = HTTP_CACHE_ROW, seen.cache
    reason = seen.first.refusal
    if reason is not None:  # the project's own configuration is refused: every row fails alike
        j.add("R6", "MUST", title, False, f"crawl refused: {reason}")
        return
    named = cache.refused is not None and "HTTPCACHE_ENABLED" in cache.refused
    if named:
        how = "refused naming HTTPCACHE_ENABLED"
    elif cache.refused:
        how = "refused without naming HTTPCACHE_ENABLED"
    else:
        how = "not refused"
    measured = f"{how}; {len(cache.hits)} requests reached the origin"
    j.add("R6", "MUST", title, named and not cache.hits, measured)
