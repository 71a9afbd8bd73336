"""Shared backend: politeness state in Redis, one budget for many processes.

Scrapy's delays are per process; N workers on one queue send N times the
allowed rate to a host. With ``WALSH_REDIS_URL`` set, every process on every
machine takes each request's slot from one per-host clock in Redis, and
shares the stores (blocklist, robots copies, validators, cadence, first-seen).

* **Atomic reservations.** :class:`RedisHostClock` reserves with a server-side
  Lua script that reads Redis's own ``TIME`` (one clock for all machines),
  checks ``max(last + interval, next, hold, lease)`` and takes the slot in one
  step. The slot carries a *lease* until the request's response (or error)
  is committed, so a second process cannot slip in while a slow connect
  delays the first request onto the wire.
* **Fail closed.** Every call goes through :class:`RedisConnection`: when
  Redis is unreachable the call waits and retries with backoff, logging one
  error per outage; a request without a reservation never goes out, and a
  write waits until it is stored.
* **Data loss is detected.** An epoch key is written at start; if it vanishes
  (Redis restarted without persistence, or flushed), nobody knows when hosts
  were last contacted, so every host waits ``WALSH_MAX_CRAWL_DELAY`` first.

All calls use ``redis.asyncio``: nothing blocks the reactor, which must be
the asyncio one (Scrapy's default).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import time
import uuid
import weakref
from typing import TYPE_CHECKING, Any, TypeVar

from redis import asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.state.hostclock import RobotsIntervals

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy.crawler import Crawler
    from typing_extensions import Self

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: errors that mean "Redis is not there right now", as opposed to a bug
UNAVAILABLE = (RedisConnectionError, RedisTimeoutError, OSError)

# Every script reads Redis's clock; f() keeps six decimals, so microseconds
# survive the round trip (Lua's default number format keeps fourteen digits).
PRELUDE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local function f(x) return string.format('%.6f', x) end
"""

RESERVE = (
    PRELUDE
    + """
-- KEYS[1] host hash, KEYS[2] epoch, KEYS[3] quarantine
-- ARGV[1] interval s, ARGV[2] lease s, ARGV[3] epoch seen, ARGV[4] owner, ARGV[5] pause s
local epoch = redis.call('GET', KEYS[2])
if not epoch then
  -- the state is gone: no one knows when hosts were last contacted
  redis.call('SET', KEYS[2], ARGV[3])
  redis.call('SET', KEYS[3], f(now + tonumber(ARGV[5])))
  return {'lost', ARGV[3]}
end
if epoch ~= ARGV[3] then return {'epoch', epoch} end
local h = redis.call('HMGET', KEYS[1], 'last', 'next', 'hold', 'lease', 'owner')
if h[4] and h[5] == ARGV[4] then return {'ok', h[1]} end  -- our own retried call
local ready = tonumber(redis.call('GET', KEYS[3]) or '0')
if h[1] then ready = math.max(ready, tonumber(h[1]) + tonumber(ARGV[1])) end
if h[2] then ready = math.max(ready, tonumber(h[2])) end
if h[3] then ready = math.max(ready, tonumber(h[3])) end
if h[4] and tonumber(h[4]) > now then
  -- in flight from another worker: ready no sooner than its interval, and
  -- asked again shortly after, since its response usually ends the lease
  ready = math.max(ready, now + math.min(tonumber(h[4]) - now, 0.25))
end
if ready > now then return {'wait', f(ready - now)} end
redis.call('HSET', KEYS[1], 'last', f(now), 'lease', f(now + tonumber(ARGV[2])),
           'owner', ARGV[4])
redis.call('EXPIRE', KEYS[1], 86400 + math.ceil(tonumber(ARGV[2])))
return {'ok', f(now)}
"""
)

COMMIT = (
    PRELUDE
    + """
-- KEYS[1] host hash; ARGV[1] seconds since the request went out, ARGV[2] interval,
-- ARGV[3] owner. The wire time is mapped onto the server clock late, never early.
local at = now - tonumber(ARGV[1])
local h = redis.call('HMGET', KEYS[1], 'last', 'next', 'owner')
local last = math.max(at, tonumber(h[1] or '0'))
local nxt = math.max(at + tonumber(ARGV[2]), tonumber(h[2] or '0'))
redis.call('HSET', KEYS[1], 'last', f(last), 'next', f(nxt))
if h[3] == ARGV[3] then redis.call('HDEL', KEYS[1], 'lease', 'owner') end
redis.call('EXPIRE', KEYS[1], 86400)
return f(nxt - at - tonumber(ARGV[1]))
"""
)

HOLD = (
    PRELUDE
    + """
-- KEYS[1] host hash; ARGV[1] seconds from now
local until_ = now + tonumber(ARGV[1])
local hold = math.max(until_, tonumber(redis.call('HGET', KEYS[1], 'hold') or '0'))
redis.call('HSET', KEYS[1], 'hold', f(hold))
redis.call('EXPIRE', KEYS[1], 86400 + math.ceil(hold - now))
return f(hold - now)
"""
)

READY = (
    PRELUDE
    + """
-- KEYS[1] host hash, KEYS[2] quarantine; ARGV[1] interval. Seconds until ready
-- (a hint for the scheduler: a lease is ignored, the reservation checks it),
-- and seconds until the host's hold (Retry-After) ends.
local h = redis.call('HMGET', KEYS[1], 'last', 'next', 'hold', 'lease')
local ready = tonumber(redis.call('GET', KEYS[2]) or '0')
if h[1] then ready = math.max(ready, tonumber(h[1]) + tonumber(ARGV[1])) end
for i = 2, 3 do if h[i] then ready = math.max(ready, tonumber(h[i])) end end
return {f(math.max(0, ready - now)), f(math.max(0, tonumber(h[3] or '0') - now))}
"""
)


class RedisConnection:
    """One client per crawler, and the fail-closed retry loop every call takes."""

    _instances: weakref.WeakKeyDictionary[Crawler, RedisConnection] = weakref.WeakKeyDictionary()

    def __init__(
        self,
        url: str,
        prefix: str = "walsh",
        *,
        crawler: Crawler | None = None,
        max_backoff: float = 10.0,
        timeout: float = 5.0,
    ) -> None:
        try:
            self.client = aioredis.Redis.from_url(
                url,
                decode_responses=True,
                socket_connect_timeout=timeout,
                socket_timeout=timeout,
            )
        except ValueError as exc:
            raise WalshConfigurationError(
                f"WALSH_REDIS_URL={url!r} is not a Redis URL ({exc}); "
                "use redis://host:port/db or rediss://..."
            ) from None
        self.url = url
        self.prefix = prefix
        self.crawler = crawler
        self.max_backoff = max_backoff
        self._down_since: float | None = None

    @classmethod
    def for_crawler(cls, crawler: Crawler) -> RedisConnection:
        conn = cls._instances.get(crawler)
        if conn is None:
            settings = crawler.settings
            conn = cls(
                settings["WALSH_REDIS_URL"],
                settings.get("WALSH_REDIS_PREFIX") or "walsh",
                crawler=crawler,
                max_backoff=settings.getfloat("WALSH_REDIS_MAX_BACKOFF", 10.0),
            )
            cls._instances[crawler] = conn
        return conn

    def key(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    def _inc(self, name: str) -> None:
        # the crawler's stats exist only once the crawl starts; the spider
        # may open the connection before that
        try:
            stats = self.crawler.stats if self.crawler is not None else None
        except RuntimeError:
            return
        if stats is not None:
            stats.inc_value(f"walsh/redis/{name}")

    async def call(self, what: str, fn: Callable[[aioredis.Redis], Awaitable[T]]) -> T:
        """Run *fn* until Redis answers: wait and reconnect, never skip it."""
        delay = 0.25
        while True:
            try:
                result = await fn(self.client)
            except UNAVAILABLE as exc:
                if self._down_since is None:
                    self._down_since = time.monotonic()
                    self._inc("outages")
                    logger.error(
                        "Redis at %(url)s is unreachable (%(exc)s) during %(what)s: no request "
                        "goes out without a reservation and no state is dropped; waiting and "
                        "reconnecting.",
                        {"url": self.url, "exc": exc, "what": what},
                    )
                self._inc("retries")
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)
                continue
            if self._down_since is not None:
                logger.warning(
                    "Redis at %(url)s is back after %(s).1f s; the crawl goes on.",
                    {"url": self.url, "s": time.monotonic() - self._down_since},
                )
                self._down_since = None
            return result

    async def close(self) -> None:
        await self.client.aclose()


class RedisStateStore:
    """The :class:`~scrapy_walsh_research.state.base.StateStore` in Redis: one
    hash per namespace, values as JSON. A write returns once Redis has it;
    durability beyond that is Redis's persistence (run it with AOF)."""

    def __init__(self, conn: RedisConnection) -> None:
        self.conn = conn

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(RedisConnection.for_crawler(crawler))

    def _hash(self, namespace: str) -> str:
        return self.conn.key("state", namespace)

    async def get(self, namespace: str, key: str) -> Any | None:
        raw = await self.conn.call(f"get {namespace}", lambda r: r.hget(self._hash(namespace), key))
        return json.loads(raw) if raw is not None else None

    async def put(self, namespace: str, key: str, value: Any) -> None:
        data = json.dumps(value, sort_keys=True)
        await self.conn.call(f"put {namespace}", lambda r: r.hset(self._hash(namespace), key, data))

    async def get_many(self, namespace: str, keys: list[str]) -> dict[str, Any]:
        if not keys:
            return {}
        raws = await self.conn.call(
            f"get {namespace}", lambda r: r.hmget(self._hash(namespace), keys)
        )
        return {k: json.loads(v) for k, v in zip(keys, raws, strict=True) if v is not None}

    async def put_many(self, namespace: str, values: dict[str, Any]) -> None:
        if not values:
            return
        mapping = {k: json.dumps(v, sort_keys=True) for k, v in values.items()}
        # one HSET: all fields or none
        await self.conn.call(
            f"put {namespace}", lambda r: r.hset(self._hash(namespace), mapping=mapping)
        )

    async def put_if_absent(self, namespace: str, key: str, value: Any) -> Any:
        data = json.dumps(value, sort_keys=True)
        name = self._hash(namespace)

        async def put(r: aioredis.Redis) -> str:
            await r.hsetnx(name, key, data)
            return await r.hget(name, key)

        return json.loads(await self.conn.call(f"put {namespace}", put))

    async def delete(self, namespace: str, key: str) -> None:
        await self.conn.call(f"delete {namespace}", lambda r: r.hdel(self._hash(namespace), key))

    async def single_flight(self, name: str, ttl: float) -> Callable[[], Awaitable[None]] | None:
        """Let one worker at a time do *name*: returns a release coroutine if
        this worker should do it now, or None after waiting (at most *ttl*
        seconds) for the worker that was doing it."""
        key = self.conn.key("lock", name)
        token = uuid.uuid4().hex
        if await self.conn.call("lock", lambda r: r.set(key, token, nx=True, px=int(ttl * 1000))):

            async def release() -> None:
                async def drop(r: aioredis.Redis) -> None:
                    if await r.get(key) == token:
                        await r.delete(key)

                await self.conn.call("unlock", drop)

            return release
        while await self.conn.call("lock", lambda r: r.exists(key)):
            await asyncio.sleep(0.1)
        return None

    async def close(self) -> None:
        await self.conn.close()


class RedisHostClock(RobotsIntervals):
    """The :class:`~scrapy_walsh_research.state.hostclock.HostClock` in Redis.

    Redis holds the truth, on its own clock; this process keeps a cache of
    when each host is next ready (its own monotonic clock) for the
    scheduler, fed by every answer.

    Intervals get ``WALSH_REDIS_MARGIN`` (50 ms) added: workers on different
    machines reach a host over paths of different length, so two requests
    spaced exactly one interval apart when sent can arrive closer than that.
    """

    def __init__(
        self, conn: RedisConnection, *, lease: float, pause_on_loss: float, margin: float = 0.05
    ) -> None:
        super().__init__()
        self.conn = conn
        self.lease = lease
        self.margin = margin
        self.pause_on_loss = pause_on_loss
        self._reserve = conn.client.register_script(RESERVE)
        self._commit = conn.client.register_script(COMMIT)
        self._hold = conn.client.register_script(HOLD)
        self._ready_script = conn.client.register_script(READY)
        self._epoch: str | None = None
        self._owner_prefix = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._seq = itertools.count()
        self._owner: dict[str, str] = {}
        self._ready: dict[str, float] = {}
        self._last: dict[str, float] = {}
        self._held: dict[str, float] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        # A reservation is leased until its response is committed; a process
        # that dies mid-request frees the host once its download must have ended.
        lease = settings.getfloat("DOWNLOAD_TIMEOUT", 180.0) + 30.0
        return cls(
            RedisConnection.for_crawler(crawler),
            lease=lease,
            margin=settings.getfloat("WALSH_REDIS_MARGIN", 0.05),
            pause_on_loss=max(
                settings.getfloat("WALSH_MIN_DELAY", 1.0),
                settings.getfloat("WALSH_MAX_CRAWL_DELAY", 30.0),
            ),
        )

    def _host_key(self, host: str) -> str:
        return self.conn.key("host", host)

    async def _ensure_epoch(self) -> str:
        if self._epoch is None:
            key = self.conn.key("epoch")
            fresh = uuid.uuid4().hex

            async def adopt(r: aioredis.Redis) -> str:
                await r.set(key, fresh, nx=True)
                return await r.get(key) or fresh

            self._epoch = await self.conn.call("start-up", adopt)
        return self._epoch

    def _note(self, host: str, wait: float) -> None:
        self._ready[host] = time.monotonic() + max(0.0, wait)

    def ready_at(self, host: str, interval: float) -> float:
        last = self._last.get(host)
        ready = self._ready.get(host, 0.0)
        return max(ready, last + interval) if last is not None else ready

    async def warm(self, host: str) -> None:
        if host in self._ready:
            return
        wait, held = await self.conn.call(
            "read host clock",
            lambda r: self._ready_script(
                keys=[self._host_key(host), self.conn.key("quarantine")], args=[1.0], client=r
            ),
        )
        self._ready.setdefault(host, time.monotonic() + float(wait))
        if float(held) > 0:
            self._held.setdefault(host, time.monotonic() + float(held))

    async def reserve(self, host: str, now: float, interval: float) -> float:
        owner = f"{self._owner_prefix}-{next(self._seq)}"
        while True:
            epoch = await self._ensure_epoch()
            keys = [self._host_key(host), self.conn.key("epoch"), self.conn.key("quarantine")]
            args = [interval + self.margin, self.lease, epoch, owner, self.pause_on_loss]
            status, value = await self.conn.call(
                "reserve",
                lambda r, keys=keys, args=args: self._reserve(keys=keys, args=args, client=r),
            )
            if status == "ok":
                self._owner[host] = owner
                self._last[host] = time.monotonic()
                self._note(host, interval)
                return 0.0
            if status == "wait":
                self._note(host, float(value))
                return float(value)
            if status == "lost":
                self.conn._inc("state_lost")
                logger.error(
                    "Redis at %(url)s lost the Walsh state (restarted without persistence or "
                    "flushed): no one knows when hosts were last contacted, so every host "
                    "waits %(p).0f s. Run Redis with appendonly yes.",
                    {"url": self.conn.url, "p": self.pause_on_loss},
                )
            self._epoch = None  # another process re-created the epoch: adopt it, retry

    async def commit(self, host: str, at: float, interval: float) -> None:
        owner = self._owner.pop(host, "")
        age = max(0.0, time.monotonic() - at)
        wait = await self.conn.call(
            "commit",
            lambda r: self._commit(
                keys=[self._host_key(host)], args=[age, interval + self.margin, owner], client=r
            ),
        )
        self._last[host] = at
        self._note(host, float(wait))

    async def hold(self, host: str, until: float) -> None:
        seconds = max(0.0, until - time.monotonic())
        wait = await self.conn.call(
            "hold", lambda r: self._hold(keys=[self._host_key(host)], args=[seconds], client=r)
        )
        self._note(host, float(wait))
        self._held[host] = max(self._held.get(host, 0.0), time.monotonic() + float(wait))

    def held_until(self, host: str) -> float:
        return self._held.get(host, 0.0)
