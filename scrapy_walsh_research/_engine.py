"""The one place we touch a private Scrapy engine attribute.

A scheduler that returns ``None`` while requests are pending leaves the
engine idle until its next heartbeat (5 s). The frontier knows exactly when
the next host becomes ready and wakes the engine then, through
``engine._slot.nextcall`` (no public hook exists). If Scrapy changes it, the
frontier falls back to the heartbeat: slower, never less polite; and
``tests/test_r4_pacing.py`` fails on the throughput assertion.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)
_warned = False


def wake_engine(crawler: Crawler) -> bool:
    """Ask the engine to pull from the scheduler now; False if that is not possible."""
    global _warned
    engine = getattr(crawler, "_engine", None)
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


def scheduler_of(crawler: Crawler) -> Any:
    """The engine's scheduler instance, or None before the engine has one.

    Also private (``engine._slot.scheduler``); used only to pace how fast a
    worker takes lines from a shared feed, where a miss costs balance, not
    politeness.
    """
    engine = getattr(crawler, "_engine", None)
    return getattr(getattr(engine, "_slot", None), "scheduler", None)
