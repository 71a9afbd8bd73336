"""The conformance check's judges, one module per rule or rule group.

Each judge reads what the sandbox crawls left (:class:`~.base.Observed`) and
adds its rows through a :class:`~.base.Judgement`. :data:`JUDGES` is the
table's order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_walsh_research.conformance.checks.adaptive import adaptive
from scrapy_walsh_research.conformance.checks.audit import audit
from scrapy_walsh_research.conformance.checks.base import Judgement, Observed
from scrapy_walsh_research.conformance.checks.blocklist import blocklist
from scrapy_walsh_research.conformance.checks.blocklist_restarts import blocklist_restarts
from scrapy_walsh_research.conformance.checks.http_cache import HTTP_CACHE_ROW, http_cache
from scrapy_walsh_research.conformance.checks.pacing import pacing
from scrapy_walsh_research.conformance.checks.preferences import preferences
from scrapy_walsh_research.conformance.checks.purge import purge
from scrapy_walsh_research.conformance.checks.redirects import redirects
from scrapy_walsh_research.conformance.checks.retry import retry
from scrapy_walsh_research.conformance.checks.revisits import revisits
from scrapy_walsh_research.conformance.checks.robots import robots
from scrapy_walsh_research.conformance.checks.robots_unknown import robots_unknown
from scrapy_walsh_research.conformance.checks.scope import scope
from scrapy_walsh_research.conformance.checks.signatures import signatures
from scrapy_walsh_research.conformance.checks.structured import structured
from scrapy_walsh_research.conformance.checks.user_agent import user_agent

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy_walsh_research.evidence.verdicts import ConformanceResult

    Judge = Callable[[Judgement, Observed], None]

#: every judge, in the order of the table's rows
JUDGES: tuple[Judge, ...] = (
    user_agent,  # R1
    robots,  # R2, R2a, R2d
    robots_unknown,  # R2 while robots.txt is unreachable
    blocklist,  # R3, R3a
    redirects,  # R3, R2 on redirect hops
    blocklist_restarts,  # R3b, R3c
    pacing,  # R4, R4c
    retry,  # R5, and R4 for a dropped connection
    adaptive,  # ADP
    scope,  # R6, REC
    revisits,  # R7, R7b, R7s, R8
    structured,  # R9
    preferences,  # PREF
    http_cache,  # R6 (start-up refusal)
    audit,  # AUD
    purge,  # PRG
    signatures,  # ID
)


def judge(result: ConformanceResult, seen: Observed) -> None:
    """Add every judge's rows (and notes) to *result*."""
    judgement = Judgement(result, seen)
    for one in JUDGES:
        one(judgement, seen)


__all__ = ["HTTP_CACHE_ROW", "JUDGES", "Judgement", "Observed", "judge"]
