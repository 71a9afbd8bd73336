"""What every rule's judge reads (:class:`Observed`) and how it adds a row
(:class:`Judgement`)."""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy_walsh_research.conformance.scenario import OPERATOR, SITEMAP_PATH
from scrapy_walsh_research.evidence.verdicts import Check
from scrapy_walsh_research.gates.preferences import TDMREP_PATH

#: the bundle's own per-origin documents, fetched before a host's targets
#: (and the sitemap a robots.txt declares, on a re-run)
OWN_PATHS = ("/robots.txt", TDMREP_PATH, SITEMAP_PATH)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from scrapy.settings import Settings

    from scrapy_walsh_research.conformance.identity import Identity
    from scrapy_walsh_research.conformance.scenario import Scenario
    from scrapy_walsh_research.evidence.verdicts import ConformanceResult, CrawlOutcome
    from scrapy_walsh_research.sandbox.origin import Hit


@dataclass
class Observed:
    """Everything the sandbox crawls left, for the judges to measure."""

    scenario: Scenario
    #: the first crawl
    first: CrawlOutcome
    #: a restart with the blocklist down (the run interval off; the sitemap host again)
    down: CrawlOutcome
    #: a restart with a schema-invalid blocklist (the project's run interval)
    invalid: CrawlOutcome
    #: a restart with a gateway's error object as schema and blocklist
    gateway: CrawlOutcome
    #: a restart once the list blocks a host crawled before
    opted_out: CrawlOutcome
    #: the crawl with ``HTTPCACHE_ENABLED=True``
    cache: CrawlOutcome
    #: most requests the origin had in flight at once, over every crawl
    max_inflight: int
    #: the project's settings (with the run's signing key, if it signs)
    base: Settings
    state: Path
    #: entries stored about the opted-out host before the list named it
    stored_before: int | None
    #: the run's signing key and signer, when the project signs
    identity: Identity | None
    #: what the project's settings say, as given (``WALSH_REDIS_URL`` set: the
    #: state and the audit log are in Redis; ``WALSH_SIGNING_KEY`` set)
    shared_state: bool = False
    #: requests that began (their connection opened, or they arrived on a
    #: kept-alive one) while another was being answered, over every crawl
    overlaps: int = 0
    signing_key_set: bool = False

    @property
    def crawls(self) -> list[CrawlOutcome]:
        """The five crawls sharing one state, in order (not the cache crawl)."""
        return [self.first, self.down, self.invalid, self.gateway, self.opted_out]

    @property
    def hits(self) -> list[Hit]:
        """What the origin received in the first four crawls: what the rows
        about every request measure (the opt-out crawl has its own row)."""
        return self.first.hits + self.down.hits + self.invalid.hits + self.gateway.hits

    @property
    def site_hits(self) -> list[Hit]:
        """:attr:`hits` to the sites, not to the operator's blocklist host."""
        return [h for h in self.hits if h.host != OPERATOR]

    @property
    def target_hits(self) -> list[Hit]:
        """:attr:`site_hits` for targets: not robots.txt, tdmrep.json or llms.txt."""
        return [h for h in self.site_hits if h.path not in (*OWN_PATHS, "/llms.txt")]


class Judgement:
    """Adds rows to *result*; while the first crawl was refused, every
    :meth:`check` row fails with the refusal's reason."""

    def __init__(self, result: ConformanceResult, seen: Observed) -> None:
        self.result = result
        self.seen = seen

    def add(self, id_: str, level: str, title: str, passed: bool, measured: str) -> None:
        self.result.checks.append(Check(id_, level, title, passed, measured))

    def note(self, text: str) -> None:
        self.result.notes.append(text)

    def check(self, id_: str, level: str, title: str, fn: Callable[[], tuple[bool, str]]) -> None:
        """A row from *fn*'s (passed, measured), unless the first crawl was refused."""
        reason = self.seen.first.refusal
        if reason is not None:
            self.add(id_, level, title, False, f"crawl refused: {reason}")
            return
        try:
            passed, measured = fn()
        except Exception as exc:  # a check that cannot be evaluated fails, saying why
            passed, measured = False, f"could not evaluate: {type(exc).__name__}: {exc}"
        self.add(id_, level, title, bool(passed), measured)

    def outcome(self, run: CrawlOutcome, host: str, path: str) -> str:
        """The record's "outcome/rule" for a target."""
        rec = run.record(self.seen.scenario.url(host, path))
        return f"{rec['outcome']}/{rec.get('rule') or '-'}"

    @staticmethod
    def requests(run: CrawlOutcome, host: str, path: str | None = None) -> int:
        """How many requests the origin received for host (and path) in a run."""
        return len(run.hits_for(host, path))


def host_gaps(hits: list[Hit]) -> dict[str, list[float]]:
    """Per host, the time between its consecutive requests."""
    per_host: dict[str, list[float]] = defaultdict(list)
    for h in hits:
        per_host[h.host].append(h.t)
    return {host: [b - a for a, b in itertools.pairwise(ts)] for host, ts in per_host.items()}


def host_path(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return (parts.hostname or ""), (parts.path or "/")
