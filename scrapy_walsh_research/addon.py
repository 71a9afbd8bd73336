"""The add-on: ``ADDONS = {"scrapy_walsh_research.Addon": 0}``.

It supplies defaults at add-on priority, wires the gate chain and the
start-up-check extension, then runs the start-up check
(:mod:`scrapy_walsh_research.settings.check`) itself: a project that disables
every gate component and the extension is still refused, before any request.
The extension repeats the check once every add-on has run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares.retry import RetryMiddleware as ScrapyRetry
from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware as ScrapyRobotsTxt
from scrapy.utils.misc import load_object

from scrapy_walsh_research.components import (
    DOWNLOADER_MIDDLEWARES,
    FRONTIER,
    HEAP_EXTENSION,
    HEAP_ORDER,
    PROGRESS_EXTENSION,
    PROGRESS_ORDER,
    RECORD_LOG_FORMATTER,
    RECORD_PIPELINE,
    RECORD_PIPELINE_ORDER,
    SPIDER_MIDDLEWARES,
    STARTUP_CHECK,
    STARTUP_CHECK_ORDER,
    WIRE_HANDLER,
    uses_frontier,
)
from scrapy_walsh_research.core.contract import USER_AGENT
from scrapy_walsh_research.settings.check import check_settings

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

#: Scrapy defaults that contradict the contract, replaced at add-on priority.
DEFAULTS: dict[str, object] = {
    "USER_AGENT": USER_AGENT,
    "ROBOTSTXT_OBEY": False,  # our R2 gate replaces Scrapy's
    # R4: serial on the wire (the wire-timed handler sends one request at a
    # time); the engine takes more so that the next request's gates, and a
    # robots.txt fetch one of them asks for, run while one is out
    "CONCURRENT_REQUESTS": 3,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
    # R4 pacing replaces Scrapy's per-slot delay, its jitter and AutoThrottle
    "DOWNLOAD_DELAY": 0.0,
    "DOWNLOAD_DELAY_JITTER": 0.0,
    "AUTOTHROTTLE_ENABLED": False,
    "SCHEDULER": FRONTIER,
    "REDIRECT_MAX_TIMES": 5,
    "METAREFRESH_ENABLED": False,  # R6: meta refresh is not followed
    # R6 (metadata, not content): Scrapy's 1 GiB default buffers a body only
    # for it to be hashed and read for metadata. Feeds, markdown and llms.txt
    # are far smaller; the largest feeds in the wild (podcast RSS with years of
    # episodes) run to a few MiB, so 16 MiB keeps them with room to spare while
    # bounding memory and parse time (a lenient feed parse of 16 MiB of junk
    # takes over a minute of CPU). Past it the line's record says so; warn at a
    # quarter of the cap to show which sources come near it.
    "DOWNLOAD_MAXSIZE": 16 * 1024 * 1024,
    "DOWNLOAD_WARNSIZE": 4 * 1024 * 1024,
    # a record of a target not fetched is logged from its request
    # ("Scraped from <GET url> (denied by R2)"), not from the rule's text
    "LOG_FORMATTER": RECORD_LOG_FORMATTER,
}


#: the bundle's spiders (``targets``), listed for ``scrapy crawl`` in any project
SPIDERS_MODULE = "scrapy_walsh_research.spiders"


class Addon:
    @classmethod
    def update_pre_crawler_settings(cls, settings: BaseSettings) -> None:
        """Let ``scrapy crawl targets`` find the bundle's spider in any project:
        Scrapy lists only the spiders in ``SPIDER_MODULES``. Listed first, so
        a project's own spider named ``targets`` (a subclass) still wins."""
        modules = settings.getlist("SPIDER_MODULES")
        if SPIDERS_MODULE not in modules:
            priority = settings.getpriority("SPIDER_MODULES") or 0
            settings.set("SPIDER_MODULES", [SPIDERS_MODULE, *modules], priority)

    def update_settings(self, settings: BaseSettings) -> None:
        for name, value in DEFAULTS.items():
            settings.set(name, value, "addon")
        if not uses_frontier(settings):
            # Another scheduler (scrapy-redis's) cannot keep a request aside
            # for its host: the pacing gate makes it wait in place, and the
            # engine's requests would queue behind each other there.
            settings.set("CONCURRENT_REQUESTS", 1, "addon")
        explicit = settings.getdict("DOWNLOADER_MIDDLEWARES")
        for replaced in (ScrapyRobotsTxt, ScrapyRetry):
            # Disable Scrapy's own robots.txt and retry middlewares unless the
            # project itself lists them; then the start-up check refuses,
            # naming the setting, instead of the add-on silently overriding.
            if not any(load_object(k) is replaced for k in explicit):
                settings.set_in_component_priority_dict("DOWNLOADER_MIDDLEWARES", replaced, None)
                if replaced is ScrapyRobotsTxt:
                    # Off, Scrapy's middleware reads ROBOTSTXT_OBEY no more,
                    # and the R2 gate obeys robots.txt whatever it says: the
                    # True that `scrapy startproject` writes would only show
                    # in Scrapy's settings dump as if Scrapy's were on.
                    priority = settings.getpriority("ROBOTSTXT_OBEY") or 0
                    settings.set("ROBOTSTXT_OBEY", False, max(priority, 15))
        handlers = settings.getdict("DOWNLOAD_HANDLERS")
        missing = {"http", "https"} - set(handlers)
        if missing:
            # A scheme the project sets itself is left alone: the check
            # refuses any handler but the wire-timed one, naming it.
            handlers.update(dict.fromkeys(missing, WIRE_HANDLER))
            priority = settings.getpriority("DOWNLOAD_HANDLERS") or 0
            settings.set("DOWNLOAD_HANDLERS", handlers, max(priority, 15))
        for path, order in SPIDER_MIDDLEWARES.items():
            settings.setdefault_in_component_priority_dict(
                "SPIDER_MIDDLEWARES", load_object(path), order
            )
        settings.setdefault_in_component_priority_dict(
            "ITEM_PIPELINES", load_object(RECORD_PIPELINE), RECORD_PIPELINE_ORDER
        )
        for path, order in DOWNLOADER_MIDDLEWARES.items():
            settings.setdefault_in_component_priority_dict(
                "DOWNLOADER_MIDDLEWARES", load_object(path), order
            )
        settings.setdefault_in_component_priority_dict(
            "EXTENSIONS", load_object(STARTUP_CHECK), STARTUP_CHECK_ORDER
        )
        settings.setdefault_in_component_priority_dict(
            "EXTENSIONS", load_object(PROGRESS_EXTENSION), PROGRESS_ORDER
        )
        settings.setdefault_in_component_priority_dict(
            "EXTENSIONS", load_object(HEAP_EXTENSION), HEAP_ORDER
        )
        # Here too, not only in components a project can switch off.
        check_settings(settings)
