"""How fast the targets spider takes its lines: the scheduling side of its
``start()``.

Scrapy reads a spider's ``start()`` as fast as it yields: a list of 10^5
lines would sit in memory as 10^5 requests, and a worker fed through Redis
would hoard lines that other workers could send now. The spider asks here
before it takes the next line:

* from a file: read on only while fewer than ``WALSH_LIST_LOOKAHEAD`` of its
  targets wait in the scheduler (:func:`wait_for_list_room`); the frontier
  needs only enough of them to keep the download slot busy while hosts wait
  for their intervals;
* from a shared feed: take a line only when this worker is about to send it
  (:func:`wait_for_feed_room`): with the frontier, from which hosts are
  ready; with another scheduler (scrapy-redis), from what the downloader is
  doing.

Only speed (and a fleet's balance) depends on this: the gates decide what
is sent, and when.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from scrapy_walsh_research.scheduling._engine import engine_of, scheduler_of
from scrapy_walsh_research.scheduling.pacer import IN_PLACE_LIMIT, Pacer

if TYPE_CHECKING:
    from scrapy_walsh_research._runtime.context import CrawlContext

#: how often a waiting reader looks again whether there is room for a line
FEED_POLL_S = 0.02
#: lines a worker may hold waiting for their hosts (the frontier serves other
#: hosts meanwhile): at least this many, more when requests are quick (one
#: interval's worth of requests), never more than the maximum
FEED_LOOKAHEAD = 4
FEED_LOOKAHEAD_MAX = 32


async def wait_for_list_room(context: CrawlContext, lookahead: int) -> None:
    """Return once fewer than *lookahead* requests wait in the scheduler.
    Targets the frontier parked for their document's next try count only
    against twice the lookahead (memory): they hold no host's turn."""
    frontier = context.waiting
    if frontier is not None:
        while len(frontier) - frontier.parked() >= lookahead or len(frontier) >= 2 * lookahead:
            await asyncio.sleep(FEED_POLL_S)
        return
    scheduler = scheduler_of(context.crawler)  # another scheduler: only its size is known
    while scheduler is not None and len(scheduler) >= lookahead:
        await asyncio.sleep(FEED_POLL_S)


async def wait_for_feed_room(context: CrawlContext) -> None:
    """Return once this worker is about to send its next request: nothing in
    flight and nothing ready in its queue (see the module's docstring)."""
    crawler = context.crawler
    while True:
        frontier = context.waiting
        scheduler = frontier if frontier is not None else scheduler_of(crawler)
        engine = engine_of(crawler)
        if scheduler is None or engine is None:
            return
        pacer = context.service(Pacer)
        if frontier is not None:
            # The frontier knows which hosts are ready: take the next line
            # while the current request is out, so it can follow at once,
            # and keep one line per host waiting for its turn (up to one
            # interval's worth); a second line for a waiting host means
            # the list is host-bound here: take no more until one goes
            # (lines parked for their document's next try hold no turn).
            queued = len(frontier) - frontier.parked()
            busy = (
                frontier.has_ready_request()
                or queued > frontier.hosts_waiting()
                or queued >= feed_lookahead(pacer)
            )
        else:
            # A shared queue (scrapy-redis) may hold only requests for a
            # host another worker holds: once they keep coming back
            # unready, take a line for some other host.
            waiting = time.monotonic() - pacer.last_requeue
            sending = len(engine.downloader.active) - pacer.waiting_in_place
            busy = sending > 0 or (len(scheduler) > 0 and waiting > 2 * IN_PLACE_LIMIT)
        if not busy:
            return
        await asyncio.sleep(FEED_POLL_S)


def feed_lookahead(pacer: Pacer) -> int:
    """How many lines may wait for their hosts: enough to keep the slot busy
    for one interval (interval / time per request), within bounds."""
    per_request = pacer.mean_duration or 0.1
    return int(min(FEED_LOOKAHEAD_MAX, max(FEED_LOOKAHEAD, pacer.min_delay / per_request + 1)))
