"""The sitemaps an origin's robots.txt declares, as the sitemaps gate needs
them: fetched through every gate, conditionally, once per fleet per
freshness period, and read off the reactor's critical path.

A document is fetched with the bundle's mark (``_runtime/marks.py:
internal_fetch``, purpose ``sitemap``) like robots.txt and tdmrep.json, so
R3, R2 (a sitemap a robots.txt disallows is not fetched), R4 (Crawl-delay,
the host's slot), R1, R5 and the byte cap apply; a sitemap on another host
is a request to that host. Its validators are kept, so the next fetch is a
conditional GET, and what it claims is kept with them (the *lastmod table*:
canonical target URL -> ``<lastmod>``), so a 304 reuses it, and so every
worker of a fleet reads one fetch: the stored single-flight fetch of
robots.txt and tdmrep.json
(:func:`~scrapy_walsh_research.documents.fetch.fetched_once`).

Only what is about the list is kept: entries the sitemap may speak for
(:func:`~scrapy_walsh_research.core.sitemap_claims.sitemap_covers`) whose
URL this bundle has fetched before (a past answer in
:data:`~scrapy_walsh_research.state.namespaces.ANSWERED`). A URL learnt from
a sitemap is never requested (R6).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.task import cooperate

from scrapy_walsh_research._runtime.marks import SITEMAP, HostBusy, internal_fetch
from scrapy_walsh_research.core.sitemap_claims import SitemapClaims
from scrapy_walsh_research.core.sitemaps import (
    MAX_SITEMAP_BYTES,
    SitemapEntry,
    SitemapReader,
    SitemapStatus,
)
from scrapy_walsh_research.core.urls import canonical_url, origin_of, url_host
from scrapy_walsh_research.documents.fetch import (
    NOT_MODIFIED,
    UNUSABLE,
    conditional_headers,
    fetched_once,
    renewed,
    revalidated,
    unusable_why,
    validators,
)
from scrapy_walsh_research.errors import DOWNLOAD_TIMEOUTS, WalshDenied, failure_reason
from scrapy_walsh_research.state.namespaces import ANSWERED
from scrapy_walsh_research.state.namespaces import SITEMAP_DOCUMENTS as DOCUMENTS

if TYPE_CHECKING:
    from scrapy_walsh_research._runtime.context import CrawlContext

    pass

logger = logging.getLogger(__name__)

#: bytes handed to the reader per turn of the reactor (the reader splits
#: them again into 64 KiB pieces, one per step)
CHUNK = 256 * 1024
#: targets looked up per state-store call when a table is built
LOOKUP_BATCH = 1000


@dataclass
class SitemapDocument:
    """One sitemap as read for one origin."""

    url: str
    #: canonical target URL -> (``<lastmod>`` as an ISO datetime, the end of
    #: what it can mean, seconds since the epoch)
    claims: dict[str, tuple[str, float]] = field(default_factory=dict)
    #: a sitemap index's sitemaps
    children: list[str] = field(default_factory=list)
    #: None when read whole; else why it is ignored (one line)
    error: str | None = None
    #: how it was had: "fetched", "not_modified" (304), "adopted" (another
    #: worker's or run's, a failure included), or "failed" (fetched now)
    how: str = "fetched"


class SitemapDocuments:
    """Fetches and reads sitemaps for one crawler (see the module)."""

    def __init__(self, context: CrawlContext) -> None:
        crawler = self.crawler = context.crawler
        settings = crawler.settings
        self.stats = crawler.stats
        self.store = context.store
        self.marks = context.marks
        self.audit = context.audit
        self.ttl = context.settings.sitemap_ttl
        self.download_timeout = settings.getfloat("DOWNLOAD_TIMEOUT", 180.0)
        self.fetch_ttl = self.download_timeout + 30.0
        self.started = self.store.time()

    def _fresh(self, saved: Any) -> bool:
        """Whether a stored reading may stand without asking the site.

        A lastmod table read before this run started says nothing of what
        changed since: it is asked for again (a conditional GET, a 304 when
        nothing changed), so a page the site announces as changed is never
        skipped on an old copy. Read in this run (by this worker or another
        of the fleet), it stands for ``WALSH_SITEMAP_TTL``. A failure (a
        404, a refusal, a malformed document) claims nothing, so an old one
        may stand: it stands for the TTL whenever it was met, and a sitemap
        that is missing is not asked for again by every run and worker."""
        if not isinstance(saved, dict) or not isinstance(saved.get("read_at"), (int, float)):
            return False
        read_at = float(saved["read_at"])
        if self.store.time() - read_at >= self.ttl:
            return False
        return read_at >= self.started or saved.get("error") is not None

    async def get(
        self, origin: str, url: str, *, max_wait: float | None, timeout: float | None = None
    ) -> SitemapDocument:
        """The sitemap at *url* as it speaks for *origin*'s targets: stored
        and fresh, or fetched (one worker of a fleet at a time; the others
        adopt what it stored). :class:`HostBusy` when its host cannot be
        reached within *max_wait* (nothing was sent); an answer not had
        within *timeout* is a failure (the target waiting on it goes on)."""
        key = f"{origin}\t{url}"  # a purge of the origin's host finds it
        saved: Any = None

        async def stored() -> SitemapDocument | None:
            nonlocal saved
            saved = await self.store.get(DOCUMENTS, key)
            return _document(url, saved, "adopted") if self._fresh(saved) else None

        doc, adopted = await fetched_once(
            self.store, f"sitemap:{key}", host=url_host(url), ttl=self.fetch_ttl,
            max_wait=max_wait, stored=stored,
            fetch=lambda: self._fetch(origin, url, key, saved, max_wait, timeout),
        )  # fmt: skip
        if adopted:
            self.stats.inc_value("walsh/sitemaps/adopted")
        return doc

    async def _fetch(
        self,
        origin: str,
        url: str,
        key: str,
        saved: Any,
        max_wait: float | None,
        timeout: float | None,
    ) -> SitemapDocument:
        headers = conditional_headers(_copy(saved))
        try:
            response = await internal_fetch(
                self.marks, url, SITEMAP, maxsize=MAX_SITEMAP_BYTES,
                max_wait=max_wait, timeout=timeout, headers=headers or None,
            )  # fmt: skip
        except HostBusy:
            raise
        except WalshDenied as exc:
            why = f"not fetched: {exc.rule}: {exc.reason}"
            # a skip (a hold or Crawl-delay beyond its maximum) is this run's
            # pacing, not the site's answer: not kept for the next run
            keep = exc.lasting and exc.outcome != "skipped"
            return await self._failed(url, why, "denied", key, kept=keep)
        except Exception as exc:
            # cut short by the time the gate had left (not the site's failure:
            # the next run asks again), or a failure of its own, kept
            ours = timeout is not None and timeout < self.download_timeout
            keep = not (ours and isinstance(exc, DOWNLOAD_TIMEOUTS))
            why = f"not fetched: {failure_reason(exc)}"
            return await self._failed(url, why, "failed", key, kept=keep)
        now = self.store.time()
        copy = _copy(await self.store.get(DOCUMENTS, key)) if headers else None
        how = revalidated(response, headers, copy, kind="sitemaps", stats=self.stats)
        if how == NOT_MODIFIED and copy is not None:
            kept = renewed(copy, response, read_at=now)
            await self.store.put(DOCUMENTS, key, kept)
            return _document(url, kept, "not_modified")
        if how == UNUSABLE:
            return await self._failed(url, unusable_why(headers), "failed", key)
        if not 200 <= response.status < 300:
            return await self._failed(url, f"answered {response.status}", "failed", key)
        self.stats.inc_value("walsh/sitemaps/fetched")
        entries, status = await read_cooperatively(response.body)
        if not status.complete:  # kept without its validators: the next fetch is a full one
            return await self._failed(url, status.describe(), "malformed", key)
        logger.info("Sitemap %(url)s: %(what)s", {"url": url, "what": status.describe()})
        doc = await self._table(origin, url, entries, status)
        await self.store.put(DOCUMENTS, key, {
            "read_at": now,
            **validators(response),
            "claims": {k: list(v) for k, v in doc.claims.items()},
            "children": doc.children,
            "error": None,
        })  # fmt: skip
        return doc

    async def _failed(
        self, url: str, why: str, stat: str, key: str, *, kept: bool = True
    ) -> SitemapDocument:
        """A sitemap that could not be read: ignored, with one log line; its
        targets are revalidated as usual. *kept* (without validators) so that
        it is not asked for again within the TTL (see :meth:`_fresh`), unless
        the failure was this run's own doing rather than the site's."""
        if kept:
            await self.store.put(DOCUMENTS, key, {"read_at": self.store.time(), "error": why})
        self.stats.inc_value(f"walsh/sitemaps/{stat}")
        await self.audit.sitemap(url, state="ignored", why=why)
        logger.warning("Sitemap %(url)s ignored (%(why)s): its targets are revalidated as usual",
                       {"url": url, "why": why})  # fmt: skip
        return SitemapDocument(url, error=why, how="failed")

    async def _table(
        self, origin: str, url: str, entries: list[SitemapEntry], status: SitemapStatus
    ) -> SitemapDocument:
        """The lastmod table of *origin*'s targets in *entries* (a later
        lastmod wins; listed once without one, a target has no claim)."""
        if status.kind == "sitemapindex":
            children = list(dict.fromkeys(e.loc for e in entries))
            return SitemapDocument(url, children=children)
        declared = (origin + "/robots.txt",)
        # the targets it could speak of: those of this origin this bundle
        # has an answer from (a URL learnt from a sitemap is never a target)
        keys = sorted({canonical_url(e.loc) for e in entries if origin_of(e.loc) == origin})
        answered: dict[str, Any] = {}
        for at in range(0, len(keys), LOOKUP_BATCH):
            answered.update(await self.store.get_many(ANSWERED, keys[at : at + LOOKUP_BATCH]))
        table = SitemapClaims(answered, url, declared)
        table.add(entries)
        claims: dict[str, tuple[str, float]] = {}
        for key, claim in table.claims().items():
            if claim.lastmod is not None and claim.lastmod_end is not None:
                claims[key] = (claim.lastmod.isoformat(), claim.lastmod_end.timestamp())
        return SitemapDocument(url, claims=claims)


def _copy(saved: Any) -> dict[str, Any] | None:
    """The stored reading a 304 would keep (a failure is none: it claims nothing)."""
    return saved if isinstance(saved, dict) and saved.get("error") is None else None


def _document(url: str, saved: Any, how: str) -> SitemapDocument:
    if saved.get("error") is not None:
        return SitemapDocument(url, error=str(saved["error"]), how=how)
    claims = {
        str(k): (str(v[0]), float(v[1]))
        for k, v in (saved.get("claims") or {}).items()
        if isinstance(v, list) and len(v) == 2
    }
    return SitemapDocument(url, claims, [str(c) for c in saved.get("children") or []], how=how)


async def read_cooperatively(body: bytes) -> tuple[list[SitemapEntry], SitemapStatus]:
    """Read *body* one piece per turn of the reactor (``cooperate``): a
    50 MiB sitemap takes seconds of parsing, which must not stall every
    other host. The reader keeps no tree, so memory stays bounded."""
    reader = SitemapReader()
    entries: list[SitemapEntry] = []

    def steps() -> Iterator[None]:
        for at in range(0, len(body), CHUNK):
            for step in reader.steps(body[at : at + CHUNK]):
                entries.extend(step)
                yield None
            if reader.stopped:
                return

    await maybe_deferred_to_future(cooperate(steps()).whenDone())
    status = reader.close()
    entries.extend(reader.drain())
    return entries, status
