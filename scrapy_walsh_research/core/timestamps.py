"""Wall-clock times as the records, the audit log and messages write them."""

from __future__ import annotations

from datetime import datetime, timezone


def utc_iso(t: float | None = None, timespec: str = "seconds") -> str:
    """*t* (seconds since the epoch; now when None) in ISO 8601, UTC:
    ``2026-11-01T12:00:00+00:00`` (*timespec* as :meth:`datetime.isoformat`)."""
    when = datetime.now(timezone.utc) if t is None else datetime.fromtimestamp(t, timezone.utc)
    return when.isoformat(timespec=timespec)


def parse_utc_iso(text: object) -> float | None:
    """A time :func:`utc_iso` wrote (seconds since the epoch), or None for
    anything else."""
    if not isinstance(text, str):
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def duration_text(seconds: float) -> str:
    """*seconds* as a person reads a wait: ``45 s``, ``6 min 5 s``, ``2 h 3 min``."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s" if whole % 60 else f"{whole // 60} min"
    return f"{whole // 3600} h {whole % 3600 // 60} min"
