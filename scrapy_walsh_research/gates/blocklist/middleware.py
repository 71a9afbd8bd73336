"""R3: the gate that denies every request to a host the operator blocklist
names, before anything else.

The gate owns correctness: a request goes on only once the list is fresh
(:mod:`~scrapy_walsh_research.documents.blocklist.refresh`) and its host is under no
entry of the list in force (:mod:`~scrapy_walsh_research.documents.blocklist.store`).
While no list is in force because fetches failed (none adopted yet, or the
one adopted lost), the list is unknown: nothing is sent, and targets wait
for its next try, within ``WALSH_POLICY_WAIT``. At that bound a lost list's
targets get a record (``skipped``, R3, what happened); a list never adopted
lets the crawl go on with ``WALSH_BLOCKLIST_EXTRA`` only, as spec §5.2 says
for a first-ever failure.
The pacer asks it, through a denial check, so that a blocked request does
not wait out a host's delay first, and through a departure check as the
request is granted its host's slot and handed its connection: the list in
force can change while a request it let by waits (another request's
refresh, a fleet worker's list adopted), and a host just added receives
nothing more.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy_walsh_research._runtime.context import InContext
from scrapy_walsh_research._runtime.marks import BLOCKLIST, SCHEMA
from scrapy_walsh_research.core.blocklist.entries import DomainSet
from scrapy_walsh_research.core.urls import url_host
from scrapy_walsh_research.documents.blocklist.build import ListBuilder
from scrapy_walsh_research.documents.blocklist.refresh import Refresher
from scrapy_walsh_research.documents.blocklist.schema import BlocklistSchema
from scrapy_walsh_research.documents.blocklist.store import HeldList
from scrapy_walsh_research.documents.waits import DocumentWaits
from scrapy_walsh_research.errors import deny
from scrapy_walsh_research.scheduling.pacer import Pacer
from scrapy_walsh_research.settings.check import check_configuration
from scrapy_walsh_research.settings.options import operator_hosts

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from typing_extensions import Self

    from scrapy_walsh_research.core.outage import Outage

logger = logging.getLogger(__name__)


class BlocklistMiddleware(InContext):
    """Downloader middleware: deny every request to a blocked host (R3).

    It must sit before the robots.txt gate so that a blocked host receives no
    request at all, not even for ``/robots.txt``; the start-up check enforces
    that order.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        context = self.context
        self.marks = context.marks
        walsh = context.settings  # its values checked as it was read (settings/values.py)
        self.url, self.schema_url = walsh.blocklist_url, walsh.blocklist_schema_url
        retry_delay = walsh.blocklist_retry_delay
        min_refresh = walsh.blocklist_min_refresh
        max_refresh = walsh.blocklist_max_refresh
        max_bytes = walsh.blocklist_max_bytes
        self.allow_http = walsh.blocklist_allow_http
        self._operator_hosts = operator_hosts(crawler.settings)
        extra = self._extra(walsh.blocklist_extra)
        schema = BlocklistSchema(context, self.schema_url)
        self.builder = ListBuilder(
            crawler.stats, schema, extra, min_refresh=min_refresh, max_refresh=max_refresh
        )
        #: the list in force: what this gate checks
        self.held = HeldList(context, url=self.url, extra=extra, builder=self.builder)
        pacer = context.service(Pacer)
        first_retry_delay = walsh.policy_retry_delay
        self.refresher = Refresher(
            context, held=self.held, schema=schema, builder=self.builder, pacer=pacer,
            retry_delay=retry_delay, first_retry_delay=first_retry_delay, max_bytes=max_bytes,
        )  # fmt: skip
        self.waits = context.service(DocumentWaits)
        #: the first-ever outage whose wait ended in the spec's fail-open (logged once)
        self._failed_open: float | None = None
        context.would_deny.append(self)
        # the list in force can change while a request it let by waits for
        # its host's slot or for the wire (another request's refresh, a
        # fleet worker's list adopted): asked again as the request leaves
        context.departure_checks.insert(0, self)

    @staticmethod
    def _extra(extra: tuple[str, ...]) -> DomainSet:
        """WALSH_BLOCKLIST_EXTRA, the project's own opt-out list."""
        return DomainSet.from_entries(
            [{"domain": d, "reason": "WALSH_BLOCKLIST_EXTRA"} for d in extra],
            source="WALSH_BLOCKLIST_EXTRA",
        )

    def would_deny(self, request: Request) -> bool:
        """A host the list in force blocks (``WouldDeny``): not the list's own fetches."""
        return (
            self.marks.purpose(request) not in (BLOCKLIST, SCHEMA)
            and self.held.domains.match(url_host(request.url)) is not None
        )

    def departure_denial(self, request: Request) -> tuple[str, str] | None:
        """("R3", reason) when the list in force now blocks *request*'s host
        (``DepartureCheck``): not the list's own fetches."""
        if self.marks.purpose(request, quiet=True) in (BLOCKLIST, SCHEMA):
            return None
        host = url_host(request.url)
        hit = self.held.domains.match(host)
        if hit is None:
            return None
        return "R3", (
            f"host {host} was added to the operator blocklist (entry {hit[0]!r}) while the "
            "request waited for its turn: not sent"
        )

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        check_configuration(crawler)
        return cls(crawler)

    def _transport_ok(self, url: str) -> bool:
        scheme = urlsplit(url).scheme.lower()
        return scheme == "https" or (self.allow_http and scheme == "http")

    async def process_request(self, request: Request) -> Request | None:
        if self.marks.purpose(request) in (BLOCKLIST, SCHEMA):
            # The operator's documents do not wait for themselves, but every
            # redirect hop of theirs is checked: https only, and no hop into
            # a host the list in force blocks.
            self._check_operator_request(request)
            return None
        await self.refresher.ensure_fresh()
        held = self.held
        while held.lost is not None and time.monotonic() < held.recover_until:
            # Another worker may hold the list Redis lost and publish it again
            # within a heartbeat: worth waiting for, rather than deny now.
            await self.refresher.look_for_shared(force=True)
            if held.lost is not None:
                await asyncio.sleep(0.5)
        unknown = self.refresher.unknown()
        host = url_host(request.url)
        # a host an entry in force blocks (WALSH_BLOCKLIST_EXTRA) is decided now
        if (
            unknown is not None
            and host not in self._operator_hosts
            and self.held.domains.match(host) is None
        ):
            waiting = await self._wait_for_list(request, unknown)
            if waiting is not None:
                return waiting
        self._deny_if_blocked(request)
        return None

    async def _wait_for_list(self, request: Request, unknown: Outage) -> Request | None:
        """*request* given back to wait for the list's next try; else, once
        the wait is over, denied (a lost list) or let on (none was ever
        adopted: spec §5.2's fail-open). The bundle's own requests, fetched
        inside another request's chain, cannot wait: they are refused."""
        if self.held.lost is None and self.waits.gave_up(unknown):
            return None  # the first list's wait ended: spec §5.2's fail-open
        if self.marks.is_direct(request):
            reason = f"{unknown.describe()}: nothing is sent while no blocklist is in force"
            deny(self.crawler, logger, request, "R3", reason, lasting=False)
        # a list never adopted: the refresh said at WARNING what the wait does
        quiet = self.held.lost is None
        waiting = await self.waits.hold(request, unknown, self.held.next_check, quiet=quiet)
        if waiting is not None:
            return waiting
        if self.held.lost is not None:
            reason = self.waits.reason(unknown, self.held.lost)
            deny(self.crawler, logger, request, "R3", reason, outcome="skipped",
                 record={"unknown": unknown.as_record()}, lasting=False)  # fmt: skip
        if self._failed_open != unknown.since:
            self._failed_open = unknown.since
            self.crawler.stats.inc_value("walsh/blocklist/failed_open")
            # the runs after this one do not wait for it again
            await self.held.note_first_wait_over(unknown)
            logger.error(
                "%(what)s and no list was ever adopted: the wait for it ended "
                "(WALSH_POLICY_WAIT), so the crawl goes on with only WALSH_BLOCKLIST_EXTRA "
                "(%(n)d entries), as spec §5.2 says for a first-ever failure; the list is "
                "tried again in the background and adopted as soon as it answers, and later "
                "runs do not wait for it again",
                {"what": unknown.describe(), "n": len(self.held.extra)},
            )
        return None

    def _deny_if_blocked(self, request: Request) -> None:
        host = url_host(request.url)
        hit = self.held.domains.match(host)
        if hit is None:
            if self.held.lost is not None and host not in self._operator_hosts:
                deny(self.crawler, logger, request, "R3", self.held.lost, lasting=False)
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
