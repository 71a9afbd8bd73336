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

from scrapy.exceptions import (
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    ResponseDataLossError,
)
from twisted.internet import error as tx_error
from twisted.web.client import ResponseFailed

# Scrapy wraps Twisted's errors in its own (2.14+); both are listed, since a
# download handler or middleware may raise either
_TIMEOUTS = (tx_error.TimeoutError, tx_error.TCPTimedOutError, DownloadTimeoutError)
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
    if isinstance(exception, _TIMEOUTS):
        return "timeout"
    if isinstance(exception, _REFUSED):
        return "connection refused"
    if isinstance(exception, _LOST):
        return "connection lost"
    return None
