"""The one stored, single-flight, conditional fetch of the documents read
before their targets: robots.txt and tdmrep.json (the document gates,
:mod:`~scrapy_walsh_research.gates.origin_documents`) and each sitemap
(:mod:`~scrapy_walsh_research.documents.sitemap_documents`).

Each stored copy keeps the validators its answer gave, so a refetch (its
freshness run out) is a conditional GET, and a 304 keeps the copy
(:func:`conditional_headers`, :func:`revalidated`, :func:`renewed`): one
implementation for the three documents."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, TypeVar

from scrapy_walsh_research._runtime.marks import HostBusy
from scrapy_walsh_research.state import FlightBusy

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from scrapy.http import Response
    from scrapy.statscollectors import StatsCollector

    from scrapy_walsh_research.state import StateStore

logger = logging.getLogger(__name__)

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
                # another worker may have fetched and stored it, and let go
                # of the lock, between the first look and this lock (one
                # process's store has no other worker: nothing to look for)
                saved = await stored() if store.shared else None
                if saved is not None:
                    return saved, True
                return await fetch(), False
            finally:
                await release()
        saved = await stored()
        if saved is not None:
            return saved, True
    return await fetch(), False


# -- the conditional part: a refetch that a 304 answers with the stored copy ----------

#: how a response to a document's fetch stands to the stored copy: a new
#: answer (any status but 304, read as that document reads it), the stored
#: copy confirmed (304 to a conditional request whose copy is still there),
#: or no answer at all (304 to a request that had nothing to match)
ANSWER, NOT_MODIFIED, UNUSABLE = "answer", "not_modified", "unusable"


def validators(response: Response) -> dict[str, str | None]:
    """The validators an answer gave (``etag``, ``last_modified``), stored
    with its copy so the next fetch of the document is conditional."""
    etag, modified = response.headers.get(b"ETag"), response.headers.get(b"Last-Modified")
    return {
        "etag": etag.decode("latin-1") if etag else None,
        "last_modified": modified.decode("latin-1") if modified else None,
    }


def conditional_headers(copy: Mapping[str, Any] | None) -> dict[str, str]:
    """The request headers that make a refetch conditional on *copy*, the
    stored copy a 304 would keep (None: none, so no validators: a 304 must
    never be asked for with nothing to reuse): ``If-None-Match`` from its
    ETag, ``If-Modified-Since`` from its Last-Modified, only those the site
    gave."""
    headers: dict[str, str] = {}
    if copy is not None:
        if copy.get("etag"):
            headers["If-None-Match"] = str(copy["etag"])
        if copy.get("last_modified"):
            headers["If-Modified-Since"] = str(copy["last_modified"])
    return headers


def revalidated(
    response: Response,
    sent: Mapping[str, str],
    copy: Mapping[str, Any] | None,
    *,
    kind: str,
    stats: StatsCollector,
) -> str:
    """What *response* to a fetch that sent the validators *sent* means,
    *copy* being the stored copy as it is now (:data:`ANSWER`,
    :data:`NOT_MODIFIED` or :data:`UNUSABLE`). A 304 keeps the copy only
    when the request was conditional on that very copy: a 304 to a request
    that sent none (a broken or hostile server), or whose copy is gone or
    was replaced meanwhile, says nothing the bot can read, and the caller
    takes it as it takes any other unusable answer for the document, never
    as an empty one. Counted under ``walsh/documents/...`` and
    ``walsh/<kind>/not_modified``."""
    if response.status != 304:
        return ANSWER
    if sent and conditional_headers(copy) == dict(sent):
        stats.inc_value("walsh/documents/not_modified")
        stats.inc_value(f"walsh/{kind}/not_modified")
        logger.debug("%(url)s: not modified (304): the stored copy stays in force",
                     {"url": response.url})  # fmt: skip
        return NOT_MODIFIED
    stats.inc_value("walsh/documents/not_modified_unusable")
    logger.warning(
        "%(url)s answered 304 Not Modified to a request %(what)s: not an answer, "
        "taken as an unusable one",
        {"url": response.url,
         "what": "whose stored copy is gone" if sent else "that sent no validators"},
    )  # fmt: skip
    return UNUSABLE


def unusable_why(sent: Mapping[str, str]) -> str:
    """What an :data:`UNUSABLE` 304 was, after the document's name, for its
    records (the request sent the validators *sent*)."""
    if sent:
        return "answered 304 Not Modified, but the stored copy it would keep is gone"
    return "answered 304 Not Modified to a request that was not conditional (nothing to keep)"


def renewed(copy: Mapping[str, Any], response: Response, **fresh: Any) -> dict[str, Any]:
    """*copy* confirmed by a 304: the same document (its body and what it
    says exactly as stored), with *fresh* (its new freshness) and any
    validators the 304 carried replacing the old ones (RFC 9111 §4.3.4)."""
    updated = {k: v for k, v in validators(response).items() if v is not None}
    return {**copy, **updated, **fresh}
