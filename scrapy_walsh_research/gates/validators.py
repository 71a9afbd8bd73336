"""R7: conditional requests from stored validators.

ETag and Last-Modified are kept per canonical URL in the state store
(SQLite by default, written when the response arrives, so a crash after a
completed fetch loses nothing); target requests send ``If-None-Match`` and
``If-Modified-Since``; a 304 is reported as ``not_modified`` and not
processed again. Scrapy's HTTP cache is not used: it stores whole bodies,
which R6 forbids keeping.
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING, Any

from scrapy_walsh_research._runtime.context import InContext
from scrapy_walsh_research.core.urls import canonical_url
from scrapy_walsh_research.state.namespaces import VALIDATORS

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self

logger = logging.getLogger(__name__)


class ConditionalRequestMiddleware(InContext):
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.store = self.context.store
        self.marks = self.context.marks
        #: requests whose target had no stored validators when they were sent
        #: (a response without validators then has nothing to delete: one
        #: state write per response fewer)
        self._unstored: weakref.WeakKeyDictionary[Request, str] = weakref.WeakKeyDictionary()
        #: the validators a request was sent with, written again on its 304:
        #: the store forgets what was not written for WALSH_STATE_TTL, and a
        #: page that never changes must keep its validators
        self._sent: weakref.WeakKeyDictionary[Request, tuple[str, dict[str, Any]]] = (
            weakref.WeakKeyDictionary()
        )

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    async def process_request(self, request: Request) -> None:
        if not self.marks.is_target(request):
            return
        key = canonical_url(request.url)
        saved = await self.store.get(VALIDATORS, key)
        if not saved:
            self._unstored[request] = key
            return
        self._sent[request] = (key, saved)
        if saved.get("etag"):
            request.headers.setdefault(b"If-None-Match", saved["etag"])
        if saved.get("last_modified"):
            request.headers.setdefault(b"If-Modified-Since", saved["last_modified"])
        self.stats.inc_value("walsh/validators/conditional")

    async def process_response(self, request: Request, response: Response) -> Response:
        if not self.marks.is_target(request):
            return response
        if response.status == 304:
            self.stats.inc_value("walsh/validators/not_modified")
            sent = self._sent.pop(request, None)
            if sent is not None:
                await self.store.put(VALIDATORS, *sent)
        elif 200 <= response.status < 300:
            etag = response.headers.get(b"ETag")
            modified = response.headers.get(b"Last-Modified")
            key = canonical_url(response.url)
            unstored = self._unstored.pop(request, None) == key
            if etag or modified:
                await self.store.put(
                    VALIDATORS,
                    key,
                    {
                        "etag": etag.decode("latin-1") if etag else None,
                        "last_modified": modified.decode("latin-1") if modified else None,
                    },
                )
                self.stats.inc_value("walsh/validators/stored")
            elif not unstored:
                await self.store.delete(VALIDATORS, key)
        return response
