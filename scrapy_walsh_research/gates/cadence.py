"""R8: run infrequently. A target fetched (or answered 304) less than
``WALSH_RUN_INTERVAL`` seconds ago is skipped with no request at all.

The gate asks a cadence store
(:class:`~scrapy_walsh_research.state.protocols.CadenceStore`, one per
crawler, from its context) for each target's
last fetch (persisted by canonical URL, so the rule holds across runs, which
is where it matters) and, with a fleet, for the claim a worker holds on a
target while it fetches it, and its release; the store's backends are in
:mod:`scrapy_walsh_research.state.cadence` and
:mod:`scrapy_walsh_research.state.redis.cadence`. The record pipeline stamps a
target's fetch with its record (:meth:`CadenceMiddleware.stamp`,
:meth:`CadenceMiddleware.release`): the gate is the crawler's
:class:`~scrapy_walsh_research._runtime.context.CadenceStamps`.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING

from scrapy_walsh_research._runtime.context import InContext
from scrapy_walsh_research._runtime.marks import target_key
from scrapy_walsh_research.core.timestamps import utc_iso
from scrapy_walsh_research.errors import deny

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self

logger = logging.getLogger(__name__)


class CadenceMiddleware(InContext):
    """R8. With the ``targets`` spider, a target's fetch time is written with
    its record (:class:`~scrapy_walsh_research.records.RecordPipeline`), so
    a crash between the two never leaves a line skipped without a record;
    other spiders have no records, and it is written when the response
    arrives. With ``WALSH_REDIS_URL`` a target is also *claimed* while it is
    fetched, so two workers never fetch one URL at once (the same list
    enqueued twice)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        context = self.context
        self.stats = crawler.stats
        self.interval = context.settings.run_interval
        self.store = context.cadence_store
        self.marks = context.marks
        # Last fetch per target, read once from the store: the frontier asks
        # on every scheduling decision (from this cache only, no I/O), and
        # this middleware is the only writer. Bounded: oldest first out, and
        # read back from the store by process_request (the gate never
        # answers from a missing entry).
        self._last: OrderedDict[str, float | None] = OrderedDict()
        self.cache_size = context.settings.cadence_cache_size
        context.would_deny.append(self)
        context.loads_ahead.append(self)
        context.cadence = self  # the record pipeline stamps with it

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def _due_at(self, request: Request) -> tuple[float, float] | None:
        """(last fetch, due time) when the target is not due yet, else None.

        Every attempt is checked, hops and retries too: a target's own fetch
        writes its time only on its final 2xx/304, after which nothing of it
        is sent again, so no ``retry_times``/``redirect_urls`` meta (which a
        project could set) is needed to tell a first attempt apart.
        """
        if self.interval <= 0 or not self.marks.is_target(request):
            return None
        last = self._last.get(target_key(request))
        if last is None or self.store.time() - last >= self.interval:
            return None
        return last, last + self.interval

    def would_deny(self, request: Request) -> bool:
        """A target fetched within the interval, as cached (``WouldDeny``)."""
        return self._due_at(request) is not None

    async def load_ahead(self, request: Request) -> None:
        """A queued target's last fetch, read ahead (``LoadsAhead``)."""
        await self._load(request)

    async def _load(self, request: Request) -> None:
        if self.interval > 0 and self.marks.is_target(request):
            key = target_key(request)
            if key not in self._last:
                last = await self.store.last_fetch(key)
                if key not in self._last:
                    self._remember(key, last)

    def _remember(self, key: str, last: float | None) -> None:
        self._last[key] = last
        while len(self._last) > self.cache_size:
            self._last.popitem(last=False)
            self.stats.inc_value("walsh/cadence/cache_evicted")

    async def process_request(self, request: Request) -> None:
        await self._load(request)
        due = self._due_at(request)
        if due is None:
            if (
                self.store.claims
                and self.interval > 0
                and self.marks.is_target(request)
                and self._commits_with_records()
            ):
                await self._claim_for_fleet(request)
            return
        last, due_at = due
        reason = (
            f"fetched {utc_iso(last)}, less than WALSH_RUN_INTERVAL={self.interval:g} s ago; "
            f"due again {utc_iso(due_at)}. To fetch it now anyway, run with -s WALSH_RUN_INTERVAL=0"
        )
        deny(self.crawler, logger, request, "R8", reason, outcome="skipped")

    def _commits_with_records(self) -> bool:
        """Whether the spider's target source writes the fetch time with each
        record (a project's own spider offers none: written on the answer)."""
        source = self.context.targets
        return source is not None and source.commits_cadence

    async def _claim_for_fleet(self, request: Request) -> None:
        """Claim *request*'s target for this worker (its hops and retries claim
        it again: a claim this worker holds is granted again)."""
        key = target_key(request)
        status, value = await self.store.claim(key, self.interval)
        if status == "recent":
            self._remember(key, float(value))
            await self.process_request(request)  # denies, with the reason
        if status == "taken":
            reason = (
                f"being fetched now by another worker ({value}) for another list line; "
                "one fetch per WALSH_RUN_INTERVAL"
            )
            deny(self.crawler, logger, request, "R8", reason, outcome="skipped")

    async def stamp(self, key: str, at: float | None = None, *, written: bool = False) -> None:
        """The target *key* was fetched (or answered 304) at *at* (its
        record's ``fetched_at``, so an R8 skip names the time its record
        gives), or now; *written*: the record pipeline already wrote it (in
        Redis, with the record)."""
        if at is None:
            at = self.store.time()
        if not written:
            await self.store.note_fetch(key, at)
        self._remember(key, at)

    async def process_response(self, request: Request, response: Response) -> Response:
        if (
            not self._commits_with_records()
            and self.marks.is_target(request)
            and (200 <= response.status < 300 or response.status == 304)
        ):
            await self.stamp(target_key(request))
        return response

    async def release(self, key: str) -> None:
        """This worker no longer fetches the target *key* (its record is
        written): with a fleet, its claim goes, if it is still this worker's."""
        await self.store.release(key)
