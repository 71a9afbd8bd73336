"""The state interface and the per-crawler owner."""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from scrapy import signals
from scrapy.utils.project import data_path

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_walsh_research.state.hostclock import HostClock


class StateStore(Protocol):
    """Namespaced JSON key/value store.

    Writes are durable when :meth:`put` returns: a crash right after must not
    lose them (R3 retention, R7 validators). The calls are coroutines because
    a shared backend talks to a server, and nothing may block the reactor.
    """

    async def get(self, namespace: str, key: str) -> Any | None: ...

    async def put(self, namespace: str, key: str, value: Any) -> None: ...

    async def get_many(self, namespace: str, keys: list[str]) -> dict[str, Any]: ...

    async def put_many(self, namespace: str, values: dict[str, Any]) -> None:
        """Write all *values* atomically (one transaction)."""
        ...

    async def put_if_absent(self, namespace: str, key: str, value: Any) -> Any:
        """Store *value* unless *key* exists; return the stored value (atomic:
        two callers racing both get the first one's value)."""
        ...

    async def delete(self, namespace: str, key: str) -> None: ...

    async def keys(self, namespace: str, prefix: str = "") -> list[str]:
        """The keys of *namespace* starting with *prefix* (for a purge: not on
        a hot path; a prefix reads only its range)."""
        ...

    async def delete_many(self, namespace: str, keys: list[str]) -> None:
        """Delete all *keys* (one transaction)."""
        ...

    async def put_blob(self, name: str, data: bytes) -> None:
        """Store a large value (the adopted blocklist: tens of MB) as bytes,
        durably, without holding the reactor while it is written."""
        ...

    async def get_blob(self, name: str) -> bytes | None: ...

    async def delete_blob(self, name: str) -> None: ...

    async def history_complete(self) -> bool:
        """Whether the store holds everything ever written to it, as far as
        can be told: False for a shared store that lost or may have lost
        data (a Redis restarted without AOF appendfsync always). The
        blocklist fails open on a first-ever failure only when this is True."""
        ...

    def time(self) -> float:
        """Wall-clock now on the clock every user of this store shares (Redis's
        for a fleet): timestamps written here are compared by other
        processes, which must not depend on their clocks agreeing."""
        ...

    async def close(self) -> None: ...


_stores: weakref.WeakKeyDictionary[Crawler, StateStore] = weakref.WeakKeyDictionary()


def state_dir(crawler: Crawler) -> Path:
    """``WALSH_STATE_DIR``, by default ``.scrapy/walsh`` in the project data dir."""
    configured = crawler.settings.get("WALSH_STATE_DIR")
    path = Path(configured) if configured else Path(data_path("walsh", createdir=True))
    path.mkdir(parents=True, exist_ok=True)
    return path


def redis_url(crawler: Crawler) -> str | None:
    """``WALSH_REDIS_URL``: when set, all politeness state is shared in Redis."""
    return crawler.settings.get("WALSH_REDIS_URL") or None


def state_for(crawler: Crawler) -> StateStore:
    """The crawler's one store, created on first use and closed with the engine:
    Redis when ``WALSH_REDIS_URL`` is set, else SQLite under ``WALSH_STATE_DIR``."""
    store = _stores.get(crawler)
    if store is None:
        if redis_url(crawler):
            from scrapy_walsh_research.state.redis import RedisStateStore

            store = RedisStateStore.from_crawler(crawler)
        else:
            from scrapy_walsh_research.state.sqlite import SQLiteStateStore

            directory = state_dir(crawler)
            lock = _hold_state_dir(directory, crawler)
            store = SQLiteStateStore(directory / "state.sqlite3")
            crawler.signals.connect(lambda: lock.close(), signal=signals.engine_stopped, weak=False)
        _stores[crawler] = store
        crawler.signals.connect(store.close, signal=signals.engine_stopped, weak=False)
    return store


#: the state dirs this process holds, and by which crawler: one whose crawl
#: never started (refused at start-up) or has ended gives its hold up
_held: dict[str, tuple[Any, weakref.ref[Crawler]]] = {}


def _hold_state_dir(directory: Path, crawler: Crawler) -> Any:
    """This crawl's exclusive hold on *directory* (a lock file): without
    Redis, the host clocks in it are this process's alone, and two crawls
    sharing it would each keep 1 s between their own requests and send a
    host two requests milliseconds apart. Released when the engine stops."""
    import fcntl

    from scrapy_walsh_research.errors import WalshConfigurationError

    key = str(directory.resolve())
    previous = _held.pop(key, None)
    if previous is not None:
        handle, holder = previous
        other = holder()
        if other is not None and other is not crawler and getattr(other, "crawling", False):
            _held[key] = previous  # a crawl of this process is using it: refused below
        else:
            handle.close()
    handle = open(directory / "crawl.lock", "a+")  # held for the crawl, closed when it stops
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise WalshConfigurationError(
            f"Another crawl (or walsh command) is using WALSH_STATE_DIR={directory}. Without "
            "WALSH_REDIS_URL each process paces only its own requests: run crawls on one "
            "state dir one at a time, or share politeness through Redis (WALSH_REDIS_URL)."
        ) from None
    _held[key] = (handle, weakref.ref(crawler))
    return handle


_local: weakref.WeakKeyDictionary[Crawler, StateStore] = weakref.WeakKeyDictionary()


def local_state_for(crawler: Crawler) -> StateStore:
    """This process's own store under ``WALSH_STATE_DIR`` (SQLite): the same
    object as :func:`state_for` without Redis; beside it with Redis, for what
    a worker must not lose with the shared store (the blocklist in force)."""
    if not redis_url(crawler):
        return state_for(crawler)
    store = _local.get(crawler)
    if store is None:
        from scrapy_walsh_research.state.sqlite import SQLiteStateStore

        store = _local[crawler] = SQLiteStateStore(state_dir(crawler) / "state.sqlite3")
        crawler.signals.connect(store.close, signal=signals.engine_stopped, weak=False)
    return store


def clock_for(crawler: Crawler) -> HostClock:
    """The per-host clock: shared through Redis when ``WALSH_REDIS_URL`` is set,
    else in memory and persisted in the embedded store."""
    if redis_url(crawler):
        from scrapy_walsh_research.state.redis import RedisHostClock

        return RedisHostClock.from_crawler(crawler)
    from scrapy_walsh_research.bounds import cache_size
    from scrapy_walsh_research.defaults import (
        WALSH_HOST_CLOCK_CACHE_SIZE as DEFAULT_HOST_CLOCK_CACHE_SIZE,
    )
    from scrapy_walsh_research.state.hostclock import PersistentHostClock

    size = cache_size(
        crawler.settings, "WALSH_HOST_CLOCK_CACHE_SIZE", DEFAULT_HOST_CLOCK_CACHE_SIZE
    )
    return PersistentHostClock(state_for(crawler), cache_size=size, stats=crawler.stats)
