"""The adaptive half of R4/R5 on the scheduling side: what an answer
signals about its host, and what pacing does with it.

The rule that folds an answer into a host's load and distress is the host
clock's (:mod:`scrapy_walsh_research.state.hostload`, the same in Lua for
Redis); the policy in force is the settings'
(:mod:`scrapy_walsh_research.settings.adaptive`). Here: which answers are
distress (:func:`distress_signal`), and the one path an answer takes into the
host's clock, counted in stats and logged (:func:`fold_answer`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy.exceptions import (
    DownloadConnectionRefusedError,
    DownloadFailedError,
    ResponseDataLossError,
)
from twisted.internet import error as tx_error
from twisted.web.client import ResponseFailed

from scrapy_walsh_research.errors import DOWNLOAD_TIMEOUTS
from scrapy_walsh_research.state.hostload import worth_noting

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

    from scrapy_walsh_research.settings.adaptive import AdaptivePolicy
    from scrapy_walsh_research.state.hostload import Answer
    from scrapy_walsh_research.state.protocols import HostClock

logger = logging.getLogger(__name__)

# Scrapy wraps Twisted's errors in its own (2.14+); both are listed, since a
# download handler or middleware may raise either (timeouts: DOWNLOAD_TIMEOUTS)
_REFUSED = (tx_error.ConnectionRefusedError, DownloadConnectionRefusedError)
_LOST = (
    tx_error.ConnectionLost,
    tx_error.ConnectionDone,
    ResponseFailed,  # ResponseNeverReceived is one
    DownloadFailedError,  # Scrapy's ResponseFailed
    ResponseDataLossError,
)


def distress_signal(
    status: int | None = None, exception: BaseException | None = None
) -> str | None:
    """The distress an answer signals (a short name for stats and reasons), or None.

    Only what the host did counts: a DNS failure, a request the bundle did not
    send (a gate's denial, a grant that expired) or one it cancelled is not the
    host's distress.
    """
    if status is not None:
        if status >= 500 or status in (429, 408):
            return f"HTTP {status}"
        return None
    if isinstance(exception, DOWNLOAD_TIMEOUTS):
        return "timeout"
    if isinstance(exception, _REFUSED):
        return "connection refused"
    if isinstance(exception, _LOST):
        return "connection lost"
    return None


async def fold_answer(
    clock: HostClock,
    policy: AdaptivePolicy,
    stats: StatsCollector,
    host: str,
    floor: float,
    answer: Answer,
) -> None:
    """Fold *answer* into *host*'s load and distress on *clock* (which applies
    the rule), counting and logging what it changed; *floor* is the host's
    interval without the rule. An answer that can change nothing pacing uses
    is not written anywhere."""
    signal = answer.distress(policy)
    view = clock.host_load(host)
    if not worth_noting(view, answer, policy, floor):
        return
    event = await clock.note_answer(host, answer, policy, floor)
    if signal is not None:
        stats.inc_value("walsh/adaptive/signals")
        stats.inc_value(f"walsh/adaptive/signal/{signal.lower().replace(' ', '_')}")
    if event in ("raised", "eased", "recovered", "gave_up"):
        stats.inc_value(f"walsh/adaptive/{event}")
    view = clock.host_load(host)
    if event == "raised":
        logger.info(
            "Distress from %(host)s (%(signal)s): its requests now at least %(s).1f s "
            "apart (signals so far: %(all)s)",
            {"host": host, "signal": signal, "s": view.distress, "all": view.describe()},
        )
    elif event == "gave_up":
        logger.warning(
            "Distress from %(host)s (%(signal)s) with its interval at "
            "WALSH_ADAPTIVE_MAX_DELAY (%(cap)g s): host given up for %(for)g s, its "
            "remaining targets skipped (signals: %(all)s)",
            {"host": host, "signal": signal, "cap": policy.max_delay,
             "for": policy.give_up, "all": view.describe()},
        )  # fmt: skip
    elif event == "recovered":
        logger.info("%(host)s answers normally again: back to its floor pace", {"host": host})
