"""W3C TDMRep: ``/.well-known/tdmrep.json`` and the ``tdm-reservation`` /
``tdm-policy`` response headers, read as :class:`Preference` statements.

The file is an array of ``{"location", "tdm-reservation", "tdm-policy"}``
rules, the first match wins; the headers override it for their response.
Read tolerantly: nothing here raises on any input. No Scrapy import: the
gate that fetches the file is :mod:`scrapy_walsh_research.gates.preferences`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scrapy_walsh_research.core.preferences.model import (
    FROM_HEADER,
    FROM_TDMREP,
    RESPONSE_SCOPE,
    TDM_PURPOSES,
    Pattern,
    Preference,
    clip,
    match_target,
    url_path,
)

# -- W3C TDMRep ---------------------------------------------------------------------

TDM_RESERVATION = "tdm-reservation"
TDM_POLICY = "tdm-policy"
#: rules read from one tdmrep.json; the rest are counted, not read
MAX_TDM_RULES = 1000


@dataclass(frozen=True)
class TdmRule:
    location: str
    #: True reserved (1), False not reserved (0), None a protocol error: unset
    reserved: bool | None
    policy: str | None = None

    @property
    def pattern(self) -> Pattern:
        return Pattern.of(self.location)


@dataclass(frozen=True)
class TdmFile:
    """A tdmrep.json as read: its rules in order, and what could not be read."""

    rules: tuple[TdmRule, ...]
    problems: str | None = None
    #: each rule's location, encoded once
    patterns: tuple[Pattern, ...] = ()

    def __post_init__(self) -> None:
        if len(self.patterns) != len(self.rules):
            object.__setattr__(self, "patterns", tuple(r.pattern for r in self.rules))


def _reservation(value: Any) -> bool | None:
    """TDMRep: 1 reserved, 0 not; a JSON ``true``/``false`` or the strings
    ``"1"``/``"0"`` read as meant; anything else is a protocol error (unset)."""
    if isinstance(value, bool):
        return value
    if (isinstance(value, int) and value in (0, 1)) or value in ("0", "1"):
        return int(value) == 1
    return None


def parse_tdmrep(body: bytes) -> TdmFile | None:
    """A tdmrep.json body: None when it is no TDMRep document (not JSON, or
    neither an array of rules nor one rule object: the origin "does not
    implement this protocol", TDMRep §3.1). One object without the array's
    brackets is read as a one-rule array (the spec warns they are often
    forgotten). Rules without a string ``location`` are skipped and noted."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):  # includes UnicodeDecodeError
        return None
    if isinstance(document, dict):
        document = [document]
    if not isinstance(document, list):
        return None
    rules: list[TdmRule] = []
    problems: list[str] = []
    for index, item in enumerate(document[:MAX_TDM_RULES]):
        if not isinstance(item, dict):
            problems.append(f"rule {index} is not an object")
            continue
        location = item.get("location")
        if not isinstance(location, str) or not location.strip():
            problems.append(f"rule {index} has no location")
            continue
        location = location.strip()
        if "://" in location:  # a full URL where a path belongs: its path
            location = url_path(location)
        reserved = _reservation(item.get(TDM_RESERVATION))
        if reserved is None:
            problems.append(f"rule {index}: tdm-reservation {item.get(TDM_RESERVATION)!r} unset")
        policy = item.get(TDM_POLICY)
        rules.append(
            # the whole location: a clipped one would match nothing (the
            # record's scope is clipped instead)
            TdmRule(location, reserved, clip(policy) if isinstance(policy, str) else None)
        )
    if len(document) > MAX_TDM_RULES:
        problems.append(f"{len(document) - MAX_TDM_RULES} rules past the first {MAX_TDM_RULES}")
    shown = "; ".join(problems[:5]) + (
        f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
    )
    return TdmFile(tuple(rules), shown or None)


def tdm_rule_for(tdm: TdmFile, url: str) -> TdmRule | None:
    """The rule for *url*: the first in sequence whose location matches
    (TDMRep: "the most specific match is the first in sequence"). A matching
    rule whose reservation is a protocol error is passed over, so a later
    match still decides (the stricter reading: an unreadable rule neither
    reserves nor lifts a reservation)."""
    target = match_target(url_path(url))
    for rule, pattern in zip(tdm.rules, tdm.patterns, strict=True):
        if rule.reserved is not None and pattern.match(target) is not None:
            return rule
    return None


def tdm_file_preferences(tdm: TdmFile, url: str) -> list[Preference]:
    """What the file says about *url* (nothing when no rule matches)."""
    rule = tdm_rule_for(tdm, url)
    if rule is None:
        return []
    scope = clip(f"location {rule.location}")
    value = "1" if rule.reserved else "0"
    out = [Preference(FROM_TDMREP, TDM_RESERVATION, value, scope, TDM_PURPOSES, not rule.reserved)]
    if rule.reserved and rule.policy:
        out.append(Preference(FROM_TDMREP, TDM_POLICY, rule.policy, scope))
    return out


def tdm_header_preferences(
    reservations: Sequence[str], policies: Sequence[str]
) -> list[Preference]:
    """The ``tdm-reservation`` / ``tdm-policy`` headers of one response. Values
    other than 1 and 0 are protocol errors (unset); repeated, conflicting
    headers reserve if any says 1 (the stricter reading)."""
    values = {part.strip() for value in reservations for part in value.split(",")}
    if "1" in values:
        out = [Preference(FROM_HEADER, TDM_RESERVATION, "1", RESPONSE_SCOPE, TDM_PURPOSES, False)]
        policy = next((p.strip() for p in policies if p.strip()), None)
        if policy:
            out.append(Preference(FROM_HEADER, TDM_POLICY, clip(policy), RESPONSE_SCOPE))
        return out
    if "0" in values:
        return [Preference(FROM_HEADER, TDM_RESERVATION, "0", RESPONSE_SCOPE, TDM_PURPOSES, True)]
    return []
