"""Start-up check: refuse to crawl when the effective configuration is not conformant.

The add-on only supplies defaults (add-on priority < project < spider), so a
project or spider setting can still undo a gate. Every gate calls
:func:`check_configuration` from ``from_crawler``; the first call checks the
settings actually in effect and raises :class:`WalshConfigurationError`
with the setting to change. It never raises ``NotConfigured``: Scrapy would
log "Disabled" and crawl without the gate.
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING, Any

from scrapy.utils.misc import load_object

from scrapy_walsh_research.errors import WalshConfigurationError

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

PACKAGE = "scrapy_walsh_research"
#: The gate chain, in the spec's order (§5), as downloader middlewares.
SCOPE_MW = f"{PACKAGE}.scope.ScopeDownloaderMiddleware"
SCOPE_SPIDER_MW = f"{PACKAGE}.scope.ScopeSpiderMiddleware"
CADENCE_MW = f"{PACKAGE}.cadence.CadenceMiddleware"
VALIDATORS_MW = f"{PACKAGE}.validators.ConditionalRequestMiddleware"
NEGOTIATION_MW = f"{PACKAGE}.structured.NegotiationMiddleware"
BLOCKLIST_MW = f"{PACKAGE}.blocklist.BlocklistMiddleware"
ROBOTS_MW = f"{PACKAGE}.robots.RobotsTxtMiddleware"
RETRY_MW = f"{PACKAGE}.retry.RetryMiddleware"
PACING_MW = f"{PACKAGE}.pacing.PacingMiddleware"
USERAGENT_MW = f"{PACKAGE}.useragent.UserAgentMiddleware"
DOWNLOADER_MIDDLEWARES: dict[str, int] = {
    SCOPE_MW: 55,  # R6: only declared targets and the bundle's own requests go on
    CADENCE_MW: 60,  # R8: a target fetched too recently is skipped, no request at all
    BLOCKLIST_MW: 80,  # R3 first: a blocked host gets nothing, not even robots.txt
    ROBOTS_MW: 100,  # R2, in the slot of Scrapy's RobotsTxtMiddleware
    VALIDATORS_MW: 520,  # R7: If-None-Match / If-Modified-Since from stored validators
    NEGOTIATION_MW: 530,  # R9: Accept prefers markdown, then feeds
    RETRY_MW: 550,  # R5, in the slot of Scrapy's RetryMiddleware
    PACING_MW: 950,  # R4, after every component that can issue or alter a request
    USERAGENT_MW: 1000,  # R1 last, nearest the wire: nothing can change it after
}
#: R6: closest to the engine, so requests any spider middleware adds are seen too.
SPIDER_MIDDLEWARES: dict[str, int] = {SCOPE_SPIDER_MW: 5}
SCRAPY_ROBOTS_MW = "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"
SCRAPY_RETRY_MW = "scrapy.downloadermiddlewares.retry.RetryMiddleware"
FRONTIER = f"{PACKAGE}.frontier.FrontierScheduler"
WIRE_HANDLER = f"{PACKAGE}.wire.WireTimedHTTP11DownloadHandler"

_checked: weakref.WeakSet[Crawler] = weakref.WeakSet()


def enabled_downloader_middlewares(settings: BaseSettings) -> dict[Any, int]:
    """Enabled downloader middlewares, class -> order, as Scrapy will build them."""
    merged = settings.get_component_priority_dict_with_base("DOWNLOADER_MIDDLEWARES")
    out: dict[Any, int] = {}
    for key, order in merged.items():
        if order is None:
            continue
        out[load_object(key) if isinstance(key, str) else key] = order
    return out


def uses_frontier(settings: BaseSettings) -> bool:
    """Whether the scheduler is the per-host frontier (it can take a paced request back)."""
    scheduler = settings["SCHEDULER"]
    cls = load_object(scheduler) if isinstance(scheduler, str) else scheduler
    return isinstance(cls, type) and issubclass(cls, load_object(FRONTIER))


def _name(cls: Any) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def problems(settings: BaseSettings) -> list[str]:
    """Every way *settings* break the contract, each saying what to change."""
    found: list[str] = []
    mws = enabled_downloader_middlewares(settings)
    order = {_name(cls): prio for cls, prio in mws.items()}
    gates = (
        (SCOPE_MW, "R6"),
        (BLOCKLIST_MW, "R3"),
        (ROBOTS_MW, "R2"),
        (PACING_MW, "R4"),
        (RETRY_MW, "R5"),
    )
    for path, rule in (*gates, (USERAGENT_MW, "R1")):
        if path not in order:
            found.append(
                f"{rule} gate {path} is not enabled: add it to DOWNLOADER_MIDDLEWARES "
                f"with order {DOWNLOADER_MIDDLEWARES[path]} (or use the "
                f"{PACKAGE}.Addon add-on)."
            )
    spider_mws = {
        _name(load_object(k) if isinstance(k, str) else k)
        for k, v in settings.get_component_priority_dict_with_base("SPIDER_MIDDLEWARES").items()
        if v is not None
    }
    if SCOPE_SPIDER_MW not in spider_mws:
        found.append(
            f"R6 guard {SCOPE_SPIDER_MW} is not enabled: add it to SPIDER_MIDDLEWARES with "
            f"order {SPIDER_MIDDLEWARES[SCOPE_SPIDER_MW]} so followed links are dropped."
        )
    if BLOCKLIST_MW in order and ROBOTS_MW in order and order[BLOCKLIST_MW] >= order[ROBOTS_MW]:
        found.append(
            f"DOWNLOADER_MIDDLEWARES orders the blocklist gate ({order[BLOCKLIST_MW]}) at or "
            f"after the robots.txt gate ({order[ROBOTS_MW]}): the spec checks the operator "
            "blocklist first. Give the blocklist gate the lower number."
        )
    if ROBOTS_MW in order and PACING_MW in order and order[PACING_MW] <= order[ROBOTS_MW]:
        found.append(
            f"DOWNLOADER_MIDDLEWARES orders the pacing gate ({order[PACING_MW]}) at or before "
            f"the robots.txt gate ({order[ROBOTS_MW]}): pace only requests that may be sent. "
            "Give the pacing gate the higher number."
        )
    if SCRAPY_RETRY_MW in order and settings.getbool("RETRY_ENABLED"):
        found.append(
            f"Scrapy's {SCRAPY_RETRY_MW} is active beside the R5 gate (it retries 429/503 at "
            "once, ignoring Retry-After): set it to None in DOWNLOADER_MIDDLEWARES or set "
            "RETRY_ENABLED=False."
        )
    if settings.getfloat("WALSH_MIN_DELAY", 1.0) < 1.0:
        found.append(
            f"WALSH_MIN_DELAY={settings.getfloat('WALSH_MIN_DELAY')}: R4 allows at most one "
            "request per second per host. Set WALSH_MIN_DELAY to 1.0 or more."
        )
    if SCRAPY_ROBOTS_MW in order and settings.getbool("ROBOTSTXT_OBEY"):
        found.append(
            f"Scrapy's {SCRAPY_ROBOTS_MW} is active beside the R2 gate (it selects groups by "
            "substring and allows everything on a 5xx): set it to None in "
            "DOWNLOADER_MIDDLEWARES or set ROBOTSTXT_OBEY=False."
        )
    if USERAGENT_MW in order:
        later = sorted(
            f"{name} ({prio})"
            for name, prio in order.items()
            if prio >= order[USERAGENT_MW] and name != USERAGENT_MW
        )
        if later:
            found.append(
                f"DOWNLOADER_MIDDLEWARES runs {', '.join(later)} at or after the R1 gate "
                f"({order[USERAGENT_MW]}), where it could change the User-Agent on the wire: "
                "give it a lower number or move the R1 gate higher."
            )
    if settings.getint("CONCURRENT_REQUESTS") != 1:
        found.append(
            f"CONCURRENT_REQUESTS={settings.getint('CONCURRENT_REQUESTS')}: R4 requires serial "
            "requests. Set CONCURRENT_REQUESTS=1."
        )
    found.extend(_redis_problems(settings))
    if settings.getint("REDIRECT_MAX_TIMES") > 5:
        found.append(
            f"REDIRECT_MAX_TIMES={settings.getint('REDIRECT_MAX_TIMES')}: at most 5 redirect "
            "hops are followed. Set REDIRECT_MAX_TIMES=5 or lower."
        )
    return found


ASYNCIO_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"
SCRAPY_REDIS_SCHEDULER = "scrapy_redis.scheduler.Scheduler"


def _redis_problems(settings: BaseSettings) -> list[str]:
    found: list[str] = []
    url = settings.get("WALSH_REDIS_URL")
    if not url:
        return found
    try:
        import redis.asyncio  # noqa: F401
    except ImportError:
        found.append(
            "WALSH_REDIS_URL is set but the redis package is missing: "
            "pip install 'scrapy-walsh-research[redis]'."
        )
    if settings.get("TWISTED_REACTOR") != ASYNCIO_REACTOR:
        found.append(
            f"WALSH_REDIS_URL needs the asyncio reactor (Redis is reached with redis.asyncio, "
            f"never blocking the reactor): set TWISTED_REACTOR={ASYNCIO_REACTOR!r}."
        )
    if settings.get("SCHEDULER") == SCRAPY_REDIS_SCHEDULER and not settings.getbool(
        "SCHEDULER_PERSIST"
    ):
        found.append(
            "SCHEDULER is scrapy-redis's, with SCHEDULER_PERSIST=False: the first process to "
            "finish would clear the queue the others still work from. Set SCHEDULER_PERSIST=True."
        )
    return found


def advice(settings: BaseSettings) -> list[str]:
    """Settings that keep the crawl polite but slow it down, or lose precision."""
    found: list[str] = []
    if settings.getfloat("DOWNLOAD_DELAY") > 0 or settings.getbool("AUTOTHROTTLE_ENABLED"):
        found.append(
            "DOWNLOAD_DELAY / AUTOTHROTTLE_ENABLED add Scrapy's own per-slot delay (with "
            "jitter) on top of Walsh pacing, which already spaces requests per host: set "
            "DOWNLOAD_DELAY=0 and AUTOTHROTTLE_ENABLED=False for full speed."
        )
    if not uses_frontier(settings):
        found.append(
            f"SCHEDULER is {settings['SCHEDULER']}: pacing still holds, but without {FRONTIER} "
            "the single download slot waits on a busy host while another is ready."
        )
    handlers = settings.getwithbase("DOWNLOAD_HANDLERS")
    for scheme in ("http", "https"):
        if handlers.get(scheme) and load_object(handlers[scheme]) is not load_object(WIRE_HANDLER):
            found.append(
                f"DOWNLOAD_HANDLERS[{scheme!r}] is not {WIRE_HANDLER}: pacing counts from the "
                "response instead of from when the request went out (safe, but slower)."
            )
    return found


def check_configuration(crawler: Crawler) -> None:
    """Raise :class:`WalshConfigurationError` listing every non-conformance."""
    if crawler in _checked:
        return
    for line in advice(crawler.settings):
        logger.warning("Walsh-Research: %s", line)
    found = problems(crawler.settings)
    if found:
        raise WalshConfigurationError(
            "The Walsh-Research configuration is not conformant; refusing to crawl:\n  - "
            + "\n  - ".join(found)
        )
    _checked.add(crawler)
