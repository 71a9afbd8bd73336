"""R5: back off and retry on 429/503 (and other transient failures), honouring Retry-After.

Replaces Scrapy's ``RetryMiddleware``, which retries 429/503 at once. Here:

* the delay is exponential with full jitter, ``uniform(0, base * 2**n)``;
* on 429/503 a valid ``Retry-After`` (delta-seconds or HTTP-date, RFC 9110
  §10.2.3) replaces it; a malformed one is ignored, a past date means "now"
  (pacing still keeps the host's interval);
* a ``Retry-After`` beyond ``WALSH_RETRY_MAX_DELAY`` means give up now;
* the wait holds back the whole host (no request to it before the retry
  time) while other hosts go on; the retry passes every gate again.

What an answer holds its host for is decided once, by
:class:`~scrapy_walsh_research.scheduling.backoff.Backoff` (``Retry-After``
parsed there); the pacing gate puts it on the host's clock, and this gate
retries with the same decision, or gives up.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy_walsh_research._runtime.context import InContext
from scrapy_walsh_research._runtime.meta import GAVE_UP_META
from scrapy_walsh_research.core.retry_after import RATE_LIMIT_CODES, parse_retry_after
from scrapy_walsh_research.core.urls import url_host
from scrapy_walsh_research.scheduling.backoff import TRANSIENT_CODES, Backoff
from scrapy_walsh_research.settings.check import check_configuration

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self

    from scrapy_walsh_research.scheduling.backoff import Hold

logger = logging.getLogger(__name__)

__all__ = ["RATE_LIMIT_CODES", "RetryMiddleware", "parse_retry_after"]


class RetryMiddleware(InContext):
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.backoff = self.context.service(Backoff)
        self.max_times = self.backoff.max_times
        self.priority_adjust = crawler.settings.getint("RETRY_PRIORITY_ADJUST")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        check_configuration(crawler)
        return cls(crawler)

    async def process_response(self, request: Request, response: Response) -> Request | Response:
        status = response.status
        if request.meta.get("dont_retry") or status not in RATE_LIMIT_CODES | TRANSIENT_CODES:
            return response
        hold = self.backoff.after(request, response=response)
        if hold.retry_after is not None and hold.retry_after > self.backoff.max_delay:
            reason = (
                f"HTTP {status} with Retry-After {hold.retry_after:.0f} s, beyond "
                f"WALSH_RETRY_MAX_DELAY ({self.backoff.max_delay:.0f} s): gave up"
            )
            return self._give_up(request, response, reason)
        retry = self._retry(request, f"HTTP {status}", hold)
        if retry is not None:
            return retry
        return self._give_up(
            request, response, f"HTTP {status} after {self.max_times} retries: gave up"
        )

    async def process_exception(self, request: Request, exception: Exception) -> Request | None:
        if request.meta.get("dont_retry") or not isinstance(exception, self.backoff.exceptions):
            return None
        return self._retry(
            request, type(exception).__name__, self.backoff.after(request, exception=exception)
        )

    def _retry(self, request: Request, reason: str, hold: Hold) -> Request | None:
        """The retry of *request*, which waits out *hold* (the pacing gate put
        it on the host), or None when its retries are used up."""
        attempt = request.meta.get("retry_times", 0)
        if attempt >= self.max_times:
            return None
        if hold.retry_after is not None:
            delay, source = hold.retry_after, "Retry-After"
        else:
            # planned with the decision: this gate retries what it planned for
            assert hold.backoff is not None
            delay, source = hold.backoff, "backoff"
        # What Scrapy's get_retry_request does, without its DEBUG line
        # ("Retrying ...", logged as scrapy.downloadermiddlewares.retry, as if
        # Scrapy's RetryMiddleware, which is off, were retrying): the R5 line
        # below says it, with the hold.
        retry = request.copy()
        retry.meta["retry_times"] = attempt + 1
        retry.dont_filter = True
        retry.priority = request.priority + self.priority_adjust
        self.stats.inc_value("walsh/retry/count")
        self.stats.inc_value(f"walsh/retry/reason_count/{reason}")
        logger.info(
            "R5: %(reason)s on %(url)s; holding %(host)s for %(delay).2f s (%(source)s)",
            {"reason": reason, "url": request.url, "host": url_host(request.url),
             "delay": delay, "source": source},
        )  # fmt: skip
        return retry

    def _give_up(self, request: Request, response: Response, reason: str) -> Response:
        self.stats.inc_value("walsh/retry/gave_up")
        logger.warning("R5: %(reason)s: %(url)s", {"reason": reason, "url": request.url})
        request.meta[GAVE_UP_META] = reason
        return response
