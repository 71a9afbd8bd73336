"""The bundle's components by the paths users write in settings, and how
each is looked up in the settings Scrapy will build from.

These paths are the public API (README, docs, a project's settings.py),
each exported from the package root: internal modules may move, these do
not. The add-on installs the gates at the orders below; the start-up check
(:mod:`~scrapy_walsh_research.settings.check`) and the attestation name
components by these paths, whichever path a project wrote.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.utils.misc import load_object

from scrapy_walsh_research import EXPORTS

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

PACKAGE = "scrapy_walsh_research"
#: The gate chain, in the spec's order (§5), as downloader middlewares.
SCOPE_MW = f"{PACKAGE}.ScopeDownloaderMiddleware"
SCOPE_SPIDER_MW = f"{PACKAGE}.ScopeSpiderMiddleware"
CADENCE_MW = f"{PACKAGE}.CadenceMiddleware"
VALIDATORS_MW = f"{PACKAGE}.ConditionalRequestMiddleware"
NEGOTIATION_MW = f"{PACKAGE}.NegotiationMiddleware"
BLOCKLIST_MW = f"{PACKAGE}.BlocklistMiddleware"
ROBOTS_MW = f"{PACKAGE}.RobotsTxtMiddleware"
PREFERENCES_MW = f"{PACKAGE}.PreferencesMiddleware"
SITEMAPS_MW = f"{PACKAGE}.SitemapsMiddleware"
RETRY_MW = f"{PACKAGE}.RetryMiddleware"
PACING_MW = f"{PACKAGE}.PacingMiddleware"
USERAGENT_MW = f"{PACKAGE}.UserAgentMiddleware"
DOWNLOADER_MIDDLEWARES: dict[str, int] = {
    SCOPE_MW: 55,  # R6: only declared targets and the bundle's own requests go on
    CADENCE_MW: 60,  # R8: a target fetched too recently is skipped, no request at all
    BLOCKLIST_MW: 80,  # R3 first: a blocked host gets nothing, not even robots.txt
    ROBOTS_MW: 100,  # R2, in the slot of Scrapy's RobotsTxtMiddleware
    PREFERENCES_MW: 110,  # PREF: the host's stated usage preferences, after its robots.txt
    SITEMAPS_MW: 510,  # R7: what a checked sitemap says has not changed is not requested
    VALIDATORS_MW: 520,  # R7: If-None-Match / If-Modified-Since from stored validators
    NEGOTIATION_MW: 530,  # R9: Accept prefers markdown, then feeds
    RETRY_MW: 550,  # R5, in the slot of Scrapy's RetryMiddleware
    PACING_MW: 950,  # R4, after every component that can issue or alter a request
    USERAGENT_MW: 1000,  # R1 last, nearest the wire: nothing can change it after
}
#: How the descriptions of the chain (README, the package's and the gates'
#: docstrings) name each gate: every gate, in the order above
#: (``tests/test_package_layout.py`` checks them).
GATE_LABELS: dict[str, str] = {
    SCOPE_MW: "R6 scope",
    CADENCE_MW: "R8 cadence",
    BLOCKLIST_MW: "R3 operator blocklist",
    ROBOTS_MW: "R2 robots.txt",
    PREFERENCES_MW: "PREF usage preferences",
    SITEMAPS_MW: "R7 sitemaps",
    VALIDATORS_MW: "R7 validators",
    NEGOTIATION_MW: "R9 negotiation",
    RETRY_MW: "R5 retry",
    PACING_MW: "R4 pacing",
    USERAGENT_MW: "R1 exact User-Agent",
}
#: R6: closest to the engine, so requests any spider middleware adds are seen too.
SPIDER_MIDDLEWARES: dict[str, int] = {SCOPE_SPIDER_MW: 5}
SCRAPY_ROBOTS_MW = "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"
SCRAPY_RETRY_MW = "scrapy.downloadermiddlewares.retry.RetryMiddleware"
FRONTIER = f"{PACKAGE}.FrontierScheduler"
WIRE_HANDLER = f"{PACKAGE}.WireTimedHTTP11DownloadHandler"
ADDON = f"{PACKAGE}.Addon"
#: where the class ADDON names is defined (known without importing the add-on)
ADDON_CLASS = f"{PACKAGE}.addon.Addon"
#: The start-up check as an extension, built after every add-on has run.
STARTUP_CHECK = f"{PACKAGE}.StartupCheck"
#: Its order in EXTENSIONS: late, so extensions built before it are seen too.
STARTUP_CHECK_ORDER = 1000
SCRAPY_MEDIA_PIPELINE = "scrapy.pipelines.media.MediaPipeline"
#: Commits each record (cadence with it; a fed line's acknowledgement).
RECORD_PIPELINE = f"{PACKAGE}.RecordPipeline"
RECORD_PIPELINE_ORDER = 100
#: LOG_FORMATTER: a record of a target not fetched is logged from its request
RECORD_LOG_FORMATTER = f"{PACKAGE}.RecordLogFormatter"
SCRAPY_DOWNLOADER = "scrapy.core.downloader.Downloader"
#: drops a request whose URL is longer than URLLENGTH_LIMIT, with no record
SCRAPY_URL_LENGTH_MW = "scrapy.spidermiddlewares.urllength.UrlLengthMiddleware"


def enabled_downloader_middlewares(settings: BaseSettings) -> dict[Any, int]:
    """Enabled downloader middlewares, class -> order, as Scrapy will build them."""
    return enabled(settings, "DOWNLOADER_MIDDLEWARES")


def loaded(obj: Any) -> Any:
    """A setting's component: the object itself, or the one its path names."""
    return load_object(obj) if isinstance(obj, str) else obj


def enabled(settings: BaseSettings, name: str) -> dict[Any, int]:
    """Enabled components of the component priority dict *name*, class -> order."""
    merged = settings.get_component_priority_dict_with_base(name)
    return {loaded(key): order for key, order in merged.items() if order is not None}


def is_subclass(cls: Any, path: str) -> bool:
    """Whether *cls* is the component at *path* or a subclass of it. A
    bundle component is told by name along the class's MRO, so that asking
    imports no component (see :func:`name_of`)."""
    if not isinstance(cls, type):
        return False
    if path.startswith(f"{PACKAGE}."):
        return any(name_of(base) == path for base in cls.__mro__)
    return issubclass(cls, load_object(path))


def uses_frontier(settings: BaseSettings) -> bool:
    """Whether the scheduler is the per-host frontier (it can take a paced request back)."""
    return is_subclass(loaded(settings["SCHEDULER"]), FRONTIER)


def retries(settings: BaseSettings) -> bool:
    """Whether the R5 gate (or a subclass) is in the downloader chain: only
    then is an answer's backoff planned (a ``Retry-After`` holds regardless)."""
    return any(is_subclass(cls, RETRY_MW) for cls in enabled_downloader_middlewares(settings))


def url_length_limit(settings: BaseSettings) -> int:
    """The longest URL the crawl sends: ``URLLENGTH_LIMIT`` while Scrapy's
    ``UrlLengthMiddleware`` (or a subclass) is enabled, else 0 (no limit)."""
    middlewares = enabled(settings, "SPIDER_MIDDLEWARES")
    if any(is_subclass(cls, SCRAPY_URL_LENGTH_MW) for cls in middlewares):
        return settings.getint("URLLENGTH_LIMIT")
    return 0


#: the progress log of long crawls (done/total, outcomes, ETA)
PROGRESS_EXTENSION = f"{PACKAGE}.Progress"
PROGRESS_ORDER = 600
#: the start-up heap out of the garbage collector's full passes
HEAP_EXTENSION = f"{PACKAGE}.HeapFreeze"
HEAP_ORDER = 610

#: every component path users write in settings (each exported from the root)
PUBLIC = (
    ADDON,
    *DOWNLOADER_MIDDLEWARES,
    *SPIDER_MIDDLEWARES,
    FRONTIER,
    WIRE_HANDLER,
    STARTUP_CHECK,
    RECORD_PIPELINE,
    RECORD_LOG_FORMATTER,
    PROGRESS_EXTENSION,
    HEAP_EXTENSION,
)


def name_of(cls: Any) -> str:
    """The path a component is known by: the one users write in settings for
    a bundle component (whichever path named it), else its module and
    qualified name. Told from the export table, not by importing the
    components: every layer names components, and only the top one may
    import them all."""
    name = getattr(cls, "__name__", None)
    home = EXPORTS.get(name) if isinstance(name, str) else None
    module = getattr(cls, "__module__", None) or ""
    if home is not None and (module == home or module.startswith(home + ".")):
        return f"{PACKAGE}.{name}"
    return f"{module}.{getattr(cls, '__qualname__', name)}"
