"""R3 and R2 on redirect hops: a hop into a blocked host or a disallowed path
is denied, and its target never requested."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy_walsh_research.conformance.checks.base import Judgement, Observed


def redirects(j: Judgement, seen: Observed) -> None:
    r1 = seen.first
    o, n = j.outcome, j.requests
    j.check(
        "R3",
        "MUST",
        "redirect into a blocked host denied and not followed",
        lambda: (
            o(r1, "hop.test", "/to-blocked") == "denied/R3"
            and n(r1, "blocked.test", "/landing") == 0,
            f"{o(r1, 'hop.test', '/to-blocked')}; target requested "
            f"{n(r1, 'blocked.test', '/landing')}x",
        ),
    )
    j.check(
        "R2",
        "MUST",
        "redirect into a disallowed path denied and not followed",
        lambda: (
            o(r1, "hop.test", "/to-private") == "denied/R2"
            and n(r1, "named.test", "/private") == 0,
            o(r1, "hop.test", "/to-private"),
        ),
    )
