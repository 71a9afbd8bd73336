"""The one place we touch Scrapy's engine beyond its public API.

A scheduler that returns ``None`` while requests are pending leaves the
engine idle until its next heartbeat (5 s). The frontier knows exactly when
the next host becomes ready and wakes the engine then, through
``engine._slot.nextcall`` (no public hook exists). If Scrapy changes it, the
frontier falls back to the heartbeat: slower, never less polite; and
``tests/test_r4_pacing.py`` fails on the throughput assertion.

The engine itself is ``crawler._engine`` from Scrapy 2.19 (reading
``crawler.engine`` before the crawl starts raises there) and
``crawler.engine`` before it (2.16, the floor); the scheduler is the public
``engine.scheduler`` from 2.19 and ``engine._slot.scheduler`` before it.

The frontier hands out at most one request per host until that request is
done with (answered, failed, dropped by a gate, given back), and learns that
from the engine's own ledger of the requests it is working on,
``engine._slot.inprogress``, which every path out of the downloader and the
scraper leaves (:func:`in_progress`). If Scrapy changes it, the frontier
hands out a host's next request as soon as it is ready (a warning says so):
pacing still holds, but two requests of one host may pass each other.

A stopped run gives its lines their records before the spider closes
(:mod:`~scrapy_walsh_research.scheduling.stop`): Scrapy has no signal for
"the spider is about to close" (``spider_closed`` comes after the item
pipelines and the feed exports have closed), so :func:`before_close` wraps
the engine's ``close_spider_async``, the one call every close goes through
(Ctrl-C, SIGTERM, ``CloseSpider``, a finished crawl). If Scrapy changes it,
the stop's records are not written (the warning says so) and
``tests/test_records_stopped_runs.py`` fails.
"""

from __future__ import annotations

import logging
from collections.abc import Container
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy import Request
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)
_warned = False
_warned_progress = False


def engine_of(crawler: Crawler) -> Any:
    """The crawler's engine, or None before it has one (never raises)."""
    attributes = vars(crawler)
    if "_engine" in attributes:  # Scrapy 2.19+
        return attributes["_engine"]
    return attributes.get("engine")


def wake_engine(crawler: Crawler) -> bool:
    """Ask the engine to pull from the scheduler now; False if that is not possible."""
    global _warned
    engine = engine_of(crawler)
    nextcall = getattr(getattr(engine, "_slot", None), "nextcall", None)
    if nextcall is None or not hasattr(nextcall, "schedule"):
        if engine is not None and not _warned:
            _warned = True
            logger.warning(
                "Cannot wake the Scrapy engine (engine._slot.nextcall is gone in this Scrapy "
                "version); pacing still holds but waits for the engine heartbeat."
            )
        return False
    nextcall.schedule()
    return True


def in_progress(crawler: Crawler) -> Container[Request] | None:
    """The requests the engine is working on (taken from its scheduler, not
    yet through the downloader and the scraper), or None if not known."""
    global _warned_progress
    engine = engine_of(crawler)
    inprogress = getattr(getattr(engine, "_slot", None), "inprogress", None)
    if isinstance(inprogress, Container):
        return inprogress
    if engine is not None and not _warned_progress:
        _warned_progress = True
        logger.warning(
            "Cannot see which requests the Scrapy engine is working on (engine._slot.inprogress "
            "is gone in this Scrapy version): a host's next request may leave the frontier "
            "before the one before it is answered; pacing still holds."
        )
    return None


def scheduler_of(crawler: Crawler) -> Any:
    """The engine's scheduler instance, or None before the engine has one.

    Used only to pace how fast the list is read
    (:mod:`~scrapy_walsh_research.scheduling.intake`), where a miss costs
    memory or a fleet's balance, not politeness.
    """
    engine = engine_of(crawler)
    if engine is None:
        return None
    if isinstance(getattr(type(engine), "scheduler", None), property):  # Scrapy 2.19+
        return engine.scheduler
    return getattr(getattr(engine, "_slot", None), "scheduler", None)


def before_close(crawler: Crawler, callback: Callable[[str], Awaitable[None]]) -> bool:
    """Have ``await callback(reason)`` run whenever the engine is asked to
    close the spider, before it closes anything (its scheduler, item
    pipelines and feed exports are still open); False if not possible."""
    engine = engine_of(crawler)
    close = getattr(engine, "close_spider_async", None)
    if close is None:
        logger.warning(
            "Cannot see the Scrapy engine close the spider (no close_spider_async in this "
            "Scrapy version): a run stopped early leaves its remaining lines without records."
        )
        return False

    async def closing(*, reason: str = "cancelled") -> None:
        try:
            await callback(reason)
        except Exception:  # the spider must close whatever happened here
            logger.exception("Ending what the run held before the spider closes failed")
        await close(reason=reason)

    engine.close_spider_async = closing
    return True
