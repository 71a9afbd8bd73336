"""The state interface and the per-crawler owner."""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from scrapy import signals
from scrapy.utils.project import data_path

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


class StateStore(Protocol):
    """Namespaced JSON key/value store.

    Writes are durable when :meth:`put` returns: a crash right after must not
    lose them (R3 retention, R7 validators).
    """

    def get(self, namespace: str, key: str) -> Any | None: ...

    def put(self, namespace: str, key: str, value: Any) -> None: ...

    def get_many(self, namespace: str, keys: list[str]) -> dict[str, Any]: ...

    def put_many(self, namespace: str, values: dict[str, Any]) -> None:
        """Write all *values* atomically (one transaction)."""
        ...

    def delete(self, namespace: str, key: str) -> None: ...

    def close(self) -> None: ...


_stores: weakref.WeakKeyDictionary[Crawler, StateStore] = weakref.WeakKeyDictionary()


def state_dir(crawler: Crawler) -> Path:
    """``WALSH_STATE_DIR``, by default ``.scrapy/walsh`` in the project data dir."""
    configured = crawler.settings.get("WALSH_STATE_DIR")
    path = Path(configured) if configured else Path(data_path("walsh", createdir=True))
    path.mkdir(parents=True, exist_ok=True)
    return path


def state_for(crawler: Crawler) -> StateStore:
    """The crawler's one store, created on first use and closed with the engine."""
    store = _stores.get(crawler)
    if store is None:
        from scrapy_walsh_research.state.sqlite import SQLiteStateStore

        store = SQLiteStateStore(state_dir(crawler) / "state.sqlite3")
        _stores[crawler] = store
        crawler.signals.connect(store.close, signal=signals.engine_stopped, weak=False)
    return store
