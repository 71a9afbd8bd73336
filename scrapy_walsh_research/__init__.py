"""scrapy-walsh-research: a Scrapy add-on for the Walsh-Research bot contract.

Gate chain before every request (spec §5): operator blocklist (R3) ->
robots.txt (R2) -> pacing (R4) -> the exact User-Agent (R1) -> backoff (R5).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy_walsh_research.core.contract import (
    BLOCKLIST_SCHEMA_URL,
    BLOCKLIST_URL,
    PRODUCT_TOKEN,
    SPEC_VERSION,
    USER_AGENT,
)

if TYPE_CHECKING:
    from scrapy_walsh_research.addon import Addon

__version__ = "0.2.0"
__all__ = [
    "BLOCKLIST_SCHEMA_URL",
    "BLOCKLIST_URL",
    "PRODUCT_TOKEN",
    "SPEC_VERSION",
    "USER_AGENT",
    "Addon",
    "__version__",
]


def __getattr__(name: str) -> Any:
    # The add-on, and Scrapy with it, is imported when first asked for, not
    # with the package: the child process that reads a large blocklist
    # imports only the pure core (tests/test_r3_large_blocklist.py checks it).
    if name == "Addon":
        from scrapy_walsh_research.addon import Addon

        return Addon
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
