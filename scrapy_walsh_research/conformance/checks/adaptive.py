"""Adaptive pacing (SHOULD): a slow host is kept mostly idle; a 503 without
Retry-After slows the whole host without abandoning it."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from scrapy_walsh_research.conformance.checks.base import OWN_PATHS
from scrapy_walsh_research.conformance.scenario import SLOW_PAGES, SLOW_S, STRAINED_PAGES

if TYPE_CHECKING:
    from scrapy_walsh_research.conformance.checks.base import Judgement, Observed


def adaptive(j: Judgement, seen: Observed) -> None:
    r1 = seen.first
    o = j.outcome

    def load_aware() -> tuple[bool, str]:
        hits = r1.hits_for("slow.test")
        fetched = sum(o(r1, "slow.test", p) == "fetched/-" for p in SLOW_PAGES)
        if len(hits) < 2:
            return False, f"{len(hits)} requests to slow.test"
        busy = SLOW_S * len(hits) / (hits[-1].t + SLOW_S - hits[0].t)
        g = [b.t - a.t for a, b in itertools.pairwise(hits)]
        ok = busy <= 0.25 and fetched == len(SLOW_PAGES)
        return ok, (
            f"busy {100 * busy:.1f} % of the time with {SLOW_S} s answers (gaps "
            f"{min(g):.2f}-{max(g):.2f} s); {fetched}/{len(SLOW_PAGES)} fetched"
        )

    j.check(
        "ADP",
        "SHOULD",
        f"load-aware: a host answering in {SLOW_S} s is kept at most 25 % busy",
        load_aware,
    )

    def distress() -> tuple[bool, str]:
        hits = r1.hits_for("strained.test")
        # the site's pages: not robots.txt or tdmrep.json, read before them
        pages = [h for h in hits if h.path not in OWN_PATHS]
        fetched = sum(o(r1, "strained.test", p) == "fetched/-" for p in STRAINED_PAGES)
        after = [b.t - a.t for a, b in itertools.pairwise(pages[:3])]
        if len(after) < 2:
            return False, f"{len(pages)} requests to strained.test's pages"
        # at least twice the floor: the smallest backoff the start-up check allows
        ok = min(after) >= 2.0 and fetched == len(STRAINED_PAGES)
        return ok, (
            f"after its 503, the next two requests (the retry, another target) came "
            f"{after[0]:.2f} s and {after[1]:.2f} s apart; {fetched}/{len(STRAINED_PAGES)} fetched"
        )

    j.check(
        "ADP",
        "SHOULD",
        "distress: a 503 without Retry-After slows the whole host, which is not abandoned",
        distress,
    )
