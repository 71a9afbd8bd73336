"""Embedded backend: one SQLite file in WAL mode, no server.

SQLite rather than a JSON file because a ``kill -9`` mid-write must leave
either the old or the new value, never a torn file. Calls are small local
writes; they do not touch the network, so the coroutines run them inline.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.threads import deferToThread

from scrapy_walsh_research.state.directory import machine_lock
from scrapy_walsh_research.state.namespaces import key_host, key_prefixes

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable


class SQLiteStateStore:
    """The embedded :class:`~scrapy_walsh_research.state.protocols.StateStore`.

    Not how processes share state (that is the Redis store's job): without
    Redis one crawl holds its directory
    (:func:`~scrapy_walsh_research.state.directory.hold_state_dir`); with
    Redis it keeps only what a worker must not lose with the shared store."""

    #: no fleet shares its state through this store
    shared = False

    def __init__(self, path: Path | str, ttls: dict[str, float] | None = None) -> None:
        self.path = Path(path)
        # One process at a time opens it: the first connections to a new file
        # each switch it to WAL, and SQLite refuses all but one at once with
        # "database is locked", without waiting (both read the header, then
        # both want to write: it would be a deadlock, so the busy timeout is
        # not used). Forked workers opening one new state dir lost a worker
        # in one start of two.
        with machine_lock(self.path.with_name(f"{self.path.name}.lock")):
            self._db: sqlite3.Connection | None = sqlite3.connect(
                str(self.path), isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            # WAL + NORMAL: a committed write survives the process being killed
            # (kill -9); only an OS crash or power loss can lose the last ones.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS kv (namespace TEXT NOT NULL, key TEXT NOT NULL,"
                " value TEXT NOT NULL, updated REAL NOT NULL, PRIMARY KEY (namespace, key))"
            )
            # what a namespace keeps only so long (namespaces.retention) is
            # forgotten when a crawl opens the store: one crawl at a time holds it
            now = time.time()
            self._db.executemany(
                "DELETE FROM kv WHERE namespace = ? AND updated < ?",
                [(namespace, now - ttl) for namespace, ttl in (ttls or {}).items()],
            )

    # -- blobs: files beside the database, written in a thread ----------------
    # A blob (the adopted blocklist, up to tens of MB) in the database would
    # hold the reactor for the write (0.3 s for 78 MB) and lock out every
    # other state write meanwhile. A file written in a thread, fsynced and
    # renamed into place, is as durable (old or new, never torn) and blocks
    # nothing.

    def _blob_path(self, name: str) -> Path:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
            raise ValueError(f"bad blob name {name!r}")
        return self.path.parent / "blobs" / name

    async def put_blob(self, name: str, data: bytes) -> None:
        await maybe_deferred_to_future(
            deferToThread(_write_atomically, self._blob_path(name), data)
        )

    async def get_blob(self, name: str) -> bytes | None:
        return await maybe_deferred_to_future(deferToThread(_read_or_none, self._blob_path(name)))

    async def delete_blob(self, name: str) -> None:
        # in a thread too: unlinking a 79 MB file held the reactor ~0.1 s
        path = self._blob_path(name)
        await maybe_deferred_to_future(deferToThread(path.unlink, missing_ok=True))

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError(f"state store {self.path} is closed")
        return self._db

    async def get(self, namespace: str, key: str) -> Any | None:
        row = self.db.execute(
            "SELECT value FROM kv WHERE namespace = ? AND key = ?", (namespace, key)
        ).fetchone()
        return json.loads(row[0]) if row else None

    async def put(self, namespace: str, key: str, value: Any) -> None:
        self.db.execute(
            "INSERT INTO kv (namespace, key, value, updated) VALUES (?, ?, ?, ?)"
            " ON CONFLICT(namespace, key) DO UPDATE SET value = excluded.value,"
            " updated = excluded.updated",
            (namespace, key, json.dumps(value, sort_keys=True), time.time()),
        )

    async def get_many(self, namespace: str, keys: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for i in range(0, len(keys), 500):  # SQLite's bound-parameter limit
            chunk = keys[i : i + 500]
            marks = ",".join("?" * len(chunk))
            rows = self.db.execute(
                f"SELECT key, value FROM kv WHERE namespace = ? AND key IN ({marks})",
                (namespace, *chunk),
            )
            out.update((k, json.loads(v)) for k, v in rows)
        return out

    async def put_many(self, namespace: str, values: dict[str, Any]) -> None:
        now = time.time()
        with self.db:  # one transaction: all or nothing, one fsync
            self.db.execute("BEGIN")
            self.db.executemany(
                "INSERT INTO kv (namespace, key, value, updated) VALUES (?, ?, ?, ?)"
                " ON CONFLICT(namespace, key) DO UPDATE SET value = excluded.value,"
                " updated = excluded.updated",
                [(namespace, k, json.dumps(v, sort_keys=True), now) for k, v in values.items()],
            )

    async def keys(self, namespace: str, prefix: str = "") -> list[str]:
        # a range on the primary key: only the prefix's rows are read
        rows = self.db.execute(
            "SELECT key FROM kv WHERE namespace = ? AND key >= ? AND key < ?",
            (namespace, prefix, prefix + "\U0010ffff"),
        )
        return [row[0] for row in rows]

    def namespaces(self) -> list[str]:
        """Every namespace with a key in this file (not a :class:`StateStore`
        call: what ``walsh-migrate`` reports it does not carry)."""
        return [row[0] for row in self.db.execute("SELECT DISTINCT namespace FROM kv")]

    async def delete_many(self, namespace: str, keys: list[str]) -> None:
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany(
                "DELETE FROM kv WHERE namespace = ? AND key = ?", [(namespace, k) for k in keys]
            )

    async def hosts(self, namespace: str) -> list[str]:
        return sorted({h for k in await self.keys(namespace) if (h := key_host(k)) is not None})

    async def forget(self, namespace: str, host: str) -> int:
        found = [
            k
            for prefix in key_prefixes(host)
            for k in await self.keys(namespace, prefix)
            if key_host(k) == host
        ]
        await self.delete_many(namespace, found)
        return len(found)

    async def put_if_absent(self, namespace: str, key: str, value: Any) -> Any:
        self.db.execute(
            "INSERT OR IGNORE INTO kv (namespace, key, value, updated) VALUES (?, ?, ?, ?)",
            (namespace, key, json.dumps(value, sort_keys=True), time.time()),
        )
        return await self.get(namespace, key)

    async def history_complete(self) -> bool:
        # its own file: a state dir that is gone is a first run, as it always was
        return True

    def on_history_lost(self, callback: Callable[[], Awaitable[None]]) -> None:
        return None  # a file on this machine: no server restart can roll it back

    def time(self) -> float:
        return time.time()

    async def single_flight(
        self, name: str, ttl: float, max_wait: float | None = None
    ) -> Callable[[], Awaitable[None]] | None:
        # no fleet shares this store, so no other worker to wait for: go ahead
        return _nothing_to_release

    async def purge_records(
        self,
        matches: Callable[[str], bool],
        cause: Callable[[str], str],
        now: str,
        host: str | None = None,
    ) -> dict[str, dict[str, int]]:
        return {}  # a crawl's records are the files it exported, not kept here

    async def delete(self, namespace: str, key: str) -> None:
        self.db.execute("DELETE FROM kv WHERE namespace = ? AND key = ?", (namespace, key))

    async def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


async def _nothing_to_release() -> None:
    return None


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
