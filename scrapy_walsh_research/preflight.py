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
BLOCKLIST_MW = f"{PACKAGE}.blocklist.BlocklistMiddleware"
ROBOTS_MW = f"{PACKAGE}.robots.RobotsTxtMiddleware"
USERAGENT_MW = f"{PACKAGE}.useragent.UserAgentMiddleware"
DOWNLOADER_MIDDLEWARES: dict[str, int] = {
    BLOCKLIST_MW: 80,  # R3 first: a blocked host gets nothing, not even robots.txt
    ROBOTS_MW: 100,  # R2, in the slot of Scrapy's RobotsTxtMiddleware
    USERAGENT_MW: 1000,  # R1 last, nearest the wire: nothing can change it after
}
SCRAPY_ROBOTS_MW = "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"

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


def _name(cls: Any) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def problems(settings: BaseSettings) -> list[str]:
    """Every way *settings* break the contract, each saying what to change."""
    found: list[str] = []
    mws = enabled_downloader_middlewares(settings)
    order = {_name(cls): prio for cls, prio in mws.items()}
    for path, rule in ((BLOCKLIST_MW, "R3"), (ROBOTS_MW, "R2"), (USERAGENT_MW, "R1")):
        if path not in order:
            found.append(
                f"{rule} gate {path} is not enabled: add it to DOWNLOADER_MIDDLEWARES "
                f"with order {DOWNLOADER_MIDDLEWARES[path]} (or use the "
                f"{PACKAGE}.Addon add-on)."
            )
    if BLOCKLIST_MW in order and ROBOTS_MW in order and order[BLOCKLIST_MW] >= order[ROBOTS_MW]:
        found.append(
            f"DOWNLOADER_MIDDLEWARES orders the blocklist gate ({order[BLOCKLIST_MW]}) at or "
            f"after the robots.txt gate ({order[ROBOTS_MW]}): the spec checks the operator "
            "blocklist first. Give the blocklist gate the lower number."
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
    if settings.getint("REDIRECT_MAX_TIMES") > 5:
        found.append(
            f"REDIRECT_MAX_TIMES={settings.getint('REDIRECT_MAX_TIMES')}: at most 5 redirect "
            "hops are followed. Set REDIRECT_MAX_TIMES=5 or lower."
        )
    return found


def check_configuration(crawler: Crawler) -> None:
    """Raise :class:`WalshConfigurationError` listing every non-conformance."""
    if crawler in _checked:
        return
    found = problems(crawler.settings)
    if found:
        raise WalshConfigurationError(
            "The Walsh-Research configuration is not conformant; refusing to crawl:\n  - "
            + "\n  - ".join(found)
        )
    _checked.add(crawler)
