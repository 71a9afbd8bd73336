"""The audit log: what the bot sent to a host, and what it decided, and why.

When a site owner writes "your bot hammered us", the operator answers with
evidence: every request that reached the network (targets, robots.txt, the
blocklist and its schema, llms.txt, redirect hops, retries) is appended
*before* it is sent, with the blocklist version and the robots.txt in force
and the signature keyid; its answer (status or error) follows; and every
decision about a target (its record's outcome, rule and reason) is appended
when the record is committed.

Storage has one owner per crawler (:meth:`AuditTrail.for_crawler`) behind a
small interface with two backends: a SQLite file in ``WALSH_STATE_DIR``
(``audit.sqlite3``; WAL, so an entry written survives SIGKILL) and, with
``WALSH_REDIS_URL``, one Redis stream for the whole fleet. Entries older
than ``WALSH_AUDIT_RETENTION`` (90 days) are dropped when a crawl opens.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from scrapy import signals

from scrapy_walsh_research.core.timestamps import utc_iso
from scrapy_walsh_research.core.urls import in_domain, is_http_url, url_host
from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.per_crawler import per_crawler
from scrapy_walsh_research.settings import defaults
from scrapy_walsh_research.state import redis_url
from scrapy_walsh_research.state.directory import state_dir

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy import Request
    from scrapy.crawler import Crawler

    from scrapy_walsh_research.state.redis.connection import RedisConnection


class AuditStore(Protocol):
    """Where entries go. ``append`` returns None when the entry is already
    durable, or an awaitable that completes when it is."""

    def append(self, entry: dict[str, Any]) -> Awaitable[None] | None: ...

    async def query(
        self, host: str | None = None, since: float | None = None
    ) -> list[dict[str, Any]]: ...

    async def prune(self, before: float) -> None: ...


class SQLiteAudit:
    """Entries in ``audit.sqlite3``; a write is committed before it returns
    (WAL: it survives the process being killed)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        # seq is the rowid, max + 1 on insert: in order, since only the oldest
        # entries are ever deleted. AUTOINCREMENT (kept by files that have it)
        # wrote one more page per entry, ~15 % of an entry's commit.
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS audit (seq INTEGER PRIMARY KEY,"
            " t REAL NOT NULL, host TEXT NOT NULL, entry TEXT NOT NULL)"
        )
        self.db.execute("CREATE INDEX IF NOT EXISTS audit_host_t ON audit (host, t)")
        self.db.execute("CREATE INDEX IF NOT EXISTS audit_t ON audit (t)")

    def append(self, entry: dict[str, Any]) -> None:
        self.db.execute(
            "INSERT INTO audit (t, host, entry) VALUES (?, ?, ?)",
            (entry["t"], entry.get("host") or "", json.dumps(entry, sort_keys=True)),
        )

    async def query(
        self, host: str | None = None, since: float | None = None
    ) -> list[dict[str, Any]]:
        sql = "SELECT entry FROM audit WHERE t >= ?"
        args: list[object] = [since or 0.0]
        if host is not None:  # the host or a subdomain (no LIKE: '%' and '_' are literal)
            sql += " AND (host = ? OR substr(host, -?) = ?)"
            args += [host, len(host) + 1, f".{host}"]
        rows = self.db.execute(sql + " ORDER BY seq", args).fetchall()
        return [json.loads(row[0]) for row in rows]

    async def prune(self, before: float) -> None:
        self.db.execute("DELETE FROM audit WHERE t < ?", (before,))

    def close(self) -> None:
        self.db.close()


class RedisAudit:
    """Every worker's entries in one stream, ``<prefix>:audit``; a write is
    acknowledged by Redis before the request it describes is sent."""

    def __init__(self, conn: RedisConnection, retention: float) -> None:
        self.conn = conn
        self.key = conn.key("audit")
        self.retention = retention

    def append(self, entry: dict[str, Any]) -> Awaitable[None]:
        data = json.dumps(entry, sort_keys=True)
        floor = int((time.time() - self.retention) * 1000)

        async def add() -> None:
            await self.conn.call(
                "audit",
                lambda r: r.xadd(self.key, {"e": data}, minid=floor, approximate=True),
            )

        return add()

    async def query(
        self, host: str | None = None, since: float | None = None
    ) -> list[dict[str, Any]]:
        start = str(int((since or 0) * 1000))
        # redis-py types a stream read as optional; XRANGE always answers a list
        rows = cast(
            "list[tuple[str, dict[str, str]]]",
            await self.conn.call("audit", lambda r: r.xrange(self.key, min=start)),
        )
        out = []
        for _, fields in rows:
            entry = json.loads(fields["e"])
            h = entry.get("host") or ""
            if host is None or in_domain(h, host):
                out.append(entry)
        return out

    async def prune(self, before: float) -> None:
        minid = str(int(before * 1000))
        await self.conn.call("audit", lambda r: r.xtrim(self.key, minid=minid, approximate=True))


class AuditTrail:
    """Builds the entries; the gates register what is in force (the
    blocklist version, each origin's robots.txt, the signing keyid)."""

    def __init__(self, store: AuditStore, retention: float) -> None:
        self.store = store
        self.retention = retention
        self.blocklist: Callable[[], dict[str, Any] | None] = lambda: None
        self.robots: Callable[[str], str | None] = lambda url: None
        #: the interval pacing kept before a request went out, and what set it
        #: (floor, Crawl-delay, load, distress, Retry-After, backoff)
        self.interval: Callable[[Request], tuple[float, str]] | None = None
        #: the purposes the bot declares (WALSH_PURPOSES), set by the PREF gate
        self.purposes: tuple[str, ...] | None = None
        self.keyid: str | None = None
        #: each request sent -> its entry id (a retry or a hop is a new
        #: request object, so an id is never carried over)
        self._sent: weakref.WeakKeyDictionary[Request, str] = weakref.WeakKeyDictionary()

    @classmethod
    def for_crawler(cls, crawler: Crawler, *, prune: bool = True) -> AuditTrail:
        """The crawler's trail; *prune*: drop entries past the retention
        (a crawl does; the commands that read the log do not)."""
        return per_crawler(crawler, AuditTrail, lambda: cls._open(crawler, prune))

    @classmethod
    def _open(cls, crawler: Crawler, prune: bool) -> AuditTrail:
        settings = crawler.settings
        retention = settings.getfloat("WALSH_AUDIT_RETENTION", defaults.WALSH_AUDIT_RETENTION)
        if not retention > 0:
            raise WalshConfigurationError(
                f"WALSH_AUDIT_RETENTION={settings.get('WALSH_AUDIT_RETENTION')!r}: the "
                "audit log is the evidence a site owner is shown, and this would delete "
                "it. Give how long to keep entries, in seconds "
                f"(default {defaults.WALSH_AUDIT_RETENTION}, 90 days)."
            )
        store: AuditStore
        if redis_url(crawler):
            # redis is the optional [redis] extra: imported only when in use
            from scrapy_walsh_research.state.redis.connection import RedisConnection

            store = RedisAudit(RedisConnection.for_crawler(crawler), retention)
        else:
            store = SQLiteAudit(state_dir(crawler) / "audit.sqlite3")
            crawler.signals.connect(
                lambda: store.close(), signal=signals.engine_stopped, weak=False
            )
            # past the retention: dropped as the crawl opens (Redis trims
            # the stream on every append)
            if prune:
                store.db.execute("DELETE FROM audit WHERE t < ?", (time.time() - retention,))
        return cls(store, retention)

    def _base(self, event: str, url: str) -> dict[str, Any]:
        now = time.time()
        host = url_host(url) if is_http_url(url) else ""
        return {
            "t": now,
            "ts": utc_iso(now, "milliseconds"),
            "event": event,
            "url": url,
            "host": host,
        }

    def sent(self, request: Request, kind: str) -> Awaitable[None] | None:
        """The entry for *request*, about to go onto its connection."""
        audit_id = uuid.uuid4().hex[:16]
        self._sent[request] = audit_id
        entry = self._base("request", request.url)
        agent = request.headers.get("User-Agent")
        interval, set_by = (
            self.interval(request) if self.interval and entry["host"] else (None, None)
        )
        entry.update(
            id=audit_id,
            kind=kind,
            method=request.method,
            user_agent=agent.decode("latin-1") if agent is not None else None,
            blocklist=self.blocklist(),
            robots_sha256=self.robots(request.url),
            interval=round(interval, 6) if interval is not None else None,
            interval_set_by=set_by,
            keyid=self.keyid,
        )
        return self.store.append(entry)

    async def answered(
        self,
        request: Request,
        status: int | None = None,
        error: str | None = None,
        hold: float | None = None,
        hold_by: str | None = None,
    ) -> None:
        """The answer to a request sent; *hold* is the R5 hold it started
        (*hold_by*: Retry-After, or the planned backoff): the host is not
        contacted again before ``hold_until`` (wall time)."""
        audit_id = self._sent.pop(request, None)
        if audit_id is None:
            return  # never sent: its gate's decision is the record's entry
        entry = self._base("response", request.url)
        entry.update(id=audit_id, status=status, error=error)
        if hold:
            entry.update(hold=hold, hold_until=entry["t"] + hold, hold_by=hold_by or "backoff")
        done = self.store.append(entry)
        if done is not None:
            await done

    async def decision(self, record: dict[str, Any]) -> None:
        entry = self._base("decision", str(record.get("url") or ""))
        entry.update(
            {k: record.get(k) for k in ("line", "outcome", "rule", "reason", "status")},
            # the usage preferences that applied to the URL (PREF), as stated,
            # and the purposes they were weighed against
            preferences=record.get("preferences"),
            purposes=list(self.purposes) if self.purposes is not None else None,
            blocklist=self.blocklist(),
        )
        done = self.store.append(entry)
        if done is not None:
            await done

    async def wait(self, url: str, *, state: str, **fields: Any) -> None:
        """A policy document at *url* that a transient failure left unknown:
        its host's targets wait for its next try (*state* ``waiting``), went
        on once it was read (``known``), or got their records at the bound
        (``gave_up``)."""
        entry = self._base("wait", url)
        entry.update(fields, state=state)
        done = self.store.append(entry)
        if done is not None:
            await done

    async def sitemap(self, url: str, *, state: str, **fields: Any) -> None:
        """What the bot made of a host's sitemap (the sitemaps gate): *url* is
        the target that checked it or the sitemap itself; *state* is
        ``trusted`` (the probe answered 304 or the same validators),
        ``contradicted`` (it answered with new validators), ``stale`` (every
        claim of change answered 304) or ``ignored`` (not fetched or not read
        whole)."""
        entry = self._base("sitemap", url)
        entry.update(fields, state=state)
        done = self.store.append(entry)
        if done is not None:
            await done

    async def purged(self, host: str, cause: str, counts: dict[str, int]) -> None:
        now = time.time()
        entry = {"t": now, "ts": utc_iso(now, "milliseconds"), "event": "purge", "url": "",
                 "host": host, "reason": cause, "deleted": counts}  # fmt: skip
        done = self.store.append(entry)
        if done is not None:
            await done
