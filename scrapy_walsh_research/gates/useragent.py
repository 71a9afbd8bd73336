"""R1: the exact User-Agent on every request that reaches the network.

Scrapy's ``UserAgentMiddleware`` uses ``setdefault``, so a header set on a
request wins. This gate *overwrites*, and the start-up check keeps it the
last downloader middleware, so nothing can change the value after it. A
project's own ``USER_AGENT`` (or a ``User-Agent`` in
``DEFAULT_REQUEST_HEADERS``) is therefore never sent: the gate says so once,
at start-up, rather than replace it in silence.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy.settings import SETTINGS_PRIORITIES

from scrapy_walsh_research.core.contract import USER_AGENT
from scrapy_walsh_research.settings.check import check_configuration

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from typing_extensions import Self

logger = logging.getLogger(__name__)
_UA = USER_AGENT.encode()


def overridden(settings: BaseSettings) -> list[tuple[str, str]]:
    """The User-Agent settings a project set that the gate will replace:
    (setting, value). Scrapy's own default, never chosen, is not one."""
    found = []
    if settings.getpriority("USER_AGENT") != SETTINGS_PRIORITIES["default"]:
        value = settings.get("USER_AGENT")
        if value != USER_AGENT:
            found.append(("USER_AGENT", value))
    for name, value in settings.getdict("DEFAULT_REQUEST_HEADERS").items():
        if str(name).lower() == "user-agent" and value != USER_AGENT:
            found.append((f"DEFAULT_REQUEST_HEADERS[{name!r}]", value))
    return found


class UserAgentMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        self.stats = crawler.stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        check_configuration(crawler)
        for setting, value in overridden(crawler.settings):
            logger.warning(
                "%(setting)s=%(value)r is not sent: R1 requires every request to carry exactly "
                "the bot's identity, %(ua)r, so the R1 gate replaces it on every request. "
                "Remove it from your settings.",
                {"setting": setting, "value": value, "ua": USER_AGENT},
            )
        return cls(crawler)

    def process_request(self, request: Request) -> None:
        if b"Host" in request.headers:
            # Every gate judged the URL's host; a Host header would send the
            # request to another site on the same server (a virtual host, a
            # CDN) than the one they checked, and the signature would name
            # the wrong authority. The connection's own Host (from the URL)
            # is what goes out.
            self.stats.inc_value("walsh/useragent/host_removed")
            logger.warning(
                "Removed a Host header (%(host)r) from %(url)s: requests go to the host "
                "their URL names, the one every gate checked",
                {"host": request.headers.get(b"Host"), "url": request.url},
            )
            del request.headers[b"Host"]
        current = request.headers.getlist(b"User-Agent")
        if current != [_UA]:
            if current:
                self.stats.inc_value("walsh/useragent/replaced")
                logger.debug(
                    "Replaced User-Agent %(old)r on %(url)s", {"old": current, "url": request.url}
                )
            request.headers[b"User-Agent"] = _UA
