"""R9: markdown, feeds and llms.txt preferred and read; HTML never parsed
for content."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy_walsh_research.conformance.checks.base import Judgement, Observed


def structured(j: Judgement, seen: Observed) -> None:
    r1, s = seen.first, seen.scenario
    targets = seen.target_hits

    def accept() -> tuple[bool, str]:
        good = sum(h.headers.get("accept", "").startswith("text/markdown") for h in targets)
        return bool(targets) and good == len(targets), f"{good}/{len(targets)} prefer text/markdown"

    j.check(
        "R9", "SHOULD", "content negotiation: every target request prefers text/markdown", accept
    )
    md = r1.record(s.url("feed.test", "/guide.md"))
    j.check(
        "R9",
        "SHOULD",
        "markdown read for headings and links",
        lambda: (
            md.get("structured") == "markdown" and len(md.get("links", [])) == 2,
            f"{len(md.get('headings', []))} headings, {len(md.get('links', []))} links",
        ),
    )
    feed = r1.record(s.url("feed.test", "/feed.xml"))
    j.check(
        "R9",
        "SHOULD",
        "feed read for per-entry metadata",
        lambda: (
            feed.get("structured") == "feed" and len(feed.get("entries", [])) == 2,
            f"{len(feed.get('entries', []))} entries",
        ),
    )
    page = r1.record(s.url("links.test", "/"))
    llms_links = len((page.get("llms_txt") or {}).get("links", []))
    j.check(
        "R9",
        "MUST",
        "HTML never parsed for content",
        lambda: (
            page.get("outcome") == "fetched"
            and page.get("structured") is None
            and "never parsed" in (page.get("note") or ""),
            f"structured={page.get('structured')!r}",
        ),
    )
    j.check(
        "R9",
        "SHOULD",
        "llms.txt probed for an HTML-only host; link map recorded",
        lambda: (llms_links == 1, f"llms.txt links recorded: {llms_links}"),
    )
