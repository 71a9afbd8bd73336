"""One store, one host clock and one cadence store per crawler: the one
place that picks a backend (SQLite and in-process clocks, or Redis when ``WALSH_REDIS_URL`` is
set). Both backends are imported from here and neither imports this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy import signals

from scrapy_walsh_research.per_crawler import per_crawler
from scrapy_walsh_research.settings.walsh import WalshSettings
from scrapy_walsh_research.state.cadence import StoredCadence
from scrapy_walsh_research.state.directory import hold_state_dir, state_dir
from scrapy_walsh_research.state.hostclock import PersistentHostClock
from scrapy_walsh_research.state.namespaces import retention
from scrapy_walsh_research.state.sqlite import SQLiteStateStore

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_walsh_research.state.protocols import CadenceStore, HostClock, StateStore
    from scrapy_walsh_research.state.redis.connection import RedisConnection


def settings_for(crawler: Crawler) -> WalshSettings:
    """The crawler's ``WALSH_`` settings, typed, read once (what its context
    gives the components; the stores below are handed what they need of it)."""
    return per_crawler(
        crawler, WalshSettings, lambda: WalshSettings.from_settings(crawler.settings)
    )


def redis_url(crawler: Crawler) -> str | None:
    """``WALSH_REDIS_URL``: when set, all politeness state is shared in Redis."""
    return settings_for(crawler).redis_url


# The Redis backend is imported inside the functions below, only when
# WALSH_REDIS_URL is set: redis-py is an optional extra (``[redis]``), and
# importing it costs a crawl without Redis 0.2-0.7 s on the reactor thread.
# Not a cycle: nothing in the Redis backend imports this module.


def state_for(crawler: Crawler) -> StateStore:
    """The crawler's one store, created on first use and closed with the engine:
    Redis when ``WALSH_REDIS_URL`` is set, else SQLite under ``WALSH_STATE_DIR``."""
    return per_crawler(crawler, state_for, lambda: _open_state(crawler))


def redis_for(crawler: Crawler) -> RedisConnection:
    """The crawler's one Redis connection, shared by every Redis-backed owner
    (``WALSH_REDIS_URL`` must be set)."""
    from scrapy_walsh_research.state.redis.connection import RedisConnection

    return per_crawler(
        crawler, redis_for, lambda: RedisConnection.from_crawler(crawler, settings_for(crawler))
    )


def _open_state(crawler: Crawler) -> StateStore:
    store: StateStore
    settings = settings_for(crawler)
    if settings.redis_url:
        from scrapy_walsh_research.state.redis.store import RedisStateStore

        store = RedisStateStore(redis_for(crawler), retention(settings))
    else:
        directory = state_dir(settings)
        lock = hold_state_dir(directory, crawler)
        store = SQLiteStateStore(directory / "state.sqlite3", retention(settings))
        crawler.signals.connect(lambda: lock.close(), signal=signals.engine_stopped, weak=False)
    crawler.signals.connect(store.close, signal=signals.engine_stopped, weak=False)
    return store


def local_state_for(crawler: Crawler) -> StateStore:
    """This process's own store under ``WALSH_STATE_DIR`` (SQLite): the same
    object as :func:`state_for` without Redis; beside it with Redis, for what
    a worker must not lose with the shared store (the blocklist in force)."""
    if not redis_url(crawler):
        return state_for(crawler)
    return per_crawler(crawler, local_state_for, lambda: _open_local(crawler))


def _open_local(crawler: Crawler) -> StateStore:
    store = SQLiteStateStore(state_dir(settings_for(crawler)) / "state.sqlite3")
    crawler.signals.connect(store.close, signal=signals.engine_stopped, weak=False)
    return store


def clock_for(crawler: Crawler) -> HostClock:
    """The per-host clock: shared through Redis when ``WALSH_REDIS_URL`` is set,
    else in memory and persisted in the embedded store."""
    if redis_url(crawler):
        from scrapy_walsh_research.state.redis.hostclock import RedisHostClock

        return RedisHostClock.from_crawler(crawler, redis_for(crawler))
    size = settings_for(crawler).host_clock_cache_size
    return PersistentHostClock(state_for(crawler), cache_size=size, stats=crawler.stats)


def cadence_for(crawler: Crawler) -> CadenceStore:
    """The crawler's cadence store (R8): each target's last fetch in the
    crawler's store, and with ``WALSH_REDIS_URL`` the fleet's claims."""
    return per_crawler(crawler, cadence_for, lambda: _open_cadence(crawler))


def _open_cadence(crawler: Crawler) -> CadenceStore:
    if redis_url(crawler):
        from scrapy_walsh_research.state.redis.cadence import RedisCadence

        return RedisCadence(state_for(crawler), redis_for(crawler))
    return StoredCadence(state_for(crawler))
