"""scrapy-walsh-research: a Scrapy add-on for the Walsh-Research bot contract.

Gate chain before every request, in the order the add-on installs it (the
spec's order, §5, with the bundle's other gates between)::

    R6 scope -> R8 cadence -> R3 operator blocklist -> R2 robots.txt (RFC 9309)
      -> PREF usage preferences -> R7 sitemaps -> R7 validators -> R9 negotiation
      -> R5 retry (backoff on 429/503, on the way back) -> R4 pacing
      -> R1 exact User-Agent

The paths users write in settings are the names exported here::

    ADDONS = {"scrapy_walsh_research.Addon": 0}
    DOWNLOADER_MIDDLEWARES = {"scrapy_walsh_research.RobotsTxtMiddleware": 100, ...}

Each is imported when first asked for, not with the package: the child
process that reads a large blocklist imports only the pure core
(``tests/test_r3_large_blocklist.py`` checks it). Where each lives is in
``docs/architecture.rst``; the module paths of 0.2.0 still import, with a
warning, until 0.4.0 (:mod:`scrapy_walsh_research._moved`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from scrapy_walsh_research import _moved
from scrapy_walsh_research.core.contract import (
    BLOCKLIST_SCHEMA_URL,
    BLOCKLIST_URL,
    PRODUCT_TOKEN,
    SPEC_VERSION,
    USER_AGENT,
)

if TYPE_CHECKING:
    from scrapy_walsh_research.addon import Addon
    from scrapy_walsh_research.extensions.heap import HeapFreeze
    from scrapy_walsh_research.extensions.progress import Progress
    from scrapy_walsh_research.gates.blocklist import BlocklistMiddleware
    from scrapy_walsh_research.gates.cadence import CadenceMiddleware
    from scrapy_walsh_research.gates.negotiation import NegotiationMiddleware
    from scrapy_walsh_research.gates.pacing import PacingMiddleware
    from scrapy_walsh_research.gates.preferences import PreferencesMiddleware
    from scrapy_walsh_research.gates.retry import RetryMiddleware
    from scrapy_walsh_research.gates.robots import RobotsTxtMiddleware
    from scrapy_walsh_research.gates.scope import (
        ScopeDownloaderMiddleware,
        ScopeSpiderMiddleware,
    )
    from scrapy_walsh_research.gates.sitemaps import SitemapsMiddleware
    from scrapy_walsh_research.gates.useragent import UserAgentMiddleware
    from scrapy_walsh_research.gates.validators import ConditionalRequestMiddleware
    from scrapy_walsh_research.records import RecordPipeline
    from scrapy_walsh_research.scheduling.frontier import FrontierScheduler
    from scrapy_walsh_research.scheduling.wire import WireTimedHTTP11DownloadHandler
    from scrapy_walsh_research.settings.check import StartupCheck

__version__ = "0.3.0"

#: every component path users write in settings, by name -> where it is defined
EXPORTS: dict[str, str] = {
    "Addon": "scrapy_walsh_research.addon",
    "ScopeSpiderMiddleware": "scrapy_walsh_research.gates.scope",
    "ScopeDownloaderMiddleware": "scrapy_walsh_research.gates.scope",
    "CadenceMiddleware": "scrapy_walsh_research.gates.cadence",
    "BlocklistMiddleware": "scrapy_walsh_research.gates.blocklist",
    "RobotsTxtMiddleware": "scrapy_walsh_research.gates.robots",
    "PreferencesMiddleware": "scrapy_walsh_research.gates.preferences",
    "SitemapsMiddleware": "scrapy_walsh_research.gates.sitemaps",
    "ConditionalRequestMiddleware": "scrapy_walsh_research.gates.validators",
    "NegotiationMiddleware": "scrapy_walsh_research.gates.negotiation",
    "RetryMiddleware": "scrapy_walsh_research.gates.retry",
    "PacingMiddleware": "scrapy_walsh_research.gates.pacing",
    "UserAgentMiddleware": "scrapy_walsh_research.gates.useragent",
    "FrontierScheduler": "scrapy_walsh_research.scheduling.frontier",
    "WireTimedHTTP11DownloadHandler": "scrapy_walsh_research.scheduling.wire",
    "RecordPipeline": "scrapy_walsh_research.records",
    "RecordLogFormatter": "scrapy_walsh_research.spiders.record_log",
    "StartupCheck": "scrapy_walsh_research.settings.check",
    "Progress": "scrapy_walsh_research.extensions.progress",
    "HeapFreeze": "scrapy_walsh_research.extensions.heap",
}

#: the contract's constants, the version, and every name in EXPORTS
__all__ = [
    "BLOCKLIST_SCHEMA_URL",
    "BLOCKLIST_URL",
    "PRODUCT_TOKEN",
    "SPEC_VERSION",
    "USER_AGENT",
    "Addon",
    "BlocklistMiddleware",
    "CadenceMiddleware",
    "ConditionalRequestMiddleware",
    "FrontierScheduler",
    "HeapFreeze",
    "NegotiationMiddleware",
    "PacingMiddleware",
    "PreferencesMiddleware",
    "Progress",
    "RecordLogFormatter",
    "RecordPipeline",
    "RetryMiddleware",
    "RobotsTxtMiddleware",
    "ScopeDownloaderMiddleware",
    "ScopeSpiderMiddleware",
    "SitemapsMiddleware",
    "StartupCheck",
    "UserAgentMiddleware",
    "WireTimedHTTP11DownloadHandler",
    "__version__",
]

_moved.install()


def __getattr__(name: str) -> Any:
    module = EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *EXPORTS})
