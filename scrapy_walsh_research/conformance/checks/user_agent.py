"""R1: the exact User-Agent on every request the bundle sends."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_walsh_research.conformance.checks.base import OWN_PATHS
from scrapy_walsh_research.conformance.scenario import OPERATOR
from scrapy_walsh_research.core.contract import USER_AGENT

if TYPE_CHECKING:
    from scrapy_walsh_research.conformance.checks.base import Judgement, Observed
    from scrapy_walsh_research.sandbox.origin import Hit


def _exact(hits: list[Hit]) -> tuple[bool, str]:
    good = sum(h.user_agent == USER_AGENT for h in hits)
    return bool(hits) and good == len(hits), f"{good}/{len(hits)} requests"


def user_agent(j: Judgement, seen: Observed) -> None:
    r1 = seen.first
    j.check("R1", "MUST", "exact User-Agent on target requests", lambda: _exact(seen.target_hits))
    j.check(
        "R1",
        "MUST",
        "exact User-Agent on robots.txt and tdmrep.json requests",
        lambda: _exact([h for h in seen.site_hits if h.path in OWN_PATHS]),
    )
    j.check(
        "R1",
        "MUST",
        "exact User-Agent on blocklist and schema requests",
        lambda: _exact([h for h in seen.hits if h.host == OPERATOR]),
    )
    j.check(
        "R1",
        "MUST",
        "exact User-Agent on redirect hops and retries",
        lambda: _exact(r1.hits_for("hop.test") + r1.hits_for("limit.test", "/busy")),
    )
