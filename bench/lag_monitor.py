"""A Scrapy extension for the benchmarks: how late the reactor runs a call
scheduled every 10 ms (its lag), for the whole crawl. Written as JSON to
``BENCH_LAG_FILE`` when the engine stops: the largest lag, and every lag over
50 ms with when it happened (seconds since the engine started)."""

from __future__ import annotations

import json
import time
from typing import Any

from scrapy import signals

TICK_S = 0.010
STALL_S = 0.050


class LagMonitor:
    def __init__(self, crawler: Any) -> None:
        self.path = crawler.settings.get("BENCH_LAG_FILE")
        self.stalls: list[tuple[float, float]] = []
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
        self.call = reactor.callLater(TICK_S, self.tick)

    def tick(self) -> None:
        now = time.monotonic()
        lag = now - self.expected
        self.ticks += 1
        self.worst = max(self.worst, lag)
        if lag > STALL_S:
            self.stalls.append((round(self.expected - self.t0, 3), round(lag, 3)))
        self.expected = now + TICK_S
        self.call = self.reactor.callLater(TICK_S, self.tick)

    def stop(self) -> None:
        if self.call.active():
            self.call.cancel()
        if self.path:
            with open(self.path, "w") as f:
                json.dump({"worst_s": round(self.worst, 4), "ticks": self.ticks,
                           "stalls": self.stalls}, f)  # fmt: skip
