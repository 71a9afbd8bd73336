"""Wall-clock times as the records, the audit log and messages write them."""

from __future__ import annotations

from datetime import datetime, timezone


def utc_iso(t: float | None = None, timespec: str = "seconds") -> str:
    """*t* (seconds since the epoch; now when None) in ISO 8601, UTC:
    ``2026-11-01T12:00:00+00:00`` (*timespec* as :meth:`datetime.isoformat`)."""
    when = datetime.now(timezone.utc) if t is None else datetime.fromtimestamp(t, timezone.utc)
    return when.isoformat(timespec=timespec)
