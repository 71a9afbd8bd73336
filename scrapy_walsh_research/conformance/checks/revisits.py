"""R7, R8: conditional requests with stored validators, canonical dedup, and
no request to a host inside its run interval."""

from __future__ import annotations

from typing import TYPE_CHECKING

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
    j.check(
        "R8",
        "SHOULD",
        "re-run inside the cadence sends nothing to the target host",
        lambda: (
            n(r3, "etag.test") == 0 and o(r3, "etag.test", "/doc") == "skipped/R8",
            f"{n(r3, 'etag.test')} requests in the re-run; {o(r3, 'etag.test', '/doc')}",
        ),
    )
