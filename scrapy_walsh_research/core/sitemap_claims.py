"""What one sitemap says about the list's targets: the ``<lastmod>`` it
claims for each, matched by canonical URL, from a sitemap that may speak for
it. The reader (``core/sitemaps.py``) only reads; this decides which of what
it read is a claim about a target at all. Whether a claim is *trusted* is
the gate's to decide (checked per host before any skip).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from scrapy_walsh_research.core.sitemaps import SitemapEntry
from scrapy_walsh_research.core.urls import canonical_url, origin_of


def sitemap_covers(sitemap_url: str, loc: str, declared_by: Iterable[str] = ()) -> bool:
    """Whether the sitemap at *sitemap_url* may speak for the URL *loc*.

    sitemaps.org 0.9, "Sitemap file location": a sitemap speaks for the URLs
    of its own scheme, host and port under its own directory
    (``/catalog/sitemap.xml``: ``/catalog/...`` only); "Sitemaps & Cross
    Submits": and for every URL of a host whose robots.txt names it.
    *declared_by* are URLs of the origins whose robots.txt did (any URL of
    each: only its origin counts). Hosts compare as one host however they
    are spelt (:func:`~scrapy_walsh_research.core.urls.origin_of`).
    """
    loc = loc.strip()
    origin = origin_of(loc)
    if any(origin == origin_of(d) for d in declared_by):
        return True
    if origin != origin_of(sitemap_url):
        return False
    try:
        directory = urlsplit(sitemap_url.strip()).path.rpartition("/")[0] + "/"
        path = urlsplit(loc).path or "/"
    except ValueError:
        return False
    return path.startswith(directory)


class SitemapClaims:
    """What one sitemap claims about the list's targets: for each target it
    lists, by canonical URL, the entry whose ``<lastmod>`` it gives.

    Fed entries as a :class:`SitemapReader` gives them (only the matching
    ones are kept, so memory follows the list, not the sitemap). An entry
    the sitemap may not speak for (:func:`sitemap_covers`) is counted in
    :attr:`outside` and claims nothing. A target listed twice keeps the
    later lastmod (the reading that skips less); listed even once without
    a lastmod, it has no claim at all: the sitemap does not say.
    """

    def __init__(
        self, targets: Iterable[str], sitemap_url: str, declared_by: Iterable[str] = ()
    ) -> None:
        self.sitemap_url = sitemap_url
        self._declared_by = tuple(declared_by)
        self._targets: dict[str, list[str]] = {}
        for target in targets:
            self._targets.setdefault(canonical_url(target), []).append(target)
        self._claims: dict[str, SitemapEntry | None] = {}
        #: entries that named a target but that the sitemap may not speak for
        self.outside = 0

    def add(self, entries: Iterable[SitemapEntry]) -> None:
        for entry in entries:
            key = canonical_url(entry.loc)
            if key not in self._targets:
                continue
            if not sitemap_covers(self.sitemap_url, entry.loc, self._declared_by):
                self.outside += 1
                continue
            if entry.lastmod_end is None:
                self._claims[key] = None
            elif key not in self._claims:
                self._claims[key] = entry
            else:
                known = self._claims[key]
                if known is not None and known.lastmod_end is not None:
                    if entry.lastmod_end > known.lastmod_end:
                        self._claims[key] = entry

    @property
    def listed(self) -> int:
        """How many targets (by canonical URL) the sitemap lists."""
        return len(self._claims)

    def claim(self, target: str) -> SitemapEntry | None:
        """The entry whose lastmod the sitemap claims for *target*; None
        when it claims none (unlisted, or listed without a lastmod)."""
        return self._claims.get(canonical_url(target))

    def claims(self) -> dict[str, SitemapEntry]:
        """Each target (as given) with a claimed lastmod -> its entry."""
        return {
            target: entry
            for key, entry in self._claims.items()
            if entry is not None
            for target in self._targets[key]
        }
