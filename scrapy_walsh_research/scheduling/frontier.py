"""A per-host politeness frontier: the scheduler for a serial, polite crawl.

Mercator's back queues: one FIFO per host under a heap ordered by the time
the host may next receive a request. ``next_request`` hands out the request
whose host is ready soonest, so the single download slot is never spent
waiting for one host while another is ready; when none is ready it wakes the
engine at the earliest ready time instead of waiting for the heartbeat. A
request that waits for its origin's robots.txt or tdmrep.json to be tried
again is kept aside until then (parked), not in its host's queue, so the
host's other origins go on meanwhile. A host has at most one request out
(handed to the engine and not yet done with: answered, failed, dropped by a
gate, given back): the engine takes the next requests while one is on the
wire, and a host's second request would otherwise meet pacing before the
first's answer, go back, and fall behind the host's third. When the run
is stopped, what it holds is handed to
:class:`~scrapy_walsh_research.scheduling.stop.RunStop` (:meth:`drain`), and
so is what reaches it afterwards: each line still gets its record.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
import weakref
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any

from scrapy.utils.misc import build_from_crawler, load_object

from scrapy_walsh_research._runtime.context import InContext
from scrapy_walsh_research._runtime.meta import PARKED_META, REQUEUED_META
from scrapy_walsh_research.core.urls import url_host
from scrapy_walsh_research.scheduling._engine import in_progress, wake_engine
from scrapy_walsh_research.scheduling.pacer import Pacer
from scrapy_walsh_research.scheduling.stop import RunStop

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from typing_extensions import Self

logger = logging.getLogger(__name__)

#: how often every host's weight is recomputed (see ``_heaviest``)
REWEIGH_S = 1.0
#: queue heads asked "will a gate deny this?" per decision (see ``_pop_denied``)
DENIAL_CHECKS_PER_DECISION = 4


class FrontierScheduler(InContext):
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        context = self.context
        self.stats = crawler.stats
        self.pacer = context.service(Pacer)
        self.df = build_from_crawler(load_object(crawler.settings["DUPEFILTER_CLASS"]), crawler)
        self._queues: dict[str, deque[Request]] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._live: dict[str, int] = {}
        #: hosts with two or more queued requests -> the seq of their live
        #: entry in ``_weights``, a max-heap of (-(queued x interval), seq, host)
        self._long: dict[str, int] = {}
        self._weights: list[tuple[float, int, str]] = []
        self._reweigh_all_at = 0.0
        self._seq = itertools.count()
        self._size = 0
        self._timer: Any = None
        self._timer_at = float("inf")
        #: hosts with queued requests, in the order their heads are next
        #: asked whether a gate will deny them
        self._rotation: OrderedDict[str, None] = OrderedDict()
        #: requests kept aside until a time (their document's next try):
        #: (time.monotonic(), seq, request)
        self._parked: list[tuple[float, int, Request]] = []
        #: hosts with a request out -> that request: such a host has no live
        #: heap entry until the engine is done with it (:meth:`_take_back`)
        self._out: dict[str, weakref.ref[Request]] = {}
        self.stop = context.service(RunStop)
        # the crawler's WaitingTargets: the sitemaps gate counts a host's targets
        context.waiting = self

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def queued(self, host: str) -> list[Request]:
        """The requests waiting for *host* now: in its queue, then kept aside
        (the origin's first target, set aside while the list is read, is
        one of the host's targets all the same)."""
        aside = [r for _, _, r in self._parked if url_host(r.url) == host]
        return [*self._queues.get(host, ()), *aside]

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

    def hosts_waiting(self) -> int:
        """How many hosts have requests queued."""
        return len(self._queues)

    def parked(self) -> int:
        """How many requests are kept aside for their document's next try."""
        return len(self._parked)

    def has_ready_request(self) -> bool:
        """Whether a queued request's host is ready now (no I/O)."""
        top = self._top()
        return top is not None and top[0] <= time.monotonic()

    def drain(self) -> list[Request]:
        """Take out every request queued or parked (the run is stopping)."""
        held = [r for queue in self._queues.values() for r in queue]
        held += [r for _, _, r in sorted(self._parked, key=lambda p: (p[0], p[1]))]
        for kept in (self._queues, self._live, self._long, self._rotation, self._out):
            kept.clear()
        self._heap, self._weights, self._parked, self._size = [], [], [], 0
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        return held

    def enqueue_request(self, request: Request) -> bool:
        if self.stop.stopping:
            # a redirect hop or a retry of a request in flight: not sent, ended now
            self.stop.end_soon(request)
            return True
        if not request.dont_filter and self.df.request_seen(request):
            self.df.log(request, self.crawler.spider)
            return False
        until = request.meta.pop(PARKED_META, None)
        if isinstance(until, (int, float)) and until > time.monotonic():
            heapq.heappush(self._parked, (float(until), next(self._seq), request))
        else:
            self._queue(request)
        self._size += 1
        self.stats.inc_value("scheduler/enqueued/walsh_frontier")
        return True

    def _queue(self, request: Request) -> None:
        """Put *request* in its host's queue (not counted: the caller does)."""
        host = url_host(request.url)
        queue = self._queues.get(host)
        if queue is None:
            queue = self._queues[host] = deque()
            self._rotation[host] = None
        if not request.meta.get(REQUEUED_META):
            self.pacer.warm(request)
        if not queue and host not in self._out:
            self._push(host, self.pacer.ready_at(host))
        if request.meta.pop(REQUEUED_META, False):
            queue.appendleft(request)  # it was first in line: keep per-host FIFO order
        else:
            queue.append(request)
        if len(queue) >= 2:
            self._weigh(host)

    def _unpark(self, now: float) -> None:
        """Requests whose time to wait aside is over go back to their hosts'
        queues, first in line (they were)."""
        while self._parked and self._parked[0][0] <= now:
            _, _, request = heapq.heappop(self._parked)
            request.meta[REQUEUED_META] = True
            self._queue(request)

    def next_request(self) -> Request | None:
        now = time.monotonic()
        self._unpark(now)
        top = self._top()
        if top is None:
            if self._parked:
                self._wake_at(self._parked[0][0])
            return None
        ready, host = top
        critical = self._critical_host(now)
        if critical is not None:
            c_host, c_ready = critical
            if c_ready <= now:
                return self._take(c_host, now)
            # Start another host's request only if it will be done before
            # the critical host is ready: its chain is the crawl's length. A
            # slow host's request is expected to take its own response time.
            fits = max(ready, now) + self._expected_duration(host) <= c_ready
            if ready <= now and fits:
                return self._take(host, now)
            return self._pop_denied_or_wait(ready if fits else c_ready)
        if ready <= now:
            return self._take(host, now)
        return self._pop_denied_or_wait(ready)

    # -- the heap: one live entry per host with queued requests -----------------

    def _push(self, host: str, ready: float) -> None:
        seq = next(self._seq)
        self._live[host] = seq
        heapq.heappush(self._heap, (ready, seq, host))

    def _hand_out(self, host: str, request: Request) -> Request:
        """*request* leaves for the engine: *host* has no turn until it is done."""
        self._out[host] = weakref.ref(request)
        self._live.pop(host, None)  # its heap entries are stale
        return request

    def _take_back(self) -> None:
        """Hosts whose request out the engine is done with get their turn
        back (at most a few: one per request the engine takes)."""
        if not self._out:
            return
        working = in_progress(self.crawler)
        for host, ref in list(self._out.items()):
            request = ref()
            if request is not None and working is not None and request in working:
                continue
            del self._out[host]
            if self._queues.get(host):
                self._push(host, self.pacer.ready_at(host))

    def _top(self) -> tuple[float, str] | None:
        self._take_back()
        while self._heap:
            ready, seq, host = self._heap[0]
            if self._live.get(host) != seq:  # stale entry
                heapq.heappop(self._heap)
                continue
            actual = self.pacer.ready_at(host)
            if actual != ready:
                # the host's clock moved: later (robots.txt, a retry hold, a
                # slow or distressed answer) or earlier (its answers eased
                # the interval the entry was pushed with)
                heapq.heappop(self._heap)
                self._push(host, actual)
                continue
            return ready, host
        return None

    def _take(self, host: str, now: float) -> Request:
        queue = self._queues[host]
        request = queue.popleft()
        self._size -= 1
        self._weigh(host)
        if not queue:
            self._forget(host)
        self.stats.inc_value("scheduler/dequeued/walsh_frontier")
        return self._hand_out(host, request)

    def _forget(self, host: str) -> None:
        """*host* has nothing queued any more."""
        del self._queues[host]
        self._live.pop(host, None)
        del self._rotation[host]

    def _critical_host(self, now: float) -> tuple[str, float] | None:
        """The host whose remaining chain of intervals outlasts all other work.

        When one host's queue would take longer than every other queued
        request together (a host-bound crawl), its requests must go out the
        moment it is ready. Returns (host, ready time) or None.
        """
        host = self._heaviest(now)
        if host is None or host in self._out:  # its turn comes once its request is done
            return None
        ready = self.pacer.ready_at(host)
        queued = len(self._queues[host])
        chain = (queued - 1) * self.pacer.interval(host) + max(0.0, ready - now)
        others = (self._size - queued) * self._expected_duration()
        return (host, ready) if chain >= others else None

    # -- the heaviest host: asked on every decision, so kept in a heap ----------
    # A scan of every host per decision (216 interval look-ups per decision
    # with 250 hosts) was 3.6 % of the crawl's profile samples. A host's weight
    # changes with its queue (re-weighed at each change) and with its interval
    # (robots.txt, another worker's reading): the top is checked against the
    # live interval, and every host is re-weighed once per REWEIGH_S, so a
    # stale weight lasts at most that long. Only speed depends on it: pacing
    # enforces the intervals whatever is picked.

    def _weigh(self, host: str) -> None:
        queue = self._queues.get(host)
        if queue is None or len(queue) < 2:
            self._long.pop(host, None)
            return
        seq = next(self._seq)
        self._long[host] = seq
        heapq.heappush(self._weights, (-len(queue) * self.pacer.interval(host), seq, host))

    def _heaviest(self, now: float) -> str | None:
        """The host with the most queued work, queued requests x interval."""
        if now >= self._reweigh_all_at:
            self._reweigh_all_at = now + REWEIGH_S
            self._weights = []
            for host in list(self._long):
                self._weigh(host)
        while self._weights:
            weight, seq, host = self._weights[0]
            if self._long.get(host) != seq:  # stale entry
                heapq.heappop(self._weights)
                continue
            if -len(self._queues[host]) * self.pacer.interval(host) != weight:
                heapq.heappop(self._weights)  # its interval changed
                self._weigh(host)
                continue
            return host
        return None

    def _expected_duration(self, host: str | None = None) -> float:
        """How long a request is expected to hold the slot: the mean over
        the crawl, or *host*'s own smoothed response time when longer."""
        mean = self.pacer.mean_duration
        expected = mean if mean is not None else 0.2
        if host is not None:
            expected = max(expected, self.pacer.clock.host_load(host).load)
        return 1.25 * expected

    def _pop_denied_or_wait(self, when: float) -> Request | None:
        """A request a gate will deny, at once; else None, and the engine is
        woken at *when* (or sooner, when a parked request is due first)."""
        denied = self._pop_denied()
        if denied is None:
            self._wake_at(min(when, self._parked[0][0]) if self._parked else when)
        return denied

    def _pop_denied(self) -> Request | None:
        """A waiting request that a gate will deny anyway goes out now.

        Only a few queue heads are asked per decision, in rotation: asking
        every host's head on every decision was 52 gate checks per request
        with 50 hosts (a fifth of the crawl's CPU in a profile), and grows
        with hosts. A host whose head was denied is asked first next time,
        so a host a gate closed drains at once. Only speed depends on this:
        the gates deny the request wherever it is picked.
        """
        for _ in range(min(DENIAL_CHECKS_PER_DECISION, len(self._rotation))):
            host = next(iter(self._rotation))
            queue = self._queues[host]
            if host in self._out or not self.pacer.will_be_denied(queue[0]):
                self._rotation.move_to_end(host)
                continue
            request = queue.popleft()
            self._size -= 1
            self._weigh(host)
            if not queue:
                self._forget(host)
            self.stats.inc_value("walsh/frontier/denied_without_wait")
            return self._hand_out(host, request)
        return None

    def _wake_at(self, when: float) -> None:
        if self._timer is not None and self._timer.active() and self._timer_at <= when:
            return
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        from twisted.internet import reactor

        self._timer_at = when
        delay = max(0.0, when - time.monotonic())
        # (Twisted types its reactor interfaces for the mypy-zope plugin)
        self._timer = reactor.callLater(delay, wake_engine, self.crawler)  # type: ignore[arg-type]
