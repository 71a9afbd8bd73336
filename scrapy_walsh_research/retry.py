"""R5: back off and retry on 429/503 (and other transient failures), honouring Retry-After.

Replaces Scrapy's ``RetryMiddleware``, which retries 429/503 at once. Here:

* the delay is exponential with full jitter, ``uniform(0, base * 2**n)``;
* on 429/503 a valid ``Retry-After`` (delta-seconds or HTTP-date, RFC 9110
  §10.2.3) replaces it; a malformed one is ignored, a past date means "now"
  (pacing still keeps the host's interval);
* a ``Retry-After`` beyond ``WALSH_RETRY_MAX_DELAY`` means give up now;
* the wait holds back the whole host (no request to it before the retry
  time) while other hosts go on; the retry passes every gate again.

The host-wide hold for a ``Retry-After`` is the pacing gate's
(:mod:`scrapy_walsh_research.pacing`): it applies to every 429/503 response,
retried or not, given up or not. This middleware holds the host for its own
computed backoff, and for the next backoff step when it gives up on a
429/503 that named no time.
"""

from __future__ import annotations

import logging
import random
import time
from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares.retry import get_retry_request

from scrapy_walsh_research._runtime.meta import GAVE_UP_META, PLANNED_HOLD_META, WIRE_TIME_META
from scrapy_walsh_research.components import loaded
from scrapy_walsh_research.core.retry_after import RATE_LIMIT_CODES, parse_retry_after
from scrapy_walsh_research.core.urls import url_host
from scrapy_walsh_research.pacing import Pacer
from scrapy_walsh_research.settings import defaults
from scrapy_walsh_research.settings.check import check_configuration

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self

logger = logging.getLogger(__name__)

TRANSIENT_CODES = frozenset({500, 502, 504, 408})
__all__ = ["RATE_LIMIT_CODES", "RetryMiddleware", "parse_retry_after"]


class RetryMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.stats = crawler.stats
        self.pacer = Pacer.for_crawler(crawler)
        self.max_times = settings.getint("WALSH_RETRY_TIMES", defaults.WALSH_RETRY_TIMES)
        self.base = settings.getfloat("WALSH_RETRY_BASE_DELAY", defaults.WALSH_RETRY_BASE_DELAY)
        self.max_delay = settings.getfloat("WALSH_RETRY_MAX_DELAY", defaults.WALSH_RETRY_MAX_DELAY)
        self.exceptions = tuple(loaded(x) for x in settings.getlist("RETRY_EXCEPTIONS"))
        self.pacer.hold_planner = self.plan_hold

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        check_configuration(crawler)
        return cls(crawler)

    async def process_response(self, request: Request, response: Response) -> Request | Response:
        status = response.status
        if request.meta.get("dont_retry") or status not in RATE_LIMIT_CODES | TRANSIENT_CODES:
            return response
        retry_after = None
        if status in RATE_LIMIT_CODES:
            retry_after = parse_retry_after(response.headers.get(b"Retry-After"))
            if retry_after is not None and retry_after > self.max_delay:
                reason = (
                    f"HTTP {status} with Retry-After {retry_after:.0f} s, beyond "
                    f"WALSH_RETRY_MAX_DELAY ({self.max_delay:.0f} s): gave up"
                )
                return self._give_up(request, response, reason)
        retry = await self._retry(request, f"HTTP {status}", retry_after)
        if retry is not None:
            return retry
        if status in RATE_LIMIT_CODES and retry_after is None:
            # The host is still overloaded and named no time: one more backoff
            # step for the whole host before anything else goes to it.
            attempt = request.meta.get("retry_times", 0)
            delay = request.meta.pop(PLANNED_HOLD_META, None) or min(
                self.max_delay, self.base * 2**attempt
            )
            until, sent_at = time.monotonic() + delay, request.meta.get(WIRE_TIME_META)
            await self.pacer.hold(url_host(request.url), until, "backoff", sent_at)
        return self._give_up(
            request, response, f"HTTP {status} after {self.max_times} retries: gave up"
        )

    def plan_hold(
        self, request: Request, status: int | None, exception: Exception | None
    ) -> float | None:
        """The backoff this gate will hold the host for after this answer
        (Retry-After aside: the pacing gate reads that itself). Decided here,
        before the pacing gate frees the host's slot, and kept in the
        request's meta so the gate holds exactly that."""
        if request.meta.get("dont_retry"):
            return None
        if exception is not None:
            if not isinstance(exception, self.exceptions):
                return None
        elif status not in RATE_LIMIT_CODES | TRANSIENT_CODES:
            return None
        attempt: int = request.meta.get("retry_times", 0)
        delay: float
        if attempt >= self.max_times:
            if status in RATE_LIMIT_CODES:  # giving up on an overloaded host: one more step
                delay = min(self.max_delay, self.base * 2**attempt)
            else:
                return None
        else:
            delay = random.uniform(0, min(self.max_delay, self.base * 2**attempt))
        request.meta[PLANNED_HOLD_META] = delay
        return delay

    async def process_exception(self, request: Request, exception: Exception) -> Request | None:
        if request.meta.get("dont_retry") or not isinstance(exception, self.exceptions):
            return None
        return await self._retry(request, type(exception).__name__, None)

    async def _retry(
        self, request: Request, reason: str, retry_after: float | None
    ) -> Request | None:
        attempt = request.meta.get("retry_times", 0)
        if attempt >= self.max_times:
            return None
        if retry_after is not None:
            delay, source = retry_after, "Retry-After"
        else:
            planned = request.meta.pop(PLANNED_HOLD_META, None)
            if planned is None:
                planned = random.uniform(0, min(self.max_delay, self.base * 2**attempt))
            delay, source = float(planned), "backoff"
        assert self.crawler.spider is not None  # as Scrapy's own RetryMiddleware does
        retry = get_retry_request(
            request,
            spider=self.crawler.spider,
            reason=reason,
            max_retry_times=self.max_times,
            stats_base_key="walsh/retry",
        )
        if retry is None:
            return None
        host = url_host(request.url)
        if retry_after is None:  # a Retry-After hold is set by the pacing gate
            sent_at = request.meta.get(WIRE_TIME_META)
            await self.pacer.hold(host, time.monotonic() + delay, "backoff", sent_at)
        logger.info(
            "R5: %(reason)s on %(url)s; holding %(host)s for %(delay).2f s (%(source)s)",
            {"reason": reason, "url": request.url, "host": host, "delay": delay, "source": source},
        )
        return retry

    def _give_up(self, request: Request, response: Response, reason: str) -> Response:
        self.stats.inc_value("walsh/retry/gave_up")
        logger.warning("R5: %(reason)s: %(url)s", {"reason": reason, "url": request.url})
        request.meta[GAVE_UP_META] = reason
        return response
