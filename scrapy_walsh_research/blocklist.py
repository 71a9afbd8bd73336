"""R3: the operator blocklist, consulted before anything else.

The list is fetched from ``WALSH_BLOCKLIST_URL``, validated against the
published schema with formats checked, and adopted only when valid. Any
failure keeps the last adopted list, also across restarts (it is persisted
in the state store): an outage must never un-block an opt-out.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import isodate
from jsonschema import exceptions as jsonschema_exceptions
from jsonschema.validators import validator_for
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred

from scrapy_walsh_research import identity
from scrapy_walsh_research.errors import WalshConfigurationError, deny
from scrapy_walsh_research.internal import BLOCKLIST, SCHEMA, internal_fetch, internal_purpose
from scrapy_walsh_research.pacing import Pacer
from scrapy_walsh_research.preflight import check_configuration
from scrapy_walsh_research.schemas import bundled_schema
from scrapy_walsh_research.state import state_for
from scrapy_walsh_research.urls import host_variants, is_ip, normalize_host, url_host

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from typing_extensions import Self

logger = logging.getLogger(__name__)

STATE_NAMESPACE = "blocklist"
STATE_KEY = "adopted"
DEFAULT_REFRESH = 6 * 3600.0
#: Formats the published schema uses; without a checker for each, "validate
#: with formats checked" would silently pass anything.
REQUIRED_FORMATS = frozenset({"date-time", "date", "email", "uri"})


def _entry_host(raw: str) -> str:
    text = raw.strip()
    if "://" in text:
        try:
            text = urlsplit(text).netloc
        except ValueError:  # bad brackets: read the authority loosely
            text = text.partition("://")[2]
    text = text.split("/", 1)[0]
    text = text.rsplit("@", 1)[-1]
    return text.lstrip("*").lstrip(".")


def normalize_entry(raw: str) -> str:
    """Read a blocklist ``domain`` leniently: a URL, ``*.`` prefix or port
    still names a host. An opt-out is never dropped for its spelling."""
    return normalize_host(_entry_host(raw))


def entry_hosts(raw: str) -> set[str]:
    """Every normalised host an entry names: usually one, several for a name
    IDNA 2003 and UTS #46 encode differently (see :func:`host_variants`)."""
    return host_variants(_entry_host(raw))


class DomainSet:
    """Apex-and-subdomain matcher whose lookup cost is O(labels of the host).

    ``xblocked.test`` is not under ``blocked.test``: matching walks whole
    labels, never a string suffix.
    """

    def __init__(self, entries: dict[str, dict[str, Any]] | None = None) -> None:
        self._entries: dict[str, dict[str, Any]] = dict(entries or {})

    @classmethod
    def from_entries(cls, entries: list[dict[str, Any]], source: str) -> DomainSet:
        out: dict[str, dict[str, Any]] = {}
        for entry in entries:
            domains = entry_hosts(str(entry.get("domain", "")))
            if not domains:
                logger.error(
                    "Blocklist entry with no usable domain ignored (%s): %r", source, entry
                )
                continue
            for domain in sorted(domains):
                out.setdefault(domain, {**entry, "source": source})
        return cls(out)

    def __len__(self) -> int:
        return len(self._entries)

    def union(self, other: DomainSet) -> DomainSet:
        return DomainSet({**other._entries, **self._entries})

    def match(self, host: str) -> tuple[str, dict[str, Any]] | None:
        host = normalize_host(host)
        if not host:
            return None
        if is_ip(host):
            entry = self._entries.get(host)
            return (host, entry) if entry else None
        labels = host.split(".")
        for i in range(len(labels)):
            candidate = ".".join(labels[i:])
            entry = self._entries.get(candidate)
            if entry is not None:
                return candidate, entry
        return None


class BlocklistError(Exception):
    """Why a fetched document was not adopted."""


@dataclass
class Adopted:
    url: str
    document: dict[str, Any]
    fetched_at: float

    @property
    def refresh_seconds(self) -> float:
        try:
            seconds = isodate.parse_duration(self.document.get("refresh", "")).total_seconds()
        except (isodate.ISO8601Error, ValueError, TypeError, AttributeError):
            return DEFAULT_REFRESH
        return seconds if seconds > 0 else DEFAULT_REFRESH


class BlocklistMiddleware:
    """Downloader middleware: deny every request to a blocked host (R3).

    It must sit before the robots.txt gate so that a blocked host receives no
    request at all, not even for ``/robots.txt``; the start-up check enforces
    that order.
    """

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.stats = crawler.stats
        self.url: str = settings.get("WALSH_BLOCKLIST_URL") or identity.BLOCKLIST_URL
        self.schema_url: str = (
            settings.get("WALSH_BLOCKLIST_SCHEMA_URL") or identity.BLOCKLIST_SCHEMA_URL
        )
        self.retry_delay = settings.getfloat("WALSH_BLOCKLIST_RETRY_DELAY", 300.0)
        allow_http = settings.getbool("WALSH_BLOCKLIST_ALLOW_HTTP")
        for name, value in (
            ("WALSH_BLOCKLIST_URL", self.url),
            ("WALSH_BLOCKLIST_SCHEMA_URL", self.schema_url),
        ):
            scheme = urlsplit(value).scheme.lower()
            if scheme != "https" and not (allow_http and scheme == "http"):
                raise WalshConfigurationError(
                    f"{name}={value!r} is not an https URL. The blocklist must come over "
                    "https; set WALSH_BLOCKLIST_ALLOW_HTTP=True only for a local sandbox."
                )
        self.extra = DomainSet.from_entries(
            [
                {"domain": d, "reason": "WALSH_BLOCKLIST_EXTRA"}
                for d in settings.getlist("WALSH_BLOCKLIST_EXTRA")
            ],
            source="WALSH_BLOCKLIST_EXTRA",
        )
        self._validator_cls, self._schema = self._load_validator(bundled_schema())
        self._schema_from = "bundled"
        self._schema_fetched = False
        self.adopted: Adopted | None = None
        self.domains = self.extra
        self._next_check = 0.0
        self._pending: Deferred[None] | None = None
        self.store = state_for(crawler)
        self._restored = False
        Pacer.for_crawler(crawler).add_denial_check(
            lambda r: (
                internal_purpose(r) not in (BLOCKLIST, SCHEMA)
                and self.domains.match(url_host(r.url)) is not None
            )
        )

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        check_configuration(crawler)
        return cls(crawler)

    # -- the gate -----------------------------------------------------------

    async def process_request(self, request: Request) -> None:
        if internal_purpose(request) in (BLOCKLIST, SCHEMA):
            return
        await self.ensure_fresh()
        host = url_host(request.url)
        hit = self.domains.match(host)
        if hit is None:
            return
        domain, entry = hit
        reason = (
            f"host {host} is blocked by operator blocklist entry {domain!r}"
            f" (added {entry.get('added', '?')}, reason: {entry.get('reason') or 'none given'},"
            f" source: {entry.get('source')})"
        )
        deny(self.crawler, logger, request, "R3", reason)

    # -- refresh ------------------------------------------------------------

    async def ensure_fresh(self) -> None:
        if self._restored and time.time() < self._next_check:
            return
        if self._pending is None:
            self._pending = Deferred()
            try:
                if not self._restored:
                    # Every run starts from the list adopted before (by an
                    # earlier run or another worker); it is fetched again
                    # once its refresh duration has passed (spec: cache it
                    # for the contract's refresh duration).
                    await self._restore()
                    self._restored = True
                if time.time() >= self._next_check:
                    await self._refresh_once()
            finally:
                pending, self._pending = self._pending, None
                pending.callback(None)
        else:
            await maybe_deferred_to_future(self._pending)

    async def _refresh_once(self) -> None:
        """With shared state, one worker fetches the list while the others wait
        for it and adopt what it stored: N workers starting together send one
        request to the operator's host, not N."""
        single_flight = getattr(self.store, "single_flight", None)
        if single_flight is None:
            await self.refresh()
            return
        before = self.adopted.fetched_at if self.adopted else None
        release = await single_flight("blocklist", ttl=60.0)
        if release is not None:
            try:
                await self.refresh()
            finally:
                await release()
            return
        saved = await self.store.get(STATE_NAMESPACE, STATE_KEY)
        if saved and saved.get("url") == self.url and saved["fetched_at"] != before:
            await self._adopt(
                Adopted(saved["url"], saved["document"], float(saved["fetched_at"])),
                persist=False,
            )
            self.stats.inc_value("walsh/blocklist/adopted_from_worker")
            return
        await self.refresh()  # the other worker failed: try ourselves

    async def refresh(self) -> None:
        """Fetch, validate and adopt; on any failure keep what we have."""
        self.stats.inc_value("walsh/blocklist/fetch")
        try:
            await self._ensure_schema()
            response = await internal_fetch(self.crawler, self.url, BLOCKLIST)
            if not 200 <= response.status < 300:
                raise BlocklistError(f"HTTP {response.status}")
            try:
                document = json.loads(response.body)
            except ValueError as exc:
                raise BlocklistError(f"not JSON ({exc})") from None
            self._validate(document)
        except Exception as exc:
            self._failed(exc)
            return
        await self._adopt(Adopted(self.url, document, time.time()), persist=True)
        self.stats.inc_value("walsh/blocklist/adopted")
        logger.info(
            "Blocklist adopted from %(url)s: %(n)d entries (schema: %(schema)s)",
            {"url": self.url, "n": len(self.domains), "schema": self._schema_from},
        )

    def _failed(self, exc: Exception) -> None:
        self.stats.inc_value("walsh/blocklist/fetch_failed")
        self._next_check = time.time() + self.retry_delay
        if isinstance(exc, BlocklistError) and str(exc).startswith("schema-invalid"):
            self.stats.inc_value("walsh/blocklist/rejected")
        if self.adopted is not None:
            logger.warning(
                "Blocklist refresh from %(url)s failed (%(exc)s); retaining the last adopted "
                "list (%(n)d entries, fetched %(age).0f s ago from %(src)s). "
                "Next try in %(d).0f s.",
                {
                    "url": self.url,
                    "exc": exc,
                    "n": len(self.domains),
                    "age": time.time() - self.adopted.fetched_at,
                    "src": self.adopted.url,
                    "d": self.retry_delay,
                },
            )
        else:
            logger.error(
                "Blocklist fetch from %(url)s failed (%(exc)s) and no list was ever adopted: "
                "crawling with only WALSH_BLOCKLIST_EXTRA (%(n)d entries), as spec §5.2 says "
                "for a first-ever failure. Next try in %(d).0f s.",
                {"url": self.url, "exc": exc, "n": len(self.extra), "d": self.retry_delay},
            )

    async def _adopt(self, adopted: Adopted, *, persist: bool) -> None:
        self.adopted = adopted
        self.domains = DomainSet.from_entries(
            list(adopted.document.get("blocked", [])), source=adopted.url
        ).union(self.extra)
        self.stats.set_value("walsh/blocklist/entries", len(self.domains))
        if persist:
            await self.store.put(
                STATE_NAMESPACE,
                STATE_KEY,
                {
                    "url": adopted.url,
                    "document": adopted.document,
                    "fetched_at": adopted.fetched_at,
                },
            )
        due = adopted.fetched_at + adopted.refresh_seconds
        # A list persisted from another URL is kept but re-fetched at once.
        self._next_check = due if adopted.url == self.url else 0.0

    async def _restore(self) -> None:
        """The list adopted by an earlier run (or another process), before any request."""
        saved = await self.store.get(STATE_NAMESPACE, STATE_KEY)
        if not saved:
            return
        await self._adopt(
            Adopted(saved["url"], saved["document"], float(saved["fetched_at"])), persist=False
        )
        logger.info(
            "Blocklist restored from state: %(n)d entries fetched from %(url)s at %(t)s",
            {"n": len(self.domains), "url": saved["url"], "t": time.ctime(saved["fetched_at"])},
        )

    # -- schema -------------------------------------------------------------

    @staticmethod
    def _load_validator(schema: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        cls = validator_for(schema)
        cls.check_schema(schema)
        missing = REQUIRED_FORMATS - set(cls.FORMAT_CHECKER.checkers)
        if missing:
            raise WalshConfigurationError(
                f"jsonschema cannot check the formats {sorted(missing)}: install "
                "'jsonschema[format-nongpl]' so blocklist documents are validated in full."
            )
        return cls, schema

    async def _ensure_schema(self) -> None:
        if self._schema_fetched:
            return
        try:
            response = await internal_fetch(self.crawler, self.schema_url, SCHEMA)
            if not 200 <= response.status < 300:
                raise BlocklistError(f"HTTP {response.status}")
            self._validator_cls, self._schema = self._load_validator(json.loads(response.body))
            self._schema_from = self.schema_url
        except Exception as exc:
            logger.warning(
                "Blocklist schema from %(url)s unusable (%(exc)s); validating with the bundled "
                "copy of the published schema.",
                {"url": self.schema_url, "exc": exc},
            )
            self.stats.inc_value("walsh/blocklist/schema_fallback")
        self._schema_fetched = True

    def _validate(self, document: Any) -> None:
        validator = self._validator_cls(
            self._schema, format_checker=self._validator_cls.FORMAT_CHECKER
        )
        error = jsonschema_exceptions.best_match(validator.iter_errors(document))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(document)"
            raise BlocklistError(f"schema-invalid at {where}: {error.message}")
