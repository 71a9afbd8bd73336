"""Which failed downloads Scrapy dropped for ``DOWNLOAD_MAXSIZE``, and why.

The ``targets`` spider gives such a line a record saying so; any other
failure keeps its own reason. Scrapy reports the cap three ways, none of
them by a type of its own (see :meth:`SizeCap.reason`), so the sizes are
noted as the response comes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import DownloadCancelledError, IgnoreRequest

from scrapy_walsh_research._runtime.meta import ANNOUNCED_META, RECEIVED_META
from scrapy_walsh_research.errors import WalshDenied

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Headers

logger = logging.getLogger(__name__)



class SizeCap:
    """Notes the sizes of the responses *watched* says matter (from the
    ``headers_received`` and ``bytes_received`` signals) and tells a size-cap
    drop from any other failure."""

    def __init__(self, crawler: Crawler, watched: Callable[[Request], bool]) -> None:
        self.crawler = crawler
        self.watched = watched
        crawler.signals.connect(self._headers_received, signal=signals.headers_received)
        crawler.signals.connect(self._bytes_received, signal=signals.bytes_received)

    def _headers_received(
        self, headers: Headers, body_length: object, request: Request, **kwargs: Any
    ) -> None:
        if self.watched(request):
            announced = body_length if isinstance(body_length, int) else None
            request.meta[ANNOUNCED_META] = announced
            request.meta[RECEIVED_META] = 0

    def _bytes_received(self, data: bytes, request: Request, **kwargs: Any) -> None:
        if RECEIVED_META in request.meta:
            request.meta[RECEIVED_META] += len(data)

    def reason(self, request: Request, exc: BaseException | None) -> str | None:
        """The reason, counted and logged, when Scrapy dropped a response for
        exceeding DOWNLOAD_MAXSIZE; None for any other failure.

        Scrapy 2.19 reports it three ways: a Content-Length above the cap
        cancels before the body is read, and a body without one is cancelled
        once it grows past the cap (both ``DownloadCancelledError``; the
        announced and received sizes, noted from the ``headers_received`` and
        ``bytes_received`` signals, tell them from any other cancellation); a
        compressed body that inflates past the cap is dropped by
        ``HttpCompressionMiddleware`` with an ``IgnoreRequest`` naming
        DOWNLOAD_MAXSIZE (its wording is all that tells; checked by
        ``tests/test_r9_bodies.py``).
        """
        limit = request.meta.get(
            "download_maxsize", self.crawler.settings.getint("DOWNLOAD_MAXSIZE")
        )
        if not limit:
            return None
        head = f"response larger than DOWNLOAD_MAXSIZE ({limit} bytes): not read"
        reason = None
        if isinstance(exc, DownloadCancelledError):
            announced = request.meta.get(ANNOUNCED_META)
            if announced is not None and announced > limit:
                reason = f"{head} (Content-Length: {announced})"
            elif request.meta.get(RECEIVED_META, 0) > limit:
                reason = f"{head} (no Content-Length; stopped when the body grew past it)"
        elif (
            isinstance(exc, IgnoreRequest)
            and not isinstance(exc, WalshDenied)
            and "DOWNLOAD_MAXSIZE" in str(exc)
            and "decompression" in str(exc)
        ):
            reason = f"{head} (once decompressed)"
        if reason is not None:
            assert self.crawler.stats is not None
            self.crawler.stats.inc_value("walsh/structured/too_large")
            logger.warning("%(reason)s: %(url)s", {"reason": reason, "url": request.url})
        return reason
