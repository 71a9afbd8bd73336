"""Reading ``Retry-After`` (RFC 9110 §10.2.3): delta-seconds or an HTTP-date.

A parser of a header a hostile server writes: it never raises. The standard
library's :func:`email.utils.parsedate_to_datetime` reads the three date forms
HTTP allows but raises ``ValueError``/``OverflowError`` on absurd ones, and
nothing reads delta-seconds for us, hence this small wrapper.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

#: the responses whose Retry-After binds the whole host (spec R5)
RATE_LIMIT_CODES = frozenset({429, 503})
#: a longer Retry-After is read as this long: effectively "not again", and a
#: number every clock and store can still add to and write down
MAX_RETRY_AFTER = 366 * 86400.0
_DELTA = re.compile(r"^\s*(\d+)\s*$")


def parse_retry_after(value: bytes | str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait per a ``Retry-After`` header, or None when absent/malformed.

    A date in the past gives 0. A negative or fractional number is not
    delta-seconds (``1*DIGIT``) and is treated as malformed. Anything longer
    than :data:`MAX_RETRY_AFTER` gives that.
    """
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
    m = _DELTA.match(text)
    if m:
        digits = m.group(1).lstrip("0") or "0"
        if len(digits) > 12:  # beyond 10**12 s: far longer than the cap anyway
            return MAX_RETRY_AFTER
        return min(float(digits), MAX_RETRY_AFTER)
    try:
        when = parsedate_to_datetime(text.strip())
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - (now or datetime.now(timezone.utc))).total_seconds()
    except (TypeError, ValueError, IndexError, OverflowError, AttributeError):
        return None
    return min(max(0.0, seconds), MAX_RETRY_AFTER)
