"""The embedded host clock (R4, R5): when each host may next receive a request,
the interval its robots.txt files ask for, and what its answers say about
it (load and distress, :mod:`scrapy_walsh_research.state.hostload`).

One owner, a small interface (:class:`~scrapy_walsh_research.state.protocols.HostClock`):
the embedded backend is a few dicts, persisted in the state store; the shared
backend (:mod:`scrapy_walsh_research.state.redis.hostclock`) implements the
same calls atomically so that several processes share one politeness budget,
and keeps its robots.txt intervals as :class:`RobotsIntervals` does here.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from scrapy_walsh_research.settings import defaults
from scrapy_walsh_research.state.hostload import IDLE, HostLoad

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

    from scrapy_walsh_research.settings.adaptive import AdaptivePolicy
    from scrapy_walsh_research.settings.walsh import WalshSettings
    from scrapy_walsh_research.state.hostload import Answer
    from scrapy_walsh_research.state.protocols import StateStore


def pause_on_loss(settings: WalshSettings) -> float:
    """How long lost history can matter: the longest interval any honoured
    robots.txt can ask for (``WALSH_MAX_CRAWL_DELAY``), at least ``WALSH_MIN_DELAY``.
    A shared backend that may have lost when hosts were last contacted makes
    every host wait this long."""
    return max(settings.min_delay, settings.max_crawl_delay)


class RobotsIntervals:
    """The robots.txt intervals part of a host clock, kept per origin."""

    def __init__(self) -> None:
        #: host -> origin -> (seconds, expires as wall time)
        self._intervals: dict[str, dict[str, tuple[float, float]]] = {}
        #: host -> the strictest of those: asked on every scheduling decision
        self._strictest: dict[str, tuple[float, str, float]] = {}

    def robots_interval(self, host: str) -> tuple[float, str | None, bool]:
        strictest = self._strictest.get(host)
        if strictest is None:
            return 0.0, None, False
        seconds, origin, expires = strictest
        return seconds, origin, expires > time.time()

    def _note_interval(self, host: str, origin: str, seconds: float, expires: float) -> None:
        readings = self._intervals.setdefault(host, {})
        readings[origin] = (seconds, expires)
        origin, (seconds, expires) = max(readings.items(), key=lambda kv: kv[1][0])
        self._strictest[host] = (seconds, origin, expires)

    async def note_interval(self, host: str, origin: str, seconds: float, expires: float) -> None:
        self._note_interval(host, origin, seconds, expires)


class MemoryHostClock(RobotsIntervals):
    """The embedded backend: in-process, monotonic clock."""

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[str, float] = {}
        #: a floor set by an earlier run (its last request plus the interval then)
        self._next: dict[str, float] = {}
        self._hold: dict[str, float] = {}
        #: hosts whose answers said something (load, distress); others have none
        self._loads: dict[str, HostLoad] = {}

    def ready_at(self, host: str, interval: float) -> float:
        last = self._last.get(host)
        ready = 0.0 if last is None else last + interval
        load = self._loads.get(host)
        gave_up = load.gave_up_until if load is not None else 0.0
        return max(ready, self._next.get(host, 0.0), self._hold.get(host, 0.0), gave_up)

    def host_load(self, host: str) -> HostLoad:
        return self._loads.get(host) or IDLE

    def grant_valid(self, host: str) -> bool:
        return True  # nobody else takes this process's slots

    def _note_answer(self, host: str, answer: Answer, policy: AdaptivePolicy, floor: float) -> str:
        load = self._loads.get(host)
        if load is None:
            load = self._loads[host] = HostLoad()
        return load.observe(answer, policy, floor, time.monotonic())

    def held_until(self, host: str) -> float:
        return self._hold.get(host, 0.0)

    def _reserve(self, host: str, now: float, interval: float) -> float:
        wait = self.ready_at(host, interval) - now
        if wait > 0:
            return wait
        self._last[host] = now
        return 0.0

    def _commit(self, host: str, at: float) -> None:
        self._last[host] = max(self._last.get(host, at), at)

    def _hold_until(self, host: str, until: float) -> None:
        self._hold[host] = max(self._hold.get(host, 0.0), until)

    async def warm(self, host: str) -> None:
        return None

    async def reserve(self, host: str, now: float, interval: float) -> float:
        return self._reserve(host, now, interval)

    async def commit(self, host: str, at: float, interval: float) -> None:
        self._commit(host, at)

    async def hold(self, host: str, until: float) -> None:
        self._hold_until(host, until)

    async def note_answer(
        self, host: str, answer: Answer, policy: AdaptivePolicy, floor: float
    ) -> str:
        return self._note_answer(host, answer, policy, floor)


class PersistentHostClock(MemoryHostClock):
    """The embedded clock, remembered across runs in the state store.

    Without it a crawl restarted at once could reach a host again within a
    second of the previous run's last request. A reservation is written
    *before* its request is sent, with the next allowed time under the
    interval in force, so a crash while a slow request is in flight still
    leaves the host's spacing behind; robots.txt intervals are kept too, so
    a restart knows a host's Crawl-delay before contacting it again. Times
    are stored as wall clock and mapped back onto this process's monotonic
    clock.

    The reservation is stored as if its request left :data:`COMMIT_SLACK`
    after it was reserved, and so is every write until its commit (a hold,
    an answer's load and distress): the commit (when it actually left) is
    written only when it left later still, or when an answer changed the
    interval. A request leaves within milliseconds of its reservation, so
    this saves one state write per request; the price is that a restart may
    wait up to that much longer for a host, never less.

    Hosts are kept in memory up to *cache_size* (``WALSH_HOST_CLOCK_CACHE_SIZE``),
    least recently used first out, and only once they are *settled*: their
    next allowed time and any hold have passed. What an evicted host's clock
    said is in the store and is read back before its next reservation, so an
    eviction never lets a request go sooner than its interval.
    """

    NAMESPACE = "hostclock"
    #: seconds a stored reservation allows for its request to leave
    COMMIT_SLACK = 1.0
    #: hosts looked at per eviction pass, so one pass costs O(1)
    EVICT_SCAN = 32

    def __init__(
        self,
        store: StateStore,
        cache_size: int = defaults.WALSH_HOST_CLOCK_CACHE_SIZE,
        stats: StatsCollector | None = None,
    ) -> None:
        super().__init__()
        self.store = store
        self.cache_size = cache_size
        self.stats = stats
        #: hosts whose stored clock is loaded, least recently used first
        self._seeded: OrderedDict[str, None] = OrderedDict()
        #: the next allowed time last written for each host (monotonic)
        self._stored_next: dict[str, float] = {}
        #: hosts reserved and not yet committed: what is written for them
        #: keeps COMMIT_SLACK (a crash before the commit must not leave a
        #: record saying the request left at its reservation)
        self._open: set[str] = set()
        self.evicted = 0

    def cached_hosts(self) -> int:
        """How many hosts' clocks are in memory (for tests and stats)."""
        return len(self._seeded)

    @staticmethod
    def _to_wall(mono: float) -> float:
        return time.time() - (time.monotonic() - mono)

    @staticmethod
    def _to_mono(wall: float) -> float:
        return time.monotonic() - (time.time() - wall)

    async def warm(self, host: str) -> None:
        await self._seed(host)

    async def _seed(self, host: str) -> None:
        if host in self._seeded:
            self._seeded.move_to_end(host)
            return
        saved = await self.store.get(self.NAMESPACE, host)
        if host in self._seeded:  # seeded by another caller meanwhile
            return
        self._seeded[host] = None
        if len(self._seeded) > self.cache_size:
            self._evict(host)
        if self.stats is not None:
            self.stats.max_value("walsh/hostclock/cache_max", len(self._seeded))
        if not isinstance(saved, dict):
            return
        for field, into in (("last", self._last), ("next", self._next), ("hold", self._hold)):
            value = saved.get(field)
            if isinstance(value, (int, float)):
                into[host] = max(into.get(host, float("-inf")), self._to_mono(value))
        for origin, pair in (saved.get("intervals") or {}).items():
            if origin not in self._intervals.get(host, {}):
                self._note_interval(host, origin, float(pair[0]), float(pair[1]))
        if "adaptive" in saved and host not in self._loads:
            self._loads[host] = HostLoad.from_json(saved["adaptive"], self._to_mono)

    def _evict(self, keep: str) -> None:
        """Forget the least recently used settled hosts beyond the bound. A
        host whose next slot or hold is still ahead stays (moved to the
        back): its clock is what keeps the next request from going early."""
        now = time.monotonic()
        for _ in range(min(self.EVICT_SCAN, len(self._seeded))):
            if len(self._seeded) <= self.cache_size:
                return
            host = next(iter(self._seeded))
            if (
                host == keep
                or max(self._next.get(host, 0.0), self._hold.get(host, 0.0)) > now
                or (host in self._last and host not in self._next)
                or self.host_load(host).gave_up_until > now
            ):
                self._seeded.move_to_end(host)
                continue
            del self._seeded[host]
            for into in (self._last, self._next, self._hold, self._intervals, self._strictest,
                         self._stored_next, self._loads):  # fmt: skip
                into.pop(host, None)
            self._open.discard(host)
            self.evicted += 1
            if self.stats is not None:
                self.stats.inc_value("walsh/hostclock/cache_evicted")

    async def _save(self, host: str, interval: float | None = None) -> None:
        slack = self.COMMIT_SLACK if host in self._open else 0.0
        last = self._last.get(host)
        if last is not None and interval is not None:
            self._next[host] = max(self._next.get(host, 0.0), last + interval)
        next_ = self._next.get(host)
        if next_ is not None:
            next_ += slack
            self._stored_next[host] = next_

        def wall(mono: float | None) -> float | None:
            return self._to_wall(mono) if mono is not None else None

        # "last" takes the slack too: with the commit skipped, an interval
        # read back later (after an eviction or a restart, a stricter
        # Crawl-delay) must count from no earlier than the request left.
        saved = {
            "last": wall(last + slack if last is not None else None),
            "next": wall(next_),
            "hold": wall(self._hold.get(host)),
            "intervals": {o: list(v) for o, v in self._intervals.get(host, {}).items()},
        }
        load = self._loads.get(host)
        if load is not None:
            saved["adaptive"] = load.as_json(self._to_wall)
        await self.store.put(self.NAMESPACE, host, saved)

    async def reserve(self, host: str, now: float, interval: float) -> float:
        await self._seed(host)
        # No await between the check and the set: atomic on the reactor.
        wait = self._reserve(host, now, interval)
        if wait <= 0:
            self._open.add(host)
            await self._save(host, interval)  # before the request leaves
        return wait

    async def commit(self, host: str, at: float, interval: float) -> None:
        await self._seed(host)
        self._commit(host, at)
        self._open.discard(host)
        due = self._last[host] + interval
        self._next[host] = due
        if due <= self._stored_next.get(host, float("-inf")) <= due + self.COMMIT_SLACK:
            # the stored reservation already keeps the host this long, and at
            # most COMMIT_SLACK longer: a restart waits that, never less
            return
        # An answer that shortened the interval (distress eased) applies
        # across a restart too: left at the reservation's, a restart right
        # after held the operator host for its old distress interval, so the
        # due blocklist refresh was deferred (HostBusy) and the targets went
        # out under the expired list (tests/test_r3_blocklist.py).
        await self._save(host, interval)

    async def hold(self, host: str, until: float) -> None:
        await self._seed(host)
        self._hold_until(host, until)
        await self._save(host)

    async def note_interval(self, host: str, origin: str, seconds: float, expires: float) -> None:
        await self._seed(host)
        self._note_interval(host, origin, seconds, expires)
        await self._save(host, self.robots_interval(host)[0] or None)

    async def note_answer(
        self, host: str, answer: Answer, policy: AdaptivePolicy, floor: float
    ) -> str:
        await self._seed(host)
        event = self._note_answer(host, answer, policy, floor)
        # the next allowed time moves with the commit that follows
        await self._save(host)
        return event
