"""A per-host politeness frontier: the scheduler for a serial, polite crawl.

Mercator's back queues: one FIFO per host under a heap ordered by the time
the host may next receive a request. ``next_request`` hands out the request
whose host is ready soonest, so the single download slot is never spent
waiting for one host while another is ready; when none is ready it wakes the
engine at the earliest ready time instead of waiting for the heartbeat.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from scrapy.utils.misc import build_from_crawler, load_object

from scrapy_walsh_research._engine import wake_engine
from scrapy_walsh_research.pacing import REQUEUED_META, Pacer
from scrapy_walsh_research.urls import url_host

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from typing_extensions import Self

logger = logging.getLogger(__name__)


class FrontierScheduler:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.pacer = Pacer.for_crawler(crawler)
        self.df = build_from_crawler(load_object(crawler.settings["DUPEFILTER_CLASS"]), crawler)
        self._queues: dict[str, deque[Request]] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._size = 0
        self._timer: Any = None
        self._timer_at = float("inf")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def open(self, spider: Spider) -> Any:
        return self.df.open()

    def close(self, reason: str) -> Any:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        return self.df.close(reason)

    def __len__(self) -> int:
        return self._size

    def has_pending_requests(self) -> bool:
        return self._size > 0

    def enqueue_request(self, request: Request) -> bool:
        if not request.dont_filter and self.df.request_seen(request):
            self.df.log(request, self.crawler.spider)
            return False
        host = url_host(request.url)
        queue = self._queues.get(host)
        if queue is None:
            queue = self._queues[host] = deque()
        if not queue:
            heapq.heappush(self._heap, (self.pacer.ready_at(host), next(self._seq), host))
        if request.meta.pop(REQUEUED_META, False):
            queue.appendleft(request)  # it was first in line: keep per-host FIFO order
        else:
            queue.append(request)
        self._size += 1
        self.stats.inc_value("scheduler/enqueued/walsh_frontier")
        return True

    def next_request(self) -> Request | None:
        now = time.monotonic()
        while self._heap:
            ready, seq, host = self._heap[0]
            actual = self.pacer.ready_at(host)
            if actual > ready:  # the host's clock moved (robots.txt, a retry hold)
                heapq.heapreplace(self._heap, (actual, seq, host))
                continue
            if ready > now:
                denied = self._pop_denied()
                if denied is not None:
                    return denied
                self._wake_at(ready)
                return None
            heapq.heappop(self._heap)
            queue = self._queues[host]
            request = queue.popleft()
            self._size -= 1
            if queue:
                # The request about to go out sets the host's next slot.
                upcoming = now + self.pacer.interval(host)
                heapq.heappush(self._heap, (upcoming, next(self._seq), host))
            else:
                del self._queues[host]
            self.stats.inc_value("scheduler/dequeued/walsh_frontier")
            return request
        return None

    def _pop_denied(self) -> Request | None:
        """A waiting request that a gate will deny anyway goes out now."""
        for host, queue in self._queues.items():
            if queue and self.pacer.will_be_denied(queue[0]):
                request = queue.popleft()
                self._size -= 1
                if not queue:
                    del self._queues[host]
                    self._heap = [e for e in self._heap if e[2] != host]
                    heapq.heapify(self._heap)
                self.stats.inc_value("walsh/frontier/denied_without_wait")
                return request
        return None

    def _wake_at(self, when: float) -> None:
        if self._timer is not None and self._timer.active() and self._timer_at <= when:
            return
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        from twisted.internet import reactor

        self._timer_at = when
        delay = max(0.0, when - time.monotonic())
        self._timer = reactor.callLater(delay, wake_engine, self.crawler)
