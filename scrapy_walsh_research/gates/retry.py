"""R5: back off and retry on 429/503 (and other transient failures), honouring Retry-After.

Replaces Scrapy's ``RetryMiddleware``, which retries 429/503 at once. Here:

* the delay is exponential with full jitter, ``uniform(0, base * 2**n)``;
* on 429/503 a valid ``Retry-After`` (delta-seconds or HTTP-date, RFC 9110
  §10.2.3) replaces it; a malformed one is ignored, a past date means "now"
  (pacing still keeps the host's interval);
* a ``Retry-After`` beyond ``WALSH_RETRY_MAX_DELAY`` means give up now;
* the wait holds back the whole host (no request to it before the retry
  time) while other hosts go on; the retry passes every gate again.

One decision per answer, one writer of the hold. :class:`Backoff` decides
what an answer holds its host for: the ``Retry-After`` it carries (parsed
here, once), else the backoff step of a request this gate will retry (drawn
once), or, giving up on an overloaded host that named no time, one more
step. The pacing gate asks first, while the request still holds its host's
slot (a hold written after the slot is free could let another worker in),
and writes the hold to the host's clock (:meth:`Pacer.hold
<scrapy_walsh_research.scheduling.pacer.Pacer.hold>`); :class:`RetryMiddleware`
then retries with the same decision, or gives up. A ``Retry-After`` binds
the host on every 429/503, retried or not, given up or not, whichever
middleware retries.
"""

from __future__ import annotations

import logging
import random
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scrapy_walsh_research._runtime.context import CrawlContext, InContext
from scrapy_walsh_research._runtime.meta import GAVE_UP_META
from scrapy_walsh_research.components import loaded
from scrapy_walsh_research.core.retry_after import RATE_LIMIT_CODES, parse_retry_after
from scrapy_walsh_research.core.urls import url_host
from scrapy_walsh_research.settings.check import check_configuration

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self

logger = logging.getLogger(__name__)

TRANSIENT_CODES = frozenset({500, 502, 504, 408})
__all__ = ["RATE_LIMIT_CODES", "Backoff", "Hold", "RetryMiddleware", "parse_retry_after"]


@dataclass(frozen=True)
class Hold:
    """What one answer holds its host for (R5), decided once."""

    #: seconds the host is held after the answer (None: not held)
    seconds: float | None
    #: what set it: ``Retry-After`` or ``backoff``
    by: str
    #: the valid Retry-After the answer carried (429/503 only; 0 included)
    retry_after: float | None = None
    #: the backoff step drawn for this answer (None: none planned)
    backoff: float | None = None


class Backoff:
    """R5's decision for each answer, one per crawler: what it holds its host for."""

    def __init__(self, context: CrawlContext) -> None:
        settings = context.crawler.settings
        walsh = context.settings
        self.max_times = walsh.retry_times
        self.base = walsh.retry_base_delay
        self.max_delay = walsh.retry_max_delay
        self.exceptions = tuple(loaded(x) for x in settings.getlist("RETRY_EXCEPTIONS"))
        #: whether the R5 gate is in the chain (it says so when built): only
        #: then does an answer plan a backoff; a Retry-After holds regardless
        self.retrying = False
        self._decided: weakref.WeakKeyDictionary[Request, Hold] = weakref.WeakKeyDictionary()

    def step(self, attempt: int) -> float:
        """The longest wait before retry *attempt*: the base delay doubled per
        attempt, at most ``WALSH_RETRY_MAX_DELAY``."""
        return min(self.max_delay, self.base * 2.0**attempt)

    def after(
        self,
        request: Request,
        *,
        response: Response | None = None,
        exception: Exception | None = None,
    ) -> Hold:
        """What the answer to *request* (its *response*, or the *exception*
        instead) holds its host for: decided when first asked, the same after."""
        decided = self._decided.get(request)
        if decided is None:
            decided = self._decided[request] = self._decide(request, response, exception)
        return decided

    def _decide(
        self, request: Request, response: Response | None, exception: Exception | None
    ) -> Hold:
        status = response.status if response is not None else None
        retry_after = None
        if response is not None and status in RATE_LIMIT_CODES:
            retry_after = parse_retry_after(response.headers.get(b"Retry-After"))
        if retry_after:  # "Retry-After: 0" names no wait: the backoff still applies
            return Hold(retry_after, "Retry-After", retry_after=retry_after)
        planned = self._plan(request, status, exception)
        return Hold(planned, "backoff", retry_after=retry_after, backoff=planned)

    def _plan(
        self, request: Request, status: int | None, exception: Exception | None
    ) -> float | None:
        """The backoff this answer holds its host for, when the R5 gate will
        retry the request (or gives up on an overloaded host), else None."""
        if not self.retrying or request.meta.get("dont_retry"):
            return None
        if exception is not None:
            if not isinstance(exception, self.exceptions):
                return None
        elif status not in RATE_LIMIT_CODES | TRANSIENT_CODES:
            return None
        attempt: int = request.meta.get("retry_times", 0)
        if attempt >= self.max_times:
            # giving up on a host still overloaded that named no time: one
            # more backoff step for the whole host before anything else
            return self.step(attempt) if status in RATE_LIMIT_CODES else None
        return random.uniform(0, self.step(attempt))


class RetryMiddleware(InContext):
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.backoff = self.context.service(Backoff)
        self.backoff.retrying = True
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
