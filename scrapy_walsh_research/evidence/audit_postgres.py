"""A fleet's audit log for months: one PostgreSQL table, partitioned by day.

``WALSH_AUDIT_URL=postgresql://user@host/db`` (the ``[postgres]`` extra)
puts every worker's entries, from every machine, in one table
(``<prefix>_audit``, the prefix being ``WALSH_REDIS_PREFIX``): a store made
for months of append-only evidence, which Redis (memory) is not.

* **Queried by host and time.** Each row carries its host's labels reversed
  (``rhost``), indexed with its time: one host's report over 90 days reads
  that host's rows through one index range
  (:func:`~scrapy_walsh_research.core.urls.domain_key_range`), streamed
  from a server-side cursor, however many rows the table holds.
* **Retention is enforced there.** One partition per UTC day: entries past
  ``WALSH_AUDIT_RETENTION`` go with their day's partition (a ``DROP``, not
  millions of deletes), the rest of the oldest day by a ``DELETE``.
* **Fail closed.** An entry is committed before the request it describes is
  sent; while PostgreSQL is unreachable the write waits and retries, logging
  one error per outage, and nothing is sent. A server that refuses the
  bundle (a wrong password, no such database, no right to create the
  table) stops the crawl with a message that says what to change.
* **Reads end.** A report's read that PostgreSQL does not answer in time is
  an error that says so, never a retry loop.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from scrapy_walsh_research.core.urls import domain_key_range, host_key
from scrapy_walsh_research.errors import (
    WalshAuditUnavailable,
    WalshConfigurationError,
    stop_refused,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

DAY = 86400
#: how long one connection attempt may take
CONNECT_TIMEOUT_S = 5
#: how long one page of a report's read may take before it is an error
READ_TIMEOUT_S = 60
#: rows fetched from the server-side cursor at a time
PAGE = 1000
#: the spider's close reason when PostgreSQL refuses the bundle
AUDIT_REFUSED = "walsh_audit_refused"
#: SQLSTATE classes that are the configuration's fault, not an outage:
#: 28 invalid authorization, 3D no such database, 42 no privilege or
#: syntax (a table the user may not create)
REFUSALS = ("28", "3D", "42")
#: the same refusals when the server ends a connection attempt: libpq gives
#: psycopg no SQLSTATE for those, only the server's FATAL message (a FATAL
#: such as "the database system is starting up" is an outage, and waited out)
REFUSED_AT_CONNECT = (
    "does not exist", "authentication failed", "no pg_hba.conf entry", "permission denied",
)  # fmt: skip


def without_password(url: str) -> str:
    """*url* with its password (if any) shown as ``***``, for logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def table_name(prefix: str) -> str:
    """The table of the fleet named *prefix* (``WALSH_REDIS_PREFIX``): a
    plain identifier, so two fleets can share a database."""
    return re.sub(r"[^a-z0-9_]", "_", prefix.lower()) + "_audit"


def refused(exc: psycopg.Error) -> bool:
    """Whether *exc* is the server refusing the bundle (its configuration's
    fault), as opposed to an outage to wait out."""
    if (exc.sqlstate or "")[:2] in REFUSALS:
        return True
    text = str(exc)
    return "FATAL:" in text and any(words in text for words in REFUSED_AT_CONNECT)


class PostgresAudit:
    """Every worker's entries in ``<prefix>_audit``, kept *retention* seconds."""

    def __init__(
        self,
        url: str,
        table: str,
        *,
        crawler: Crawler | None = None,
        max_backoff: float = 10.0,
    ) -> None:
        self.url = url
        self.shown_url = without_password(url)
        self.table = table
        self.crawler = crawler
        self.max_backoff = max_backoff
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._connecting = asyncio.Lock()
        #: days whose partition this process made sure of
        self._days: set[int] = set()
        self._down_since: float | None = None

    # -- writes ------------------------------------------------------------

    def append(self, entry: dict[str, Any]) -> Awaitable[None]:
        host = entry.get("host") or ""
        row = (entry["t"], host, host_key(host), str(entry.get("event") or ""), Jsonb(entry))
        day = int(entry["t"] // DAY)

        async def insert(conn: psycopg.AsyncConnection[Any]) -> None:
            if day not in self._days:
                await self._partition(conn, day)
            await conn.execute(
                sql.SQL(
                    "INSERT INTO {} (t, host, rhost, event, entry) VALUES (%s, %s, %s, %s, %s)"
                ).format(sql.Identifier(self.table)),
                row,
            )

        return self._call("audit entry", insert)

    async def prune(self, before: float) -> None:
        """Entries older than *before* go: whole days with their partition,
        the rest of the oldest day row by row."""

        async def drop(conn: psycopg.AsyncConnection[Any]) -> None:
            for name, day in await self._partitions(conn):
                if (day + 1) * DAY <= before:
                    drop_day = sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name))
                    await conn.execute(drop_day)
                    self._days.discard(day)
            await conn.execute(
                sql.SQL("DELETE FROM {} WHERE t < %s").format(sql.Identifier(self.table)), (before,)
            )

        await self._call("audit retention", drop)

    async def open(self) -> None:
        """Connect and make sure of the table (at a worker's start: a server
        that refuses the bundle stops the crawl before anything is sent)."""
        await self._call("audit table", lambda conn: self._partition(conn, int(time.time() // DAY)))

    async def _call(
        self, what: str, fn: Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]]
    ) -> None:
        """Run *fn* until PostgreSQL has it: wait and reconnect, never skip it."""
        delay = 0.25
        while True:
            try:
                await fn(await self._connection())
            except psycopg.Error as exc:
                if refused(exc):
                    self._refuse(exc)
                if not isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
                    raise
                await self._disconnect()
                if self._down_since is None:
                    self._down_since = time.monotonic()
                    self._stat("outages")
                    logger.error(
                        "PostgreSQL at %(url)s is unreachable (%(exc)s) during %(what)s: no "
                        "request goes out before its audit entry is stored; waiting and "
                        "reconnecting.",
                        {"url": self.shown_url, "exc": str(exc).strip(), "what": what},
                    )
                self._stat("retries")
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)
                continue
            if self._down_since is not None:
                logger.warning(
                    "PostgreSQL at %(url)s is back after %(s).1f s; the crawl goes on.",
                    {"url": self.shown_url, "s": time.monotonic() - self._down_since},
                )
                self._down_since = None
            return

    def _refuse(self, exc: psycopg.Error) -> None:
        message = (
            f"PostgreSQL at {self.shown_url} refuses the audit log ({str(exc).strip()}): "
            "WALSH_AUDIT_URL must name a database the bundle's user can connect to and "
            f"create and write the table {self.table} in (its partitions included). Nothing "
            "is sent without its audit entry, so the crawl stops."
        )
        logger.error(message)
        if self.crawler is not None:
            self._stat("refused")
            stop_refused(self.crawler, AUDIT_REFUSED)
        raise WalshConfigurationError(message) from exc

    def _stat(self, name: str) -> None:
        crawler = self.crawler
        try:
            stats = crawler.stats if crawler is not None else None
        except RuntimeError:
            return
        if stats is not None:
            stats.inc_value(f"walsh/audit/postgres/{name}")

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        async with self._connecting:
            if self._conn is None or self._conn.closed:
                self._conn = await psycopg.AsyncConnection.connect(
                    self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
                )
                self._days.clear()
            return self._conn

    async def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except psycopg.Error:
                pass

    async def _partition(self, conn: psycopg.AsyncConnection[Any], day: int) -> None:
        """The table, its indexes and *day*'s partition (and the next day's),
        made once by whichever worker comes first (an advisory lock: two
        workers' CREATE ... IF NOT EXISTS can still collide)."""
        table = sql.Identifier(self.table)
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.table,))
            await conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (seq bigserial, t double precision NOT NULL,"
                    " host text NOT NULL, rhost text COLLATE \"C\" NOT NULL, event text NOT NULL,"
                    " entry jsonb NOT NULL) PARTITION BY RANGE (t)"
                ).format(table)
            )
            await conn.execute(
                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (rhost, t)").format(
                    sql.Identifier(f"{self.table}_rhost_t"), table
                )
            )
            await conn.execute(
                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (t)").format(
                    sql.Identifier(f"{self.table}_t"), table
                )
            )
            for d in (day, day + 1):
                partition = sql.Identifier(f"{self.table}_d{d}")
                bounds = (sql.Literal(d * DAY), sql.Literal((d + 1) * DAY))
                await conn.execute(
                    sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {} PARTITION OF {}"
                        " FOR VALUES FROM ({}) TO ({})"
                    ).format(partition, table, *bounds)
                )
        self._days.update((day, day + 1))

    async def _partitions(self, conn: psycopg.AsyncConnection[Any]) -> list[tuple[str, int]]:
        cur = await conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = to_regclass(%s)",
            (self.table,),
        )
        found = []
        for (name,) in await cur.fetchall():
            m = re.fullmatch(re.escape(self.table) + r"_d(\d+)", name)
            if m:
                found.append((name, int(m.group(1))))
        return found

    # -- reads -------------------------------------------------------------

    async def entries(
        self, host: str | None = None, since: float | None = None, *, subdomains: bool = True
    ) -> AsyncIterator[dict[str, Any]]:
        """The entries of *host* (and its subdomains), or every entry, in time
        order, streamed a page at a time from a server-side cursor."""
        where, args = _where(host, since, subdomains)
        query = sql.SQL("SELECT entry FROM {} WHERE {} ORDER BY t, seq").format(
            sql.Identifier(self.table), where
        )
        conn = await self._reader()
        try:
            async with conn.transaction():
                await conn.execute(
                    sql.SQL("SET LOCAL statement_timeout = {}").format(
                        sql.Literal(READ_TIMEOUT_S * 1000)
                    )
                )
                async with conn.cursor(name="walsh_report") as cur:
                    cur.itersize = PAGE
                    await cur.execute(query, args)
                    async for (entry,) in cur:
                        yield entry
        except psycopg.errors.UndefinedTable:
            return
        except psycopg.Error as exc:
            raise self._unreadable(exc) from exc
        finally:
            await conn.close()

    async def hosts(self, since: float | None = None) -> list[str]:
        conn = await self._reader()
        try:
            cur = await conn.execute(
                sql.SQL("SELECT DISTINCT host FROM {} WHERE t >= %s AND host != ''").format(
                    sql.Identifier(self.table)
                ),
                (since or 0.0,),
            )
            return sorted(row[0] for row in await cur.fetchall())
        except psycopg.errors.UndefinedTable:
            return []
        except psycopg.Error as exc:
            raise self._unreadable(exc) from exc
        finally:
            await conn.close()

    async def query_plan(self, host: str, since: float | None = None) -> str:
        """How PostgreSQL reads one host's entries (a test checks the index is used)."""
        where, args = _where(host, since, True)
        conn = await self._reader()
        try:
            cur = await conn.execute(
                sql.SQL("EXPLAIN SELECT entry FROM {} WHERE {} ORDER BY t, seq").format(
                    sql.Identifier(self.table), where
                ),
                args,
            )
            return "\n".join(row[0] for row in await cur.fetchall())
        finally:
            await conn.close()

    async def _reader(self) -> psycopg.AsyncConnection[Any]:
        try:
            return await psycopg.AsyncConnection.connect(
                self.url, connect_timeout=CONNECT_TIMEOUT_S
            )
        except psycopg.Error as exc:
            raise self._unreadable(exc) from exc

    def _unreadable(self, exc: psycopg.Error) -> WalshAuditUnavailable:
        return WalshAuditUnavailable(
            f"The audit log in PostgreSQL at {self.shown_url} (table {self.table}) could not "
            f"be read ({str(exc).strip()}). Nothing was written; check WALSH_AUDIT_URL and "
            "try again once PostgreSQL answers."
        )

    async def close(self) -> None:
        await self._disconnect()


def _where(
    host: str | None, since: float | None, subdomains: bool
) -> tuple[sql.Composed, list[Any]]:
    if host is None:
        return sql.SQL("t >= %s").format(), [since or 0.0]
    key, low, high = domain_key_range(host)
    if not subdomains:
        return sql.SQL("rhost = %s AND t >= %s").format(), [key, since or 0.0]
    return (
        sql.SQL("(rhost = %s OR (rhost >= %s AND rhost < %s)) AND t >= %s").format(),
        [key, low, high, since or 0.0],
    )
