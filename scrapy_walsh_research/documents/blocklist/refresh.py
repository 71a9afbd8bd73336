"""When the blocklist is fetched again, and by which worker of a fleet.

Every run starts from the list kept before and fetches it again once its
``refresh`` has passed (spec: cache it for the contract's refresh duration).
Any failure keeps the list in force and tries again after
``WALSH_BLOCKLIST_RETRY_DELAY``: an outage must never un-block an opt-out.
While no list is in force (none adopted yet, or the one adopted is lost), a
failure that passes (5xx, 429, a timeout, a connection or DNS failure; any
failure while a list is lost) leaves the list unknown: the targets wait for
the next try, which comes sooner (``WALSH_POLICY_RETRY_DELAY``, doubling,
with jitter, at most ``WALSH_BLOCKLIST_RETRY_DELAY``), within
``WALSH_POLICY_WAIT`` (:class:`~scrapy_walsh_research.gates.blocklist.middleware.
BlocklistMiddleware` holds them). Only a first-ever failure the operator's
host answered (a 404, an invalid document), or the end of that wait, lets
the crawl go on with no list, as spec §5.2 says.
With shared state, one worker fetches while the others wait and adopt what
it stored, or share its failure and its next try: N workers starting
together send one request to the operator's host, not N.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import random
import time
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import IgnoreRequest
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThread

from scrapy_walsh_research._runtime.marks import BLOCKLIST, HostBusy, internal_fetch
from scrapy_walsh_research.core.blocklist.document import INLINE_PARSE_BYTES, BlocklistError
from scrapy_walsh_research.core.outage import Outage, retry_delay
from scrapy_walsh_research.core.timestamps import duration_text, utc_iso
from scrapy_walsh_research.core.urls import url_host
from scrapy_walsh_research.documents.blocklist.store import CLOCK_TOLERANCE, STATE_NAMESPACE
from scrapy_walsh_research.documents.names import NameLookups
from scrapy_walsh_research.documents.waits import DocumentWaits
from scrapy_walsh_research.state import FlightBusy

if TYPE_CHECKING:
    from scrapy_walsh_research._runtime.context import CrawlContext
    from scrapy_walsh_research.documents.blocklist.build import Adopted, ListBuilder
    from scrapy_walsh_research.documents.blocklist.schema import BlocklistSchema
    from scrapy_walsh_research.documents.blocklist.store import HeldList
    from scrapy_walsh_research.scheduling.pacer import Pacer

logger = logging.getLogger(__name__)

#: the outcome of the last refresh, so workers waiting on another's fetch
#: share its failure (and its next try) instead of fetching in turn
ATTEMPT_KEY = "attempt"
#: how long a refresh of a list in force may wait for the operator host
SHORT_WAIT = 2.0
#: the blocklist's name in messages about it
DOCUMENT = "the operator blocklist"
#: the longest exception text kept in a failure's description
MAX_WHY = 200
#: what a user changes when the operator's list cannot be read from here
CHANGE_HINT = (
    "To read another list, set WALSH_BLOCKLIST_URL; in a lab without internet, serve a "
    "list locally (`python -m http.server 8000 -d docs/examples` in a checkout) and crawl "
    "with -s WALSH_BLOCKLIST_URL=http://127.0.0.1:8000/blocklist.json "
    "-s WALSH_BLOCKLIST_ALLOW_HTTP=True."
)


class Refresher:
    """Keeps the held list fresh: restores it once, then fetches, validates
    and adopts it whenever it is due, one worker of a fleet at a time."""

    def __init__(
        self,
        context: CrawlContext,
        *,
        held: HeldList,
        schema: BlocklistSchema,
        builder: ListBuilder,
        pacer: Pacer,
        retry_delay: float,
        first_retry_delay: float,
        max_bytes: int,
    ) -> None:
        crawler = self.crawler = context.crawler
        self.stats = crawler.stats
        self.marks = context.marks
        self.waits = context.service(DocumentWaits)
        self.names = context.service(NameLookups)
        self.held = held
        self.schema = schema
        self.builder = builder
        self.pacer = pacer
        self.retry_delay = retry_delay
        #: the first retry while no list is in force (doubling up to retry_delay)
        self.first_retry_delay = first_retry_delay
        self.max_bytes = max_bytes
        self.url = held.url
        self.store = held.store
        self._pending: Deferred[None] | None = None
        self._restored = False
        self._next_look = 0.0

    async def ensure_fresh(self) -> None:
        held = self.held
        if held.lost is not None and self._restored:
            await self.look_for_shared()
        if self._restored and self.store.time() < held.next_check:
            return
        if self._pending is None:
            self._pending = Deferred()
            try:
                if not self._restored:
                    # Every run starts from the list adopted before (by an
                    # earlier run or another worker); it is fetched again
                    # once its refresh duration has passed (spec: cache it
                    # for the contract's refresh duration).
                    await held.restore()
                    await held.purge_extra()
                    self._restored = True
                if self.store.time() >= held.next_check:
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
        held = self.held
        before = held.adopted.fetched_at if held.adopted else None
        waiting_since = self.store.time()
        in_force = held.adopted is not None and held.lost is None
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
            held.next_check = self.store.time() + 1.0
            return
        if release is not None:
            try:
                await self.refresh()
            finally:
                await release()
            return
        if not await self._adopt_from_worker(before) and not await self._failed_by_worker(
            waiting_since
        ):
            await self.refresh()  # nothing to adopt and no failure recorded: try ourselves

    async def _adopt_from_worker(self, before: float | None) -> bool:
        """Adopt the list the worker we waited for stored, if it stored one."""
        found = await self.held.stored(self.store)
        stored = found[0] if found is not None else None
        if (
            found is not None
            and stored is not None
            and stored.url == self.url
            and (stored.fetched_at != before)
        ):
            await self.held.adopt(stored, persist=False, canonical=found[1])
            self.stats.inc_value("walsh/blocklist/adopted_from_worker")
            return True
        return False

    async def _failed_by_worker(self, waiting_since: float) -> bool:
        """Whether the worker we waited for failed: its next try is then the
        fleet's."""
        attempt = await self.store.get(STATE_NAMESPACE, ATTEMPT_KEY)
        if not (
            isinstance(attempt, dict)
            and not attempt.get("ok")
            and float(attempt.get("at", 0)) >= waiting_since - CLOCK_TOLERANCE
        ):
            return False
        held = self.held
        held.next_check = float(attempt.get("next_check", 0))
        if isinstance(attempt.get("outage"), dict) and (held.adopted is None or held.lost):
            held.outage = Outage(**attempt["outage"])
        self.stats.inc_value("walsh/blocklist/failed_by_worker")
        # the fleet's failure is ours too: with no list and a history Redis
        # may have lost, this worker must not fail open either
        await self._unless_history_complete()
        # nor wait again for a first list the fleet already waited out
        await self._waive_if_waited_out()
        logger.warning(
            "Blocklist refresh by another worker failed (%(why)s); this worker keeps to what "
            "is in force until the fleet's next try in %(d).0f s.",
            {"why": attempt.get("why"), "d": held.next_check - self.store.time()},
        )
        return True

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
        if self.held.adopted is not None:
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
        held = self.held
        self.stats.inc_value("walsh/blocklist/fetch")
        status: int | None = None
        try:
            await self.schema.ensure(max_wait=self._max_wait())
            response = await internal_fetch(
                self.marks, self.url, BLOCKLIST, maxsize=self.max_bytes, max_wait=self._max_wait()
            )
            if len(response.body) > INLINE_PARSE_BYTES:
                large.append(response)
            if not 200 <= response.status < 300:
                status = response.status
                raise BlocklistError(f"HTTP {response.status}")
            adopted, canonical = await self._unchanged(
                response.body
            ) or await self.builder.parse_off_reactor(
                response.body, url=self.url, fetched_at=self.store.time()
            )
        except HostBusy as exc:
            self.stats.inc_value("walsh/blocklist/deferred")
            held.next_check = self.store.time() + exc.ready_in
            logger.info(
                "Blocklist refresh deferred: the operator host %(host)s is not ready for "
                "%(s).0f s; the list in force stays until then.",
                {"host": exc.host, "s": exc.ready_in},
            )
            return
        except Exception as exc:
            await self._failed(exc, status)
            await self._share_attempt(ok=False, why=str(exc))
            return
        await held.adopt(adopted, persist=True, canonical=canonical)
        await self._share_attempt(ok=True, why="")
        self.stats.inc_value("walsh/blocklist/adopted")
        logger.info(
            "Blocklist adopted from %(url)s: %(n)d entries, refresh %(r).0f s (schema: %(schema)s)",
            {"url": self.url, "n": len(held.domains), "r": adopted.refresh,
             "schema": self.schema.names()},
        )  # fmt: skip

    async def _unchanged(self, body: bytes) -> tuple[Adopted, bytes] | None:
        """The list in force, fetched again now, when *body* is byte for byte
        the document it was adopted from: nothing to validate or index again
        (a 10^6-entry list costs seconds of CPU per refresh otherwise)."""
        adopted = self.held.adopted
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

    async def _share_attempt(self, *, ok: bool, why: str) -> None:
        if not self.store.shared:
            return  # nobody to share with
        attempt = {"at": self.store.time(), "ok": ok, "next_check": self.held.next_check,
                   "why": why}  # fmt: skip
        outage = self.held.outage
        if not ok and outage is not None:
            # the fleet's wait: the workers that waited for this fetch wait
            # for the same next try, counted from the same first failure
            attempt["outage"] = dataclasses.asdict(outage)
        await self.store.put(STATE_NAMESPACE, ATTEMPT_KEY, attempt)

    async def _failed(self, exc: Exception, status: int | None) -> None:
        await self._unless_history_complete()
        held = self.held
        now = self.store.time()
        # A failure that passes says nothing of the list: while none is in
        # force, it is unknown (and while one is lost, any failure leaves it so)
        passing = (status is not None and (status == 429 or status >= 500)) or (
            status is None and not isinstance(exc, (BlocklistError, IgnoreRequest))
        )
        waits = self.waits
        if (held.adopted is not None and held.lost is None) or not (passing or held.lost):
            if held.outage is not None:  # an answer that decides: the wait is over
                held.outage = None
                await waits.known("blocklist", self.url, read=False)
            self._failed_log(exc, self.retry_delay)
            return
        unresolved = await self.names.why(url_host(self.url), exc)
        if status is not None:
            why = f"answered {status}"
        elif isinstance(exc, BlocklistError):
            why = f"was rejected ({str(exc)[:MAX_WHY]})"
        elif unresolved is not None:
            # the operator's host exists: a name it does not find is this
            # machine's resolver (no internet, a lab's DNS), a failure that
            # passes, not an answer
            why = f"fetch failed ({unresolved.text})"
        else:
            why = f"fetch failed ({type(exc).__name__}: {str(exc)[:MAX_WHY]})"
        before = held.outage
        tries = before.tries + 1 if before is not None else 1
        delay = retry_delay(self.first_retry_delay, tries, self.retry_delay, random.random())
        held.outage = Outage(
            kind="blocklist", document=DOCUMENT, url=self.url, why=why, tries=tries,
            since=before.since if before is not None else now, last=now, retry_at=now + delay,
            mixed=before is not None and (before.mixed or before.why != why), status=status,
        )  # fmt: skip
        over = await self._waive_if_waited_out()
        if over is None:
            # a last try just before the wait's bound rather than none within it
            retry_at = waits.last_try(held.outage, self.first_retry_delay)
            held.outage = dataclasses.replace(held.outage, retry_at=retry_at)
        if held.lost is not None:
            self._failed_log(exc, held.outage.retry_at - now)
            return
        self.stats.inc_value("walsh/blocklist/fetch_failed")
        held.next_check = held.outage.retry_at
        if before is None:
            self._first_unknown_log(held.outage, over)
        else:
            logger.info(
                "Blocklist fetch from %(url)s failed again (%(why)s; try %(n)d); the next "
                "try in %(d)s",
                {"url": self.url, "why": why, "n": tries,
                 "d": duration_text(held.next_check - now)},
            )  # fmt: skip

    async def _waive_if_waited_out(self) -> dict[str, Any] | None:
        """When no list was ever adopted and an earlier run already waited
        for it (WALSH_POLICY_WAIT) in vain, the first-ever failure fails
        open at once (spec §5.2): the targets do not wait for the list
        again, while it is still tried on its schedule and adopted as soon
        as it answers. The record of that wait, or None (nothing waived)."""
        held = self.held
        if held.outage is None:
            return None
        over = await held.first_wait_over()
        if over is not None:
            self.waits.waive(held.outage)
        return over

    def _first_unknown_log(self, outage: Outage, over: dict[str, Any] | None) -> None:
        """The one WARNING a crawl gives when it meets no list it can read
        (none ever adopted): the URL, what the crawl does meanwhile, and the
        setting to change."""
        waits = self.waits
        values = {
            "url": self.url, "why": outage.why,
            "next": duration_text(outage.retry_at - self.store.time()),
            "bound": duration_text(waits.bound), "change": CHANGE_HINT,
        }  # fmt: skip
        if over is None:
            logger.warning(
                "The operator blocklist %(url)s %(why)s, and no list was ever adopted here. "
                "It is read before any request (R3), so nothing is sent while it is unknown: "
                "it is tried again in %(next)s and waited for up to WALSH_POLICY_WAIT "
                "(%(bound)s); then the crawl goes on without it, as the spec says for a "
                "first-ever failure, and later runs do not wait for it again. %(change)s",
                values,
            )
            return
        logger.warning(
            "The operator blocklist %(url)s %(why)s, and no list was ever adopted here. A run "
            "already waited WALSH_POLICY_WAIT for it (until %(at)s) and it never answered, so "
            "this crawl does not wait: it goes on without it, as the spec says for a "
            "first-ever failure, tries it again (next in %(next)s) and adopts it as soon as "
            "it answers. %(change)s",
            {**values, "at": utc_iso(float(over["at"]))},
        )

    def unknown(self) -> Outage | None:
        """Why no list is in force and targets must wait for one, or None:
        a list is in force, or none was ever adopted and the operator's host
        answered (the spec's first-ever failure: no list)."""
        held = self.held
        if held.adopted is not None and held.lost is None:
            return None
        if held.outage is not None:
            return held.outage
        if held.lost is None:
            return None
        now = self.store.time()
        return Outage(
            kind="blocklist", document=DOCUMENT, url=self.url, why="is lost", tries=0,
            since=now, last=now, retry_at=max(now, held.next_check),
        )  # fmt: skip

    async def _unless_history_complete(self) -> None:
        """After a failed fetch with no list held: deny every host unless the
        shared store vouches that no list was ever adopted."""
        held = self.held
        if held.adopted is None and held.lost is None and not await self.store.history_complete():
            # "First-ever" is what the spec fails open on; with a Redis that
            # lost (or may have lost) the fleet's state, nobody can tell a
            # first fetch from a list the fleet adopted and Redis forgot.
            self.stats.inc_value("walsh/blocklist/history_unknown")
            held.mark_lost(
                "no blocklist is held and the fleet's history in Redis is incomplete (Redis "
                "restarted without AOF appendfsync always, failed over, or lost the fleet's "
                "records; or, without AOF always, nothing vouches for what it held before "
                "them), so a list the fleet adopted may be lost: no host is contacted until a "
                "list is fetched or another worker publishes its copy",
                wait_for_fleet=True,
            )

    def _failed_log(self, exc: Exception, delay: float) -> None:
        held = self.held
        self.stats.inc_value("walsh/blocklist/fetch_failed")
        held.next_check = self.store.time() + delay
        if isinstance(exc, BlocklistError):
            self.stats.inc_value("walsh/blocklist/rejected")
        if held.lost is not None:
            logger.error(
                "Blocklist fetch from %(url)s failed (%(exc)s) and the list adopted before is "
                "lost: no target is sent until a list is adopted (they wait, within "
                "WALSH_POLICY_WAIT). Next try in %(d).0f s.",
                {"url": self.url, "exc": exc, "d": delay},
            )
        elif held.adopted is not None:
            logger.warning(
                "Blocklist refresh from %(url)s failed (%(exc)s); retaining the last adopted "
                "list (%(n)d entries, fetched %(age).0f s ago from %(src)s). "
                "Next try in %(d).0f s.",
                {
                    "url": self.url,
                    "exc": exc,
                    "n": len(held.domains),
                    "age": self.store.time() - held.adopted.fetched_at,
                    "src": held.adopted.url,
                    "d": delay,
                },
            )
        else:
            logger.error(
                "Blocklist fetch from %(url)s failed (%(exc)s) and no list was ever adopted: "
                "crawling with only WALSH_BLOCKLIST_EXTRA (%(n)d entries), as spec §5.2 says "
                "for a first-ever failure. Next try in %(d).0f s.",
                {"url": self.url, "exc": exc, "n": len(held.extra), "d": delay},
            )

    async def look_for_shared(self, *, force: bool = False) -> None:
        """While no list is in force for a loss, adopt one another worker
        published (or fetched) as soon as it is in the shared store."""
        held = self.held
        if held.local is self.store or (not force and time.monotonic() < self._next_look):
            return
        self._next_look = time.monotonic() + 1.0
        found = await held.stored(self.store, quiet=True)
        if found is not None and held.lost is not None:
            await held.adopt(found[0], persist=False, canonical=found[1])
            self.stats.inc_value("walsh/blocklist/adopted_from_worker")
            logger.info(
                "Blocklist: adopted the list another worker published (%(n)d entries).",
                {"n": len(held.domains)},
            )
