"""A fleet's audit log for months: one PostgreSQL table, partitioned by day.

``WALSH_AUDIT_URL=postgresql://user@host/db`` (the ``[postgres]`` extra)
puts every worker's entries, from every machine, in one table
(:func:`table_name` of ``WALSH_REDIS_PREFIX``: ``walsh_audit``): a store
made for months of append-only evidence, which Redis (memory) is not.

* **Queried by host and time.** Each row carries its host's labels reversed
  (``rhost``, byte order), indexed with its time: one host's report over 90
  days reads that host's rows through one index range
  (:func:`~scrapy_walsh_research.core.urls.domain_key_range`), however many
  rows the table holds.
* **Retention is enforced there.** One partition per UTC day, made two days
  ahead: entries past ``WALSH_AUDIT_RETENTION`` go with their day's
  partition (a ``DROP``, not millions of deletes), the rest of the oldest
  day by a ``DELETE``.
* **Fail closed, and durable.** An entry is committed, and flushed
  (``synchronous_commit=on`` for the bundle's session whatever the server's
  default), before the request it describes is sent; while PostgreSQL is
  unreachable the write waits and retries, logging one error per outage,
  and nothing is sent. A server that refuses the bundle (a wrong password,
  no such database, no right to create the table) stops the crawl with a
  message that says what to change. Text PostgreSQL's ``jsonb`` cannot hold
  (NUL, a lone surrogate: a site's words) is stored as U+FFFD, never a
  reason to lose an entry.
* **Nobody waits on a report.** A read materialises one host's rows and lets
  go of the table (a ``WITH HOLD`` cursor), so its locks last the query, not
  the report; the bundle's own DDL (a day's partition, the retention's
  ``DROP``) waits at most ``LOCK_TIMEOUT_S`` for its lock, so INSERTs never
  queue behind it.
* **Reads end.** Every read has a server-side ``statement_timeout`` and a
  client-side deadline: one that PostgreSQL does not answer in time is an
  error that says so, never a retry loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import re
import time
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from scrapy_walsh_research.core.urls import domain_key_range, host_key, without_password
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
#: partitions are made this many days ahead of an entry's day, so the day a
#: crawl crosses midnight has its partition before its first entry
AHEAD_DAYS = 2
#: how long one connection attempt may take
CONNECT_TIMEOUT_S = 5
#: how long one statement of a report's read may take before it is an error
READ_TIMEOUT_S = 60
#: how long the bundle's DDL waits for its table lock before it tries later
LOCK_TIMEOUT_S = 2
#: rows fetched from a report's cursor at a time
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
#: PostgreSQL cuts identifiers to 63 bytes; a table name leaves room for its
#: partitions' ``_d<day>`` (8) and its indexes' ``_rhost_t`` (8)
MAX_TABLE = 55
#: what ``jsonb`` refuses in a string
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def table_name(prefix: str) -> str:
    """The table of the fleet named *prefix* (``WALSH_REDIS_PREFIX``): a plain
    lower-case identifier, so two fleets can share a database. A prefix that
    is not one already (``Fleet-A``, or one too long for its partitions'
    names) is kept apart from every other by a hash of it: ``fleet_a`` and
    ``Fleet-A`` are two fleets, two tables."""
    base = re.sub(r"[^a-z0-9_]", "_", prefix.lower())
    if base != prefix or len(base) + len("_audit") > MAX_TABLE:
        digest = hashlib.sha256(prefix.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        base = f"{base[: MAX_TABLE - len('_audit') - 9]}_{digest}"
    return base + "_audit"


def storable(value: Any) -> Any:
    """*value* as ``jsonb`` takes it: NUL and lone surrogates (which JSON
    allows and ``jsonb`` refuses) become U+FFFD, and a non-finite number
    (which JSON does not allow) its text. A site's text must never cost an
    entry."""
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value) if _UNSTORABLE.search(value) else value
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def refused(exc: psycopg.Error) -> bool:
    """Whether *exc* is the server refusing the bundle (its configuration's
    fault), as opposed to an outage to wait out."""
    if (exc.sqlstate or "")[:2] in REFUSALS:
        return True
    text = str(exc)
    return "FATAL:" in text and any(words in text for words in REFUSED_AT_CONNECT)


class PostgresAudit:
    """Every worker's entries in one table, kept ``WALSH_AUDIT_RETENTION``.

    *patience*: how long a write may wait for an unreachable server before
    it is an error (a command's; a crawl waits as long as it takes, sending
    nothing meanwhile)."""

    def __init__(
        self,
        url: str,
        table: str,
        *,
        crawler: Crawler | None = None,
        max_backoff: float = 10.0,
        patience: float | None = None,
    ) -> None:
        self.url = url
        self.shown_url = without_password(url)
        self.table = table
        self.crawler = crawler
        self.max_backoff = max_backoff
        self.patience = patience
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._connecting = asyncio.Lock()
        #: days whose partition (and the next ones') this process made sure of
        self._days: set[int] = set()
        self._down_since: float | None = None

    # -- writes ------------------------------------------------------------

    def append(self, entry: dict[str, Any]) -> Awaitable[None]:
        host = entry.get("host") or ""
        row = (entry["t"], host, host_key(host), str(entry.get("event") or ""),
               Jsonb(storable(entry)))  # fmt: skip
        day = int(entry["t"] // DAY)

        async def insert(conn: psycopg.AsyncConnection[Any]) -> None:
            if day not in self._days:
                await self._partitions_for(conn, day)
            await conn.execute(
                sql.SQL(
                    "INSERT INTO {} (t, host, rhost, event, entry) VALUES (%s, %s, %s, %s, %s)"
                ).format(sql.Identifier(self.table)),
                row,
            )

        return self._call("audit entry", insert)

    async def prune(self, before: float) -> None:
        """Entries older than *before* go: whole days with their partition
        (a day whose lock is not free within LOCK_TIMEOUT_S is dropped at a
        later start), the rest of the oldest day row by row."""

        async def drop(conn: psycopg.AsyncConnection[Any]) -> None:
            for name, _, upper in await self._partitions(conn):
                if upper <= before:
                    try:
                        async with conn.transaction():
                            await self._lock_timeout(conn)
                            await conn.execute(
                                sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name))
                            )
                    except psycopg.errors.LockNotAvailable:
                        logger.info("Audit retention: %(t)s is in use; dropped later.", {"t": name})
            await conn.execute(
                sql.SQL("DELETE FROM {} WHERE t < %s").format(sql.Identifier(self.table)), (before,)
            )

        await self._call("audit retention", drop)

    async def open(self) -> None:
        """Connect and make sure of the table and today's partitions (at a
        worker's start: a server that refuses the bundle stops the crawl
        before anything is sent)."""
        await self._call("audit table", lambda c: self._partitions_for(c, int(time.time() // DAY)))

    async def _call(
        self, what: str, fn: Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]]
    ) -> None:
        """Run *fn* until PostgreSQL has it: wait and reconnect, never skip it
        (for a command, at most *patience* seconds)."""
        delay = 0.25
        while True:
            try:
                await fn(await self._connection())
            except psycopg.Error as exc:
                if refused(exc):
                    self._refuse(exc)
                outage = isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
                if not outage:
                    raise
                if not isinstance(exc, psycopg.errors.LockNotAvailable):
                    await self._disconnect()
                self._wait_started(what, exc)
                if self.patience is not None and self._down_for() > self.patience:
                    raise WalshAuditUnavailable(
                        f"PostgreSQL at {self.shown_url} did not take the audit entry for "
                        f"{self.patience:.0f} s ({str(exc).strip()}): nothing was done that "
                        "the audit log would not show. Try again once it answers."
                    ) from exc
                self._stat("retries")
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)
                continue
            if self._down_since is not None:
                logger.warning(
                    "PostgreSQL at %(url)s is back after %(s).1f s; the crawl goes on.",
                    {"url": self.shown_url, "s": self._down_for()},
                )
                self._down_since = None
            return

    def _wait_started(self, what: str, exc: psycopg.Error) -> None:
        if self._down_since is not None:
            return
        self._down_since = time.monotonic()
        self._stat("outages")
        logger.error(
            "PostgreSQL at %(url)s is unreachable or busy (%(exc)s) during %(what)s: no "
            "request goes out before its audit entry is stored; waiting and trying again.",
            {"url": self.shown_url, "exc": str(exc).strip(), "what": what},
        )

    def _down_for(self) -> float:
        return 0.0 if self._down_since is None else time.monotonic() - self._down_since

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
            stop_refused(self.crawler, AUDIT_REFUSED, message)
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
                # an entry is acknowledged once flushed, whatever the
                # server's default: a crash must not lose the evidence of a
                # request already sent
                self._conn = await psycopg.AsyncConnection.connect(
                    self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                    options="-c synchronous_commit=on",
                )  # fmt: skip
                self._days.clear()
            return self._conn

    async def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except psycopg.Error:
                pass

    @staticmethod
    async def _lock_timeout(conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute(
            sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(f"{LOCK_TIMEOUT_S}s"))
        )

    def _day_table(self, day: int) -> str:
        return f"{self.table}_d{day}"

    async def _partitions_for(self, conn: psycopg.AsyncConnection[Any], day: int) -> None:
        """*day*'s partition and the next AHEAD_DAYS', made where missing.
        Usually they exist (made ahead) and nothing is locked; a missing one
        is made by whichever worker comes first (an advisory lock: two
        workers' CREATE ... IF NOT EXISTS still collide), waiting at most
        LOCK_TIMEOUT_S for the table (a later day tries again next time; the
        entry's own day is retried as an outage)."""
        days = range(day, day + AHEAD_DAYS + 1)
        cur = await conn.execute(
            "SELECT d, to_regclass(%s || d::text) IS NOT NULL FROM unnest(%s::int[]) AS d",
            (f"{self.table}_d", list(days)),
        )
        missing = [d for d, there in await cur.fetchall() if not there]
        table = sql.Identifier(self.table)
        create = sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} PARTITION OF {} FOR VALUES FROM ({}) TO ({})"
        )
        for d in missing:
            bounds = (sql.Literal(d * DAY), sql.Literal((d + 1) * DAY))
            try:
                async with conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.table,))
                    await self._lock_timeout(conn)
                    await self._table(conn, table)
                    await conn.execute(
                        create.format(sql.Identifier(self._day_table(d)), table, *bounds)
                    )
            except psycopg.errors.LockNotAvailable:
                if d == day:
                    raise
                logger.info(
                    "Audit log: the partition for %(d)s waits for its table lock; made later.",
                    {"d": time.strftime("%Y-%m-%d", time.gmtime(d * DAY))},
                )
                return
        self._days.add(day)

    async def _table(self, conn: psycopg.AsyncConnection[Any], table: sql.Identifier) -> None:
        """The partitioned table and its indexes, once (nothing is locked
        when they exist: the catalog says so first)."""
        cur = await conn.execute("SELECT to_regclass(%s) IS NOT NULL", (self.table,))
        row = await cur.fetchone()
        if row is not None and row[0]:
            return
        await conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (seq bigserial, t double precision NOT NULL,"
                ' host text NOT NULL, rhost text COLLATE "C" NOT NULL, event text NOT NULL,'
                " entry jsonb NOT NULL) PARTITION BY RANGE (t)"
            ).format(table)
        )
        for suffix, columns in (("_rhost_t", "(rhost, t)"), ("_t", "(t)")):
            await conn.execute(
                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} " + columns).format(
                    sql.Identifier(self.table + suffix), table
                )
            )

    async def _partitions(
        self, conn: psycopg.AsyncConnection[Any]
    ) -> list[tuple[str, float, float]]:
        """Each partition with its bounds, as PostgreSQL holds them (never
        read from a name)."""
        cur = await conn.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)"
            " FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = to_regclass(%s)",
            (self.table,),
        )
        found = []
        for name, bound in await cur.fetchall():
            m = re.search(r"FROM \('?([^')]+)'?\) TO \('?([^')]+)'?\)", bound or "")
            if m:
                found.append((name, float(m.group(1)), float(m.group(2))))
        return found

    # -- reads -------------------------------------------------------------

    async def entries(
        self, host: str | None = None, since: float | None = None, *, subdomains: bool = True
    ) -> AsyncIterator[dict[str, Any]]:
        """The entries of *host* (and its subdomains), or every entry, in time
        order. The query runs once, to completion, into a cursor kept past
        its transaction (``WITH HOLD``): the table's locks last the query,
        not the report; the rows are then fetched a page at a time."""
        where, args = _where(host, since, subdomains)
        query = sql.SQL("SELECT entry FROM {} WHERE {} ORDER BY t, seq").format(
            sql.Identifier(self.table), where
        )
        conn = await self._reader()
        try:
            cur = conn.cursor(name="walsh_report", withhold=True)
            await self._read(cur.execute(query, args))
            while rows := await self._read(cur.fetchmany(PAGE)):
                for (entry,) in rows:
                    yield entry
            await self._read(cur.close())
        finally:
            await self._close_reader(conn)

    async def hosts(self, since: float | None = None) -> list[str]:
        conn = await self._reader()
        try:
            cur = await self._read(
                conn.execute(
                    sql.SQL("SELECT DISTINCT host FROM {} WHERE t >= %s AND host != ''").format(
                        sql.Identifier(self.table)
                    ),
                    (since or 0.0,),
                )
            )
            return sorted(row[0] for row in await self._read(cur.fetchall()))
        finally:
            await self._close_reader(conn)

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
            await self._close_reader(conn)

    async def _reader(self) -> psycopg.AsyncConnection[Any]:
        """A connection of its own for a read, with a time limit on every
        statement and on any transaction left idle."""
        limit = READ_TIMEOUT_S * 1000
        options = f"-c statement_timeout={limit} -c idle_in_transaction_session_timeout={limit}"
        try:
            return await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, options=options
            )
        except psycopg.Error as exc:
            raise self._unreadable(exc) from exc

    async def _read(self, step: Awaitable[Any]) -> Any:
        """One step of a read, within READ_TIMEOUT_S by the client's own
        clock too (a server that stops answering, or a network that drops
        every packet, never answers at all)."""
        try:
            return await asyncio.wait_for(step, READ_TIMEOUT_S + CONNECT_TIMEOUT_S)
        except psycopg.errors.UndefinedTable as exc:
            raise WalshAuditUnavailable(
                f"The audit log in PostgreSQL at {self.shown_url} has no table {self.table}: "
                "no worker wrote to it with these settings. Give the report the "
                "WALSH_REDIS_PREFIX the fleet runs with (the table is named after it)."
            ) from exc
        except psycopg.Error as exc:
            raise self._unreadable(exc) from exc
        except asyncio.TimeoutError as exc:  # TimeoutError from Python 3.11 on
            raise self._unreadable(exc) from exc

    @staticmethod
    async def _close_reader(conn: psycopg.AsyncConnection[Any]) -> None:
        try:
            await asyncio.wait_for(conn.close(), CONNECT_TIMEOUT_S)
        except (psycopg.Error, asyncio.TimeoutError):
            pass

    def _unreadable(self, exc: Exception) -> WalshAuditUnavailable:
        why = str(exc).strip() or f"no answer within {READ_TIMEOUT_S + CONNECT_TIMEOUT_S} s"
        return WalshAuditUnavailable(
            f"The audit log in PostgreSQL at {self.shown_url} (table {self.table}) could not "
            f"be read ({why}). Nothing was written; check WALSH_AUDIT_URL and try again once "
            "PostgreSQL answers."
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
