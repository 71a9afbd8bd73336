"""The one stored, single-flight fetch of the documents read before their
targets: robots.txt and tdmrep.json (the document gates,
:mod:`~scrapy_walsh_research.gates.origin_documents`) and each sitemap
(:mod:`~scrapy_walsh_research.documents.sitemap_documents`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from scrapy_walsh_research._runtime.marks import HostBusy
from scrapy_walsh_research.state import FlightBusy

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy_walsh_research.state import StateStore

T = TypeVar("T")


async def fetched_once(
    store: StateStore,
    lock: str,
    *,
    host: str,
    ttl: float,
    max_wait: float | None,
    stored: Callable[[], Awaitable[T | None]],
    fetch: Callable[[], Awaitable[T]],
) -> tuple[T, bool]:
    """A stored document, or one fetch of it per fleet: the one stored
    single-flight fetch of the documents read before their targets
    (robots.txt, tdmrep.json, each sitemap). *stored* is the copy still in
    force (None: none); with shared state one worker holds the fleet's lock
    *lock* while it fetches, and the others wait for it and adopt what it
    stored, so workers starting together send one request for a document,
    not one each. Returns the document and whether it was adopted (stored by
    an earlier run or another worker: nothing was sent). :class:`HostBusy`
    when the fetch cannot wait *max_wait* for another worker's (nothing was
    sent)."""
    saved = await stored()
    if saved is not None:
        return saved, True
    for _ in range(3):
        try:
            release = await store.single_flight(lock, ttl=ttl, max_wait=max_wait)
        except FlightBusy:
            # another worker's fetch is still out: serve other hosts
            # meanwhile rather than hold the only download slot
            raise HostBusy(host, 1.0) from None
        if release is not None:
            try:
                return await fetch(), False
            finally:
                await release()
        saved = await stored()
        if saved is not None:
            return saved, True
    return await fetch(), False
