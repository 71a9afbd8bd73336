"""R9: ask targets for structured representations: ``text/markdown``
first, then feeds, HTML last.

Sets ``Accept`` on every declared target (and on the ``/llms.txt`` probe:
markdown, then plain text). What comes back is read for metadata by the
targets spider (:mod:`scrapy_walsh_research.spiders.structured`); HTML is
never parsed for content.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_walsh_research._runtime.context import InContext
from scrapy_walsh_research._runtime.marks import LLMS, TARGET

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from typing_extensions import Self

ACCEPT = (
    "text/markdown, "
    "application/feed+json;q=0.9, application/atom+xml;q=0.9, application/rss+xml;q=0.9, "
    "application/xml;q=0.8, text/xml;q=0.8, text/plain;q=0.7, text/html;q=0.5, */*;q=0.1"
)
ACCEPT_LLMS = "text/markdown, text/plain;q=0.9, */*;q=0.1"


class NegotiationMiddleware(InContext):
    """Ask targets for markdown first, then feeds (R9 content negotiation)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.marks = self.context.marks

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def process_request(self, request: Request) -> None:
        purpose = self.marks.purpose(request)
        if purpose == LLMS:
            request.headers[b"Accept"] = ACCEPT_LLMS
        elif purpose == TARGET:
            request.headers[b"Accept"] = ACCEPT
