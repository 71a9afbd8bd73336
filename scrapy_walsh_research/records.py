"""The output record: exactly one per list line, metadata only (R6).

The body is hashed and measured, never kept.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy.http import Response

OUTCOMES = ("fetched", "not_modified", "denied", "failed", "duplicate", "skipped", "invalid")
RULES = ("R2", "R3", "R4", "R5", "R6", "R8")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_record(
    *, line: int, url: str, canonical_url: str | None, outcome: str, **extra: Any
) -> dict[str, Any]:
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}")
    rule = extra.pop("rule", None)
    if rule is not None and rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}")
    record: dict[str, Any] = {
        "url": url,
        "line": line,
        "canonical_url": canonical_url,
        "outcome": outcome,
        "rule": rule,
        "reason": None,
        "status": None,
        "final_url": None,
        "content_type": None,
        "content_length": None,
        "sha256": None,
        "etag": None,
        "last_modified": None,
        "fetched_at": None,
    }
    record.update(extra)
    return record


def response_metadata(response: Response) -> dict[str, Any]:
    """HTTP metadata of a response; the body only as its length and digest."""
    headers = response.headers

    def header(name: bytes) -> str | None:
        value = headers.get(name)
        return value.decode("latin-1") if value is not None else None

    body = response.body
    return {
        "status": response.status,
        "final_url": response.url,
        "content_type": header(b"Content-Type"),
        "content_length": len(body),
        "sha256": hashlib.sha256(body).hexdigest(),
        "etag": header(b"ETag"),
        "last_modified": header(b"Last-Modified"),
        "fetched_at": now_iso(),
    }
