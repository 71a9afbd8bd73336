"""The add-on: ``ADDONS = {"scrapy_walsh_research.Addon": 0}``.

It supplies defaults at add-on priority and wires the gate chain; the
start-up check (:mod:`scrapy_walsh_research.preflight`) then verifies the
settings that are actually in effect, whoever set them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware as ScrapyRobotsTxt
from scrapy.utils.misc import load_object

from scrapy_walsh_research.identity import USER_AGENT
from scrapy_walsh_research.preflight import DOWNLOADER_MIDDLEWARES

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

#: Scrapy defaults that contradict the contract, replaced at add-on priority.
DEFAULTS: dict[str, object] = {
    "USER_AGENT": USER_AGENT,
    "ROBOTSTXT_OBEY": False,  # our R2 gate replaces Scrapy's
    "CONCURRENT_REQUESTS": 1,  # R4: serial
    "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
    "DOWNLOAD_DELAY": 1.0,  # R4: at least 1 s per host
    "DOWNLOAD_DELAY_JITTER": 0.0,  # jitter would go under 1 s
    "AUTOTHROTTLE_ENABLED": False,
    "REDIRECT_MAX_TIMES": 5,
    "METAREFRESH_ENABLED": False,  # R6: meta refresh is not followed
    # Until R5 backoff exists, 429/503 are not retried at all: Scrapy would
    # retry them at once, ignoring Retry-After.
    "RETRY_HTTP_CODES": [500, 502, 504, 522, 524, 408],
}


class Addon:
    def update_settings(self, settings: BaseSettings) -> None:
        for name, value in DEFAULTS.items():
            settings.set(name, value, "addon")
        explicit = settings.getdict("DOWNLOADER_MIDDLEWARES")
        if not any(load_object(k) is ScrapyRobotsTxt for k in explicit):
            # Disable Scrapy's robots.txt middleware unless the project itself
            # lists it; then the start-up check refuses, naming the setting,
            # instead of the add-on silently overriding the project.
            settings.set_in_component_priority_dict("DOWNLOADER_MIDDLEWARES", ScrapyRobotsTxt, None)
        for path, order in DOWNLOADER_MIDDLEWARES.items():
            settings.setdefault_in_component_priority_dict(
                "DOWNLOADER_MIDDLEWARES", load_object(path), order
            )
