"""R6: only declared targets reach the network; nothing is followed.

Two guards:

* :class:`ScopeSpiderMiddleware` marks every request that leaves the
  spider's ``start()`` as a declared target, and drops every request a
  spider callback yields (followed links), whatever the spider: a
  project's own link-following spider fetches its start pages only, and is
  told so once, at WARNING, with the count, when it closes;
* :class:`ScopeDownloaderMiddleware`, first in the downloader chain, lets
  through only declared targets (the targets spider's, or a spider's start
  requests), their redirects and retries, and the bundle's own requests.
  Anything else (a media pipeline's sub-resources, a request another
  component injects, one carrying a forged marker) is denied with rule R6
  before any other gate runs. What counts as declared is the bundle's own
  mark (:mod:`scrapy_walsh_research._runtime.marks`), never a meta key a project
  could set.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals

from scrapy_walsh_research._runtime.context import InContext
from scrapy_walsh_research._runtime.marks import LLMS, TARGET
from scrapy_walsh_research._runtime.meta import INTERNAL_META
from scrapy_walsh_research.errors import deny
from scrapy_walsh_research.settings.check import check_configuration

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable

    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self

logger = logging.getLogger(__name__)


#: said once, when the spider closes, if it yielded requests from its callbacks
NOT_FOLLOWED = (
    "R6: spider %(spider)r yielded %(n)d request(s) while parsing responses (links to "
    "follow, next pages, ...), and none was sent: with the Walsh-Research add-on a spider "
    "fetches only its start requests (its declared targets) and follows no link. To fetch "
    "a page, make it a start URL, or list it for the targets spider (scrapy crawl targets "
    "-a list=FILE). Counted in walsh/scope/followup_dropped."
)


class ScopeSpiderMiddleware(InContext):
    """Mark declared targets; drop requests yielded by callbacks (R6)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.marks = self.context.marks
        #: requests a callback yielded and this guard dropped, this crawl
        self.dropped = 0
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        check_configuration(crawler)
        return cls(crawler)

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """Every request of ``start()`` is a declared target: mark it (closest
        to the engine, so requests other middlewares add here count too)."""
        await self.marks.ready()
        async for obj in start:
            if isinstance(obj, Request):
                obj.meta[INTERNAL_META] = self.marks.issue(TARGET)
            yield obj

    def _keep(self, obj: Any, response: Response) -> bool:
        if not isinstance(obj, Request):
            return True
        if self.marks.purpose(obj) == LLMS:
            return True  # the bundle's own /llms.txt probe (R9), gated like a target
        self.stats.inc_value("walsh/scope/followup_dropped")
        self.dropped += 1
        if self.dropped == 1:  # one example; the count is said when the spider closes
            logger.debug(
                "R6: dropped a request yielded while parsing %(from)s: %(url)s (no link "
                "following; further ones are only counted)",
                {"from": response.url, "url": obj.url},
            )
        return False

    def spider_closed(self, spider: Any) -> None:
        if self.dropped:
            logger.warning(NOT_FOLLOWED, {"spider": spider.name, "n": self.dropped})

    def process_spider_output(
        self, response: Response, result: Iterable[Any], spider: Any = None
    ) -> Iterable[Any]:
        return (obj for obj in result if self._keep(obj, response))

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any], spider: Any = None
    ) -> AsyncIterator[Any]:
        async for obj in result:
            if self._keep(obj, response):
                yield obj


class ScopeDownloaderMiddleware(InContext):
    """Deny every request that is not a declared target or the bundle's own (R6)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.marks = self.context.marks

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        check_configuration(crawler)
        return cls(crawler)

    def process_request(self, request: Request) -> None:
        if self.marks.purpose(request) is not None:
            return
        reason = "not a declared target: sub-resources and followed links are never fetched"
        deny(self.crawler, logger, request, "R6", reason)
