"""Exceptions shared by the gates.

A denial is an :class:`~scrapy.exceptions.IgnoreRequest` so Scrapy routes it
to the request's errback; it carries the rule that decided, so the record and
the stats can name it.
"""

from __future__ import annotations

from scrapy.exceptions import IgnoreRequest


class WalshDenied(IgnoreRequest):
    """A gate refused a request before it reached the network."""

    def __init__(self, rule: str, reason: str, outcome: str = "denied") -> None:
        super().__init__(f"{rule}: {reason}")
        self.rule = rule
        self.reason = reason
        #: the record outcome: "denied", or "skipped" (R4 Crawl-delay too long)
        self.outcome = outcome


class WalshConfigurationError(RuntimeError):
    """The effective configuration is not conformant; the crawl must not start.

    Deliberately *not* :class:`~scrapy.exceptions.NotConfigured`: Scrapy treats
    that as "disable this component" and would crawl without the gate.
    """
