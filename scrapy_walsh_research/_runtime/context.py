"""What the components ask of each other, declared, with one owner per crawler.

No component looks another up, and none reads a spider's attributes by
name. What one offers the others is a small interface declared here; the
component that offers it hands itself to the crawler's :class:`CrawlContext`
when Scrapy builds it, and the components that ask are given the context in
``from_crawler`` and ask it when they need the answer (Scrapy builds the
spider first, then the downloader middlewares in order, and the scheduler
only when the spider opens):

* :class:`TargetSource`, offered by the spider that reads a declared list
  (``TargetsSpider``): whether its records carry the cadence, whether it
  reads a fleet's shared feed, and the targets left (for the progress line);
* :class:`RobotsPolicies`, offered by the R2 gate: the robots.txt policy in
  force per origin (the PREF gate reads the selected group's usage
  preferences in it, the sitemaps gate its ``Sitemap:`` lines);
* :class:`WaitingTargets`, offered by the frontier scheduler: the requests
  it holds (the sitemaps gate counts an origin's targets, the list is read
  no faster than they go, a stopped run ends them);
* :class:`WouldDeny` (and :class:`LoadsAhead`), offered by the gates that
  can tell from cached state that they will deny a request: the Pacer asks
  them for the frontier, which lets such a request go without its turn;
* :class:`DepartureCheck`, offered by the R3 and R2 gates: whether a request
  they let by may still leave (the blocklist in force may come to block its
  host, a robots.txt read meanwhile disallow it, a Visit-time window close,
  while it waits for its host's slot or for the wire); the pacing gate asks
  the Pacer, which asks them, as the slot is reserved, and the wire-timed
  handler as the request is handed its connection;
* :class:`CadenceStamps`, offered by the R8 gate: a target's fetch stamped
  with its record, and a fleet's claim on it let go (the record pipeline,
  and a stopped run's lines given back to a shared feed).

Nothing offered is an answer too: a project's own spider offers no target
source, a project may use another scheduler; each asker then does what it
does without one.

The context also owns the crawler's shared services, each built once, on
first ask: the typed settings (:attr:`CrawlContext.settings`), the state
stores (:attr:`~CrawlContext.store`, :attr:`~CrawlContext.local_store`,
:attr:`~CrawlContext.redis`), the request marks (:attr:`~CrawlContext.marks`), the audit trail
(:attr:`~CrawlContext.audit`), and the services of the layers above this one
(the Pacer, the run's stop, the document waits, ...), asked for by kind
(:meth:`CrawlContext.service`) and built with the context. A component gets
the context from :class:`InContext` (``self.context``): the one place a
crawler's context is looked up, so no component looks a service up itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from scrapy_walsh_research._runtime.marks import Marks
from scrapy_walsh_research.evidence.audit import AuditTrail
from scrapy_walsh_research.per_crawler import per_crawler
from scrapy_walsh_research.settings.walsh import WalshSettings
from scrapy_walsh_research.state import (
    cadence_for,
    local_state_for,
    redis_for,
    redis_url,
    settings_for,
    state_for,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from scrapy import Request
    from scrapy.crawler import Crawler

    from scrapy_walsh_research.core.robots_policy import RobotsPolicy
    from scrapy_walsh_research.state import CadenceStore, StateStore
    from scrapy_walsh_research.state.redis.connection import RedisConnection

S = TypeVar("S")


class TargetSource(Protocol):
    """What a spider reading a declared target list tells the components."""

    @property
    def commits_cadence(self) -> bool:
        """Whether each target's fetch time is written with its record (the
        record pipeline), not when its response arrives (the R8 gate)."""

    @property
    def reads_shared_feed(self) -> bool:
        """Whether lines come from a fleet's shared feed, a few at a time,
        rather than from a list this worker reads ahead in."""

    @property
    def host_left(self) -> Mapping[str, int] | None:
        """Targets not yet recorded, per host; None until the list is counted."""

    @property
    def targets_total(self) -> int | None:
        """How many lines the list holds; None while unknown (a fed list)."""


class RobotsPolicies(Protocol):
    """The robots.txt policy in force for a URL's origin (the R2 gate's)."""

    def cached_policy(self, url: str) -> RobotsPolicy | None:
        """The policy when one is cached and fresh, else None (no I/O)."""

    async def policy_for(self, url: str) -> RobotsPolicy:
        """The policy in force: cached, stored, or fetched."""


class WaitingTargets(Protocol):
    """The requests a scheduler holds (the frontier's queues): what the
    sitemaps gate counts, what paces the reading of the list, what a stopped
    run ends."""

    def queued(self, host: str) -> list[Request]:
        """The requests waiting for *host* now (queued or kept aside)."""

    def __len__(self) -> int:
        """The requests held."""

    def parked(self) -> int:
        """Those held until their document's next try (they hold no host's turn)."""

    def hosts_waiting(self) -> int:
        """Hosts whose next request waits for its turn."""

    def has_ready_request(self) -> bool:
        """Whether a request could be sent now."""

    def drain(self) -> list[Request]:
        """Every request held, taken out (a stopped run ends them)."""


class WouldDeny(Protocol):
    """What a gate would deny from its cached state alone (no I/O): the
    frontier lets such a request go at once (a denial needs no host's turn),
    asking the Pacer, which asks every gate that offers this."""

    def would_deny(self, request: Request) -> bool:
        """Whether what is cached already denies *request*."""


class DepartureCheck(Protocol):
    """A gate whose answer can change while a request it let through waits
    for its host's slot or for the wire (a host the blocklist comes to
    block, a robots.txt read that disallows it, a Visit-time window that
    closes): the Pacer asks it again as the
    slot is reserved and as the request is handed its connection."""

    def departure_denial(self, request: Request) -> tuple[str, str] | None:
        """(rule, reason) when *request* may no longer leave (cached state only)."""


class LoadsAhead(Protocol):
    """A gate whose :class:`WouldDeny` answer needs stored state loaded."""

    async def load_ahead(self, request: Request) -> None:
        """Load what *request* will need, as it is queued (in the background)."""


class CadenceStamps(Protocol):
    """Each target's last fetch, as the R8 gate keeps it."""

    async def stamp(self, key: str, at: float | None = None, *, written: bool = False) -> None:
        """The target *key* was fetched (or answered 304) at *at*, or now;
        *written*: already written to the store (with the record, in Redis)."""

    async def release(self, key: str) -> None:
        """This worker no longer fetches *key*: a fleet's claim on it goes."""


@dataclass(eq=False)
class CrawlContext:
    """One per crawler: the interfaces its components offer each other, and
    the shared services it owns.

    Each interface field is set once, by the component that offers it, as
    Scrapy builds it; None while (or when) nothing offers it. Each service
    is built on first ask and kept here for the crawl.
    """

    crawler: Crawler
    #: set by ``TargetsSpider.from_crawler``
    targets: TargetSource | None = None
    #: set by the R2 gate (``RobotsTxtMiddleware``)
    robots: RobotsPolicies | None = None
    #: set by ``FrontierScheduler``
    waiting: WaitingTargets | None = None
    #: set by the R8 gate (``CadenceMiddleware``)
    cadence: CadenceStamps | None = None
    #: offered by the R8, R3, R2, PREF and sitemaps gates (asked by the Pacer)
    would_deny: list[WouldDeny] = field(default_factory=list)
    #: offered by the R8 gate (asked by the Pacer as a request is queued)
    loads_ahead: list[LoadsAhead] = field(default_factory=list)
    #: offered by the R2 gate (asked by the pacing gate as a slot is reserved)
    departure_checks: list[DepartureCheck] = field(default_factory=list)
    #: a command that only reads what crawls left (``scrapy walsh-report``,
    #: ``walsh-purge``): its audit trail neither prunes nor waits unbounded
    command: bool = False
    _services: dict[object, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def for_crawler(cls, crawler: Crawler, *, command: bool = False) -> CrawlContext:
        """The crawler's context (built on first use; *command*: for a
        command that only reads, see :attr:`command`)."""
        return per_crawler(crawler, CrawlContext, lambda: cls(crawler, command=command))

    def service(self, kind: Callable[[CrawlContext], S]) -> S:
        """The crawler's one *kind* (a class built with the context: the
        Pacer, the run's stop, ...), built on first ask."""
        if kind not in self._services:
            self._services[kind] = kind(self)
        return cast("S", self._services[kind])

    @property
    def settings(self) -> WalshSettings:
        """The ``WALSH_`` settings in force, typed, read once."""
        return settings_for(self.crawler)

    @property
    def store(self) -> StateStore:
        """The crawler's state store (Redis in a fleet, else SQLite)."""
        return state_for(self.crawler)

    @property
    def cadence_store(self) -> CadenceStore:
        """Each target's last fetch (R8), and a fleet's claims on targets."""
        return cadence_for(self.crawler)

    @property
    def local_store(self) -> StateStore:
        """This process's own store (the same as :attr:`store` without Redis)."""
        return local_state_for(self.crawler)

    @property
    def redis(self) -> RedisConnection | None:
        """The crawler's one Redis connection; None without ``WALSH_REDIS_URL``."""
        return redis_for(self.crawler) if redis_url(self.crawler) else None

    @property
    def marks(self) -> Marks:
        """The marks of the bundle's own requests (their secret in :attr:`store`)."""
        if Marks not in self._services:
            self._services[Marks] = Marks(self.crawler, lambda: self.store)
        return cast("Marks", self._services[Marks])

    @property
    def audit(self) -> AuditTrail:
        """The audit trail (pruned by a crawl; not by a :attr:`command`)."""
        if AuditTrail not in self._services:
            trail = AuditTrail.open(
                self.crawler, self.settings, self.redis, prune=not self.command
            )
            self._services[AuditTrail] = trail
        return cast("AuditTrail", self._services[AuditTrail])


class InContext:
    """A component that asks its crawler's context: ``self.context``, looked
    up here once per component (Scrapy builds components from the crawler
    alone, so ``Component.from_crawler(crawler)`` and ``Component(crawler)``
    work as they did)."""

    crawler: Crawler

    @cached_property
    def context(self) -> CrawlContext:
        return CrawlContext.for_crawler(self.crawler)
