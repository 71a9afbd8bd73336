"""Exceptions shared by the gates, and failures put into words.

A denial is an :class:`~scrapy.exceptions.IgnoreRequest` so Scrapy routes it
to the request's errback; it carries the rule that decided, so the record and
the stats can name it. :func:`failure_reason` says why a download failed in
the words a record, a log line or the audit log should carry.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, NoReturn

from OpenSSL import SSL
from scrapy import signals
from scrapy.exceptions import DownloadTimeoutError, IgnoreRequest, ScrapyDeprecationWarning
from scrapy.utils.defer import deferred_from_coro
from twisted.internet import error as tx_error
from twisted.python.failure import Failure
from twisted.web.client import (
    RequestGenerationFailed,
    RequestTransmissionFailed,
    ResponseFailed,
    ResponseNeverReceived,
)

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler


class WalshDenied(IgnoreRequest):
    """A gate refused a request before it reached the network."""

    def __init__(
        self,
        rule: str,
        reason: str,
        outcome: str = "denied",
        record: dict[str, Any] | None = None,
        lasting: bool = True,
    ) -> None:
        super().__init__(f"{rule}: {reason}")
        self.rule = rule
        self.reason = reason
        #: False when the cause passes by itself (robots.txt unreachable, the
        #: blocklist lost): a refused origin document is then unknown, not
        #: absent, and is tried again
        self.lasting = lasting
        #: the record outcome: "denied", "skipped" (R4 Crawl-delay too long), or
        #: "withheld" (PREF: the response came, its content may not be used)
        self.outcome = outcome
        #: further fields of the target's record (the preferences that applied;
        #: for "withheld", the response's status and validators)
        self.record: dict[str, Any] = dict(record or {})


class WalshConfigurationError(RuntimeError):
    """The effective configuration is not conformant; the crawl must not start.

    Deliberately *not* :class:`~scrapy.exceptions.NotConfigured`: Scrapy treats
    that as "disable this component" and would crawl without the gate.
    """


class WalshAuditUnavailable(RuntimeError):
    """The audit log could not be read to the end (its store unreachable, or
    a read that did not finish in time): a command that reads it says so
    and stops, rather than retrying forever or showing part of it."""


class WalshDeprecationWarning(ScrapyDeprecationWarning):
    """A path or setting name of an older release, still honoured for now.

    A :class:`~scrapy.exceptions.ScrapyDeprecationWarning`, so it is shown
    (Python hides a plain ``DeprecationWarning`` outside ``__main__``) and a
    project that filters Scrapy's deprecations filters these too."""


class WalshUsageError(ValueError):
    """A user's slip the crawl cannot start with (a missing list file, a
    spider argument missing): :func:`refuse_start` reports it in one line."""


def refuse_start(log: logging.Logger, message: str) -> NoReturn:
    """Stop a crawl that cannot start because of how it was called: one ERROR
    line saying what to do, no traceback, and ``scrapy crawl`` exits 1.

    Scrapy 2.19's ``AsyncCrawlerProcess`` (what ``scrapy crawl`` runs on the
    asyncio reactor) re-raises a start-up error in its crawl task and leaves
    it there, so asyncio prints "Task exception was never retrieved" and the
    traceback at exit; having said it in one line, the error is retrieved
    here. Scrapy still sets ``bootstrap_failed``, hence the exit code
    (``tests/test_records_targets_spider.py`` runs the command).
    """
    log.error(message)
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop: a direct call (tests) raises as usual
        task = None
    if task is not None:
        task.add_done_callback(_retrieve)
    raise WalshUsageError(message)


def stop_refused(crawler: Crawler, reason: str) -> None:
    """Stop a running crawl that must not go on where it runs (the fleet's
    Redis cannot run the guard): close the spider with *reason* (its finish
    reason), and have ``scrapy crawl`` exit 1, as for a crawl refused at
    start-up. The caller has logged why.

    Scrapy gives a crawl a non-zero exit code only when it failed to start
    (``bootstrap_failed``: its ``crawl`` raised, or its crawler has no spider
    when it ends); a crawl whose engine ran exits 0 whatever its finish
    reason, and a component that raises while the engine opens leaves Scrapy
    sending ``spider_closed`` to handlers that never saw ``spider_opened``
    (a traceback from ``CoreStats``, no finish reason). So the spider closes
    cleanly, and once the engine has stopped (stats dumped, every other
    handler run), the crawler lets its spider go: the runner counts the
    crawl as one that did not start, which, having sent nothing, it is.
    ``tests/test_fleet_redis_failures.py`` runs ``scrapy crawl`` and fails if
    Scrapy changes that.
    """
    try:
        engine = crawler.engine
    except RuntimeError:  # Scrapy 2.19+: no engine before the crawl starts
        return
    if engine is None or not engine.spider:
        return

    def let_spider_go() -> None:
        crawler.spider = None

    crawler.signals.connect(let_spider_go, signal=signals.engine_stopped, weak=False)
    deferred_from_coro(engine.close_spider_async(reason=reason)).addErrback(
        lambda f: logging.getLogger(__name__).debug(
            "closing the spider: %(f)s", {"f": f.getErrorMessage()}
        )
    )


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


def deny(
    crawler: Crawler,
    log: logging.Logger,
    request: Request,
    rule: str,
    reason: str,
    *,
    outcome: str = "denied",
    record: dict[str, Any] | None = None,
    lasting: bool = True,
) -> NoReturn:
    """Count (``walsh/<outcome>/<rule>``), log the reason, raise."""
    assert crawler.stats is not None
    crawler.stats.inc_value(f"walsh/{outcome}/{rule}")
    log.info(
        "%(what)s by %(rule)s: %(url)s: %(reason)s",
        {"what": outcome.capitalize(), "rule": rule, "url": request.url, "reason": reason},
        extra={"spider": crawler.spider},
    )
    raise WalshDenied(rule, reason, outcome=outcome, record=record, lasting=lasting)


#: Twisted's HTTP client reports a failed exchange as one of these, holding
#: the Failures that caused it in ``reasons``; its own text is that list's
#: repr (``[<twisted.python.failure.Failure OpenSSL.SSL.Error: ...>]``).
#: Scrapy 2.19 raises ``DownloadFailedError(str(e)) from e`` for a
#: ``ResponseFailed``, so the wrapper is the cause.
_WRAPPERS = (ResponseFailed, RequestGenerationFailed, RequestTransmissionFailed)


#: a download that took too long: Scrapy wraps Twisted's errors in its own
#: (2.14+); both are listed, since a download handler or middleware may raise either
DOWNLOAD_TIMEOUTS = (tx_error.TimeoutError, tx_error.TCPTimedOutError, DownloadTimeoutError)


def failure_reason(exc: BaseException | None) -> str:
    """Why a download failed, as a person reads it: the causes Twisted wrapped
    (``no response: TLS error: wrong version number``), never a repr."""
    if exc is None:
        return "failed, no cause given"
    for wrapper in (exc, exc.__cause__):
        if isinstance(wrapper, _WRAPPERS):
            if isinstance(wrapper, ResponseNeverReceived):
                what = "no response"
            elif isinstance(wrapper, ResponseFailed):
                what = "response cut short"
            else:
                what = "request not sent"
            failures = [f.value for f in wrapper.reasons if isinstance(f, Failure)]
            causes = [_one(value) for value in failures if value is not None]
            return f"{what}: {'; '.join(dict.fromkeys(causes)) or 'no cause given'}"
    return _one(exc)


def _one(exc: BaseException) -> str:
    if isinstance(exc, SSL.Error):
        # pyOpenSSL: args[0] is OpenSSL's error queue, (library, function, reason) each
        queue = exc.args[0] if exc.args and isinstance(exc.args[0], list) else []
        details = [str(item[-1]) for item in queue if isinstance(item, tuple) and item]
        return f"TLS error: {', '.join(details) or str(exc) or 'handshake failed'}"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
