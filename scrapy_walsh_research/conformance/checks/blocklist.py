"""R3: the operator blocklist, apex and subdomain, before robots.txt."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy_walsh_research.conformance.checks.base import Judgement, Observed


def blocklist(j: Judgement, seen: Observed) -> None:
    r1 = seen.first
    o, n = j.outcome, j.requests
    blocked = n(r1, "blocked.test") + n(r1, "www.blocked.test")
    j.check(
        "R3",
        "MUST",
        "operator blocklist blocks the apex (blocked.test)",
        lambda: (o(r1, "blocked.test", "/page") == "denied/R3", o(r1, "blocked.test", "/page")),
    )
    j.check(
        "R3a",
        "MUST",
        "subdomain www.blocked.test blocked by the apex entry",
        lambda: (
            o(r1, "www.blocked.test", "/page") == "denied/R3",
            o(r1, "www.blocked.test", "/page"),
        ),
    )
    j.check(
        "R3",
        "MUST",
        "blocklist checked before robots: blocked hosts get no request at all",
        lambda: (blocked == 0, f"{blocked} requests to blocked hosts, robots.txt included"),
    )
    j.check(
        "R3",
        "MUST",
        "unrelated host xblocked.test not falsely blocked",
        lambda: (o(r1, "xblocked.test", "/page") == "fetched/-", o(r1, "xblocked.test", "/page")),
    )
