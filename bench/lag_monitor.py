"""A Scrapy extension for the benchmarks: how late the reactor runs a call
scheduled every 10 ms (its lag), for the whole crawl. Written as JSON to
``BENCH_LAG_FILE`` when the engine stops: the largest lag, and every lag over
50 ms with when it happened (seconds since the engine started).

Each stall also says where the reactor thread's time went meanwhile (Linux):
``cpu`` on a CPU (our code, or the interpreter), ``queued`` runnable but
not run by the OS (other processes on the machine: not ours to fix), and the
rest blocked (waiting for the GIL, or in a blocking call). Resolution: the
tick is 10 ms and a lag is measured from the tick's due time, so a lag under
~12 ms is noise; /proc's schedstat is in ns."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from scrapy import signals

TICK_S = 0.010
STALL_S = 0.050


class LagMonitor:
    def __init__(self, crawler: Any) -> None:
        self.path = crawler.settings.get("BENCH_LAG_FILE")
        self.stalls: list[tuple[float, ...]] = []
        self.worst = 0.0
        self.ticks = 0
        crawler.signals.connect(self.start, signal=signals.engine_started)
        crawler.signals.connect(self.stop, signal=signals.engine_stopped)

    @classmethod
    def from_crawler(cls, crawler: Any) -> LagMonitor:
        return cls(crawler)

    def start(self) -> None:
        from twisted.internet import reactor

        self.reactor = reactor
        self.t0 = time.monotonic()
        self.expected = self.t0 + TICK_S
        self.schedstat = f"/proc/self/task/{threading.get_native_id()}/schedstat"
        self.last = self._times()
        self.call = reactor.callLater(TICK_S, self.tick)

    def _times(self) -> tuple[float, float]:
        """(seconds on a CPU, seconds runnable but waiting for one) of this thread."""
        try:
            with open(self.schedstat) as f:
                run, wait, _ = f.read().split()
            return int(run) / 1e9, int(wait) / 1e9
        except OSError:
            return time.thread_time(), 0.0

    def tick(self) -> None:
        now = time.monotonic()
        lag = now - self.expected
        self.ticks += 1
        self.worst = max(self.worst, lag)
        times = self._times()
        if lag > STALL_S:
            cpu, queued = (times[0] - self.last[0], times[1] - self.last[1])
            self.stalls.append(
                (round(self.expected - self.t0, 3), round(lag, 3), round(cpu, 3), round(queued, 3))
            )
        self.last = times
        self.expected = now + TICK_S
        self.call = self.reactor.callLater(TICK_S, self.tick)

    def stop(self) -> None:
        if self.call.active():
            self.call.cancel()
        if self.path:
            with open(self.path, "w") as f:
                json.dump({"worst_s": round(self.worst, 4), "ticks": self.ticks,
                           "stalls": self.stalls}, f)  # fmt: skip
