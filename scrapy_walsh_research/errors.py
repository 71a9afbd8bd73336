"""Exceptions shared by the gates, and failures put into words.

A denial is an :class:`~scrapy.exceptions.IgnoreRequest` so Scrapy routes it
to the request's errback; it carries the rule that decided, so the record and
the stats can name it. :func:`failure_reason` says why a download failed in
the words a record, a log line or the audit log should carry.

A crawl that must not start (:class:`WalshRefusal`: a configuration the
start-up check refuses, a slip in how it was called) is said in one message
on stderr, with ``--nolog`` too, with no traceback, and ``scrapy crawl``
exits 1 (:func:`say`, :func:`refuse_start`, :func:`stop_refused`).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import weakref
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


class WalshStopped(WalshDenied):
    """The run is being stopped (Ctrl-C, SIGTERM, a close): a target not yet
    sent is not sent, and its line gets a ``skipped`` record that says so,
    with no rule (none decided it) and no R8 cadence (the next run takes it
    again). A line fed through Redis gets none: it goes back to the queue."""

    def __init__(self, reason: str) -> None:
        super().__init__("", reason, outcome="skipped", lasting=False)


class WalshRefusal(Exception):
    """Why a crawl must not start: said once, in words, never as a crash.

    Scrapy 2.19's ``AsyncCrawlerProcess`` (what ``scrapy crawl``, ``scrapy
    runspider`` and each ``walsh-workers`` worker run on the asyncio reactor)
    re-raises a start-up error in its crawl task and leaves it there:
    asyncio then logs "Task exception was never retrieved" with the
    traceback, and with ``--nolog`` nothing at all. So a refusal made while a
    loop runs asks that loop to say it instead, should it escape a task that
    nobody awaits: one message (:func:`say`), no traceback. Scrapy still sets
    ``bootstrap_failed``, hence the exit code 1. A caller that catches or
    awaits the refusal (the conformance check's crawls, a script) hears of
    it as before, and nothing is said for it."""

    #: the logger the refusal is said with (the module that refused)
    log: logging.Logger | None = None

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        _say_refusals_nobody_retrieved()


class WalshConfigurationError(WalshRefusal, RuntimeError):
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


class WalshUsageError(WalshRefusal, ValueError):
    """A user's slip the crawl cannot start with (a missing list file, a
    spider argument missing): :func:`refuse_start` reports it in one line."""


def refuse_start(log: logging.Logger, message: str) -> NoReturn:
    """Stop a crawl that cannot start because of how it was called: one ERROR
    line saying what to do, no traceback, and ``scrapy crawl`` exits 1 (see
    :class:`WalshRefusal`; ``tests/test_startup_refusals.py`` runs the
    commands)."""
    error = WalshUsageError(message)
    error.log = log
    raise error


def say(log: logging.Logger, message: str) -> None:
    """Log *message* at ERROR, and write it on stderr as well when the log
    does not go there (``--nolog``, ``LOG_FILE``, a ``LOG_LEVEL`` above
    ERROR): a refusal must reach the person who started the crawl."""
    log.error(message)
    if not reaches_stderr(log, logging.ERROR):
        print(message, file=sys.stderr, flush=True)


def reaches_stderr(log: logging.Logger, level: int) -> bool:
    """Whether a record of *level* from *log* is written on stderr."""
    if not log.isEnabledFor(level):
        return False
    handled = False
    current: logging.Logger | None = log
    while current is not None:
        for handler in current.handlers:
            handled = True
            if (
                level >= handler.level
                and isinstance(handler, logging.StreamHandler)
                and not isinstance(handler, logging.FileHandler)
                and handler.stream in (sys.stderr, sys.__stderr__)
            ):
                return True
        current = current.parent if current.propagate else None
    last = logging.lastResort
    return not handled and last is not None and level >= last.level


def _say_refusals_nobody_retrieved() -> None:
    """Have the running asyncio loop (if any) say a :class:`WalshRefusal`
    that ends a task nobody awaits, instead of printing its traceback. The
    loop's exception handler is asked only for an exception nobody
    retrieved; any other context goes on to the handler that was there."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no running loop: the caller sees the exception
        return
    previous = loop.get_exception_handler()
    if getattr(previous, "says_refusals", False):
        return

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, WalshRefusal):
            say(exc.log or logging.getLogger(__name__), str(exc))
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    handler.says_refusals = True  # type: ignore[attr-defined]
    loop.set_exception_handler(handler)


#: crawls stopped by :func:`stop_refused`, and the finish reason each was given
_refused: weakref.WeakKeyDictionary[Crawler, str] = weakref.WeakKeyDictionary()


def was_refused(crawler: Crawler) -> bool:
    """Whether :func:`stop_refused` stopped *crawler*: its records cannot be
    written (its audit store or its Redis guard refuses it)."""
    return crawler in _refused


def stop_refused(crawler: Crawler, reason: str, message: str) -> None:
    """Stop a running crawl that must not go on where it runs (the fleet's
    Redis cannot run the guard): close the spider with *reason* (its finish
    reason), and have ``scrapy crawl`` exit 1, as for a crawl refused at
    start-up. The caller has logged why (*message*, at ERROR); it is written
    on stderr too when the log does not go there (``--nolog``).

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
    _refused[crawler] = reason
    if not reaches_stderr(logging.getLogger(__name__), logging.ERROR):
        print(message, file=sys.stderr, flush=True)
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
