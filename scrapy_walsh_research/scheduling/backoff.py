"""R5's decision for each answer: what it holds its host for.

One decision per answer, one writer of the hold. :class:`Backoff` decides
what an answer holds its host for: the ``Retry-After`` it carries (parsed
here, once), else the backoff step of a request the R5 gate will retry
(drawn once), or, giving up on an overloaded host that named no time, one
more step. The pacing gate asks first, while the request still holds its
host's slot (a hold written after the slot is free could let another worker
in), and writes the hold to the host's clock (:meth:`Pacer.hold
<scrapy_walsh_research.scheduling.pacer.Pacer.hold>`); the R5 gate
(:class:`~scrapy_walsh_research.gates.retry.RetryMiddleware`) then retries
with the same decision, or gives up. A ``Retry-After`` binds the host on
every 429/503, retried or not, given up or not, whichever middleware
retries.

Whether the R5 gate retries is read from the settings Scrapy builds the
chain from (:func:`~scrapy_walsh_research.components.retries`), not told by
the gate: the decision is the same whichever component is built first.
"""

from __future__ import annotations

import random
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scrapy_walsh_research.components import loaded, retries
from scrapy_walsh_research.core.retry_after import RATE_LIMIT_CODES, parse_retry_after

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.http import Response

    from scrapy_walsh_research._runtime.context import CrawlContext

#: answers other than 429/503 that the R5 gate retries
TRANSIENT_CODES = frozenset({500, 502, 504, 408})
__all__ = ["TRANSIENT_CODES", "Backoff", "Hold"]


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
        #: whether the R5 gate is in the chain: only then does an answer plan
        #: a backoff; a Retry-After holds regardless
        self.retrying = retries(settings)
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
