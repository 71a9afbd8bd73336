"""R2: robots.txt (RFC 9309) and the stricter readings the spec asks for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_walsh_research.conformance.checks.base import host_gaps
from scrapy_walsh_research.conformance.scenario import OPERATOR, VISIT_HOST

if TYPE_CHECKING:
    from scrapy_walsh_research.conformance.checks.base import Judgement, Observed


def robots(j: Judgement, seen: Observed) -> None:
    r1 = seen.first
    o, n = j.outcome, j.requests

    def robots_first() -> tuple[bool, str]:
        hosts = {h.host for h in r1.hits if h.host != OPERATOR}
        late = [host for host in hosts if r1.hits_for(host)[0].path != "/robots.txt"]
        ok = bool(hosts) and not late
        return ok, f"{len(hosts) - len(late)}/{len(hosts)} hosts: robots.txt first"

    j.check("R2", "MUST", "robots.txt fetched before any other request to a host", robots_first)
    j.check(
        "R2",
        "MUST",
        "disallowed paths never requested",
        lambda: (
            n(r1, "named.test", "/private") + n(r1, "star.test", "/nope") == 0
            and o(r1, "named.test", "/private") == "denied/R2",
            f"/private and /nope requested {n(r1, 'named.test', '/private')}"
            f"+{n(r1, 'star.test', '/nope')}x; record {o(r1, 'named.test', '/private')}",
        ),
    )
    j.check(
        "R2a",
        "MUST",
        "named Walsh-Research group overrides * (allows where * disallows)",
        lambda: (o(r1, "named.test", "/page") == "fetched/-", o(r1, "named.test", "/page")),
    )
    j.check(
        "R2a",
        "MUST",
        "named group Walsh-Research/1.0 overrides * (blocks where * allows)",
        lambda: (
            o(r1, "versioned.test", "/page") == "denied/R2"
            and n(r1, "versioned.test", "/page") == 0,
            o(r1, "versioned.test", "/page"),
        ),
    )
    j.check(
        "R2",
        "MUST",
        "'User-agent: Walsh' does not claim the Walsh-Research token",
        lambda: (o(r1, "star.test", "/page") == "fetched/-", o(r1, "star.test", "/page")),
    )
    j.check(
        "R2",
        "MUST",
        "'User-agent: *SomeBot*' is not the * group: its Disallow: / does not close the site",
        lambda: (o(r1, "starbot.test", "/page") == "fetched/-", o(r1, "starbot.test", "/page")),
    )
    j.check(
        "R2",
        "MUST",
        "robots.txt 404: no rules apply",
        lambda: (o(r1, "missing.test", "/page") == "fetched/-", o(r1, "missing.test", "/page")),
    )
    j.check(
        "R2",
        "MUST",
        "outside its Visit-time window a host receives nothing but robots.txt; the record says so",
        lambda: (
            [h.path for h in r1.hits_for(VISIT_HOST)] == ["/robots.txt"]
            and o(r1, VISIT_HOST, "/page") == "skipped/R2",
            f"{VISIT_HOST} received {[h.path for h in r1.hits_for(VISIT_HOST)]}; "
            f"record {o(r1, VISIT_HOST, '/page')}",
        ),
    )

    def named_gap() -> tuple[bool, str]:
        gaps = host_gaps(r1.hits).get("named.test", [])
        ok = bool(gaps) and min(gaps) >= 2.0
        return ok, f"min gap at named.test {min(gaps, default=0):.3f} s"

    j.check("R2d", "MUST", "Crawl-delay 2 of the named group honoured", named_gap)
