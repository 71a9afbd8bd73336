"""R3: the operator blocklist, consulted before anything else.

The list is fetched from ``WALSH_BLOCKLIST_URL`` over https (every redirect
hop too, and no hop into a blocked host), validated against the published
schema with formats checked (the bundled copy is the contract; a fetched
schema can only add constraints), and adopted only when the whole document
is good, ``refresh`` included (clamped to a logged range). Any failure keeps
the last adopted list, also across restarts (it is persisted in the state
store and validated again when restored): an outage must never un-block an
opt-out.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import io
import json
import logging
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import isodate
from jsonschema import exceptions as jsonschema_exceptions
from jsonschema.validators import validator_for
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThread

from scrapy_walsh_research.core import contract as identity
from scrapy_walsh_research.core.urls import host_variants, is_ip, normalize_host, url_host
from scrapy_walsh_research.errors import WalshConfigurationError, deny
from scrapy_walsh_research.internal import BLOCKLIST, SCHEMA, HostBusy, Marks, internal_fetch
from scrapy_walsh_research.options import list_setting
from scrapy_walsh_research.pacing import Pacer
from scrapy_walsh_research.preflight import check_configuration
from scrapy_walsh_research.schemas import bundled_schema
from scrapy_walsh_research.state import FlightBusy, local_state_for, state_for

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from typing_extensions import Self

    from scrapy_walsh_research.state import StateStore

logger = logging.getLogger(__name__)

STATE_NAMESPACE = "blocklist"
#: the list (and local entries) whose opted-out hosts were last purged
PURGED_KEY = "purged_for"
PURGED_EXTRA_KEY = "purged_extra_for"
STATE_KEY = "adopted"
#: kept once a list was adopted: from then on "no list" means lost, not new
EVER_KEY = "adopted_before"
#: the outcome of the last refresh, so workers waiting on another's fetch
#: share its failure (and its next try) instead of fetching in turn
ATTEMPT_KEY = "attempt"
#: the contract's example value, for a document without ``refresh``
DEFAULT_REFRESH = 6 * 3600.0
#: ``refresh`` is clamped to [MIN, MAX]: below a minute every request would
#: refetch; above a day an opt-out could wait too long to be honoured.
DEFAULT_MIN_REFRESH = 60.0
DEFAULT_MAX_REFRESH = 86400.0
#: refuse a blocklist response larger than this (WALSH_BLOCKLIST_MAX_BYTES)
DEFAULT_MAX_BYTES = 128 * 1024 * 1024  # a 10^6-entry list is ~80 MB
#: a document up to this size is read inline; a larger one in a thread
INLINE_PARSE_BYTES = 256 * 1024
#: a list replaced that has more entries is freed in a thread
LARGE_LIST = 5_000
MAX_SCHEMA_BYTES = 1024 * 1024
#: how long a refresh of a list in force may wait for the operator host
SHORT_WAIT = 2.0
#: how long a target waits for another worker to publish again a list that
#: Redis lost, before it is denied: two heartbeats, within which every live
#: worker has seen the loss
RECOVERY_WAIT = 10.0
#: a stored fetch time this far ahead of our clock means a clock was wrong
CLOCK_TOLERANCE = 5.0
#: Formats the published schema uses; without a checker for each, "validate
#: with formats checked" would silently pass anything.
REQUIRED_FORMATS = frozenset({"date-time", "date", "email", "uri"})


_SEPARATORS = re.compile(r"[\s,;]+")
_QUOTES = "\"'`<>"


def _entry_host(raw: str) -> str:
    text = raw.strip().strip(_QUOTES)
    if text.startswith("//"):
        text = "http:" + text  # a scheme-relative URL
    if "://" in text:
        try:
            text = urlsplit(text).netloc
        except ValueError:  # bad brackets: read the authority loosely
            text = text.partition("://")[2]
    text = re.split(r"[/?#]", text, maxsplit=1)[0]
    text = text.rsplit("@", 1)[-1]
    return text.lstrip("*").lstrip(".")


def _entry_parts(raw: str) -> list[str]:
    """The host names in one ``domain`` value: usually one; an operator who
    wrote several (``"a.test, b.test"``) meant each of them."""
    return [p for p in (_entry_host(x) for x in _SEPARATORS.split(raw.strip())) if p]


def normalize_entry(raw: str) -> str:
    """Read a blocklist ``domain`` leniently: a URL, ``*.`` prefix, port,
    quotes, a query or several names still name hosts. An opt-out is never
    dropped for its spelling."""
    parts = _entry_parts(raw)
    return normalize_host(parts[0]) if parts else ""


#: a lower-case LDH host name whose last label is not all digits (never an
#: IP address spelling)
PLAIN_HOST = re.compile(
    r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?"
)


def entry_hosts(raw: str) -> set[str]:
    """Every normalised host an entry names: one per name written, several
    for a name IDNA 2003 and UTS #46 encode differently (see
    :func:`host_variants`)."""
    out: set[str] = set()
    for part in _entry_parts(raw):
        out |= host_variants(part)
    return out


#: what the bundled schema asks of each ``blocked`` entry; checked by
#: tests/test_r3_large_blocklist.py, so that a change to the contract's
#: schema makes :func:`_one_entry_per_shape` be looked at again
ENTRY_SCHEMA_FIELDS = {"type", "required", "properties"}


#: a normalised host name: LDH labels (``_`` too, as names in the wild have it)
_HOST_NAME = re.compile(r"(?:[a-z0-9_](?:[a-z0-9_-]{0,62})\.)*[a-z0-9_](?:[a-z0-9_-]{0,62})")


def _names_host(host: str) -> bool:
    """Whether a normalised entry host could be a host the crawl contacts."""
    return is_ip(host) or _HOST_NAME.fullmatch(host) is not None


def _one_entry_per_shape(document: Any) -> Any | None:
    """*document* with one ``blocked`` entry for each shape, or None when it
    has too few entries to be worth it.

    The bundled schema constrains an entry only by its type, which keys it
    has, the type of each, and the format of ``added``: two entries with the
    same keys, value types and ``added`` value pass or fail it alike. So
    jsonschema checks one entry per shape (a 10^6-entry list has a few
    hundred) instead of every one (~26 us each: 26 s per list). Only for the
    bundled schema; a published schema that differs checks every entry."""
    blocked = document.get("blocked") if isinstance(document, dict) else None
    if not isinstance(blocked, list) or len(blocked) < 1000:
        return None
    seen: dict[Any, Any] = {}
    for entry in blocked:
        if isinstance(entry, dict):
            shape: Any = tuple(
                sorted(
                    (k, type(v), v if k == "added" and isinstance(v, str) else None)
                    for k, v in entry.items()
                )
            )
        else:
            shape = (type(entry), entry if isinstance(entry, (str, int, float, bool)) else None)
        if shape not in seen:
            seen[shape] = entry
    return {**document, "blocked": list(seen.values())}


def _not_json(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number out of range: {text[:40]}")
    return value


def strict_json(data: bytes) -> Any:
    """*data* as RFC 8259 JSON with ``json.loads``, read as ijson reads it
    (:func:`load_json`), so one document gets one verdict whichever path
    reads it: NaN, Infinity and numbers out of range are refused, a leading
    UTF-8 byte order mark is ignored (RFC 8259 §8.1 allows it; an operator's
    list saved with one is still adopted)."""
    try:
        return json.loads(
            data.removeprefix(UTF8_BOM), parse_constant=_not_json, parse_float=_finite
        )
    except (ValueError, RecursionError) as exc:
        raise BlocklistError(f"not JSON ({str(exc)[:200]})") from None


UTF8_BOM = b"\xef\xbb\xbf"


def load_json(data: bytes) -> Any:
    """*data* as JSON. A large document is read with ijson through a Python
    reader: ``json.loads`` of a 10^6-entry list is one C call that holds the
    GIL for ~1.5 s (a reactor stall even from a thread); ijson returns to
    Python every 16 KiB, so the reactor thread keeps running."""
    if len(data) <= INLINE_PARSE_BYTES:
        return strict_json(data)
    import ijson

    data = data.removeprefix(UTF8_BOM)

    class Reader:
        def __init__(self) -> None:
            self.buffer = io.BytesIO(data)

        def read(self, n: int) -> bytes:
            return self.buffer.read(n)

    try:
        values = ijson.items(Reader(), "", use_float=True, buf_size=16384)
        document = next(values)
        for _ in values:  # a second value after the first: not one JSON document
            raise BlocklistError("not JSON (more than one value)")
    except (ijson.JSONError, StopIteration, ValueError, RecursionError) as exc:
        raise BlocklistError(f"not JSON ({str(exc).strip()[:200]})") from None
    return document


def _release(doomed: list[Adopted]) -> None:
    """Free a replaced list a little at a time (in a thread): freeing 10^6
    entries at once is one C call that holds the GIL for ~0.3 s. Only what
    belonged to that version alone is emptied (the caller checks the new
    version shares none of it); the local entries chained to it are not. A
    list read into an index file is let go here too: unmapping its file (and
    so deleting it) cost the reactor 0.1 s."""
    (old,) = doomed
    doomed.clear()
    blocked = old.document.get("blocked")
    while isinstance(blocked, list) and blocked:
        del blocked[-2000:]
    entries = old.domains._entries
    while isinstance(entries, dict) and entries:
        for _ in range(min(2000, len(entries))):
            entries.popitem()


def blob_name(sha256: str) -> str:
    """Where the state store keeps the document of the version *sha256*."""
    return f"blocklist-{sha256}.json"


class DomainSet:
    """Apex-and-subdomain matcher whose lookup cost is O(labels of the host).

    ``xblocked.test`` is not under ``blocked.test``: matching walks whole
    labels, never a string suffix.
    """

    def __init__(
        self, entries: dict[str, dict[str, Any]] | None = None, also: DomainSet | None = None
    ) -> None:
        self._entries: dict[str, dict[str, Any]] = dict(entries or {})
        #: a second set consulted after this one (the local entries beside a
        #: fetched list): chained, not merged, since copying a 10^6-entry
        #: dict is one C call that holds the GIL (a reactor stall)
        self._also = also

    @classmethod
    def from_index(cls, index: Mapping[str, dict[str, Any]]) -> DomainSet:
        """A set over *index* as it is (an :class:`IndexFile`), not copied."""
        out = cls()
        out._entries = index  # type: ignore[assignment]
        return out

    @classmethod
    def from_entries(cls, entries: list[dict[str, Any]], source: str) -> DomainSet:
        out: dict[str, dict[str, Any]] = {}
        for entry in entries:
            raw = str(entry.get("domain", ""))
            if PLAIN_HOST.fullmatch(raw) and "xn--" not in raw:
                # the usual entry: one lower-case LDH name, which every
                # reading below leaves as it is (tests/test_r3_large_blocklist
                # checks that); 10x faster on a 10^6-entry list
                out.setdefault(raw, {**entry, "source": source})
                continue
            domains = entry_hosts(raw)
            if domains and sorted(domains) != sorted(host_variants(raw.strip())):
                logger.warning(
                    "Blocklist entry %r read leniently (%s) as: %s",
                    raw, source, ", ".join(sorted(domains)),
                )  # fmt: skip
            if not domains:
                logger.error(
                    "Blocklist entry with no usable domain ignored (%s): %r", source, entry
                )
                continue
            for domain in sorted(domains):
                out.setdefault(domain, {**entry, "source": source})
        return cls(out)

    def __len__(self) -> int:
        return len(self._entries) + (len(self._also) if self._also is not None else 0)

    def union(self, other: DomainSet) -> DomainSet:
        """This set, then *other* where this one has no entry. A large set is
        shared, not copied (copying 10^6 entries holds the GIL ~0.1 s)."""
        if len(self._entries) <= len(other):
            return DomainSet({**other._entries, **self._entries})
        chained = DomainSet(also=other)
        chained._entries = self._entries
        return chained

    def _get(self, name: str) -> dict[str, Any] | None:
        entry = self._entries.get(name)
        if entry is None and self._also is not None:
            entry = self._also._get(name)
        return entry

    def match(self, host: str) -> tuple[str, dict[str, Any]] | None:
        host = normalize_host(host)
        if not host:
            return None
        if is_ip(host):
            entry = self._get(host)
            return (host, entry) if entry else None
        labels = host.split(".")
        for i in range(len(labels)):
            candidate = ".".join(labels[i:])
            entry = self._get(candidate)
            if entry is not None:
                return candidate, entry
        return None


class BlocklistError(Exception):
    """Why a fetched (or stored) document was not adopted."""


def refresh_seconds(value: Any, low: float, high: float) -> tuple[float, str | None]:
    """The contract's ``refresh`` (ISO 8601 duration) in seconds, clamped to
    [*low*, *high*]; returns (seconds, why it was clamped or None).

    Raises :class:`BlocklistError` when it is not a duration at all: the
    document is then rejected as a whole. Months and years (``P1M``) count as
    their mean length: isodate gives them no ``total_seconds`` of their own,
    and the clamp makes exactness moot.
    """
    if value is None:
        seconds = DEFAULT_REFRESH
    else:
        try:
            duration = isodate.parse_duration(str(value))
        except OverflowError:
            return high, f"refresh {value!r} is longer than any representable time"
        except (isodate.ISO8601Error, ValueError, TypeError) as exc:
            raise BlocklistError(f"refresh {value!r} is not an ISO 8601 duration ({exc})") from None
        if isinstance(duration, isodate.Duration):
            seconds = (
                float(duration.years) * 365.2425 * 86400
                + float(duration.months) * 30.436875 * 86400
                + duration.tdelta.total_seconds()
            )
        else:
            seconds = duration.total_seconds()
    if not seconds >= low:  # also NaN
        return low, f"refresh {value!r} is shorter than WALSH_BLOCKLIST_MIN_REFRESH ({low:g} s)"
    if seconds > high:
        return high, f"refresh {value!r} is longer than WALSH_BLOCKLIST_MAX_REFRESH ({high:g} s)"
    return seconds, None


@dataclass(frozen=True)
class Adopted:
    """One blocklist version, with everything derived from it computed up
    front: adopting it then changes state in one step that cannot fail."""

    url: str
    document: dict[str, Any]
    fetched_at: float
    refresh: float
    domains: DomainSet
    sha256: str
    #: the fetched entries plus WALSH_BLOCKLIST_EXTRA: what R3 checks
    in_force: DomainSet | None = None
    #: why ``refresh`` was clamped, if it was (logged on the reactor thread)
    clamped: str | None = None


class BlocklistMiddleware:
    """Downloader middleware: deny every request to a blocked host (R3).

    It must sit before the robots.txt gate so that a blocked host receives no
    request at all, not even for ``/robots.txt``; the start-up check enforces
    that order.
    """

    #: read a large list in a child process (False: in a thread, as before)
    child_build = True

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.stats = crawler.stats
        self.marks = Marks.for_crawler(crawler)
        self.url: str = settings.get("WALSH_BLOCKLIST_URL") or identity.BLOCKLIST_URL
        self.schema_url: str = (
            settings.get("WALSH_BLOCKLIST_SCHEMA_URL") or identity.BLOCKLIST_SCHEMA_URL
        )
        self.retry_delay = settings.getfloat("WALSH_BLOCKLIST_RETRY_DELAY", 300.0)
        self.min_refresh = settings.getfloat("WALSH_BLOCKLIST_MIN_REFRESH", DEFAULT_MIN_REFRESH)
        self.max_refresh = settings.getfloat("WALSH_BLOCKLIST_MAX_REFRESH", DEFAULT_MAX_REFRESH)
        if not 0 < self.min_refresh <= self.max_refresh:
            raise WalshConfigurationError(
                f"WALSH_BLOCKLIST_MIN_REFRESH={self.min_refresh:g} and "
                f"WALSH_BLOCKLIST_MAX_REFRESH={self.max_refresh:g}: the blocklist's refresh is "
                "clamped to this range, so it must be 0 < MIN <= MAX."
            )
        self.max_bytes = settings.getint("WALSH_BLOCKLIST_MAX_BYTES", DEFAULT_MAX_BYTES)
        self.allow_http = settings.getbool("WALSH_BLOCKLIST_ALLOW_HTTP")
        for name, value in (
            ("WALSH_BLOCKLIST_URL", self.url),
            ("WALSH_BLOCKLIST_SCHEMA_URL", self.schema_url),
        ):
            if not self._transport_ok(value):
                raise WalshConfigurationError(
                    f"{name}={value!r} is not an https URL. The blocklist must come over "
                    "https; set WALSH_BLOCKLIST_ALLOW_HTTP=True only for a local sandbox."
                )
        self._operator_hosts = {url_host(self.url), url_host(self.schema_url)}
        extra = list_setting(settings, "WALSH_BLOCKLIST_EXTRA")
        unusable = [d for d in extra if not all(map(_names_host, entry_hosts(d) or {""}))]
        if unusable:
            # the project's own opt-out list: refused, not logged and dropped
            raise WalshConfigurationError(
                f"WALSH_BLOCKLIST_EXTRA: {unusable[0]!r} names no host, so it would block "
                "nothing. Give host names or URLs (e.g. -s WALSH_BLOCKLIST_EXTRA=a.test,b.test "
                "or -s 'WALSH_BLOCKLIST_EXTRA=[\"a.test\"]')."
            )
        self.extra = DomainSet.from_entries(
            [{"domain": d, "reason": "WALSH_BLOCKLIST_EXTRA"} for d in extra],
            source="WALSH_BLOCKLIST_EXTRA",
        )
        #: the published schema as bundled: the contract, never replaced
        self._contract = load_validator(bundled_schema())
        #: the schema fetched from WALSH_BLOCKLIST_SCHEMA_URL when it differs:
        #: documents must satisfy it as well, so it can only add constraints
        self._published: Any = None
        self._schema_fetched = False
        self.adopted: Adopted | None = None
        self.domains = self.extra
        self._next_check = 0.0
        self._pending: Deferred[None] | None = None
        self.store = state_for(crawler)
        from scrapy_walsh_research.evidence.audit import AuditTrail

        AuditTrail.for_crawler(crawler).blocklist = self.version
        #: with Redis, this worker's own copy of the list in force: a Redis that
        #: loses its data must not un-block an opt-out this worker knew
        self.local = local_state_for(crawler)
        self._restored = False
        #: why every target is denied: a list was adopted before, none is left
        #: (or, with Redis, none is left and no one can tell whether one was)
        self._lost: str | None = None
        #: until when (monotonic) a target waits for another worker to publish
        #: the list again before that denial is made
        self._recover_until = 0.0
        self._next_look = 0.0
        self.store.on_history_lost(self._publish_again)
        self.pacer = Pacer.for_crawler(crawler)
        self.pacer.add_denial_check(
            lambda r: (
                self.marks.purpose(r) not in (BLOCKLIST, SCHEMA)
                and self.domains.match(url_host(r.url)) is not None
            )
        )

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        check_configuration(crawler)
        return cls(crawler)

    def _transport_ok(self, url: str) -> bool:
        scheme = urlsplit(url).scheme.lower()
        return scheme == "https" or (self.allow_http and scheme == "http")

    # -- the gate -----------------------------------------------------------

    async def process_request(self, request: Request) -> None:
        if self.marks.purpose(request) in (BLOCKLIST, SCHEMA):
            # The operator's documents do not wait for themselves, but every
            # redirect hop of theirs is checked: https only, and no hop into
            # a host the list in force blocks.
            self._check_operator_request(request)
            return
        await self.ensure_fresh()
        while self._lost is not None and time.monotonic() < self._recover_until:
            # Another worker may hold the list Redis lost and publish it again
            # within a heartbeat: worth waiting for, rather than deny now.
            await self._look_for_shared(force=True)
            if self._lost is not None:
                await asyncio.sleep(0.5)
        self._deny_if_blocked(request)

    def _deny_if_blocked(self, request: Request) -> None:
        host = url_host(request.url)
        if self._lost is not None and host not in self._operator_hosts:
            deny(self.crawler, logger, request, "R3", self._lost)
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

    def _check_operator_request(self, request: Request) -> None:
        if not self._transport_ok(request.url):
            reason = (
                f"the blocklist or schema fetch was redirected to {request.url}, which is not "
                "https: not followed (set WALSH_BLOCKLIST_ALLOW_HTTP=True only for a sandbox)"
            )
            deny(self.crawler, logger, request, "R3", reason)
        if url_host(request.url) not in self._operator_hosts:
            # The opt-out list comes from the operator's hosts; a redirect
            # elsewhere (a hijacked URL, a third party's private path) is not
            # followed: the fetch fails and the list in force stays.
            self._deny_if_blocked(request)
            reason = (
                f"the blocklist or schema fetch was redirected off the operator's hosts to "
                f"{request.url}: not followed"
            )
            deny(self.crawler, logger, request, "R3", reason)

    def version(self) -> dict[str, Any] | None:
        """The list in force, as the audit log names it."""
        if self.adopted is None:
            return None
        return {"updated": self.adopted.document.get("updated"), "sha256": self.adopted.sha256}

    # -- refresh ------------------------------------------------------------

    async def ensure_fresh(self) -> None:
        if self._lost is not None and self._restored:
            await self._look_for_shared()
        if self._restored and self.store.time() < self._next_check:
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
                    await self._purge_extra()
                    self._restored = True
                if self.store.time() >= self._next_check:
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
        before = self.adopted.fetched_at if self.adopted else None
        waiting_since = self.store.time()
        in_force = self.adopted is not None and self._lost is None
        try:
            # With a list in force, another worker's refresh is not waited
            # for beyond a moment: the list in force keeps applying (as it
            # would if the refresh failed) and the stored result is looked
            # for again shortly. Without one, the gate must wait: a dead
            # holder's lock lapses within its lease.
            release = await self.store.single_flight(
                "blocklist", ttl=60.0, max_wait=SHORT_WAIT if in_force else None
            )
        except FlightBusy:
            self._next_check = self.store.time() + 1.0
            return
        if release is not None:
            try:
                await self.refresh()
            finally:
                await release()
            return
        found = await self._stored(self.store)
        stored = found[0] if found is not None else None
        if (
            found is not None
            and stored is not None
            and stored.url == self.url
            and (stored.fetched_at != before)
        ):
            await self._adopt(stored, persist=False, canonical=found[1])
            self.stats.inc_value("walsh/blocklist/adopted_from_worker")
            return
        attempt = await self.store.get(STATE_NAMESPACE, ATTEMPT_KEY)
        if (
            isinstance(attempt, dict)
            and not attempt.get("ok")
            and float(attempt.get("at", 0)) >= waiting_since - CLOCK_TOLERANCE
        ):
            # The worker we waited for failed: its next try is the fleet's.
            self._next_check = float(attempt.get("next_check", 0))
            self.stats.inc_value("walsh/blocklist/failed_by_worker")
            logger.warning(
                "Blocklist refresh by another worker failed (%(why)s); the list in force stays "
                "until the fleet's next try in %(d).0f s.",
                {"why": attempt.get("why"), "d": self._next_check - self.store.time()},
            )
            return
        await self.refresh()  # nothing to adopt and no failure recorded: try ourselves

    def _max_wait(self) -> float | None:
        """How long a fetch of the operator's documents may hold the download
        slot waiting for the operator host: a refresh of a list in force may
        wait a moment only (it is tried again later, the list in force
        applying meanwhile), or the operator host's interval in force when
        its answers slowed it (a 503 to the last refresh: 3 s, at most
        WALSH_ADAPTIVE_MAX_DELAY). Deferred past that, the refresh would come
        after the run's last target in a short run, every day until the host
        eased, and a new opt-out would wait that long. A Retry-After hold
        beyond it still defers the refresh. The first list is worth waiting
        for, since every target waits on it anyway."""
        if self.adopted is not None:
            return max(SHORT_WAIT, self.pacer.interval(url_host(self.url)))
        return None

    async def refresh(self) -> None:
        """Fetch, validate and adopt; on any failure keep what we have."""
        large: list[Any] = []
        try:
            await self._refresh(large)
        finally:
            if large:
                # The last reference to a large body goes in a thread:
                # freeing 80 MB cost the reactor ~45 ms.
                deferToThread(large.clear)

    async def _refresh(self, large: list[Any]) -> None:
        """:meth:`refresh`; a large response is put in *large*, to be freed
        after this frame is gone."""
        self.stats.inc_value("walsh/blocklist/fetch")
        try:
            await self._ensure_schema()
            response = await internal_fetch(
                self.crawler, self.url, BLOCKLIST, maxsize=self.max_bytes, max_wait=self._max_wait()
            )
            if len(response.body) > INLINE_PARSE_BYTES:
                large.append(response)
            if not 200 <= response.status < 300:
                raise BlocklistError(f"HTTP {response.status}")
            adopted, canonical = await self._unchanged(
                response.body
            ) or await self.parse_off_reactor(
                response.body, url=self.url, fetched_at=self.store.time()
            )
        except HostBusy as exc:
            self.stats.inc_value("walsh/blocklist/deferred")
            self._next_check = self.store.time() + exc.ready_in
            logger.info(
                "Blocklist refresh deferred: the operator host %(host)s is not ready for "
                "%(s).0f s; the list in force stays until then.",
                {"host": exc.host, "s": exc.ready_in},
            )
            return
        except Exception as exc:
            await self._failed(exc)
            await self._share_attempt(ok=False, why=str(exc))
            return
        await self._adopt(adopted, persist=True, canonical=canonical)
        await self._share_attempt(ok=True, why="")
        self.stats.inc_value("walsh/blocklist/adopted")
        logger.info(
            "Blocklist adopted from %(url)s: %(n)d entries, refresh %(r).0f s (schema: %(schema)s)",
            {
                "url": self.url,
                "n": len(self.domains),
                "r": adopted.refresh,
                "schema": "bundled" if self._published is None else "bundled + published",
            },
        )

    async def _share_attempt(self, *, ok: bool, why: str) -> None:
        if not self.store.shared:
            return  # nobody to share with
        attempt = {"at": self.store.time(), "ok": ok, "next_check": self._next_check, "why": why}
        await self.store.put(STATE_NAMESPACE, ATTEMPT_KEY, attempt)

    async def _failed(self, exc: Exception) -> None:
        if self.adopted is None and self._lost is None and not await self.store.history_complete():
            # "First-ever" is what the spec fails open on; with a Redis that
            # lost (or may have lost) the fleet's state, nobody can tell a
            # first fetch from a list the fleet adopted and Redis forgot.
            self.stats.inc_value("walsh/blocklist/history_unknown")
            self._lost = (
                "no blocklist is held and the fleet's history in Redis is incomplete (Redis "
                "restarted without AOF appendfsync always, or lost its data), so a list the "
                "fleet adopted may be lost: every host is denied until a list is fetched or "
                "another worker publishes its copy"
            )
            self._recover_until = time.monotonic() + RECOVERY_WAIT
        self._failed_log(exc)

    def _failed_log(self, exc: Exception) -> None:
        self.stats.inc_value("walsh/blocklist/fetch_failed")
        self._next_check = self.store.time() + self.retry_delay
        if isinstance(exc, BlocklistError):
            self.stats.inc_value("walsh/blocklist/rejected")
        if self._lost is not None:
            logger.error(
                "Blocklist fetch from %(url)s failed (%(exc)s) and the list adopted before is "
                "lost: every target stays denied (R3) until a list is adopted. "
                "Next try in %(d).0f s.",
                {"url": self.url, "exc": exc, "d": self.retry_delay},
            )
        elif self.adopted is not None:
            logger.warning(
                "Blocklist refresh from %(url)s failed (%(exc)s); retaining the last adopted "
                "list (%(n)d entries, fetched %(age).0f s ago from %(src)s). "
                "Next try in %(d).0f s.",
                {
                    "url": self.url,
                    "exc": exc,
                    "n": len(self.domains),
                    "age": self.store.time() - self.adopted.fetched_at,
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

    def parse(self, data: bytes | Any, *, url: str, fetched_at: float) -> Adopted:
        """Everything about one document, or :class:`BlocklistError`: JSON, the
        contract's shape, the published schema (formats checked), ``refresh``,
        the entries. Nothing is changed until all of it has succeeded."""
        adopted, _ = self._build(data, url=url, fetched_at=fetched_at)
        self._note_clamped(adopted)
        return adopted

    async def parse_off_reactor(
        self, data: bytes | Any, *, url: str, fetched_at: float
    ) -> tuple[Adopted, bytes]:
        """:meth:`parse`, off the reactor when the document is large; also
        returns the bytes to persist. The result is swapped in by
        :meth:`_adopt` in one step.

        Large bytes are read, validated and indexed in a child process
        (:meth:`_build_in_child`): in a thread, the pure-Python work of a
        10^6-entry list held the GIL long enough to stall the reactor for
        0.1-0.4 s at a time, and its 10^6 entries cost the crawl process
        hundreds of MB."""
        size = len(data) if isinstance(data, bytes) else len(data.get("blocked") or ()) * 64
        if size <= INLINE_PARSE_BYTES:
            adopted, canonical = self._build(data, url=url, fetched_at=fetched_at)
        elif isinstance(data, bytes) and self.child_build:
            adopted, canonical = await maybe_deferred_to_future(
                deferToThread(self._build_in_child, data, url=url, fetched_at=fetched_at)
            )
        else:
            adopted, canonical = await maybe_deferred_to_future(
                deferToThread(self._build, data, url=url, fetched_at=fetched_at)
            )
        self._note_clamped(adopted)
        return adopted, canonical

    def _build_in_child(self, data: bytes, *, url: str, fetched_at: float) -> tuple[Adopted, bytes]:
        """:meth:`_build` for large bytes, run in a thread that only waits on a
        child process (see :func:`child_main`); the entries come back as an
        index file, mapped (:class:`IndexFile`), not rebuilt. A child that
        fails without an answer (it could not start, was killed) is not a
        verdict on the list: the document is then built in this thread, as
        before, so the list is still checked and adopted."""
        import os
        import subprocess
        import sys
        import tempfile

        from scrapy_walsh_research.core.blocklist_index import IndexFile

        fd, body_path = tempfile.mkstemp(prefix="walsh-blocklist-", suffix=".json")
        index_path = body_path[: -len(".json")] + ".index"
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            request = {
                "body": body_path, "index": index_path, "url": url,
                "schema_url": self.schema_url, "min_refresh": self.min_refresh,
                "max_refresh": self.max_refresh,
                "published": None if self._published is None else self._published.schema,
            }  # fmt: skip
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
            try:
                if not sys.executable:
                    raise _ChildFailed("no Python executable to start")
                done = subprocess.run(
                    [sys.executable, "-c", _CHILD_CODE], input=json.dumps(request).encode(),
                    capture_output=True, env=env, timeout=CHILD_TIMEOUT, check=False,
                )  # fmt: skip
                if done.returncode != 0 or not done.stdout:
                    tail = done.stderr.decode(errors="replace").strip()[-500:]
                    raise _ChildFailed(f"exit status {done.returncode}: {tail}")
                answer = json.loads(done.stdout)
            except (OSError, ValueError, subprocess.SubprocessError, _ChildFailed) as exc:
                self.stats.inc_value("walsh/blocklist/child_failed")
                logger.warning(
                    "The blocklist could not be read in a child process (%(exc)s); reading "
                    "it in a thread instead (the reactor may stall meanwhile).",
                    {"exc": exc},
                )
                return self._build(data, url=url, fetched_at=fetched_at)
            for level, line in answer["log"]:
                logger.log(level, "%s", line)
            if answer["log_dropped"]:
                logger.warning(
                    "... and %(n)d more lines about blocklist entries (%(url)s)",
                    {"n": answer["log_dropped"], "url": url},
                )
            if not answer["ok"]:
                raise BlocklistError(answer["error"])
            if answer["unusable"] is not None:
                self._published_unusable(answer["unusable"])
            domains = DomainSet.from_index(IndexFile(index_path))
        finally:
            for path in (body_path, index_path):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)  # an open index stays mapped
        self.stats.inc_value("walsh/blocklist/built_in_child")
        digest = hashlib.sha256(data).hexdigest()
        adopted = Adopted(url, answer["header"], float(fetched_at), answer["refresh"], domains,
                          digest, in_force=domains.union(self.extra),
                          clamped=answer["clamped"])  # fmt: skip
        return adopted, data

    async def _unchanged(self, body: bytes) -> tuple[Adopted, bytes] | None:
        """The list in force, fetched again now, when *body* is byte for byte
        the document it was adopted from: nothing to validate or index again
        (a 10^6-entry list costs seconds of CPU per refresh otherwise)."""
        adopted = self.adopted
        if adopted is None or adopted.url != self.url:
            return None
        if len(body) <= INLINE_PARSE_BYTES:
            digest = hashlib.sha256(body).hexdigest()
        else:
            digest = await maybe_deferred_to_future(
                deferToThread(lambda: hashlib.sha256(body).hexdigest())
            )
        if digest != adopted.sha256:
            return None
        self.stats.inc_value("walsh/blocklist/unchanged")
        return dataclasses.replace(adopted, fetched_at=self.store.time(), clamped=None), body

    def _note_clamped(self, adopted: Adopted) -> None:
        if adopted.clamped:
            self.stats.inc_value("walsh/blocklist/refresh_clamped")
            logger.warning(
                "Blocklist from %(url)s: %(why)s; using %(s).0f s",
                {"url": adopted.url, "why": adopted.clamped, "s": adopted.refresh},
            )

    def _build(self, data: bytes | Any, *, url: str, fetched_at: float) -> tuple[Adopted, bytes]:
        """The work of :meth:`parse`, touching no shared state (it may run in
        a thread): the adopted version and the bytes it is identified by (as
        fetched; its ``sha256`` is the version's, what ``sha256sum`` of the
        published file prints) and kept as."""
        if isinstance(data, bytes):
            raw = data
            document = load_json(data)
        else:  # a copy kept inline (before blobs), or a test's document
            document = data
            raw = json.dumps(document, sort_keys=True).encode()
        check_shape(document)
        self._validate(document)
        refresh, clamped = refresh_seconds(document.get("refresh"), self.min_refresh,
                                           self.max_refresh)  # fmt: skip
        digest = hashlib.sha256(raw).hexdigest()
        domains = DomainSet.from_entries(document["blocked"], source=url)
        adopted = Adopted(url, document, float(fetched_at), refresh, domains, digest,
                          in_force=domains.union(self.extra), clamped=clamped)  # fmt: skip
        return adopted, raw

    async def _adopt(self, adopted: Adopted, *, persist: bool, canonical: bytes) -> None:
        """Put *adopted* in force (one step), and keep it with *canonical*,
        the bytes its sha256 is of."""
        # The list replaced is let go in a thread: freeing 10^6 entries takes
        # ~0.3 s, which would be a reactor stall here.
        old = self.adopted
        self.adopted = adopted
        self._lost = None
        self.domains = adopted.in_force or adopted.domains.union(self.extra)
        if (
            old is not None
            and len(old.domains) > LARGE_LIST
            and old.domains._entries is not adopted.domains._entries
            and old.document is not adopted.document
        ):
            deferToThread(_release, [old])
        del old
        self.stats.set_value("walsh/blocklist/entries", len(self.domains))
        now = self.store.time()
        if adopted.url != self.url:
            self._next_check = 0.0  # a list persisted from another URL: kept, re-fetched at once
        elif adopted.fetched_at > now + CLOCK_TOLERANCE:
            # Fetched "in the future": a clock was wrong (this machine's
            # earlier, or another worker's). Its age is unknown: due now.
            self.stats.inc_value("walsh/blocklist/future_fetch_time")
            logger.warning(
                "The adopted blocklist's fetch time is %(s).0f s in the future (clock skew): "
                "refreshing it now rather than trusting its age.",
                {"s": adopted.fetched_at - now},
            )
            self._next_check = 0.0
        else:
            self._next_check = adopted.fetched_at + adopted.refresh
        copy = {"url": adopted.url, "fetched_at": adopted.fetched_at, "sha256": adopted.sha256,
                "blob": blob_name(adopted.sha256)}  # fmt: skip
        ever = {"at": adopted.fetched_at}
        if persist:
            await self._persist(self.store, adopted, copy, ever, canonical)
        if self.local is not self.store:
            local = await self.local.get(STATE_NAMESPACE, STATE_KEY)
            if (
                not isinstance(local, dict)
                or local.get("sha256") != adopted.sha256
                or local.get("fetched_at") != adopted.fetched_at
            ):
                await self._persist(self.local, adopted, copy, ever, canonical)
        await self._purge_opted_out(adopted)

    async def _persist(
        self, store: StateStore, adopted: Adopted, copy: dict[str, Any], ever: dict[str, Any],
        canonical: bytes,
    ) -> None:  # fmt: skip
        """The document as a blob (written off the reactor), then the small
        record naming it; the blob of the version it replaces goes last, so a
        crash at any point leaves a record whose blob exists."""
        previous = await store.get(STATE_NAMESPACE, STATE_KEY)
        if not isinstance(previous, dict) or previous.get("blob") != copy["blob"]:
            await store.put_blob(copy["blob"], canonical)
        await store.put_many(STATE_NAMESPACE, {STATE_KEY: copy, EVER_KEY: ever})
        if isinstance(previous, dict) and previous.get("blob") not in (None, copy["blob"]):
            await store.delete_blob(str(previous["blob"]))

    def _extra_digest(self) -> str:
        """Which local entries are in force (not how many: swapping one entry
        for another is a new opt-out)."""
        names = json.dumps(sorted(self.extra._entries)).encode()
        return hashlib.sha256(names).hexdigest()[:16]

    async def _purge_extra(self) -> None:
        """The local entries opt hosts out whether or not a list is ever
        adopted (a first run whose fetch fails crawls with them alone): what
        was stored about those hosts goes, once per set of entries."""
        from scrapy_walsh_research.evidence.audit import AuditTrail
        from scrapy_walsh_research.evidence.purge import purge

        if not len(self.extra):
            return
        done_for = self._extra_digest()
        if await self.store.get(STATE_NAMESPACE, PURGED_EXTRA_KEY) == done_for:
            return
        extra = self.extra

        def cause(host: str) -> str:
            found = extra.match(host)
            return (
                f"opted out: blocklist entry {found[0] if found else '?'!r} (WALSH_BLOCKLIST_EXTRA)"
            )

        await purge(
            self.store, lambda host: extra.match(host) is not None, cause=cause,
            audit=AuditTrail.for_crawler(self.crawler), stats=self.stats,
        )  # fmt: skip
        await self.store.put(STATE_NAMESPACE, PURGED_EXTRA_KEY, done_for)

    async def _purge_opted_out(self, adopted: Adopted) -> None:
        """Delete what was stored about every host the list in force blocks,
        once per list (and set of local entries)."""
        from scrapy_walsh_research.evidence.audit import AuditTrail
        from scrapy_walsh_research.evidence.purge import purge

        done_for = f"{adopted.sha256}+{self._extra_digest()}"
        if await self.store.get(STATE_NAMESPACE, PURGED_KEY) == done_for:
            return
        domains = self.domains
        version = f"updated {adopted.document.get('updated')}, sha256 {adopted.sha256[:12]}"

        def cause(host: str) -> str:
            found = domains.match(host)
            entry, source = (found[0], found[1].get("reason")) if found else ("?", None)
            where = "WALSH_BLOCKLIST_EXTRA" if source == "WALSH_BLOCKLIST_EXTRA" else version
            return f"opted out: blocklist entry {entry!r} adopted ({where})"

        await purge(
            self.store, lambda host: domains.match(host) is not None, cause=cause,
            audit=AuditTrail.for_crawler(self.crawler), stats=self.stats,
        )  # fmt: skip
        await self.store.put(STATE_NAMESPACE, PURGED_KEY, done_for)

    async def _stored(
        self, store: StateStore, *, quiet: bool = False
    ) -> tuple[Adopted, bytes] | None:
        """The list kept in *store*, validated like a fetched one, and its
        bytes; None if there is none or it does not validate (it is then
        never adopted). Bytes whose sha256 is the list in force's are that
        list (validated when it was adopted): only its fetch time is new."""
        saved = await store.get(STATE_NAMESPACE, STATE_KEY)
        if not saved:
            return None
        try:
            url, fetched_at = str(saved.get("url")), float(saved.get("fetched_at", 0.0))
            if isinstance(saved, dict) and "blob" in saved:
                data = await store.get_blob(str(saved["blob"]))
                if data is None:
                    raise BlocklistError(f"its document {saved['blob']!r} is missing")
                digest = await maybe_deferred_to_future(
                    deferToThread(lambda: hashlib.sha256(data).hexdigest())
                )
                if digest != saved.get("sha256"):
                    raise BlocklistError("its document does not match its recorded sha256")
                current = self.adopted
                if current is not None and current.sha256 == digest and current.url == url:
                    return dataclasses.replace(current, fetched_at=fetched_at), data
                document: Any = data
            else:  # a copy kept inline (before blobs)
                document = saved.get("document")
            return await self.parse_off_reactor(document, url=url, fetched_at=fetched_at)
        except (BlocklistError, TypeError, ValueError, AttributeError) as exc:
            if quiet:
                return None
            self.stats.inc_value("walsh/blocklist/stored_rejected")
            logger.error(
                "The stored blocklist (from %(url)s) does not validate (%(exc)s): not restored.",
                {"url": saved.get("url") if isinstance(saved, dict) else None, "exc": exc},
            )
            return None

    async def _look_for_shared(self, *, force: bool = False) -> None:
        """While no list is in force for a loss, adopt one another worker
        published (or fetched) as soon as it is in the shared store."""
        if self.local is self.store or (not force and time.monotonic() < self._next_look):
            return
        self._next_look = time.monotonic() + 1.0
        found = await self._stored(self.store, quiet=True)
        if found is not None and self._lost is not None:
            await self._adopt(found[0], persist=False, canonical=found[1])
            self.stats.inc_value("walsh/blocklist/adopted_from_worker")
            logger.info(
                "Blocklist: adopted the list another worker published (%(n)d entries).",
                {"n": len(self.domains)},
            )

    async def _publish_again(self) -> None:
        """Redis lost or rolled back the fleet's history: put this worker's
        copy of the list in force back, unless the shared one is as new."""
        own = await self._stored(self.local, quiet=True)
        if own is None:
            return
        shared = await self._stored(self.store, quiet=True)
        if shared is not None and shared[0].fetched_at >= own[0].fetched_at:
            return
        adopted, canonical = own
        copy = {"url": adopted.url, "fetched_at": adopted.fetched_at, "sha256": adopted.sha256,
                "blob": blob_name(adopted.sha256)}  # fmt: skip
        await self._persist(self.store, adopted, copy, {"at": adopted.fetched_at}, canonical)
        self.stats.inc_value("walsh/blocklist/published_again")
        logger.warning(
            "Blocklist: Redis lost the fleet's copy; published this worker's again "
            "(%(n)d entries, fetched %(t)s).",
            {"n": len(adopted.domains), "t": time.ctime(adopted.fetched_at)},
        )

    async def _restore(self) -> None:
        """The list adopted by an earlier run (or another process), before any
        request: the newer valid one of the shared copy and this worker's own.
        When neither is left but a list was adopted before, every target is
        denied until a list is adopted again (a lost opt-out is not "new")."""
        shared = await self._stored(self.store)
        own = await self._stored(self.local) if self.local is not self.store else None
        candidates = [found for found in (shared, own) if found is not None]
        if not candidates:
            for store in {id(s): s for s in (self.store, self.local)}.values():
                if await store.get(STATE_NAMESPACE, EVER_KEY):
                    self.stats.inc_value("walsh/blocklist/lost")
                    self._lost = (
                        "a blocklist was adopted before but no valid copy is left (the state was "
                        "lost or damaged): every host is denied until the list is fetched again"
                    )
                    logger.error("Blocklist: %(why)s.", {"why": self._lost})
                    if self.local is not self.store:  # another worker may publish it again
                        self._recover_until = time.monotonic() + RECOVERY_WAIT
                    return
            return
        stored, data = max(candidates, key=lambda found: found[0].fetched_at)
        # republish this worker's copy when the shared one is gone or older
        await self._adopt(stored, persist=shared is None or stored is not shared[0], canonical=data)
        logger.info(
            "Blocklist restored from state: %(n)d entries fetched from %(url)s at %(t)s",
            {"n": len(self.domains), "url": stored.url, "t": time.ctime(stored.fetched_at)},
        )
        # the documents read (up to ~80 MB each) are freed in a thread
        large = [shared, own, candidates, data]
        del shared, own, candidates, data
        deferToThread(large.clear)

    # -- schema -------------------------------------------------------------

    async def _ensure_schema(self) -> None:
        """Consult the published schema (spec §4.2). It never replaces the
        bundled copy, which is the contract: a fetched ``{}`` or an error
        page must not make garbage "valid". When it differs, documents must
        satisfy both."""
        if self._schema_fetched:
            return
        self._schema_fetched = True
        try:
            response = await internal_fetch(
                self.crawler,
                self.schema_url,
                SCHEMA,
                maxsize=MAX_SCHEMA_BYTES,
                max_wait=self._max_wait(),
            )
            if not 200 <= response.status < 300:
                raise BlocklistError(f"HTTP {response.status}")
            schema = json.loads(response.body)
            if schema == self._contract.schema:
                return
            self._published = load_validator(schema)
        except Exception as exc:
            if isinstance(exc, HostBusy):
                self._schema_fetched = False  # consult it when the host is ready
            logger.warning(
                "Blocklist schema from %(url)s unusable (%(exc)s); validating with the bundled "
                "copy of the published schema.",
                {"url": self.schema_url, "exc": exc},
            )
            self.stats.inc_value("walsh/blocklist/schema_fallback")
            return
        self.stats.inc_value("walsh/blocklist/schema_differs")
        logger.warning(
            "The blocklist schema at %(url)s differs from the bundled copy of the published "
            "schema: documents must satisfy both.",
            {"url": self.schema_url},
        )

    def _validate(self, document: Any) -> None:
        unusable = validate(document, self._contract, self._published, self.schema_url)
        if unusable is not None:
            self._published_unusable(unusable)

    def _published_unusable(self, why: str) -> None:
        logger.warning(
            "The blocklist schema from %(url)s cannot be applied (%(exc)s); validating with "
            "the bundled copy only.",
            {"url": self.schema_url, "exc": why},
        )
        self._published = None


def validate(document: Any, contract: Any, published: Any, schema_url: str) -> str | None:
    """Check *document* against the bundled schema (*contract*) and the
    fetched one (*published*, or None): :class:`BlocklistError` when it
    fails either. Returns why *published* cannot be applied, if it cannot
    (it then adds nothing)."""
    reduced = _one_entry_per_shape(document)
    if reduced is not None and not any(True for _ in contract.iter_errors(reduced)):
        error = None  # every entry is valid: each is shaped like one that passed
    else:
        error = jsonschema_exceptions.best_match(contract.iter_errors(document))
    if error is not None:
        raise BlocklistError(f"schema-invalid at {_where(error)}: {error.message}")
    if published is None:
        return None
    try:
        error = jsonschema_exceptions.best_match(published.iter_errors(document))
    except Exception as exc:  # an unusable fetched schema adds nothing
        return str(exc)
    if error is not None:
        raise BlocklistError(
            f"schema-invalid (per {schema_url}) at {_where(error)}: {error.message}"
        )
    return None


def _where(error: Any) -> str:
    return "/".join(str(p) for p in error.absolute_path) or "(document)"


def check_shape(document: Any) -> None:
    """The contract's outline, before the schema: an object naming the
    contract, with a ``blocked`` array."""
    if (
        not isinstance(document, dict)
        or document.get("contract") != identity.BLOCKLIST_CONTRACT
        or not isinstance(document.get("blocked"), list)
    ):
        raise BlocklistError(
            f"schema-invalid: not a {identity.BLOCKLIST_CONTRACT} document "
            "(an object with that 'contract' and a 'blocked' array)"
        )


def load_validator(schema: Any) -> Any:
    """A validator for *schema* with every format the contract uses checked."""
    cls = validator_for(schema)
    cls.check_schema(schema)
    missing = REQUIRED_FORMATS - set(cls.FORMAT_CHECKER.checkers)
    if missing:
        raise WalshConfigurationError(
            f"jsonschema cannot check the formats {sorted(missing)}: it checks date-time "
            "with rfc3339-validator and uri with rfc3986-validator; install "
            "scrapy-walsh-research's dependencies so blocklist documents are validated in full."
        )
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


# -- a large list is read, validated and indexed in a child process ------------

#: how many of the child's log lines (entries read leniently, unusable
#: entries) are passed on; the rest are counted
CHILD_LOG_LINES = 100
#: a child that takes longer than this is given up (the list in force stays)
CHILD_TIMEOUT = 600.0
_CHILD_CODE = "from scrapy_walsh_research.blocklist import child_main; child_main()"


class _ChildFailed(Exception):
    """The child process ended without an answer (not: the list is bad)."""


def child_main() -> None:
    """The child process: read the request (JSON) on stdin, answer on stdout.

    It reads the document (``body``), checks it exactly as the crawl process
    does for a small one (the contract's outline, the bundled schema, the
    fetched schema when it differs, ``refresh``), reads the entries with
    :meth:`DomainSet.from_entries` and writes them with
    :func:`~scrapy_walsh_research.core.blocklist_index.write_index` to ``index``.
    The answer is the document without its entries, or why it was rejected.
    """
    import sys

    from scrapy_walsh_research.core.blocklist_index import write_index

    request = json.loads(sys.stdin.buffer.read())
    lines: list[tuple[int, str]] = []
    dropped = 0

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            nonlocal dropped
            if len(lines) < CHILD_LOG_LINES:
                lines.append((record.levelno, record.getMessage()))
            else:
                dropped += 1

    logger.addHandler(Keep())
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    answer: dict[str, Any]
    try:
        with open(request["body"], "rb") as f:
            data = f.read()
        document = strict_json(data)  # the verdict the thread path would give
        del data
        check_shape(document)
        published = request.get("published")
        unusable = validate(
            document,
            load_validator(bundled_schema()),
            None if published is None else load_validator(published),
            request["schema_url"],
        )
        refresh, clamped = refresh_seconds(document.get("refresh"), request["min_refresh"],
                                           request["max_refresh"])  # fmt: skip
        domains = DomainSet.from_entries(document["blocked"], source=request["url"])
        write_index(domains._entries, request["index"])
        answer = {
            "ok": True,
            "header": {k: v for k, v in document.items() if k != "blocked"},
            "refresh": refresh,
            "clamped": clamped,
            "unusable": unusable,
        }
    except BlocklistError as exc:
        answer = {"ok": False, "error": str(exc)}
    answer["log"] = lines
    answer["log_dropped"] = dropped
    sys.stdout.write(json.dumps(answer))
    sys.stdout.flush()
