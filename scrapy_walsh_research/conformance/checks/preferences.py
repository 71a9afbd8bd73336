"""PREF: the hosts' stated usage preferences, honoured for the declared
purposes, judged from what the origin received and the records."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_walsh_research.conformance.scenario import OPERATOR
from scrapy_walsh_research.gates.preferences import TDMREP_PATH

if TYPE_CHECKING:
    from scrapy_walsh_research.conformance.checks.base import Judgement, Observed


def preferences(j: Judgement, seen: Observed) -> None:
    r1, s = seen.first, seen.scenario
    o, n = j.outcome, j.requests

    def tdmrep_first() -> tuple[bool, str]:
        hosts = sorted({h.host for h in r1.hits if h.path not in ("/robots.txt", TDMREP_PATH)}
                       - {OPERATOR})  # fmt: skip
        bad = []
        for host in hosts:
            paths = [h.path for h in r1.hits_for(host)]
            first = next(i for i, p in enumerate(paths) if p not in ("/robots.txt", TDMREP_PATH))
            if paths.count(TDMREP_PATH) != 1 or TDMREP_PATH not in paths[:first]:
                bad.append(host)
        return bool(hosts) and not bad, (
            f"{len(hosts) - len(bad)}/{len(hosts)} hosts: tdmrep.json once, before the first "
            f"target" + (f"; not: {bad[:3]}" if bad else "")
        )

    reserved = n(r1, "reserved.test", "/page")
    j.check(
        "PREF", "MUST", "tdmrep.json fetched once per origin, before its first target", tdmrep_first
    )
    j.check(
        "PREF",
        "MUST",
        "a TDM reservation in tdmrep.json denies the target, with no request",
        lambda: (
            o(r1, "reserved.test", "/page") == "denied/PREF" and reserved == 0,
            f"{o(r1, 'reserved.test', '/page')}; /page requested {reserved}x",
        ),
    )
    withheld = r1.record(s.url("withheld.test", "/doc"))
    kept = {k: withheld.get(k) for k in ("status", "etag", "sha256", "headings", "links")}
    j.check(
        "PREF",
        "MUST",
        "a tdm-reservation header withholds the content: status and validators only",
        lambda: (
            o(r1, "withheld.test", "/doc") == "withheld/PREF"
            and kept["status"] == 200 and kept["etag"] == '"w1"'
            and kept["sha256"] is None and not kept["headings"] and not kept["links"],
            f"{o(r1, 'withheld.test', '/doc')}; kept {kept}",
        ),
    )  # fmt: skip
    signal = r1.record(s.url("signal.test", "/page"))
    stated = [p.get("signal") for p in signal.get("preferences") or []]
    j.check(
        "PREF",
        "MUST",
        "a preference about an undeclared purpose never denies; the record carries it",
        lambda: (
            o(r1, "signal.test", "/page") == "fetched/-" and "Content-Signal: ai-train" in stated,
            f"{o(r1, 'signal.test', '/page')}; preferences recorded: {stated}",
        ),
    )
