"""The output record: exactly one per list line, metadata only (R6).

Its fields, outcomes and rules, and the fields a response gives it: the
body is hashed and measured, never kept. The targets spider builds each
record; a gate that withholds a response's content keeps only its status
and validators (:func:`response_validators`). The pipeline that commits
each record is :class:`scrapy_walsh_research.RecordPipeline`. No Scrapy
import: a response is read through the little of it a record needs
(:class:`Answered`).
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

from scrapy_walsh_research.core.timestamps import utc_iso


class _Headers(Protocol):
    def get(self, key: bytes) -> bytes | None: ...


class Answered(Protocol):
    """What a record reads of a response (a Scrapy ``Response`` is one)."""

    @property
    def status(self) -> int: ...

    @property
    def url(self) -> str: ...

    @property
    def body(self) -> bytes: ...

    @property
    def headers(self) -> _Headers: ...


#: key of a record's feed ticket on its way to the record pipeline (never exported)
TICKET_KEY = "_walsh_ticket"
OUTCOMES = (
    "fetched", "not_modified", "denied", "failed", "duplicate", "skipped", "invalid", "withheld"
)  # fmt: skip
RULES = ("R2", "R3", "R4", "R5", "R6", "R7", "R8", "PREF")
#: outcomes of a request that reached the target, or (``not_modified``, rule
#: R7, no request) of one a checked sitemap said was unchanged: its cadence is stamped
SENT_OUTCOMES = ("fetched", "not_modified", "withheld")


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
        "preferences": None,
    }
    record.update(extra)
    return record


def _header(response: Answered, name: bytes) -> str | None:
    value = response.headers.get(name)
    return value.decode("latin-1") if value is not None else None


def response_validators(response: Answered) -> dict[str, Any]:
    """Status and validators only: what a ``withheld`` record keeps."""
    return {
        "status": response.status,
        "final_url": response.url,
        "etag": _header(response, b"ETag"),
        "last_modified": _header(response, b"Last-Modified"),
        "fetched_at": utc_iso(),
    }


def response_metadata(response: Answered) -> dict[str, Any]:
    """HTTP metadata of a response; the body only as its length and digest."""
    body = response.body
    return {
        **response_validators(response),
        "content_type": _header(response, b"Content-Type"),
        "content_length": len(body),
        "sha256": hashlib.sha256(body).hexdigest(),
    }
