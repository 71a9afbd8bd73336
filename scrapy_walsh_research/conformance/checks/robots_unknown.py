"""R2 with robots.txt unreachable: complete disallow while it is (RFC 9309
§2.3.1.4), and a wait for its next try rather than a verdict
(``docs/waits.rst``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy_walsh_research.conformance.checks.base import Judgement, Observed


def robots_unknown(j: Judgement, seen: Observed) -> None:
    r1 = seen.first
    o = j.outcome

    def down() -> tuple[bool, str]:
        paths = [h.path for h in r1.hits_for("down.test")]
        said = str(r1.record(seen.scenario.url("down.test", "/page")).get("reason") or "")
        ok = (
            bool(paths)
            and set(paths) == {"/robots.txt"}
            and o(r1, "down.test", "/page") == "skipped/R2"
            and said.startswith("robots.txt answered 503 on ")
        )
        return ok, f"down.test received {paths}; record {o(r1, 'down.test', '/page')}"

    j.check(
        "R2",
        "MUST",
        "robots.txt 503 for good: only its tries sent; the record says so (RFC 9309 2.3.1.4)",
        down,
    )

    def heals() -> tuple[bool, str]:
        hits = r1.hits_for("heals.test")
        paths = [h.path for h in hits]
        ok = paths[:2] == ["/robots.txt", "/robots.txt"] and o(r1, "heals.test", "/page") == (
            "fetched/-"
        )
        return ok, f"heals.test received {paths}; record {o(r1, 'heals.test', '/page')}"

    j.check(
        "R2",
        "SHOULD",
        "robots.txt 503 once: its target waits and is fetched once it answers, in the same run",
        heals,
    )
