"""Request-rate lines (the 1996 robots.txt extension proposal): how many
documents a site allows per time, as seconds per request.

Protego reads one line (:meth:`protego.Protego.request_rate`) and keeps only
the last of a group; the bot keeps the slowest of every line the selected
group states, at all times (a window after the rate is not read: the rate
holds outside it too). What Protego drops is written here: a rate of zero
documents, which it takes for malformed, and one too slow for a float.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from protego import Protego

_PROBE = "walsh-research-request-rate"


#: a Request-rate of zero documents per any time ("0/1h", "0/10m")
_NO_DOCUMENTS = re.compile(r"\s*0+\s*/\s*\d")


def slowest_rate(values: Any) -> float | None:
    """The slowest of the Request-rate *values* as seconds per request,
    each read by Protego (which keeps only the last line of a group)."""
    slowest = None
    for value in values:
        parser = Protego.parse(f"User-agent: {_PROBE}\nRequest-rate: {value}\n")
        rate = parser.request_rate(_PROBE)
        if rate is not None and rate.requests:
            try:
                interval = rate.seconds / rate.requests
            except OverflowError:  # 1/999…9: longer than a float holds
                interval = sys.float_info.max
        elif _NO_DOCUMENTS.match(value):
            # "0/1h" asks for no document at all; Protego drops it as
            # malformed, the reading that protects the site keeps it
            interval = sys.float_info.max
        else:
            continue
        slowest = interval if slowest is None else max(slowest, interval)
    return slowest
