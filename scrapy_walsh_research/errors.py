"""Exceptions shared by the gates.

A denial is an :class:`~scrapy.exceptions.IgnoreRequest` so Scrapy routes it
to the request's errback; it carries the rule that decided, so the record and
the stats can name it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, NoReturn

from scrapy.exceptions import IgnoreRequest

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
