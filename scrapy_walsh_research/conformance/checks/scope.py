"""R6: only declared targets, no sub-resources, no exemption for a forged
marker, metadata not content; and one record per list line."""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING

from scrapy_walsh_research.conformance.checks.base import OWN_PATHS, host_path
from scrapy_walsh_research.conformance.scenario import BODY_MARKER, FORGED

if TYPE_CHECKING:
    from scrapy_walsh_research.conformance.checks.base import Judgement, Observed


def scope(j: Judgement, seen: Observed) -> None:
    r1, s = seen.first, seen.scenario

    def in_scope() -> tuple[bool, str]:
        lines = [x for x in s.run1_lines() + s.restart_lines() if "://" in x]
        # the bundle's own /llms.txt probe (R9) of a host whose target answered HTML
        probes = {(host_path(r["url"])[0], "/llms.txt") for r in r1.records if r.get("llms_txt")}
        allowed = {host_path(x) for x in lines} | probes
        # redirect hops of declared targets
        allowed |= {("named.test", "/private"), ("blocked.test", "/landing")}
        allowed |= {("moved.test", "/new")}
        extra = [f"{h.host}{h.path}" for h in seen.site_hits
                 if h.path not in OWN_PATHS and (h.host, h.path) not in allowed]  # fmt: skip
        return not extra, f"{len(extra)} requests beyond the declared targets {extra[:3]}"

    j.check("R6", "MUST", "no request beyond declared targets (no recursion)", in_scope)
    subs = [h for h in r1.hits_for("links.test") if h.path not in ("/", *OWN_PATHS, "/llms.txt")]
    denied_r6 = r1.stats.get("walsh/denied/R6", 0)
    j.check(
        "R6",
        "MUST",
        "no sub-resources: an injected image request is denied",
        lambda: (
            not subs and denied_r6 >= 1,
            f"{len(subs)} sub-resource requests; {denied_r6} denied by R6",
        ),
    )
    leaks = sum(BODY_MARKER in json.dumps(r) for r in r1.records)
    forged = [f"{h}{p}" for h, p, _ in FORGED if r1.hits_for(h, p)]
    j.check(
        "R6",
        "MUST",
        "a forged internal marker gets no exemption (injected requests denied)",
        lambda: (
            not forged and r1.stats.get("walsh/internal/forged", 0) >= 2,
            f"{len(forged)}/{len(FORGED)} forged requests reached the origin; "
            f"{r1.stats.get('walsh/internal/forged', 0)} forged markers seen",
        ),
    )
    j.check(
        "R6",
        "MUST",
        "records carry metadata only, never the body",
        lambda: (
            bool(r1.records) and not leaks,
            f"{leaks}/{len(r1.records)} records hold body text",
        ),
    )

    def one_record_per_line() -> tuple[bool, str]:
        lines = [x for x in s.run1_lines() if x and not x.startswith("#")]
        counts = Counter(r["url"] for r in r1.records)
        invalid = sum(r["outcome"] == "invalid" for r in r1.records)
        ok = len(r1.records) == len(lines) and all(counts[x] == 1 for x in lines) and invalid == 2
        return ok, f"{len(r1.records)} records for {len(lines)} lines; {invalid} invalid"

    j.check(
        "REC",
        "MUST",
        "exactly one record per list line; bad lines reported invalid",
        one_record_per_line,
    )
