"""R5: backoff honouring Retry-After, giving up beyond the maximum; and a
connection closed after the request was read is not re-sent at once (R4)."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy_walsh_research.conformance.checks.base import Judgement, Observed


def retry(j: Judgement, seen: Observed) -> None:
    r1 = seen.first
    o, n = j.outcome, j.requests

    def retry_after() -> tuple[bool, str]:
        busy = r1.hits_for("limit.test", "/busy")
        if len(busy) < 2:
            return False, f"{len(busy)} request(s) to /busy"
        waited = busy[1].t - busy[0].t
        fetched = o(r1, "limit.test", "/busy") == "fetched/-"
        return waited >= 2.0 and fetched, f"retried after {waited:.3f} s (Retry-After: 2)"

    j.check("R5", "MUST", "429 with Retry-After: 2 retried no sooner, then fetched", retry_after)
    j.check(
        "R5",
        "MUST",
        "Retry-After beyond the maximum: give up at once",
        lambda: (
            n(r1, "giveup.test", "/huge") == 1 and o(r1, "giveup.test", "/huge") == "failed/-",
            f"{n(r1, 'giveup.test', '/huge')} request(s); {o(r1, 'giveup.test', '/huge')}",
        ),
    )
    j.check(
        "R5",
        "MUST",
        "Retry-After on give-up still binds the host: its other target skipped, not sent",
        lambda: (
            n(r1, "giveup.test", "/after") == 0 and o(r1, "giveup.test", "/after") == "skipped/R5",
            f"/after requested {n(r1, 'giveup.test', '/after')}x; "
            f"record {o(r1, 'giveup.test', '/after')}",
        ),
    )

    def dropped() -> tuple[bool, str]:
        sent = [h.t for h in r1.hits_for("drop.test", "/page")]
        gap = min((b - a for a, b in itertools.pairwise(sent)), default=0.0)
        ok = len(sent) >= 2 and gap >= 1.0 and o(r1, "drop.test", "/page") == "fetched/-"
        return ok, f"{len(sent)} attempts, closest {gap:.3f} s apart"

    j.check(
        "R4",
        "MUST",
        "connection closed after the request was read: not re-sent at once",
        dropped,
    )
