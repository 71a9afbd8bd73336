"""What a conformance run found: the rows, and what each sandbox crawl left.

Evidence, kept below the check that produces it: the conformance check
(:mod:`scrapy_walsh_research.conformance`) fills it in, the attestation
(:mod:`scrapy_walsh_research.evidence.attestation`) is built from it, and
neither imports the other. It imports nothing from the package but the
sandbox's ``Hit`` type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy_walsh_research.sandbox.origin import Hit


@dataclass
class CrawlOutcome:
    """One sandbox crawl: its records, what the origin received, the stats,
    or the start-up refusal that stopped it before any request."""

    records: list[dict[str, Any]]
    hits: list[Hit]
    stats: dict[str, Any]
    refused: str | None = None

    @property
    def refusal(self) -> str | None:
        """The refusal's last line (the one that says what to change), if refused."""
        return self.refused.strip().splitlines()[-1].strip() if self.refused else None

    def record(self, url: str) -> dict[str, Any]:
        found = [r for r in self.records if r["url"] == url]
        return found[0] if found else {"outcome": "missing", "rule": None}

    def hits_for(self, host: str, path: str | None = None) -> list[Hit]:
        return [h for h in self.hits if h.host == host and (path is None or h.path == path)]


@dataclass
class Check:
    """One row of the table: a requirement and what was measured for it."""

    id: str
    level: str  # MUST or SHOULD
    title: str
    passed: bool
    measured: str


@dataclass
class ConformanceResult:
    """Every row of a conformance run, in the table's order."""

    checks: list[Check] = field(default_factory=list)
    max_inflight: int = 0
    #: what the table should say beyond its rows (e.g. that signing is off)
    notes: list[str] = field(default_factory=list)
    #: the start-up check's refusal of the project's own configuration: no
    #: crawl ran, so every row fails with it
    refused: str | None = None

    @property
    def must_pass(self) -> bool:
        return all(c.passed for c in self.checks if c.level == "MUST")

    def table(self) -> str:
        width = max(len(c.title) for c in self.checks)
        lines = [
            f"{'':6} {'id':<5} {'level':<6} {'requirement':<{width}}  measured",
            "-" * (width + 40),
        ]
        for c in self.checks:
            mark = "PASS" if c.passed else "FAIL"
            lines.append(f"[{mark}] {c.id:<5} {c.level:<6} {c.title:<{width}}  {c.measured}")
        passed = sum(c.passed for c in self.checks)
        musts = [c for c in self.checks if c.level == "MUST"]
        lines.append("-" * (width + 40))
        lines.append(
            f"{passed}/{len(self.checks)} checks passed; "
            f"{sum(c.passed for c in musts)}/{len(musts)} MUST. "
            + ("Conformant." if self.must_pass else "NOT conformant.")
        )
        lines += [f"Note: {note}" for note in self.notes]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            "checks": [c.__dict__ for c in self.checks],
            "must_pass": self.must_pass,
            "notes": self.notes,
            "refused": self.refused,
        }
