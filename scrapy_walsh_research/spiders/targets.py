"""The ``targets`` spider: fetch a declared list, one record per line.

``scrapy crawl targets -a list=urls.txt``, or, with ``WALSH_REDIS_URL``, any
number of workers running ``scrapy crawl targets -a redis_key=targets`` on a
list pushed by ``scrapy walsh-enqueue urls.txt`` (the format:
:mod:`~scrapy_walsh_research.core.target_list`). Blank lines and ``#``
comments are skipped; every other line yields exactly one record, whatever
happens to it: a line that is no URL or one longer than ``URLLENGTH_LIMIT``,
a body no parser can read, a parser that fails, a response past
``DOWNLOAD_MAXSIZE`` each give the line its record with the reason.
Bodies are parsed in a worker thread, so a slow parse never holds the reactor.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import scrapy
from scrapy.spidermiddlewares.httperror import HttpError
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.threads import deferToThread

from scrapy_walsh_research._runtime.context import InContext
from scrapy_walsh_research._runtime.marks import LLMS
from scrapy_walsh_research._runtime.meta import (
    FEED_META,
    GAVE_UP_META,
    INTERNAL_META,
    LLMS_RECORD_META,
    PREFERENCES_META,
    TARGET_META,
)
from scrapy_walsh_research.components import url_length_limit
from scrapy_walsh_research.core.records import TICKET_KEY, new_record, response_metadata
from scrapy_walsh_research.core.target_list import ListLine, read_list, unreadable, url_problem
from scrapy_walsh_research.core.timestamps import utc_iso
from scrapy_walsh_research.core.urls import canonical_url, is_http_url, origin_of, url_host
from scrapy_walsh_research.errors import (
    WalshConfigurationError,
    WalshDenied,
    WalshStopped,
    failure_reason,
    refuse_start,
)
from scrapy_walsh_research.scheduling.intake import wait_for_feed_room, wait_for_list_room
from scrapy_walsh_research.settings import defaults
from scrapy_walsh_research.spiders.llms_probes import LlmsProbes
from scrapy_walsh_research.spiders.size_cap import SizeCap
from scrapy_walsh_research.spiders.stopping import ListStop
from scrapy_walsh_research.spiders.structured import (
    HTML_TYPES,
    extract,
    markdown_metadata,
    media_type,
)
from scrapy_walsh_research.state.namespaces import SEEN

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from scrapy import Request
    from scrapy.http import Response
    from scrapy.settings import BaseSettings
    from twisted.python.failure import Failure
    from typing_extensions import Self

    from scrapy_walsh_research.state import StateStore
    from scrapy_walsh_research.state.redis.target_queue import RedisFeed

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: how often a worker with an empty feed looks again while other workers
#: still hold lines in flight (one small script each time; at the end of a
#: list every idle worker waits for the last line, then exits this soon)
FEED_WAIT_S = 0.2
#: bodies up to this size are read on the reactor: at about 5 s per MiB in
#: the worst case (junk read leniently), 8 KiB stays near 40 ms
INLINE_PARSE_BYTES = 8 * 1024
#: Invalid lines logged one by one; past it they are only counted (and recorded).
MAX_INVALID_LOGGED = 20
#: Longest exception text kept in a record.
MAX_ERROR_TEXT = 200
#: start() hands the reactor back after this many lines. While the downloader
#: is full (CONCURRENT_REQUESTS requests in it: one on the wire, the others
#: prepared meanwhile, or 1 with another scheduler) Scrapy's engine reads
#: start() without waiting in between, and while the scheduler has room
#: start() awaits nothing that suspends: the first 10^4 lines (WALSH_LIST_LOOKAHEAD) went out in one
#: reactor callback, 0.1-0.37 s for 400-1200 lines (py-spy, stall_bench). At
#: ~0.25 ms a line (request, scope mark, frontier), 32 lines stay near 8 ms.
START_BURST = 32


def _ticket(ticket: dict[str, str] | None) -> dict[str, Any]:
    """The record field that carries a fed line's ticket to the pipeline."""
    return {TICKET_KEY: ticket} if ticket is not None else {}


class TargetsSpider(InContext, scrapy.Spider):
    """The crawler's target source
    (:class:`~scrapy_walsh_research._runtime.context.TargetSource`): it hands
    itself to the crawler's context, where the gates and the progress line
    ask for it."""

    name = "targets"
    #: records carry the cadence (RecordPipeline), not the responses
    commits_cadence = True
    store: StateStore
    size_cap: SizeCap
    llms: LlmsProbes
    #: what a stopped run owes the lines (their records, or the feed's queue)
    stop: ListStop
    probe_llms: bool
    only_new: bool
    list_lookahead: int = defaults.WALSH_LIST_LOOKAHEAD
    _invalid_logged: int = 0
    _url_length_limit: int = 0

    @property
    def reads_shared_feed(self) -> bool:
        """Whether lines come from a fleet's feed (Redis), a few at a time,
        rather than from a list file this worker reads ahead in."""
        return self._feed is not None

    def __init__(
        self, list: str | None = None, redis_key: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if bool(list) == bool(redis_key):
            refuse_start(
                logger,
                "The targets spider needs one URL list: scrapy crawl targets -a list=FILE, "
                "or -a redis_key=KEY (with WALSH_REDIS_URL) for a list fed through Redis.",
            )
        self.list_path = Path(list).expanduser() if list else None  # -a list=~/urls.txt
        self.redis_key = redis_key
        if self.list_path is not None:
            problem = unreadable(self.list_path)
            if problem is not None:
                refuse_start(logger, f"URL list {str(self.list_path)!r} {problem}.")
        self._feed: RedisFeed | None = None
        #: canonical URL -> the first line that declared it (this process's list)
        self.seen: dict[str, int] = {}
        #: targets not yet recorded, per host, and the list's lines: counted
        #: by start() (None until then; a fed list's total stays unknown)
        self.host_left: Counter[str] | None = None
        self.targets_total: int | None = None

    @classmethod
    def update_settings(cls, settings: BaseSettings) -> None:
        """Each response gives one record, so Scrapy's per-response item
        concurrency (``CONCURRENT_ITEMS``, 100 tasks started for every
        callback's output) buys nothing here and cost 1.3 ms of CPU per
        request (250 hosts x 16 pages: 22.2 s -> 16.5 s for the crawl). Set at
        add-on priority: a project or spider setting still wins."""
        super().update_settings(settings)
        settings.set("CONCURRENT_ITEMS", 1, priority="addon")

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> Self:
        spider = super().from_crawler(crawler, *args, **kwargs)
        context = spider.context
        context.targets = spider
        spider.store = context.store
        spider.llms = LlmsProbes(crawler, spider.store)
        spider.stop = ListStop(spider, context)
        walsh = context.settings
        spider.probe_llms = walsh.llms_probe
        spider.only_new = walsh.only_new
        spider.list_lookahead = walsh.list_lookahead
        spider._url_length_limit = url_length_limit(crawler.settings)
        spider.size_cap = SizeCap(
            crawler, lambda r: TARGET_META in r.meta or LLMS_RECORD_META in r.meta
        )
        if spider.redis_key:
            if not walsh.redis_url:
                refuse_start(
                    logger,
                    f"-a redis_key={spider.redis_key} reads targets from Redis: "
                    "set WALSH_REDIS_URL (e.g. -s WALSH_REDIS_URL=redis://localhost:6379/0).",
                )
            from scrapy_walsh_research.state.redis.target_queue import RedisFeed

            redis = context.redis
            assert redis is not None  # WALSH_REDIS_URL is set
            spider._feed = RedisFeed(redis, spider.redis_key)
        return spider

    async def _lines(self) -> AsyncIterator[tuple[ListLine, str, str, dict[str, str] | None]]:
        """(line, list name, dedup scope, feed ticket) of every declared line:
        a fed line's scope is the batch it was enqueued in, and its ticket
        acknowledges it once its record is stored."""
        if self._feed is not None:
            while True:
                await wait_for_feed_room(self.context)
                try:
                    raw, pending, wait = await self._feed.take()
                except WalshConfigurationError:
                    return  # the Redis guard cannot run there: it said why, and stops the crawl
                if wait > 0:
                    # Redis lost or rolled back history: the fleet recovers
                    # it before lines are handed out again
                    await asyncio.sleep(min(wait, 1.0))
                    continue
                if raw is None:
                    if not pending:
                        return
                    # Other workers hold lines in flight: if one dies, its
                    # lines come back to the queue, and someone must be here.
                    await asyncio.sleep(FEED_WAIT_S)
                    continue
                try:
                    item = json.loads(raw)
                    lineno, text = int(item["line"]), str(item["url"])
                    # enqueued with its reason when the list reader found it
                    # invalid; checked again here for an item pushed by hand
                    line = ListLine(lineno, text, item.get("invalid") or url_problem(text))
                except (ValueError, TypeError, KeyError, AttributeError) as exc:
                    logger.error("Unreadable item in the feed, dropped: %(raw)r (%(exc)s)",
                                 {"raw": raw[:200], "exc": exc})  # fmt: skip
                    await self._feed.drop(raw)
                    continue
                source = str(item.get("list") or "redis")
                batch = str(item.get("batch") or source)
                yield line, source, batch, self._feed.ticket(raw, batch)
        assert self.list_path is not None
        for line in read_list(self.list_path):
            await wait_for_list_room(self.context, self.list_lookahead)
            yield line, str(self.list_path), str(self.list_path), None

    async def _claim(self, seen: dict[str, int], scope: str, canon: str, lineno: int) -> int | None:
        """The line in *scope* that already declared *canon* (in any worker),
        or None."""
        if self._feed is not None:
            return await self._feed.claim(scope, canon, lineno)
        first = seen.setdefault(canon, lineno)
        return None if first == lineno else first

    def _count_targets(self) -> None:
        """How many lines, and targets per host, the list holds (for the
        progress log): one pass over the file, no request. A fed list's size
        is the fleet's, unknown here."""
        left: Counter[str] = Counter()
        self.host_left = left
        if self.list_path is None:
            return
        total = 0
        for line in read_list(self.list_path):
            total += 1
            if line.invalid is None:
                left[url_host(line.text)] += 1
        self.targets_total = total

    async def start(self) -> AsyncIterator[Any]:
        # a thread: a list of 10^6 lines takes seconds to count (5 us a line)
        await maybe_deferred_to_future(deferToThread(self._count_targets))
        if self.targets_total == 0:
            logger.warning("URL list %r has no targets: only comments and blank lines",
                           str(self.list_path))  # fmt: skip
        read = 0
        async for line, source, scope, ticket in self._lines():
            read += 1
            if read % START_BURST == 0:
                await asyncio.sleep(0)  # let the reactor run (see START_BURST)
            if self.stop.stopping:
                return  # this line and the rest get their records from the stop
            lineno, text = line.number, line.text
            self.stop.handed_out = lineno
            request, invalid = self._target_request(line, ticket)
            if request is None:
                self._log_invalid(source, lineno, str(invalid), text)
                yield self._record(
                    line=lineno,
                    url=text,
                    canonical_url=None,
                    outcome="invalid",
                    reason=invalid,
                    **_ticket(ticket),
                )
                continue
            canon = request.meta[TARGET_META]["canonical_url"]
            first = await self._claim(self.seen, scope, canon, lineno)
            if first is not None:
                yield self._record(
                    line=lineno,
                    url=text,
                    canonical_url=canon,
                    outcome="duplicate",
                    reason=f"same canonical URL as line {first}",
                    **_ticket(ticket),
                )
                continue
            yield request

    def _log_invalid(self, source: str, lineno: int, reason: str, text: str) -> None:
        """A WARNING per invalid line, up to :data:`MAX_INVALID_LOGGED`: a file
        that is no list at all (a binary passed by mistake) gives hundreds."""
        self._invalid_logged += 1
        if self._invalid_logged <= MAX_INVALID_LOGGED:
            logger.warning(
                "%(file)s line %(line)d is invalid (%(reason)s): %(text)r",
                {"file": source, "line": lineno, "reason": reason, "text": text[:200]},
            )
        if self._invalid_logged == MAX_INVALID_LOGGED:
            logger.warning(
                "%(n)d invalid lines: further ones are not logged; each still gets its "
                "record, and walsh/outcome/invalid counts them", {"n": MAX_INVALID_LOGGED},
            )  # fmt: skip

    def _target_request(
        self, line: ListLine, ticket: dict[str, str] | None
    ) -> tuple[Request | None, str | None]:
        """The request for a list line, or None and why the line is invalid.

        Every reason a line would get no request is decided here, so the line
        gets its record: Scrapy's ``UrlLengthMiddleware`` would drop a longer
        URL than ``URLLENGTH_LIMIT`` from the start requests with no trace.
        """
        if line.invalid is not None:
            return None, line.invalid
        try:
            request = scrapy.Request(
                line.text,
                callback=self.parse_target,
                errback=self.target_failed,
                dont_filter=True,  # dedup is by canonical URL, in start()
                meta={
                    TARGET_META: {
                        "line": line.number,
                        "url": line.text,
                        "canonical_url": canonical_url(line.text),
                    },
                    FEED_META: ticket,
                },
            )
        except ValueError as exc:  # a URL Scrapy cannot send
            return None, f"not a URL Scrapy can request ({exc})"
        limit = self._url_length_limit
        if limit and len(request.url) > limit:
            return None, (
                f"URL of {len(request.url)} characters (as sent), longer than URLLENGTH_LIMIT "
                f"({limit}): not fetched; raise URLLENGTH_LIMIT to fetch it"
            )
        return request, None

    async def parse_target(self, response: Response) -> AsyncIterator[Any]:
        target = response.meta[TARGET_META]
        base = new_record(
            **target, outcome="fetched", **response_metadata(response),
            preferences=response.meta.get(PREFERENCES_META),
            **_ticket(response.meta.get(FEED_META)),
        )  # fmt: skip
        try:
            record = {**base, **await self._in_thread(len(response.body), extract, response)}
            await self._first_seen(record, target["canonical_url"])
        except Exception as exc:  # a parser or state-store failure must not cost the record
            record = {**base, "structured": None, "reason": self._not_read(response.url, exc)}
        else:
            self._count_reading(record, response.url)
        if (
            record["structured"] is None and media_type(response) in HTML_TYPES
            and self.probe_llms and not self.stop.stopping  # a stopped run sends no probe
        ):  # fmt: skip
            origin = origin_of(response.url)
            ticket = response.meta.get(FEED_META)
            if await self.llms.probed_by(origin, target["line"], ticket) is None:
                # R9: a feed-less, markdown-less host may offer /llms.txt. The
                # record waits for the probe, so each line still gets one record.
                yield scrapy.Request(
                    f"{origin}/llms.txt",
                    callback=self.parse_llms,
                    errback=self.llms_failed,
                    dont_filter=True,
                    meta={
                        INTERNAL_META: self.context.marks.issue(LLMS),
                        LLMS_RECORD_META: record,
                    },
                )
                return
            record["llms_txt"] = {
                "url": f"{origin}/llms.txt",
                "note": f"probed once per host per run: see line {self.llms.lines[origin]}",
            }
        yield self._emit(record)

    async def parse_llms(self, response: Response) -> AsyncIterator[Any]:
        record = response.meta[LLMS_RECORD_META]
        info: dict[str, Any] = {"url": response.url, "status": response.status}
        if media_type(response) in HTML_TYPES:
            info["note"] = "answered HTML, not markdown: not parsed"
        else:
            try:
                found = await self._in_thread(
                    len(response.body), markdown_metadata, response.body, response.url
                )
                stamped = {**info, **found}
                await self._first_seen(stamped, record["canonical_url"])
                info = stamped
            except Exception as exc:  # the target's record is kept whatever happens
                info["error"] = self._not_read(response.url, exc)
        record["llms_txt"] = info
        yield self._emit(record)

    def llms_failed(self, failure: Failure) -> Any:
        request = failure.request  # type: ignore[attr-defined]
        record = request.meta[LLMS_RECORD_META]
        exc = failure.value
        info: dict[str, Any] = {"url": request.url}
        if isinstance(exc, WalshDenied):
            info.update(outcome=exc.outcome, rule=exc.rule or None, reason=exc.reason, **exc.record)
        elif isinstance(exc, HttpError):
            info["status"] = exc.response.status
        elif (too_large := self.size_cap.reason(request, exc)) is not None:
            info["error"] = too_large
        else:
            info["error"] = failure_reason(exc)
        record["llms_txt"] = info
        yield self._emit(record)

    async def _first_seen(self, holder: dict[str, Any], target: str) -> None:
        """Stamp feed entries and markdown links with when they were first
        seen for this target, across runs; with WALSH_ONLY_NEW keep only new ones.
        Every entry listed is written again (its first sighting kept): the
        store forgets what was not written for WALSH_STATE_TTL, and an entry
        still in the feed must not come back as new."""
        for field, key in (("entries", "id"), ("links", "url")):
            items = holder.get(field)
            if not items:
                continue
            keys = [f"{target}\t{item.get(key) or item.get('link')}" for item in items]
            known = await self.store.get_many(SEEN, keys)
            now = utc_iso()
            await self.store.put_many(SEEN, {k: known.get(k, now) for k in keys})
            for item, k in zip(items, keys, strict=True):
                item["first_seen"] = known.get(k, now)
                item["new"] = k not in known
            if self.only_new:
                holder[field] = [item for item in items if item["new"]]

    def target_failed(self, failure: Failure) -> Any:
        request = failure.request  # type: ignore[attr-defined]
        target = {**request.meta[TARGET_META], **_ticket(request.meta.get(FEED_META))}
        exc = failure.value
        final_url = request.url
        if isinstance(exc, WalshStopped):
            if request.meta.get(FEED_META) is not None:
                self.stop.give_back(target["canonical_url"])  # no record: back to the queue
                return
            self.crawler.stats.inc_value("walsh/stop/skipped")
        if isinstance(exc, WalshDenied):
            # a PREF decision brings the preferences that applied (and, for
            # "withheld", the response's status and validators)
            fields = {"final_url": final_url, **exc.record}
            yield self._record(
                **target, outcome=exc.outcome, rule=exc.rule or None, reason=exc.reason, **fields
            )
        elif isinstance(exc, HttpError):
            meta = response_metadata(exc.response)
            outcome = "not_modified" if exc.response.status == 304 else "failed"
            reason = None
            if outcome != "not_modified":
                reason = request.meta.get(GAVE_UP_META) or f"HTTP {exc.response.status}"
            yield self._record(
                **target, outcome=outcome, reason=reason,
                preferences=request.meta.get(PREFERENCES_META), **meta,
            )  # fmt: skip
        elif (too_large := self.size_cap.reason(request, exc)) is not None:
            yield self._record(**target, outcome="failed", final_url=final_url, reason=too_large)
        else:
            yield self._record(
                **target,
                outcome="failed",
                final_url=final_url,
                reason=failure_reason(exc),
            )

    @staticmethod
    async def _in_thread(size: int, fn: Callable[..., T], *args: Any) -> T:
        """*fn(args)* in the reactor's thread pool when the body is larger than
        :data:`INLINE_PARSE_BYTES`: a parse of a large or hostile body (a
        lenient feed parse of junk takes about 5 s per MiB) must not hold the
        reactor. A small body is read inline: handing it to a thread costs
        more than reading it. Twisted's pool works under any reactor."""
        if size <= INLINE_PARSE_BYTES:
            return fn(*args)
        return await maybe_deferred_to_future(deferToThread(fn, *args))

    def _not_read(self, url: str, exc: Exception) -> str:
        """Reason for metadata that could not be read: logged, counted, kept."""
        reason = f"metadata not read: {type(exc).__name__}: {str(exc)[:MAX_ERROR_TEXT]}"
        logger.warning("%(reason)s: %(url)s", {"reason": reason, "url": url}, exc_info=exc)
        self.crawler.stats.inc_value("walsh/structured/failed")
        return reason

    def _count_reading(self, record: dict[str, Any], url: str) -> None:
        """Count and log a body that claimed a structured format and was not
        read (``failed``), or read with problems (``partial``)."""
        reason = record.get("reason")
        if not reason:
            return
        if record["structured"] is None:
            self.crawler.stats.inc_value("walsh/structured/failed")
            logger.warning("%(reason)s: %(url)s", {"reason": reason, "url": url})
        else:
            self.crawler.stats.inc_value("walsh/structured/partial")
            logger.info("%(reason)s: %(url)s", {"reason": reason, "url": url})

    def _record(self, **fields: Any) -> dict[str, Any]:
        return self._emit(new_record(**fields))

    def _emit(self, record: dict[str, Any]) -> dict[str, Any]:
        self.crawler.stats.inc_value(f"walsh/outcome/{record['outcome']}")
        left = self.host_left
        if left and is_http_url(str(record.get("url"))):
            host = url_host(str(record["url"]))
            if left[host] > 0:
                left[host] -= 1
        return record
