"""The bundle's own requests (robots.txt, blocklist, schema).

They go through ``engine.download_async`` and therefore through the whole
downloader-middleware chain: the R1 gate sets the User-Agent on them, the R3
gate checks their redirect hops, and they count against a host like any
other request. ``meta["walsh_internal"]`` names the purpose so that a gate
does not gate its own input (the blocklist gate does not wait for the
blocklist to fetch the blocklist).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from scrapy import Request, signals
from scrapy.exceptions import StopDownload
from scrapy.http.request import NO_CALLBACK

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

INTERNAL_META = "walsh_internal"
ROBOTS, BLOCKLIST, SCHEMA = "robots", "blocklist", "schema"
_CAP_META = "walsh_max_bytes"
_SEEN_META = "_walsh_bytes_seen"


def internal_purpose(request: Request) -> str | None:
    return request.meta.get(INTERNAL_META)


async def internal_fetch(
    crawler: Crawler, url: str, purpose: str, *, max_bytes: int | None = None
) -> Response:
    """Download *url* for the bundle itself; redirects are followed by Scrapy.

    With *max_bytes*, the body download is stopped soon after that many
    bytes (one network chunk more at most) and the partial response returned.
    """
    meta: dict[str, object] = {INTERNAL_META: purpose, "dont_retry": True}
    if max_bytes is not None:
        meta[_CAP_META] = max_bytes
        _install_cap(crawler)
    request = Request(url, callback=NO_CALLBACK, dont_filter=True, meta=meta)
    assert crawler.engine is not None
    return await crawler.engine.download_async(request)


_capped: weakref.WeakSet[Crawler] = weakref.WeakSet()


def _install_cap(crawler: Crawler) -> None:
    if crawler in _capped:
        return
    _capped.add(crawler)

    def on_bytes(data: bytes, request: Request, spider: object = None) -> None:
        cap = request.meta.get(_CAP_META)
        if cap is None:
            return
        seen = request.meta.get(_SEEN_META, 0) + len(data)
        request.meta[_SEEN_META] = seen
        if seen > cap:
            raise StopDownload(fail=False)

    crawler.signals.connect(on_bytes, signal=signals.bytes_received, weak=False)
