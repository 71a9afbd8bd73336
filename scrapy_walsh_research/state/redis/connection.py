"""One Redis connection per crawler: its client, the fail-closed retry loop
every call takes, the worker's heartbeat, and the fleet's guard it carries.

* **Fail closed.** Every call goes through :class:`RedisConnection`: when
  Redis is unreachable the call waits and retries with backoff, logging one
  error per outage; a request without a reservation never goes out, and a
  write waits until it is stored.
* **One guard per connection.** What the worker knows of the fleet's Redis
  (a restart, a failover, a step of its clock) is its
  :class:`~.guard.FleetGuard`, made with the connection; every user of the
  connection (the store, the host clock, the target queue, the heartbeat)
  passes its answers through it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
import uuid
from typing import TYPE_CHECKING, Any, TypeVar

from redis import asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MasterDownError, ReadOnlyError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from scrapy.utils.defer import deferred_from_coro
from twisted.internet import task

from scrapy_walsh_research.core.urls import without_password
from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.settings import defaults
from scrapy_walsh_research.settings.walsh import WalshSettings
from scrapy_walsh_research.state.directory import state_dir
from scrapy_walsh_research.state.hostclock import pause_on_loss
from scrapy_walsh_research.state.redis.client import client_options
from scrapy_walsh_research.state.redis.guard import FleetGuard
from scrapy_walsh_research.state.redis.journal import FleetJournal

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: a worker's heartbeat lasts this long, renewed every third of it
HEARTBEAT_S = 15.0

#: how long one connection attempt or call may take before it counts as failed
CONNECT_TIMEOUT_S = 5.0

#: errors that mean "Redis is not there right now", as opposed to a bug: no
#: answer, or an answer from a Redis that takes no writes for now: during a
#: failover the fleet's endpoint may still reach the old primary, demoted to
#: a replica (READONLY), or a replica cut off from its primary (MASTERDOWN)
UNAVAILABLE = (RedisConnectionError, RedisTimeoutError, OSError, ReadOnlyError, MasterDownError)

#: refusals of the same kind that redis-py raises as a plain ResponseError,
#: by their error code: a primary short of the replicas that
#: ``min-replicas-to-write`` asks for (docs/redis.rst recommends it)
REFUSED_FOR_NOW = ("NOREPLICAS",)


def unavailable(exc: BaseException) -> bool:
    """Whether *exc* says that Redis cannot serve the call now (wait and
    retry), rather than that the call is wrong."""
    return isinstance(exc, UNAVAILABLE) or (
        isinstance(exc, ResponseError) and str(exc).startswith(REFUSED_FOR_NOW)
    )


#: a live holder renews its lease this many times per lease (host clock, locks)
RENEWALS_PER_LEASE = 3
#: a renewal's own delay: a Redis round trip and the retry loop's backoff
RENEWAL_SLACK_S = 1.0


def lost_history_wait(settings: WalshSettings) -> float:
    """How long every host waits once Redis lost the fleet's history: as long
    as any interval can last (:func:`pause_on_loss`), and never less than one
    renewal period, so a request that was out when Redis lost its lease has
    it put back by its holder before another worker may reserve the host."""
    return max(pause_on_loss(settings), settings.redis_lease / RENEWALS_PER_LEASE + RENEWAL_SLACK_S)


def recall_s(max_backoff: float, timeout: float) -> float:
    """The longest a live worker takes to call Redis again, whose calls
    retry at most *max_backoff* apart and give up a connection attempt after
    *timeout*: its longest retry backoff, or its next heartbeat, plus a
    connect timeout and a second."""
    return max(max_backoff, HEARTBEAT_S / 3) + timeout + RENEWAL_SLACK_S


def young_redis_s(
    pause: float,
    max_backoff: float = defaults.WALSH_REDIS_MAX_BACKOFF,
    timeout: float = CONNECT_TIMEOUT_S,
) -> float:
    """:attr:`~.guard.FleetGuard.young` for a fleet whose lost-history wait
    is *pause* (:func:`lost_history_wait`), whose workers retry at most
    *max_backoff* apart and give up a connection attempt after *timeout*."""
    return max(pause, recall_s(max_backoff, timeout))


class RedisConnection:
    """One client per crawler, and the fail-closed retry loop every call takes."""

    def __init__(
        self,
        url: str,
        prefix: str = defaults.WALSH_REDIS_PREFIX,
        *,
        crawler: Crawler | None = None,
        max_backoff: float = defaults.WALSH_REDIS_MAX_BACKOFF,
        timeout: float = CONNECT_TIMEOUT_S,
        settings: WalshSettings | None = None,
    ) -> None:
        #: the crawler's settings (what the owners sharing the connection
        #: read: leases, retention); the defaults for a connection of no crawler
        self.settings = settings if settings is not None else WalshSettings.at_defaults()
        try:
            self.client = aioredis.Redis.from_url(
                url,
                **client_options(
                    decode_responses=True,
                    socket_connect_timeout=timeout,
                    socket_timeout=timeout,
                ),
            )
        except ValueError as exc:
            raise WalshConfigurationError(
                f"WALSH_REDIS_URL={url!r} is not a Redis URL ({exc}); "
                "use redis://host:port/db or rediss://..."
            ) from None
        self.url = url
        #: the URL as logs show it: without its password (an ACL user's)
        self.shown_url = without_password(url)
        self.prefix = prefix
        self.crawler = crawler
        self.max_backoff = max_backoff
        self.timeout = timeout
        #: the longest this worker takes to call Redis again (see FleetGuard.young)
        self.recall = recall_s(max_backoff, timeout)
        self._down_since: float | None = None
        #: Redis's clock minus ours, so timestamps this worker writes for
        #: others to compare are on the fleet's one clock (see :meth:`time`)
        self._offset = 0.0
        #: this process in the fleet: what it holds (lines in flight, cadence
        #: claims) is its own only while ``<prefix>:alive:<worker>`` exists
        self.worker = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._beat: Any = None
        #: what this worker knows of the fleet's Redis across calls
        self.guard = FleetGuard(self)
        #: what this machine's workers saw of the fleet's Redis, on disk
        #: (None: not kept, as for a connection made outside a crawl)
        self.journal: FleetJournal | None = None

    async def announce(self) -> None:
        """Start this worker's heartbeat (once): others may take back what it
        holds once the heartbeat has been silent for HEARTBEAT_S."""
        if self._beat is not None:
            return
        await self._heartbeat()
        self._beat = task.LoopingCall(lambda: deferred_from_coro(self._heartbeat()))
        self._beat.start(HEARTBEAT_S / 3, now=False).addErrback(
            lambda f: logger.error("heartbeat stopped: %(f)s", {"f": f.getErrorMessage()})
        )

    async def _heartbeat(self) -> None:
        key = self.key("alive", self.worker)
        await self.call("heartbeat", lambda r: r.set(key, "1", ex=int(HEARTBEAT_S)))
        # a restart or a step of Redis's clock is seen within a beat even
        # while this worker sends nothing (a worker joining meanwhile relies
        # on it), and a change of Redis's persistence counts from then
        await self.guard.prepare()
        await self.guard.recheck_persistence()
        await self.guard.check()

    def note_server_time(self, server_now: float) -> None:
        self._offset = server_now - time.time()

    def time(self) -> float:
        """Now, on Redis's clock (as last measured): the time to write into
        shared state, which other machines compare with their own now."""
        return time.time() + self._offset

    @classmethod
    def from_crawler(cls, crawler: Crawler, settings: WalshSettings) -> RedisConnection:
        """A connection as the crawler's *settings* give it (the crawler's one
        is ``state.factory.redis_for``, which every Redis-backed owner shares)."""
        assert settings.redis_url is not None
        conn = cls(
            settings.redis_url,
            settings.redis_prefix,
            crawler=crawler,
            max_backoff=settings.redis_max_backoff,
            settings=settings,
        )
        conn.guard.pause = lost_history_wait(settings)
        digest = hashlib.sha256(f"{conn.url}\x00{conn.prefix}".encode()).hexdigest()[:12]
        conn.journal = FleetJournal(state_dir(settings) / f"redis-fleet-{digest}.json")
        return conn

    def key(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    def inc_stat(self, name: str, count: int = 1) -> None:
        """Count *name* under ``walsh/redis/`` in the crawler's stats."""
        # the crawler's stats exist only once the crawl starts; the spider
        # may open the connection before that
        try:
            stats = self.crawler.stats if self.crawler is not None else None
        except RuntimeError:
            return
        if stats is not None:
            stats.inc_value(f"walsh/redis/{name}", count)

    async def call(self, what: str, fn: Callable[[aioredis.Redis], Awaitable[T]]) -> T:
        """Run *fn* until Redis answers: wait and reconnect, never skip it.

        A Redis that answers but takes no writes for now (:func:`unavailable`)
        is waited for too, on new connections: the endpoint (a DNS name, a
        managed service's address) is resolved again, and reaches the new
        primary once the failover has moved it."""
        delay = 0.25
        while True:
            try:
                result = await fn(self.client)
            except (*UNAVAILABLE, ResponseError) as exc:
                if not unavailable(exc):
                    raise
                if isinstance(exc, ResponseError):
                    # idle connections only: a call still on one gets its own answer
                    await self.client.connection_pool.disconnect(inuse_connections=False)
                if self._down_since is None:
                    self._down_since = time.monotonic()
                    self.inc_stat("outages")
                    logger.error(
                        "Redis at %(url)s is unreachable or takes no writes for now (%(exc)s) "
                        "during %(what)s: no request goes out without a reservation and no "
                        "state is dropped; waiting and reconnecting.",
                        {"url": self.shown_url, "exc": exc, "what": what},
                    )
                self.inc_stat("retries")
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)
                continue
            if self._down_since is not None:
                logger.warning(
                    "Redis at %(url)s is back after %(s).1f s; the crawl goes on.",
                    {"url": self.shown_url, "s": time.monotonic() - self._down_since},
                )
                self._down_since = None
            return result

    async def close(self) -> None:
        if self._beat is not None and self._beat.running:
            self._beat.stop()
        await self.client.aclose()
