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
#: The /llms.txt probe (R9): scheduled like a target and subject to every gate.
LLMS = "llms"
#: Fetched with engine.download_async from inside another request's chain:
#: not robots-gated (they are robots.txt or the operator's own documents),
#: and paced in place, since they cannot be requeued.
DIRECT = frozenset({ROBOTS, BLOCKLIST, SCHEMA})
#: Meta key the targets spider sets on each declared target.
TARGET_META = "walsh_target"
_CAP_META = "walsh_max_bytes"
_SEEN_META = "_walsh_bytes_seen"


def internal_purpose(request: Request) -> str | None:
    return request.meta.get(INTERNAL_META)


def is_direct(request: Request) -> bool:
    return request.meta.get(INTERNAL_META) in DIRECT


def is_target(request: Request) -> bool:
    """A declared target (or its redirect/retry): from the targets spider or a
    spider's start requests. Scrapy copies meta to redirects and retries."""
    return bool(request.meta.get(TARGET_META) or request.meta.get("is_start_request"))


def target_key(request: Request) -> str:
    """The canonical URL of the declared target a request stems from."""
    from scrapy_walsh_research.urls import canonical_url

    target = request.meta.get(TARGET_META)
    if target:
        return target["canonical_url"]
    first = (request.meta.get("redirect_urls") or [request.url])[0]
    return canonical_url(first)


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
