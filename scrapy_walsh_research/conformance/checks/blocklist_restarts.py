"""R3b, R3c: after a restart, an unreachable, schema-invalid or garbage list
leaves the last adopted one in force."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy_walsh_research.conformance.checks.base import Judgement, Observed


def blocklist_restarts(j: Judgement, seen: Observed) -> None:
    r2, r3, r4 = seen.down, seen.invalid, seen.gateway
    o, n = j.outcome, j.requests
    failed = r2.stats.get("walsh/blocklist/fetch_failed", 0)
    j.check(
        "R3b",
        "MUST",
        "last list retained when the blocklist is down (after a restart)",
        lambda: (
            o(r2, "www.blocked.test", "/page") == "denied/R3"
            and n(r2, "www.blocked.test") == 0
            and failed >= 1,
            f"blocklist failed {failed}x; record {o(r2, 'www.blocked.test', '/page')}",
        ),
    )
    rejected = r3.stats.get("walsh/blocklist/rejected", 0)
    j.check(
        "R3c",
        "MUST",
        "schema-invalid blocklist rejected, prior list retained",
        lambda: (
            rejected >= 1 and o(r3, "www.blocked.test", "/page") == "denied/R3",
            f"rejected {rejected}x; record {o(r3, 'www.blocked.test', '/page')}",
        ),
    )
    garbage = r4.stats.get("walsh/blocklist/rejected", 0)
    j.check(
        "R3c",
        "MUST",
        "garbage schema and blocklist after a good list: nothing adopted, opt-outs kept",
        lambda: (
            garbage >= 1
            and o(r4, "www.blocked.test", "/page") == "denied/R3"
            and n(r4, "www.blocked.test") == 0,
            f"rejected {garbage}x; record {o(r4, 'www.blocked.test', '/page')}",
        ),
    )
