"""R4, R4c: serial requests, at least the floor between two to a host, and
no wait before the first."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from scrapy_walsh_research.conformance.checks.base import host_gaps

if TYPE_CHECKING:
    from scrapy_walsh_research.conformance.checks.base import Judgement, Observed


def pacing(j: Judgement, seen: Observed) -> None:
    r1 = seen.first

    j.check(
        "R4",
        "MUST",
        "serial: at most one request in flight, no connection opened during one",
        lambda: (
            seen.max_inflight == 1 and seen.overlaps == 0,
            f"max in flight {seen.max_inflight}; {seen.overlaps} began while another was answered",
        ),
    )

    def min_gap() -> tuple[bool, str]:
        gaps = [(g, host) for host, hg in host_gaps(seen.hits).items() for g in hg]
        smallest, host = min(gaps)
        return smallest >= 1.0, f"min same-host gap {smallest:.3f} s ({host}) over {len(gaps)} gaps"

    j.check(
        "R4", "MUST", "at least 1 s between requests to a host, as the origin saw them", min_gap
    )

    def first_contact() -> tuple[bool, str]:
        contacted: set[str] = set()
        waits = []
        for prev, hit in itertools.pairwise(r1.hits):
            contacted.add(prev.host)
            if hit.host not in contacted:
                waits.append(hit.t - prev.t)
        worst = max(waits, default=0.0)
        return worst < 1.0, f"longest idle before a first contact {worst:.3f} s"

    j.check("R4c", "MUST", "first request to an unseen host not delayed", first_contact)
