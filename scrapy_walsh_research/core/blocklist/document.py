"""A blocklist document: read as JSON, checked against the contract.

A document is adopted only when the whole of it is good: RFC 8259 JSON (one
verdict whichever reader reads it), the contract's outline, the bundled
schema with formats checked (and the published one, when it differs: it can
only add constraints), and a ``refresh`` that is an ISO 8601 duration
(clamped to a range). Anything else raises :class:`BlocklistError` and the
list in force stays.
"""

from __future__ import annotations

import io
import json
import math
from typing import Any

import isodate  # type: ignore[import-untyped]
from jsonschema import exceptions as jsonschema_exceptions  # type: ignore[import-untyped]
from jsonschema.validators import validator_for  # type: ignore[import-untyped]

#: a document up to this size is read inline; a larger one off the reactor
INLINE_PARSE_BYTES = 256 * 1024
UTF8_BOM = b"\xef\xbb\xbf"
#: the contract's example value, for a document without ``refresh``
DEFAULT_REFRESH = 6 * 3600.0
#: Formats the published schema uses; without a checker for each, "validate
#: with formats checked" would silently pass anything.
REQUIRED_FORMATS = frozenset({"date-time", "date", "email", "uri"})
#: what the bundled schema asks of each ``blocked`` entry; checked by
#: tests/test_r3_large_blocklist.py, so that a change to the contract's
#: schema makes :func:`_one_entry_per_shape` be looked at again
ENTRY_SCHEMA_FIELDS = {"type", "required", "properties"}


class BlocklistError(Exception):
    """Why a fetched (or stored) document was not adopted."""


class UncheckableFormats(Exception):
    """jsonschema has no checker for a format the contract uses."""


# -- JSON ---------------------------------------------------------------------


def _not_json(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number out of range: {text[:40]}")
    return value


def strict_json(data: bytes) -> Any:
    """*data* as RFC 8259 JSON with ``json.loads``, read as ijson reads it
    (:func:`load_json`), so one document gets one verdict whichever path
    reads it: NaN, Infinity and numbers out of range are refused, a leading
    UTF-8 byte order mark is ignored (RFC 8259 §8.1 allows it; an operator's
    list saved with one is still adopted)."""
    try:
        return json.loads(
            data.removeprefix(UTF8_BOM), parse_constant=_not_json, parse_float=_finite
        )
    except (ValueError, RecursionError) as exc:
        raise BlocklistError(f"not JSON ({str(exc)[:200]})") from None


def load_json(data: bytes) -> Any:
    """*data* as JSON. A large document is read with ijson through a Python
    reader: ``json.loads`` of a 10^6-entry list is one C call that holds the
    GIL for ~1.5 s (a reactor stall even from a thread); ijson returns to
    Python every 16 KiB, so the reactor thread keeps running."""
    if len(data) <= INLINE_PARSE_BYTES:
        return strict_json(data)
    import ijson  # only for a large document

    data = data.removeprefix(UTF8_BOM)

    class Reader:
        def __init__(self) -> None:
            self.buffer = io.BytesIO(data)

        def read(self, n: int) -> bytes:
            return self.buffer.read(n)

    try:
        values = ijson.items(Reader(), "", use_float=True, buf_size=16384)
        document = next(values)
        for _ in values:  # a second value after the first: not one JSON document
            raise BlocklistError("not JSON (more than one value)")
    except (ijson.JSONError, StopIteration, ValueError, RecursionError) as exc:
        raise BlocklistError(f"not JSON ({str(exc).strip()[:200]})") from None
    return document


# -- the contract -------------------------------------------------------------


def check_shape(document: Any, contract_name: str) -> None:
    """The contract's outline, before the schema: an object naming the
    contract (*contract_name*, e.g. ``walsh-research-blocklist/v1``), with a
    ``blocked`` array."""
    if (
        not isinstance(document, dict)
        or document.get("contract") != contract_name
        or not isinstance(document.get("blocked"), list)
    ):
        raise BlocklistError(
            f"schema-invalid: not a {contract_name} document "
            "(an object with that 'contract' and a 'blocked' array)"
        )


def schema_validator(schema: Any) -> Any:
    """A validator for *schema* with every format the contract uses checked;
    :class:`UncheckableFormats` when jsonschema cannot check one of them."""
    cls = validator_for(schema)
    cls.check_schema(schema)
    missing = REQUIRED_FORMATS - set(cls.FORMAT_CHECKER.checkers)
    if missing:
        raise UncheckableFormats(
            f"jsonschema cannot check the formats {sorted(missing)}: it checks date-time "
            "with rfc3339-validator and uri with rfc3986-validator; install "
            "scrapy-walsh-research's dependencies so blocklist documents are validated in full."
        )
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _one_entry_per_shape(document: Any) -> Any | None:
    """*document* with one ``blocked`` entry for each shape, or None when it
    has too few entries to be worth it.

    The bundled schema constrains an entry only by its type, which keys it
    has, the type of each, and the format of ``added``: two entries with the
    same keys, value types and ``added`` value pass or fail it alike. So
    jsonschema checks one entry per shape (a 10^6-entry list has a few
    hundred) instead of every one (~26 us each: 26 s per list). Only for the
    bundled schema; a published schema that differs checks every entry."""
    blocked = document.get("blocked") if isinstance(document, dict) else None
    if not isinstance(blocked, list) or len(blocked) < 1000:
        return None
    seen: dict[Any, Any] = {}
    for entry in blocked:
        if isinstance(entry, dict):
            shape: Any = tuple(
                sorted(
                    (k, type(v), v if k == "added" and isinstance(v, str) else None)
                    for k, v in entry.items()
                )
            )
        else:
            shape = (type(entry), entry if isinstance(entry, (str, int, float, bool)) else None)
        if shape not in seen:
            seen[shape] = entry
    return {**document, "blocked": list(seen.values())}


def validate(document: Any, contract: Any, published: Any, schema_url: str) -> str | None:
    """Check *document* against the bundled schema (*contract*) and the
    fetched one (*published*, or None): :class:`BlocklistError` when it
    fails either. Returns why *published* cannot be applied, if it cannot
    (it then adds nothing)."""
    reduced = _one_entry_per_shape(document)
    if reduced is not None and not any(True for _ in contract.iter_errors(reduced)):
        error = None  # every entry is valid: each is shaped like one that passed
    else:
        error = jsonschema_exceptions.best_match(contract.iter_errors(document))
    if error is not None:
        raise BlocklistError(f"schema-invalid at {_where(error)}: {error.message}")
    if published is None:
        return None
    try:
        error = jsonschema_exceptions.best_match(published.iter_errors(document))
    except Exception as exc:  # an unusable fetched schema adds nothing
        return str(exc)
    if error is not None:
        raise BlocklistError(
            f"schema-invalid (per {schema_url}) at {_where(error)}: {error.message}"
        )
    return None


def _where(error: Any) -> str:
    return "/".join(str(p) for p in error.absolute_path) or "(document)"


def refresh_seconds(value: Any, low: float, high: float) -> tuple[float, str | None]:
    """The contract's ``refresh`` (ISO 8601 duration) in seconds, clamped to
    [*low*, *high*]; returns (seconds, why it was clamped or None).

    Raises :class:`BlocklistError` when it is not a duration at all: the
    document is then rejected as a whole. Months and years (``P1M``) count as
    their mean length: isodate gives them no ``total_seconds`` of their own,
    and the clamp makes exactness moot.
    """
    seconds: float
    if value is None:
        seconds = DEFAULT_REFRESH
    else:
        try:
            duration = isodate.parse_duration(str(value))
        except OverflowError:
            return high, f"refresh {value!r} is longer than any representable time"
        except (isodate.ISO8601Error, ValueError, TypeError) as exc:
            raise BlocklistError(f"refresh {value!r} is not an ISO 8601 duration ({exc})") from None
        if isinstance(duration, isodate.Duration):
            seconds = (
                float(duration.years) * 365.2425 * 86400
                + float(duration.months) * 30.436875 * 86400
                + duration.tdelta.total_seconds()
            )
        else:
            seconds = duration.total_seconds()
    if not seconds >= low:  # also NaN
        return low, f"refresh {value!r} is shorter than WALSH_BLOCKLIST_MIN_REFRESH ({low:g} s)"
    if seconds > high:
        return high, f"refresh {value!r} is longer than WALSH_BLOCKLIST_MAX_REFRESH ({high:g} s)"
    return seconds, None
