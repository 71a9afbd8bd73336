"""Reading a sitemap's ``<lastmod>``: a W3C datetime (https://www.w3.org/TR/NOTE-datetime),
as sitemaps write it, to an aware UTC datetime and the end of what it can mean.

Written here because no library reads this profile: ``datetime.fromisoformat``
(3.10) and ``isodate.parse_datetime`` take neither ``1997`` nor ``1997-07``
as a datetime, and each accepts forms W3C does not (a time without a zone).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

#: the longest ``<lastmod>`` read (a W3C datetime is at most 35 characters)
MAX_LASTMOD_CHARS = 64

# YYYY, YYYY-MM, YYYY-MM-DD, then Thh:mm[:ss[.s]] with a zone. Also what
# crawler-commons accepts of what sites write wrongly but unambiguously
# (checked against its formatters, java.time's ISO_OFFSET_DATE_TIME with
# "yyyy[-MM[-dd]]"): a lower-case "t" or "z", an offset as "+hh" or
# "+hh:mm:ss", a fraction of up to 9 digits or none after the dot. Not
# accepted, as there: a time without a zone (whose?), "+hhmm", a space for
# "T", a comma for the dot, 24:00, a leap second, a day the month lacks.
_W3C = re.compile(
    r"(?P<year>\d{4})(?:-(?P<month>\d{2})(?:-(?P<day>\d{2})"
    r"(?:[Tt](?P<hour>\d{2}):(?P<minute>\d{2})"
    r"(?::(?P<second>\d{2})(?:\.(?P<fraction>\d{0,9}))?)?"
    r"(?P<zone>[Zz]|[+-]\d{2}(?::\d{2}(?::\d{2})?)?))?)?)?",
    re.ASCII,
)
#: java.time's range of offsets
_MAX_OFFSET = timedelta(hours=18)
#: a date without a time names a day somewhere on Earth: it ends up to 12 h
#: after it ends in UTC (UTC-12)
_ZONELESS_SLACK = timedelta(hours=12)
_LATEST = datetime.max.replace(tzinfo=timezone.utc)


def parse_lastmod(text: str) -> tuple[datetime, datetime] | None:
    """A ``<lastmod>`` value as ``(start, end)``, both aware UTC datetimes,
    or None when it is not one (the caller drops that lastmod only).

    *start* is the instant written (a date alone: its midnight UTC, as
    crawler-commons reads it); *end* is the first instant after everything
    the value can mean: ``2024-05-01`` can mean any time that day in any
    zone, ``…T10:00Z`` any second of that minute, ``…T10:00:00.5Z`` any
    time in that tenth of a second. A page changed by *end* at the latest,
    so only a fetch at or after *end* saw the change for sure: that is the
    comparison that never skips a changed page. Never raises.
    """
    text = text.strip()
    m = _W3C.fullmatch(text) if len(text) <= MAX_LASTMOD_CHARS else None
    if m is None:
        return None
    g = m.groupdict()
    try:
        zone = _zone(g["zone"]) if g["zone"] else timezone.utc
        if zone is None:
            return None
        fraction = g["fraction"] or ""
        local = datetime(
            int(g["year"]),
            int(g["month"] or 1),
            int(g["day"] or 1),
            int(g["hour"] or 0),
            int(g["minute"] or 0),
            int(g["second"] or 0),
            int((fraction + "000000")[:6]),
            tzinfo=zone,
        )
        start = local.astimezone(timezone.utc)
    except (ValueError, OverflowError):
        return None
    return start, _end(local, g)


def _zone(text: str) -> timezone | None:
    if text in ("Z", "z"):
        return timezone.utc
    parts = [int(p) for p in text[1:].split(":")] + [0, 0]
    hours, minutes, seconds = parts[:3]
    if minutes > 59 or seconds > 59:
        return None
    offset = timedelta(hours=hours, minutes=minutes, seconds=seconds)
    if offset > _MAX_OFFSET:
        return None
    return timezone(-offset if text[0] == "-" else offset)


def _end(local: datetime, g: dict[str, str | None]) -> datetime:
    """The first instant after the period *local* names (see parse_lastmod)."""
    try:
        if g["month"] is None:
            return (local.replace(year=local.year + 1) + _ZONELESS_SLACK).astimezone(timezone.utc)
        if g["day"] is None:
            year, month = divmod(local.month, 12)
            nxt = local.replace(year=local.year + year, month=month + 1)
            return (nxt + _ZONELESS_SLACK).astimezone(timezone.utc)
        if g["hour"] is None:
            return (local + timedelta(days=1) + _ZONELESS_SLACK).astimezone(timezone.utc)
        if g["second"] is None:
            step = timedelta(minutes=1)
        else:  # a second, or its last written digit of a fraction (down to 1 µs)
            digits = min(len(g["fraction"] or ""), 6)
            step = timedelta(microseconds=10 ** (6 - digits))
        return (local + step).astimezone(timezone.utc)
    except (ValueError, OverflowError):
        return _LATEST
