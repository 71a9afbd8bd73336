"""AUD: the audit log holds every request the origin saw, and nothing else."""

from __future__ import annotations

import sqlite3
from collections import Counter
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy_walsh_research.conformance.stored import AUDIT_FILE, audit_entries

if TYPE_CHECKING:
    from scrapy_walsh_research.conformance.checks.base import Judgement, Observed


def audit(j: Judgement, seen: Observed) -> None:
    title = "audit log: every request the origin saw is logged, and nothing else"
    if seen.shared_state:
        j.note("the audit log is in Redis here: its row is not checked")
        return
    reason = seen.first.refusal
    if reason is not None:
        j.add("AUD", "MUST", title, False, f"crawl refused: {reason}")
        return
    try:
        entries = audit_entries(seen.state)
    except sqlite3.Error as exc:
        j.add("AUD", "MUST", title, False, f"no audit log at {seen.state / AUDIT_FILE}: {exc}")
        return
    received = Counter((h.host, h.path) for run in seen.crawls for h in run.hits)
    logged: Counter[tuple[str, str]] = Counter()
    for e in entries:
        if e.get("event") == "request":
            parts = urlsplit(e["url"])
            path_q = parts.path + (f"?{parts.query}" if parts.query else "")
            logged[(e["host"], path_q)] += 1
    missing, extra = received - logged, logged - received
    measured = (
        f"{sum(logged.values())} logged, {sum(received.values())} received; "
        f"missing {sorted(missing)[:2]}, extra {sorted(extra)[:2]}"
    )
    j.add("AUD", "MUST", title, not missing and not extra, measured)
