"""R8: run infrequently. A target fetched (or answered 304) less than
``WALSH_RUN_INTERVAL`` seconds ago is skipped with no request at all.

The last fetch time of each target (by canonical URL) persists in the state
store, so the rule holds across runs, which is where it matters.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from scrapy_walsh_research.errors import deny
from scrapy_walsh_research.internal import Marks, target_key
from scrapy_walsh_research.pacing import Pacer
from scrapy_walsh_research.state import state_for

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self

logger = logging.getLogger(__name__)

STATE_NAMESPACE = "cadence"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


class CadenceMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.interval = crawler.settings.getfloat("WALSH_RUN_INTERVAL", 86400.0)
        self.store = state_for(crawler)
        self.marks = Marks.for_crawler(crawler)
        # Last fetch per target, read once from the store: the frontier asks
        # on every scheduling decision (from this cache only, no I/O), and
        # this middleware is the only writer.
        self._last: dict[str, float | None] = {}
        pacer = Pacer.for_crawler(crawler)
        pacer.add_denial_check(lambda r: self._due_at(r) is not None)
        pacer.add_warmer(self._load)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def _due_at(self, request: Request) -> tuple[float, float] | None:
        """(last fetch, due time) when the target is not due yet, else None.

        Every attempt is checked, hops and retries too: a target's own fetch
        writes its time only on its final 2xx/304, after which nothing of it
        is sent again, so no ``retry_times``/``redirect_urls`` meta (which a
        project could set) is needed to tell a first attempt apart.
        """
        if self.interval <= 0 or not self.marks.is_target(request):
            return None
        last = self._last.get(target_key(request))
        if last is None or self.store.time() - last >= self.interval:
            return None
        return last, last + self.interval

    async def _load(self, request: Request) -> None:
        if self.interval > 0 and self.marks.is_target(request):
            key = target_key(request)
            if key not in self._last:
                last = await self.store.get(STATE_NAMESPACE, key)
                self._last.setdefault(key, last)

    async def process_request(self, request: Request) -> None:
        await self._load(request)
        due = self._due_at(request)
        if due is None:
            return
        last, due_at = due
        reason = (
            f"fetched {_iso(last)}, less than WALSH_RUN_INTERVAL={self.interval:g} s ago; "
            f"due again {_iso(due_at)}. To fetch it now anyway, run with -s WALSH_RUN_INTERVAL=0"
        )
        deny(self.crawler, logger, request, "R8", reason, outcome="skipped")

    async def process_response(self, request: Request, response: Response) -> Response:
        if self.marks.is_target(request) and (
            200 <= response.status < 300 or response.status == 304
        ):
            key, now = target_key(request), self.store.time()
            await self.store.put(STATE_NAMESPACE, key, now)
            self._last[key] = now
        return response
