"""Per-host timing state (R4, R5): when each host may next receive a request.

One owner, a small interface: the embedded backend is a pair of dicts; a
shared backend (Redis) can implement the same three calls atomically so that
several processes share one politeness budget.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from scrapy_walsh_research.state.base import StateStore


class HostClock(Protocol):
    """Times are this process's :func:`time.monotonic`; a shared backend maps
    them onto its own clock. Only :meth:`ready_at` is synchronous: the
    scheduler asks it on every decision, so it answers from what this
    process knows and never does I/O; a stale answer only costs a requeue.
    """

    async def reserve(self, host: str, now: float, interval: float) -> float:
        """Take the host's next slot if it is free at *now*.

        Returns 0 and records *now* as the host's last request when the host
        is ready (never seen, or *interval* after its last request and past
        any hold); else the seconds still to wait, recording nothing. Atomic:
        two callers never both get 0 within *interval*.
        """
        ...

    async def commit(self, host: str, at: float, interval: float) -> None:
        """The request reserved last reached the host at *at* (later than reserved)."""
        ...

    async def hold(self, host: str, until: float) -> None:
        """No request to *host* before *until* (Retry-After, backoff)."""
        ...

    def ready_at(self, host: str, interval: float) -> float:
        """When the host may next receive a request, as far as this process knows
        (0 for a host never seen)."""
        ...

    async def warm(self, host: str) -> None:
        """Load what is stored about *host*, so :meth:`ready_at` knows it."""
        ...


class MemoryHostClock:
    """The embedded backend: in-process, monotonic clock."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._hold: dict[str, float] = {}

    def ready_at(self, host: str, interval: float) -> float:
        last = self._last.get(host)
        ready = 0.0 if last is None else last + interval
        return max(ready, self._hold.get(host, 0.0))

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


class PersistentHostClock(MemoryHostClock):
    """The embedded clock, remembered across runs in the state store.

    Without it a crawl restarted at once could reach a host again within a
    second of the previous run's last request. Times are stored as wall
    clock and mapped back onto this process's monotonic clock.
    """

    NAMESPACE = "hostclock"

    def __init__(self, store: StateStore) -> None:
        super().__init__()
        self.store = store
        self._seeded: set[str] = set()

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
            return
        saved = await self.store.get(self.NAMESPACE, host)
        self._seeded.add(host)
        if saved:
            if saved.get("last") is not None:
                self._last.setdefault(host, self._to_mono(saved["last"]))
            if saved.get("hold") is not None:
                self._hold.setdefault(host, self._to_mono(saved["hold"]))

    async def _save(self, host: str) -> None:
        last, hold = self._last.get(host), self._hold.get(host)
        await self.store.put(
            self.NAMESPACE,
            host,
            {
                "last": self._to_wall(last) if last is not None else None,
                "hold": self._to_wall(hold) if hold is not None else None,
            },
        )

    async def reserve(self, host: str, now: float, interval: float) -> float:
        await self._seed(host)
        # No await between the check and the set: atomic on the reactor.
        return self._reserve(host, now, interval)

    async def commit(self, host: str, at: float, interval: float) -> None:
        await self._seed(host)
        self._commit(host, at)
        await self._save(host)

    async def hold(self, host: str, until: float) -> None:
        await self._seed(host)
        self._hold_until(host, until)
        await self._save(host)
