"""What the crawls left in the state directory, read back for the judges:
the audit log's entries and the state store's entries about a host.

Read-only SQLite opens of the files the SQLite backend writes; with the
state in Redis the rows that need them are not checked (the run says so).
"""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING, Any

from scrapy_walsh_research.evidence.purge import NAMESPACES, stored_host

if TYPE_CHECKING:
    from pathlib import Path

AUDIT_FILE = "audit.sqlite3"
STATE_FILE = "state.sqlite3"


def _open(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def audit_entries(state: Path, host: str | None = None) -> list[dict[str, Any]]:
    """The audit log's entries (about *host* only, if given); raises
    :class:`sqlite3.Error` when there is no readable log."""
    db = _open(state / AUDIT_FILE)
    try:
        if host is None:
            rows = db.execute("SELECT entry FROM audit")
        else:
            rows = db.execute("SELECT entry FROM audit WHERE host = ?", (host,))
        return [json.loads(r[0]) for r in rows]
    finally:
        db.close()


def stored_about(state: Path, host: str) -> int | None:
    """How many entries the state store holds about *host* (validators,
    first-seen, cadence); None when it is not a readable SQLite store here."""
    try:
        db = _open(state / STATE_FILE)
        try:
            marks = ",".join("?" * len(NAMESPACES))
            rows = db.execute(f"SELECT key FROM kv WHERE namespace IN ({marks})", NAMESPACES)
            return sum(stored_host(key) == host for (key,) in rows)
        finally:
            db.close()
    except sqlite3.Error:
        return None
