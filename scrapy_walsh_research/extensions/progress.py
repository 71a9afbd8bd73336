"""Progress on long crawls: every ``LOGSTATS_INTERVAL``, targets done of the
total, outcomes by rule, and an ETA from the frontier's own lower bound.

A list of 10^4 targets at one request a second per host takes hours; the
operator should see how far it is and why it cannot go faster. The bound is
the larger of the serial work left (targets left times the mean time a
request takes) and the busiest host's remaining chain (its targets left minus
one, times the interval in force for it now: a slow or distressed host's
adapted one, named in the line; a host being skipped has none): no schedule
can beat either at today's pace, so it is an honest "at least". A host
whose robots.txt or tdmrep.json is unknown for now waits for the document's
next try (:mod:`scrapy_walsh_research.documents.waits`): the line names those hosts
(the first few, soonest first) with the document each waits for, and their
chains start at that try.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured

from scrapy_walsh_research._runtime.context import InContext
from scrapy_walsh_research.core.timestamps import duration_text
from scrapy_walsh_research.documents.waits import DocumentWaits
from scrapy_walsh_research.scheduling.pacer import Pacer

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self

logger = logging.getLogger(__name__)

#: the waiting hosts the line names (soonest next try first); the rest are counted
NAMED_HOSTS = 3


class Progress(InContext):
    def __init__(self, crawler: Crawler, interval: float) -> None:
        self.crawler = crawler
        self.interval = interval
        self._task: Any = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        interval = crawler.settings.getfloat("LOGSTATS_INTERVAL", 60.0)
        if interval <= 0:
            raise NotConfigured  # progress follows Scrapy's own periodic stats switch
        ext = cls(crawler, interval)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def spider_opened(self, spider: Any) -> None:
        from twisted.internet import task

        self._task = task.LoopingCall(self.log)
        self._task.start(self.interval, now=False)

    def spider_closed(self, spider: Any, reason: str) -> None:
        if self._task is not None and self._task.running:
            self._task.stop()
        self.log(final=True)

    def state(self) -> dict[str, Any] | None:
        """What the log line says, or None when the spider offers no target
        source (a project's own spider: nothing to count) or has not counted
        its list yet."""
        targets = self.context.targets
        left_by_host = targets.host_left if targets is not None else None
        if targets is None or left_by_host is None:
            return None
        assert self.crawler.stats is not None
        stats = self.crawler.stats.get_stats()
        outcomes = {k.removeprefix("walsh/outcome/"): v for k, v in stats.items()
                    if k.startswith("walsh/outcome/")}  # fmt: skip
        decided = ("walsh/denied/", "walsh/skipped/", "walsh/withheld/")
        rules = {k.removeprefix("walsh/"): v for k, v in stats.items()
                 if k.startswith(decided)}  # fmt: skip
        done = sum(outcomes.values())
        total = targets.targets_total
        pacer = self.context.service(Pacer)
        now = time.monotonic()
        documents = self.context.service(DocumentWaits).waiting()
        waiting = {
            host: max(0.0, wait.next_try - now)
            for host, wait in documents.items()
            if left_by_host.get(host)
        }
        left = sum(left_by_host.values())
        serial = left * (pacer.mean_duration or 0.1)
        # Each host's chain at the interval in force now (a slow or
        # distressed host's adapted one), from its document's next try when
        # it waits for one; a skipped host's targets need none.
        chain, busiest, paced = 0.0, None, (0.0, "floor")
        for host, n in left_by_host.items():
            if n < 1 or (n < 2 and host not in waiting) or pacer.skip_reason(host) is not None:
                continue
            seconds, source = pacer.in_force(host)
            length = waiting.get(host, 0.0) + (n - 1) * (seconds + pacer.margin)
            if length > chain:
                chain, busiest, paced = length, host, (seconds, source)
        return {
            "done": done, "total": total, "outcomes": outcomes, "rules": rules,
            "eta_s": max(serial, chain), "busiest": busiest,
            "busiest_left": left_by_host.get(busiest, 0) if busiest else 0,
            "busiest_interval_s": paced[0], "busiest_set_by": paced[1],
            "hosts_waiting": len(waiting),
            "next_try_s": min(waiting.values(), default=None),
            # soonest first: (host, the document it waits for, its next try in s)
            "waiting": sorted(((host, documents[host].document, s) for host, s in waiting.items()),
                              key=lambda w: (w[2], w[0])),
        }  # fmt: skip

    def log(self, final: bool = False) -> None:
        state = self.state()
        if state is None:
            return
        total = state["total"]
        head = f"{state['done']}/{total} targets" if total else f"{state['done']} targets"
        if total:
            head += f" ({100 * state['done'] / max(1, total):.0f} %)"
        by = ", ".join(f"{k} {v}" for k, v in sorted(state["outcomes"].items())) or "none yet"
        rules = ", ".join(f"{k} {v}" for k, v in sorted(state["rules"].items()))
        line = f"Progress: {head}; outcomes: {by}" + (f" ({rules})" if rules else "")
        if state["hosts_waiting"] and not final:
            hosts = state["hosts_waiting"]
            named = ", ".join(
                f"{host} ({document}, next try in {duration_text(seconds)})"
                for host, document, seconds in state["waiting"][:NAMED_HOSTS]
            )
            more = hosts - min(hosts, NAMED_HOSTS)
            line += (f"; {hosts} host{'s' if hosts > 1 else ''} waiting: {named}"
                     + (f" and {more} more" if more else ""))  # fmt: skip
        if not final and total:
            eta = state["eta_s"]
            line += f"; ETA at least {duration_text(eta)}"
            if state["busiest"]:
                line += (f" (busiest host {state['busiest']}: {state['busiest_left']} "
                         f"targets left, one per {state['busiest_interval_s']:.1f} s, set by "
                         f"{state['busiest_set_by']})")  # fmt: skip
            else:
                line += " (serial work left)"
        logger.info(line, extra={"spider": self.crawler.spider})
