"""R7, R8: conditional requests with stored validators, canonical dedup, a
re-run that skips what a checked sitemap says is unchanged, and no request to
a host inside its run interval."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_walsh_research.conformance.scenario import SITEMAP_HOST, SITEMAP_PAGES, SITEMAP_PATH

if TYPE_CHECKING:
    from scrapy_walsh_research.conformance.checks.base import Judgement, Observed


def revisits(j: Judgement, seen: Observed) -> None:
    r1, r2, r3 = seen.first, seen.down, seen.invalid
    o, n = j.outcome, j.requests
    sent = [h.headers.get("if-none-match") for h in r2.hits_for("etag.test", "/doc")]
    j.check(
        "R7",
        "SHOULD",
        "conditional request with stored validators; 304 is not_modified",
        lambda: (
            sent == ['"e1"'] and o(r2, "etag.test", "/doc") == "not_modified/-",
            f"If-None-Match sent: {sent}; record {o(r2, 'etag.test', '/doc')}",
        ),
    )
    j.check(
        "R7b",
        "SHOULD",
        "dedup by canonical URL (a #fragment line fetched once)",
        lambda: (
            n(r1, "named.test", "/page") == 1
            and o(r1, "named.test", "/page#again") == "duplicate/-",
            f"named.test/page requested {n(r1, 'named.test', '/page')}x",
        ),
    )

    def sitemap_used() -> tuple[bool, str]:
        sitemaps = (n(r1, SITEMAP_HOST, SITEMAP_PATH), n(r2, SITEMAP_HOST, SITEMAP_PATH))
        pages = [n(r2, SITEMAP_HOST, p) for p in SITEMAP_PAGES]
        records = [o(r2, SITEMAP_HOST, p) for p in SITEMAP_PAGES]
        return (
            sitemaps == (0, 1) and sum(pages) == 1
            and records == ["not_modified/-"] + ["not_modified/R7"] * (len(pages) - 1),
            f"sitemap fetched {sitemaps[0]}x in the first run, {sitemaps[1]}x in the re-run; "
            f"pages requested {pages}; records {records}",
        )  # fmt: skip

    j.check(
        "R7s",
        "SHOULD",
        "re-run: a sitemap checked by one conditional GET spares what it calls unchanged",
        sitemap_used,
    )
    j.check(
        "R8",
        "SHOULD",
        "re-run inside the cadence sends nothing to the target host",
        lambda: (
            n(r3, "etag.test") == 0 and o(r3, "etag.test", "/doc") == "skipped/R8",
            f"{n(r3, 'etag.test')} requests in the re-run; {o(r3, 'etag.test', '/doc')}",
        ),
    )
