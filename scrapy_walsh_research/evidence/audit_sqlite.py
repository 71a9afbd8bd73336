"""The audit log of one machine: ``audit.sqlite3`` in ``WALSH_STATE_DIR``.

An entry is committed before :meth:`SQLiteAudit.append` returns (WAL: it
survives the process being killed). Entries are indexed by host and time
(``rhost``: the host's labels reversed, so a host and its subdomains are
one index range, :func:`~scrapy_walsh_research.core.urls.domain_key_range`):
one host's report reads that host's entries, never the whole log.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from typing import TYPE_CHECKING, Any

from scrapy_walsh_research.core.urls import domain_key_range, host_key

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path

logger = logging.getLogger(__name__)

#: rows fetched from SQLite at a time while a report streams
PAGE = 1000
#: rows given their key per transaction when an older file is upgraded
MIGRATION_BATCH = 50_000
#: how long opening the file waits for another process that holds it (an
#: upgrade's batch, or building the index over a large log)
BUSY_TIMEOUT_S = 120.0


class SQLiteAudit:
    """Entries in ``audit.sqlite3``; a write is committed before it returns."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # another process may be upgrading the file: wait for it a while
        self.db = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_S
        )
        self.db.create_function("walsh_host_key", 1, host_key, deterministic=True)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        # seq is the rowid, max + 1 on insert: in order, since only the oldest
        # entries are ever deleted. AUTOINCREMENT (kept by files that have it)
        # wrote one more page per entry, ~15 % of an entry's commit.
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS audit (seq INTEGER PRIMARY KEY,"
            " t REAL NOT NULL, host TEXT NOT NULL, entry TEXT NOT NULL, rhost TEXT)"
        )
        self._index_by_host()
        self.db.execute("CREATE INDEX IF NOT EXISTS audit_t ON audit (t)")

    def _index_by_host(self) -> None:
        """The (reversed host, time) index. A file written before it (an
        index on (host, t), which cannot find subdomains) gets the column,
        then its rows their key in committed batches, so another process
        opening the file meanwhile waits a batch, not the whole upgrade
        (and takes its share of it)."""
        with self._immediate():
            columns = {row[1] for row in self.db.execute("PRAGMA table_info(audit)")}
            if "rhost" not in columns:
                self.db.execute("ALTER TABLE audit ADD COLUMN rhost TEXT")
        upgrading = False
        while True:
            with self._immediate():
                done = self.db.execute(
                    "UPDATE audit SET rhost = walsh_host_key(host) WHERE seq IN"
                    " (SELECT seq FROM audit WHERE rhost IS NULL LIMIT ?)",
                    (MIGRATION_BATCH,),
                ).rowcount
            if done < MIGRATION_BATCH:
                break
            if not upgrading:
                upgrading = True
                logger.info(
                    "Upgrading the audit log %(p)s: each entry gets its host's reversed name, "
                    "for the index by host (once; a large log takes a minute).",
                    {"p": self.path},
                )
        with self._immediate():
            self.db.execute("DROP INDEX IF EXISTS audit_host_t")
            self.db.execute("CREATE INDEX IF NOT EXISTS audit_rhost_t ON audit (rhost, t)")

    @contextlib.contextmanager
    def _immediate(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def append(self, entry: dict[str, Any]) -> None:
        host = entry.get("host") or ""
        self.db.execute(
            "INSERT INTO audit (t, host, rhost, entry) VALUES (?, ?, ?, ?)",
            (entry["t"], host, host_key(host), json.dumps(entry, sort_keys=True)),
        )

    async def entries(
        self, host: str | None = None, since: float | None = None, *, subdomains: bool = True
    ) -> AsyncIterator[dict[str, Any]]:
        sql, args = _select(host, since, subdomains)
        cursor = self.db.execute(sql, args)
        try:
            while rows := cursor.fetchmany(PAGE):
                for (raw,) in rows:
                    yield json.loads(raw)
        finally:
            cursor.close()

    async def hosts(self, since: float | None = None) -> list[str]:
        rows = self.db.execute(
            "SELECT DISTINCT host FROM audit WHERE t >= ? AND host != ''", (since or 0.0,)
        ).fetchall()
        return sorted(row[0] for row in rows)

    async def prune(self, before: float) -> None:
        self.db.execute("DELETE FROM audit WHERE t < ?", (before,))

    def query_plan(self, host: str | None, since: float | None = None) -> str:
        """How SQLite reads one host's entries (a test checks the index is used)."""
        sql, args = _select(host, since, True)
        return " | ".join(row[-1] for row in self.db.execute("EXPLAIN QUERY PLAN " + sql, args))

    async def close(self) -> None:
        self.db.close()


def _select(host: str | None, since: float | None, subdomains: bool) -> tuple[str, list[Any]]:
    """The query for *host* (and its subdomains) from *since*, in time order."""
    if host is None:
        return "SELECT entry FROM audit WHERE t >= ? ORDER BY t, seq", [since or 0.0]
    key, low, high = domain_key_range(host)
    if not subdomains:
        sql = "SELECT entry FROM audit WHERE rhost = ? AND t >= ? ORDER BY t, seq"
        return sql, [key, since or 0.0]
    sql = (
        "SELECT entry FROM audit WHERE (rhost = ? OR (rhost >= ? AND rhost < ?)) AND t >= ?"
        " ORDER BY t, seq"
    )
    return sql, [key, low, high, since or 0.0]
