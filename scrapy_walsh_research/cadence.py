"""R8: run infrequently. A target fetched (or answered 304) less than
``WALSH_RUN_INTERVAL`` seconds ago is skipped with no request at all.

The last fetch time of each target (by canonical URL) persists in the state
store, so the rule holds across runs, which is where it matters.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from scrapy_walsh_research._runtime.marks import Marks, target_key
from scrapy_walsh_research.core.timestamps import utc_iso
from scrapy_walsh_research.errors import deny
from scrapy_walsh_research.per_crawler import register, registered
from scrapy_walsh_research.scheduling.pacer import Pacer
from scrapy_walsh_research.settings import defaults
from scrapy_walsh_research.settings.options import cache_size
from scrapy_walsh_research.state import redis_url, state_for

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self

logger = logging.getLogger(__name__)

STATE_NAMESPACE = "cadence"


#: only one worker of a fleet fetches a target at a time: same URL, other batch
CLAIM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
-- KEYS[1] cadence hash, KEYS[2] claims hash
-- ARGV[1] target, ARGV[2] interval s, ARGV[3] worker id, ARGV[4] heartbeat prefix
local last = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '')
if last and now - last < tonumber(ARGV[2]) and last <= now then
  return {'recent', string.format('%.6f', last)}
end
local owner = redis.call('HGET', KEYS[2], ARGV[1])
if owner and owner ~= ARGV[3] and redis.call('EXISTS', ARGV[4] .. owner) == 1 then
  return {'taken', owner}
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
return {'ok', ''}
"""
CLAIMS_NAMESPACE = "cadence_claims"


def cadence_of(crawler: Crawler) -> CadenceMiddleware | None:
    """The crawler's cadence gate, for the record pipeline that writes it."""
    return registered(crawler, CadenceMiddleware)


class CadenceMiddleware:
    """R8. With the ``targets`` spider, a target's fetch time is written with
    its record (:class:`~scrapy_walsh_research.records.RecordPipeline`), so
    a crash between the two never leaves a line skipped without a record;
    other spiders have no records, and it is written when the response
    arrives. With ``WALSH_REDIS_URL`` a target is also *claimed* while it is
    fetched, so two workers never fetch one URL at once (the same list
    enqueued twice)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.interval = crawler.settings.getfloat("WALSH_RUN_INTERVAL", defaults.WALSH_RUN_INTERVAL)
        self.store = state_for(crawler)
        self.marks = Marks.for_crawler(crawler)
        # Last fetch per target, read once from the store: the frontier asks
        # on every scheduling decision (from this cache only, no I/O), and
        # this middleware is the only writer. Bounded: oldest first out, and
        # read back from the store by process_request (the gate never
        # answers from a missing entry).
        self._last: OrderedDict[str, float | None] = OrderedDict()
        self.cache_size = cache_size(
            crawler.settings, "WALSH_CADENCE_CACHE_SIZE", defaults.WALSH_CADENCE_CACHE_SIZE
        )
        pacer = Pacer.for_crawler(crawler)
        pacer.add_denial_check(lambda r: self._due_at(r) is not None)
        pacer.add_warmer(self._load)
        self._redis: Any = None
        if redis_url(crawler):
            # redis is the optional [redis] extra: imported only when in use
            from scrapy_walsh_research.state.redis.connection import RedisConnection

            self._redis = RedisConnection.for_crawler(crawler)
            self._claim = self._redis.client.register_script(CLAIM)
        register(crawler, CadenceMiddleware, self)

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

    async def _load(self, request: Request) -> None:
        if self.interval > 0 and self.marks.is_target(request):
            key = target_key(request)
            if key not in self._last:
                last = await self.store.get(STATE_NAMESPACE, key)
                if key not in self._last:
                    self._remember(key, float(last) if isinstance(last, (int, float)) else None)

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
                self._redis is not None
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
        return bool(getattr(self.crawler.spider, "commits_cadence", False))

    async def _claim_for_fleet(self, request: Request) -> None:
        """Claim *request*'s target for this worker (its hops and retries claim
        it again: a claim this worker holds is granted again)."""
        key = target_key(request)
        await self._redis.announce()
        keys = [
            self._redis.key("state", STATE_NAMESPACE),
            self._redis.key("state", CLAIMS_NAMESPACE),
        ]
        args = [key, self.interval, self._redis.worker, self._redis.key("alive", "")]
        status, value = await self._redis.call(
            "claim cadence", lambda r: self._claim(keys=keys, args=args, client=r)
        )
        if status == "recent":
            self._remember(key, float(value))
            await self.process_request(request)  # denies, with the reason
        if status == "taken":
            reason = (
                f"being fetched now by another worker ({value}) for another list line; "
                "one fetch per WALSH_RUN_INTERVAL"
            )
            deny(self.crawler, logger, request, "R8", reason, outcome="skipped")

    async def stamp(self, key: str, at: float | None = None) -> None:
        """The target *key* was fetched (or answered 304) now; with *at*, the
        record pipeline already wrote it (in Redis, with the record)."""
        if at is None:
            at = self.store.time()
            await self.store.put(STATE_NAMESPACE, key, at)
        self._remember(key, at)

    async def process_response(self, request: Request, response: Response) -> Response:
        if (
            not self._commits_with_records()
            and self.marks.is_target(request)
            and (200 <= response.status < 300 or response.status == 304)
        ):
            await self.stamp(target_key(request))
        return response
