"""How a record is logged when no page was fetched for it.

Scrapy logs each item as ``Scraped from <source>``; for an item a request's
errback returns, the source is the failure's message. A target that a gate
denied is recorded by its errback, so Scrapy logged ``Scraped from R2:
robots.txt (* group) disallows this path``, as if the rule had been a page.
:class:`RecordLogFormatter` (``LOG_FORMATTER``, set by the add-on) names the
request instead, with what became of it: ``Scraped from <GET
https://example.org/private> (denied by R2)``. Everything else is logged as
Scrapy logs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.logformatter import LogFormatter
from twisted.python.failure import Failure

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.http import Response
    from scrapy.logformatter import LogFormatterResult


class RecordLogFormatter(LogFormatter):
    def scraped(
        self, item: Any, response: Response | Failure | None, spider: Spider
    ) -> LogFormatterResult:
        result = super().scraped(item, response, spider)
        request = getattr(response, "request", None) if isinstance(response, Failure) else None
        if request is None:
            return result
        assert isinstance(response, Failure)
        if isinstance(item, dict) and item.get("outcome"):
            rule = item.get("rule")
            what = str(item["outcome"]) + (f" by {rule}" if rule else "")
        else:
            what = response.getErrorMessage()
        args = result.get("args")
        if isinstance(args, dict):
            args["src"] = f"<{request.method} {request.url}> ({what})"
        return result
