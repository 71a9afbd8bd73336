"""PRG: purge on opt-out. Once the adopted list blocks a host crawled
before, what was stored about it is gone, the purge is an audit entry naming
the blocklist entry, and the host got no request."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from scrapy_walsh_research.conformance.scenario import PURGED_HOST
from scrapy_walsh_research.conformance.stored import audit_entries, stored_about

if TYPE_CHECKING:
    from scrapy_walsh_research.conformance.checks.base import Judgement, Observed


def purge(j: Judgement, seen: Observed) -> None:
    title = "purge on opt-out: a newly blocked host's stored data is deleted, and audited"
    if seen.shared_state:
        j.note("the state is in Redis here: the purge row is not checked")
        return
    run, before = seen.opted_out, seen.stored_before
    reason = run.refusal
    if reason is not None:
        j.add("PRG", "MUST", title, False, f"crawl refused: {reason}")
        return
    after = stored_about(seen.state, PURGED_HOST)
    try:
        entries = audit_entries(seen.state, PURGED_HOST)
    except sqlite3.Error:
        entries = []
    purges = [e for e in entries if e.get("event") == "purge"]
    named = [p for p in purges if repr(PURGED_HOST) in str(p.get("reason"))]
    contacted = len(run.hits_for(PURGED_HOST))
    measured = (
        f"{before} stored entries before, {after} after; {len(named)} purge entries naming "
        f"the blocklist entry; {contacted} requests after it was blocked"
    )
    passed = bool(before) and after == 0 and bool(named) and contacted == 0
    j.add("PRG", "MUST", title, passed, measured)
