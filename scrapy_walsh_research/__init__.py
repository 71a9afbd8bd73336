"""scrapy-walsh-research: a Scrapy add-on for the Walsh-Research bot contract.

Gate chain before every request (spec §5): operator blocklist (R3) ->
robots.txt (R2) -> pacing (R4) -> the exact User-Agent (R1) -> backoff (R5).
"""

from scrapy_walsh_research.addon import Addon
from scrapy_walsh_research.core.contract import (
    BLOCKLIST_SCHEMA_URL,
    BLOCKLIST_URL,
    PRODUCT_TOKEN,
    SPEC_VERSION,
    USER_AGENT,
)

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
