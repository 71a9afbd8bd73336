"""The audit log: what the bot sent to a host, and what it decided, and why.

When a site owner writes "your bot hammered us", the operator answers with
evidence: every request that reached the network (targets, robots.txt, the
blocklist and its schema, llms.txt, redirect hops, retries) is appended
*before* it is sent, with the blocklist version and the robots.txt in force
and the signature keyid; its answer (status or error) follows; and every
decision about a target (its record's outcome, rule and reason) is appended
when the record is committed.

Storage has one owner per crawler (the crawler's context's ``audit``) behind a
small interface (:class:`AuditStore`) with three backends, each indexed by
host and time so one host's report reads that host's entries only:

* a SQLite file in ``WALSH_STATE_DIR`` (``audit.sqlite3``; WAL, so an entry
  written survives SIGKILL), for one process or the workers of one machine;
* with ``WALSH_AUDIT_URL``, a PostgreSQL table partitioned by day: a fleet's
  evidence, from every machine, for months (:mod:`.audit_postgres`);
* with ``WALSH_REDIS_URL`` and no ``WALSH_AUDIT_URL``, one Redis stream per
  host kept ``WALSH_AUDIT_REDIS_WINDOW`` (7 days): Redis is memory, and a
  busy fleet's 90 days of evidence outgrow it (:mod:`.audit_redis`).

Entries older than ``WALSH_AUDIT_RETENTION`` (90 days) are dropped when a
crawl opens (PostgreSQL drops whole days).
"""

from __future__ import annotations

import logging
import secrets
import time
import weakref
from typing import TYPE_CHECKING, Any, Protocol

from scrapy import signals

from scrapy_walsh_research.core.timestamps import utc_iso
from scrapy_walsh_research.core.urls import is_http_url, url_host
from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.evidence.audit_sqlite import SQLiteAudit
from scrapy_walsh_research.state.directory import state_dir

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from scrapy import Request
    from scrapy.crawler import Crawler

    from scrapy_walsh_research.settings.walsh import WalshSettings
    from scrapy_walsh_research.state.redis.connection import RedisConnection

logger = logging.getLogger(__name__)

#: how long a command (a report, a purge) waits for an unreachable audit
#: store before it says so and stops
COMMAND_PATIENCE_S = 30.0


def _entry_id() -> str:
    """16 random hex digits: an entry's ``eid``, a request's ``id`` (64
    random bits; ``uuid4().hex[:16]`` cost four times as much, 1.7 µs, for
    60 of them, four times a request)."""
    return secrets.token_hex(8)


def _days(seconds: float) -> str:
    return f"{seconds / 86400:g} days" if seconds >= 86400 else f"{seconds:g} s"


class AuditStore(Protocol):
    """Where entries go. ``append`` returns None when the entry is already
    durable, or an awaitable that completes when it is. Reads stream, in
    time order, only what they ask for: a host (and its subdomains) through
    an index by host and time, never the whole log; a read that cannot
    finish raises :class:`~scrapy_walsh_research.errors.WalshAuditUnavailable`."""

    def append(self, entry: dict[str, Any]) -> Awaitable[None] | None: ...

    def entries(
        self, host: str | None = None, since: float | None = None, *, subdomains: bool = True
    ) -> AsyncIterator[dict[str, Any]]: ...

    async def hosts(self, since: float | None = None) -> list[str]:
        """Every exact host with an entry (from *since* on, where the store
        can tell)."""
        ...

    async def prune(self, before: float) -> None: ...

    async def close(self) -> None: ...


async def read_all(
    store: AuditStore, host: str | None = None, since: float | None = None
) -> list[dict[str, Any]]:
    """Every entry of *host* (and its subdomains) from *since* on, as a list:
    for a small read (a purge's exported records, a test), not a report."""
    return [entry async for entry in store.entries(host, since)]


def fleet_clock(redis: RedisConnection | None) -> Callable[[], float]:
    """The clock an entry is stamped with: Redis's, as the worker last
    measured it, in a fleet (pacing's clock); else this machine's."""
    return redis.time if redis is not None else time.time


def open_store(
    crawler: Crawler,
    settings: WalshSettings,
    retention: float,
    patience: float | None = None,
    redis: RedisConnection | None = None,
) -> AuditStore:
    """The crawler's audit store: PostgreSQL when ``WALSH_AUDIT_URL`` is set;
    else, with ``WALSH_REDIS_URL`` (the crawler's connection: *redis*),
    per-host Redis streams kept ``WALSH_AUDIT_REDIS_WINDOW``; else
    ``audit.sqlite3`` in the state dir (*settings*: the crawler's)."""
    url = settings.audit_url
    if url:  # a postgresql:// URL: checked as the typed settings were read
        try:
            # psycopg is the optional [postgres] extra: imported only when in use
            from scrapy_walsh_research.evidence.audit_postgres import PostgresAudit, table_name
        except ImportError as exc:
            raise WalshConfigurationError(
                f"WALSH_AUDIT_URL is set but psycopg cannot be imported ({exc}): "
                "pip install 'scrapy-walsh-research[postgres]'."
            ) from None
        return PostgresAudit(
            url,
            table_name(settings.redis_prefix),
            crawler=crawler,
            patience=patience,
            max_backoff=settings.redis_max_backoff,
        )
    if redis is not None:
        # redis is the optional [redis] extra: imported only when in use
        from scrapy_walsh_research.evidence.audit_redis import RedisAudit

        # WALSH_AUDIT_REDIS_WINDOW: above 0, as its reader (settings.walsh) checks
        window = min(retention, settings.audit_redis_window)
        return RedisAudit(redis, window)
    return SQLiteAudit(state_dir(settings) / "audit.sqlite3")


class AuditFacts(Protocol):
    """What the components tell the audit trail, each declared once as the
    crawl is built, for every entry to carry: what is in force, asked of its
    owner when an entry is written."""

    def blocklist_in_force(self, version: Callable[[], dict[str, Any] | None]) -> None:
        """The R3 gate's list in force (its version), asked per entry."""

    def robots_in_force(self, sha256_for: Callable[[str], str | None]) -> None:
        """The R2 gate's robots.txt per URL (its sha256), asked per request."""

    def pacing_intervals(self, interval_for: Callable[[Request], tuple[float, str]]) -> None:
        """The interval pacing kept before a request went out, and what set it."""

    def purposes_declared(self, purposes: tuple[str, ...]) -> None:
        """The purposes the bot declares (``WALSH_PURPOSES``: the PREF gate)."""

    def signing_keyid(self, keyid: str | None) -> None:
        """The key requests are signed with (the download handler)."""


class AuditTrail(AuditFacts):
    """Builds the entries; the components declare what is in force (the
    blocklist version, each origin's robots.txt, the interval kept, the
    purposes, the signing keyid) through :class:`AuditFacts`."""

    def __init__(
        self, store: AuditStore, retention: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.retention = retention
        #: the time an entry is stamped with: in a fleet, the clock every
        #: worker paces by (Redis's), so gaps between two workers' requests
        #: are measured as pacing kept them, whatever their machines' clocks
        self.clock = clock
        self._blocklist: Callable[[], dict[str, Any] | None] = lambda: None
        self._robots: Callable[[str], str | None] = lambda url: None
        #: the interval pacing kept before a request went out, and what set it
        #: (floor, Crawl-delay, load, distress, Retry-After, backoff)
        self._interval: Callable[[Request], tuple[float, str]] | None = None
        #: the purposes the bot declares (WALSH_PURPOSES), from the PREF gate
        self._purposes: tuple[str, ...] | None = None
        self._keyid: str | None = None
        #: each request sent -> its entry id (a retry or a hop is a new
        #: request object, so an id is never carried over)
        self._sent: weakref.WeakKeyDictionary[Request, str] = weakref.WeakKeyDictionary()

    # -- the facts, as declared (AuditFacts) -------------------------------------

    def blocklist_in_force(self, version: Callable[[], dict[str, Any] | None]) -> None:
        self._blocklist = version

    def robots_in_force(self, sha256_for: Callable[[str], str | None]) -> None:
        self._robots = sha256_for

    def pacing_intervals(self, interval_for: Callable[[Request], tuple[float, str]]) -> None:
        self._interval = interval_for

    def purposes_declared(self, purposes: tuple[str, ...]) -> None:
        self._purposes = purposes

    def signing_keyid(self, keyid: str | None) -> None:
        self._keyid = keyid

    @classmethod
    def open(
        cls,
        crawler: Crawler,
        settings: WalshSettings,
        redis: RedisConnection | None,
        *,
        prune: bool = True,
    ) -> AuditTrail:
        """The crawler's trail (its context builds it once: ``context.audit``),
        over *redis* in a fleet; *prune*: drop entries past the retention (a
        crawl does; the commands that read the log do not)."""
        # WALSH_AUDIT_RETENTION: above 0, as its reader (settings.walsh) checks
        retention = settings.audit_retention
        # a command waits a bounded time for its store; a crawl, as long as
        # it takes (nothing is sent meanwhile)
        patience = None if prune else COMMAND_PATIENCE_S
        store = open_store(crawler, settings, retention, patience, redis)
        crawler.signals.connect(store.close, signal=signals.engine_stopped, weak=False)
        trail = cls(store, retention, fleet_clock(redis))
        if prune:
            # a crawl opens the store once its engine runs (a server that
            # refuses it stops the crawl, exit code 1, before anything is
            # sent: no request leaves before its entry is stored) and drops
            # what is past the retention; the commands that only read do neither
            crawler.signals.connect(trail.opened, signal=signals.engine_started, weak=False)
        return trail

    async def opened(self) -> None:
        """As the crawl's engine starts: the store is ready, and holds nothing
        past the retention."""
        opener = getattr(self.store, "open", None)
        if opener is not None:
            try:
                await opener()
            except WalshConfigurationError:
                return  # the store has said why, and stopped the crawl (exit 1)
        await self.store.prune(time.time() - self.retention)
        window = getattr(self.store, "window", None)
        if window is not None and window < self.retention:
            logger.warning(
                "The fleet's audit log is kept in Redis for %(w)s (WALSH_AUDIT_REDIS_WINDOW), "
                "not the %(r)s of WALSH_AUDIT_RETENTION: Redis is memory, and a busy fleet's "
                "evidence (about 490 B an entry, 3 to 4 entries a target) outgrows it. To keep "
                "%(r)s of evidence, set WALSH_AUDIT_URL=postgresql://user:password@host/db "
                "(pip install 'scrapy-walsh-research[postgres]').",
                {"w": _days(window), "r": _days(self.retention)},
            )

    def _base(self, event: str, url: str) -> dict[str, Any]:
        host = url_host(url) if is_http_url(url) else ""
        return self._stamped({"event": event, "url": url, "host": host})

    def _stamped(self, entry: dict[str, Any]) -> dict[str, Any]:
        """*entry* with its time and its own id (``eid``: a write retried
        after its acknowledgement was lost stores it twice; the report
        counts it once); in a fleet, also the machine's own time."""
        now = self.clock()
        local = time.time()
        stamped = {"t": now, "ts": utc_iso(now, "milliseconds"), "eid": _entry_id()}
        if abs(now - local) >= 0.001:
            stamped["t_local"] = local
        return {**stamped, **entry}

    def sent(self, request: Request, kind: str) -> Awaitable[None] | None:
        """The entry for *request*, about to go onto its connection."""
        audit_id = _entry_id()
        self._sent[request] = audit_id
        entry = self._base("request", request.url)
        agent = request.headers.get("User-Agent")
        interval, set_by = (
            self._interval(request) if self._interval and entry["host"] else (None, None)
        )
        entry.update(
            id=audit_id,
            kind=kind,
            method=request.method,
            user_agent=agent.decode("latin-1") if agent is not None else None,
            blocklist=self._blocklist(),
            robots_sha256=self._robots(request.url),
            interval=round(interval, 6) if interval is not None else None,
            interval_set_by=set_by,
            keyid=self._keyid,
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
            purposes=list(self._purposes) if self._purposes is not None else None,
            blocklist=self._blocklist(),
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

    async def robots_said(self, url: str, **fields: Any) -> None:
        """What the robots.txt at *url* says to the robot's operator: its
        selected group's ``Comment`` lines and ``Visit-time`` windows (UTC),
        and the Visit-time values it could not read."""
        entry = self._base("robots_said", url)
        entry.update(fields)
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
        entry = self._stamped(
            {"event": "purge", "url": "", "host": host, "reason": cause, "deleted": counts}
        )
        done = self.store.append(entry)
        if done is not None:
            await done
