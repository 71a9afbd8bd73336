"""Start-up check: refuse to crawl when the effective configuration is not conformant.

The add-on only supplies defaults (add-on priority < project < spider), so a
project or spider setting can still undo a gate, or turn on a Scrapy feature
that routes around one (the HTTP cache, meta refresh, a media pipeline,
another download handler). :func:`problems` lists each with what to change
(the audit behind it: ``docs/readings.rst``).

It runs at three points, whenever the add-on is installed, even when a
project disables every gate component:

* :meth:`scrapy_walsh_research.Addon.update_settings`, right after the
  add-on applied its defaults (it sees project, spider and command-line
  settings and the add-ons loaded before it);
* :class:`StartupCheck`, an extension the add-on enables: Scrapy builds
  extensions after every add-on has run, so it sees the final settings;
* every gate's ``from_crawler`` (:func:`check_configuration`), after the
  settings are frozen; this is the check of the explicit-middlewares route.

Each raises :class:`WalshConfigurationError` naming the setting to change,
before the engine exists (no request is sent), never ``NotConfigured``
(Scrapy would log "Disabled" and crawl without the gate).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy_walsh_research._moved import warn
from scrapy_walsh_research.components import (
    ADDON,
    ADDON_CLASS,
    BLOCKLIST_MW,
    DOWNLOADER_MIDDLEWARES,
    FRONTIER,
    PACING_MW,
    PACKAGE,
    PREFERENCES_MW,
    RECORD_PIPELINE,
    RECORD_PIPELINE_ORDER,
    RETRY_MW,
    ROBOTS_MW,
    SCOPE_MW,
    SCOPE_SPIDER_MW,
    SCRAPY_DOWNLOADER,
    SCRAPY_MEDIA_PIPELINE,
    SCRAPY_RETRY_MW,
    SCRAPY_ROBOTS_MW,
    SPIDER_MIDDLEWARES,
    STARTUP_CHECK,
    USERAGENT_MW,
    enabled,
    enabled_downloader_middlewares,
    is_subclass,
    loaded,
    name_of,
    uses_frontier,
)
from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.per_crawler import per_crawler
from scrapy_walsh_research.settings import wire
from scrapy_walsh_research.settings.options import deprecated_names, sitemap_order_problems
from scrapy_walsh_research.settings.values import refusal
from scrapy_walsh_research.settings.walsh import walsh_problems

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)


def problems(settings: BaseSettings) -> list[str]:
    """Every way *settings* break the contract, each saying what to change."""
    mws = enabled_downloader_middlewares(settings)
    order = {name_of(cls): prio for cls, prio in mws.items()}
    found = _component_problems(settings, order)
    found.extend(_order_problems(order) + sitemap_order_problems(order))
    if SCRAPY_RETRY_MW in order and settings.getbool("RETRY_ENABLED"):
        found.append(
            f"Scrapy's {SCRAPY_RETRY_MW} is active beside the R5 gate (it retries 429/503 at "
            "once, ignoring Retry-After): set it to None in DOWNLOADER_MIDDLEWARES or set "
            "RETRY_ENABLED=False."
        )
    # every WALSH_ value the typed settings refuse (settings/values.py)
    found.extend(walsh_problems(settings))
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
    found.extend(wire.concurrency_problems(settings))
    found.extend(_redis_problems(settings))
    if settings.getint("REDIRECT_MAX_TIMES") > 5:
        found.append(
            f"REDIRECT_MAX_TIMES={settings.getint('REDIRECT_MAX_TIMES')}: at most 5 redirect "
            "hops are followed. Set REDIRECT_MAX_TIMES=5 or lower."
        )
    found.extend(_bypass_problems(settings))
    return found


def _component_problems(settings: BaseSettings, order: dict[str, int]) -> list[str]:
    """Gates, the R6 guard and the record pipeline that are not enabled, or
    run where they cannot guard (*order*: the enabled downloader middlewares)."""
    found: list[str] = []
    gates = (
        (SCOPE_MW, "R6"),
        (BLOCKLIST_MW, "R3"),
        (ROBOTS_MW, "R2"),
        (PREFERENCES_MW, "PREF"),
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
    spider_mws = {name_of(c): prio for c, prio in enabled(settings, "SPIDER_MIDDLEWARES").items()}
    pipelines = {name_of(cls) for cls in enabled(settings, "ITEM_PIPELINES")}
    if RECORD_PIPELINE not in pipelines:
        found.append(
            f"{RECORD_PIPELINE} is not enabled: add it to ITEM_PIPELINES with order "
            f"{RECORD_PIPELINE_ORDER}; the targets spider's records write each target's "
            "cadence (R8) and acknowledge lines fed through Redis with it."
        )
    if SCOPE_SPIDER_MW not in spider_mws:
        found.append(
            f"R6 guard {SCOPE_SPIDER_MW} is not enabled: add it to SPIDER_MIDDLEWARES with "
            f"order {SPIDER_MIDDLEWARES[SCOPE_SPIDER_MW]} so followed links are dropped."
        )
    else:
        # A callback's output passes spider middlewares from the highest order
        # down: one at or below the guard would see it after the guard.
        guard = spider_mws[SCOPE_SPIDER_MW]
        after = sorted(
            f"{name} ({prio})"
            for name, prio in spider_mws.items()
            if prio <= guard and name != SCOPE_SPIDER_MW
        )
        if after:
            found.append(
                f"SPIDER_MIDDLEWARES runs {', '.join(after)} at or after the R6 guard "
                f"({SCOPE_SPIDER_MW}, {guard}) on a callback's output, where a request it "
                "yields is not dropped: give it a higher number."
            )
    return found


def _order_problems(order: dict[str, int]) -> list[str]:
    """The downloader middlewares out of the spec's order (§5): blocklist,
    robots.txt, usage preferences, then pacing, with nothing between pacing
    and the R1 gate."""
    found: list[str] = []
    if BLOCKLIST_MW in order and ROBOTS_MW in order and order[BLOCKLIST_MW] >= order[ROBOTS_MW]:
        found.append(
            f"DOWNLOADER_MIDDLEWARES orders the blocklist gate ({order[BLOCKLIST_MW]}) at or "
            f"after the robots.txt gate ({order[ROBOTS_MW]}): the spec checks the operator "
            "blocklist first. Give the blocklist gate the lower number."
        )
    if PREFERENCES_MW in order and ROBOTS_MW in order and order[PREFERENCES_MW] <= order[ROBOTS_MW]:
        found.append(
            f"DOWNLOADER_MIDDLEWARES orders the preferences gate ({order[PREFERENCES_MW]}) at "
            f"or before the robots.txt gate ({order[ROBOTS_MW]}): preferences apply only where "
            "robots.txt allows crawling, and tdmrep.json is fetched under robots.txt's rules. "
            "Give the preferences gate the higher number."
        )
    if PREFERENCES_MW in order and PACING_MW in order and order[PACING_MW] <= order[PREFERENCES_MW]:
        found.append(
            f"DOWNLOADER_MIDDLEWARES orders the pacing gate ({order[PACING_MW]}) at or before "
            f"the preferences gate ({order[PREFERENCES_MW]}): pace only requests that may be "
            "sent. Give the pacing gate the higher number."
        )
    if ROBOTS_MW in order and PACING_MW in order and order[PACING_MW] <= order[ROBOTS_MW]:
        found.append(
            f"DOWNLOADER_MIDDLEWARES orders the pacing gate ({order[PACING_MW]}) at or before "
            f"the robots.txt gate ({order[ROBOTS_MW]}): pace only requests that may be sent. "
            "Give the pacing gate the higher number."
        )
    if PACING_MW in order:
        # Between the pacing gate and the wire, a component that answers or
        # retries a request in process_response/process_exception runs before
        # the pacing gate sees the answer: its Retry-After hold and its send
        # time would be skipped. The R5 gate itself must run before pacing.
        between = sorted(
            f"{name} ({prio})"
            for name, prio in order.items()
            if order[PACING_MW] < prio < order.get(USERAGENT_MW, 10**9)
        )
        if between:
            found.append(
                f"DOWNLOADER_MIDDLEWARES runs {', '.join(between)} between the pacing gate "
                f"({order[PACING_MW]}) and the R1 gate: it would see answers before pacing does "
                "(a Retry-After hold could be skipped). Give it a number below "
                f"{order[PACING_MW]}."
            )
    return found


def _bypass_problems(settings: BaseSettings) -> list[str]:
    """Scrapy features that issue requests, retarget them, store bodies or parse HTML.

    The table of every Scrapy 2.19 setting and component and why each is
    refused, allowed or only advised against is in ``docs/readings.rst``.
    Long because it is a flat list of independent checks, one per feature,
    each with its message: read top to bottom.
    """
    found: list[str] = []
    defaults = settings.getdict("DEFAULT_REQUEST_HEADERS")
    if any(str(k).lower() == "host" for k in defaults):
        found.append(
            "DEFAULT_REQUEST_HEADERS sets Host: it would send every request to the site it "
            "names, not the one whose blocklist entry and robots.txt were checked. Remove it "
            "(the connection sends the URL's host)."
        )
    # Refused whether or not the middleware is listed: a subclass under
    # another name, or the project's own cache, reads the same setting.
    if settings.getbool("HTTPCACHE_ENABLED"):
        found.append(
            "HTTPCACHE_ENABLED=True: Scrapy's HttpCacheMiddleware answers from disk, so the "
            "blocklist, its schema and robots.txt are not fetched again (with the default "
            "policy, never: new opt-outs go unseen), and it stores whole bodies. R3 requires "
            "the live blocklist and R6 requires that content is not stored. "
            "Set HTTPCACHE_ENABLED=False."
        )
    if settings.getbool("METAREFRESH_ENABLED"):
        found.append(
            "METAREFRESH_ENABLED=True: Scrapy's MetaRefreshMiddleware parses every HTML answer "
            "and requests the target of its <meta http-equiv=refresh>, on any host. R9 "
            "requires that HTML is never parsed and R6 requires that nothing is followed. "
            "Set METAREFRESH_ENABLED=False."
        )
    if settings.getbool("AJAXCRAWL_ENABLED"):
        found.append(
            "AJAXCRAWL_ENABLED=True: Scrapy's AjaxCrawlMiddleware (in Scrapy releases that "
            "still ship it) parses HTML answers for <meta name=fragment> and requests their "
            "?_escaped_fragment_= variant. R9 requires that HTML is never parsed and R6 "
            "requires that nothing is followed. Set AJAXCRAWL_ENABLED=False."
        )
    media = sorted(
        name_of(cls)
        for cls in enabled(settings, "ITEM_PIPELINES")
        if is_subclass(cls, SCRAPY_MEDIA_PIPELINE)
    )
    if media:
        found.append(
            f"ITEM_PIPELINES enables {', '.join(media)}: a media pipeline downloads the files "
            "and images an item points to and stores them. R6 requires no sub-resources and "
            "no stored content. Set it to None in ITEM_PIPELINES."
        )
    found.extend(wire.handler_problems(settings))
    if not settings.getbool("TWISTED_REACTOR_ENABLED", True):
        found.append(
            "TWISTED_REACTOR_ENABLED=False: the gates run on the Twisted reactor (the pacing "
            "gate's waits, the robots.txt and blocklist fetches, the wire-timed download "
            "handler), and R4 requires the pacing gate. Set TWISTED_REACTOR_ENABLED=True."
        )
    downloader_cls = loaded(settings["DOWNLOADER"])
    if not is_subclass(downloader_cls, SCRAPY_DOWNLOADER):
        found.append(
            f"DOWNLOADER={name_of(downloader_cls)} is not {SCRAPY_DOWNLOADER} or a subclass: "
            "every gate is a downloader middleware that Scrapy's downloader calls, and another "
            f"one need not call them. Set DOWNLOADER={SCRAPY_DOWNLOADER!r}."
        )
    if addon_installed(settings) and not any(
        name_of(cls) == STARTUP_CHECK for cls in enabled(settings, "EXTENSIONS")
    ):
        found.append(
            f"EXTENSIONS disables {STARTUP_CHECK} while the {ADDON} add-on is installed: it "
            "repeats this check after every add-on has run. Remove its entry from EXTENSIONS."
        )
    return found


def addon_installed(settings: BaseSettings) -> bool:
    """Whether ``ADDONS`` enables the bundle's add-on (or a subclass of it).

    Known by where its class is defined: the add-on imports this module, so
    this one does not import it back."""
    for key, order in settings.getdict("ADDONS").items():
        cls = loaded(key)
        if order is not None and isinstance(cls, type):
            if any(f"{b.__module__}.{b.__qualname__}" == ADDON_CLASS for b in cls.__mro__):
                return True
    return False


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
    slow_slots = sorted(
        slot
        for slot, conf in settings.getdict("DOWNLOAD_SLOTS").items()
        if isinstance(conf, dict) and float(conf.get("delay") or 0) > 0
    )
    if slow_slots:
        found.append(
            f"DOWNLOAD_SLOTS gives {', '.join(slow_slots)} a delay: Scrapy's slot delay adds "
            "to Walsh pacing, which already spaces requests per host. Drop the 'delay' keys "
            "for full speed."
        )
    return found


def check_settings(settings: BaseSettings) -> None:
    """Raise :class:`WalshConfigurationError` listing every non-conformance in *settings*."""
    found = problems(settings)
    if found:
        raise refusal(found)


def apply_addons(crawler: Crawler) -> str | None:
    """Apply the add-ons to ``crawler.settings`` as a crawl would, without crawling.

    For the attestation, which reports on a refused configuration instead of
    stopping: returns the add-on's refusal, if any. The settings then hold
    every add-on up to ours, with our defaults applied.
    """
    try:
        crawler.addons.load_settings(crawler.settings)
    except WalshConfigurationError as exc:
        return str(exc)
    return None


def check_configuration(crawler: Crawler) -> None:
    """Check the crawler's settings; log the advice once.

    Called again once the settings are frozen (by the gates), since an
    extension built after :class:`StartupCheck` could still change them.
    """
    # "advised": the advice was logged; "checked": the frozen settings passed
    # (the gates need not repeat it)
    done: set[str] = per_crawler(crawler, check_configuration, set)
    if "checked" in done:
        return
    if "advised" not in done:
        done.add("advised")
        for line in advice(crawler.settings):
            logger.warning("Walsh-Research: %s", line)
        for line in deprecated_names(crawler.settings):
            warn(line)
    check_settings(crawler.settings)
    if crawler.settings.frozen:
        done.add("checked")


class StartupCheck:
    """Extension: the start-up check on the settings every add-on has shaped.

    Scrapy builds extensions after it has run every add-on and before it
    builds the engine, so this runs even when a project disables every gate
    component, and before any request.
    """

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> StartupCheck:
        check_configuration(crawler)
        return cls()
