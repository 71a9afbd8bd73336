"""What sites say beyond allow/disallow: usage preferences, read for the
purposes the bot declares.

Four vocabularies, each read tolerantly (a value no parser can read states
nothing; no function raises on any input, ``tests/
test_pref_parsers.py`` fuzzes them):

* Content Signals (Cloudflare's Content Signals Policy): ``Content-Signal:
  search=yes, ai-input=no, ai-train=no`` in a robots.txt group, or as a
  response header; ``yes``/``no`` per signal, an absent signal states nothing;
* IETF AI Preferences (draft-ietf-aipref-vocab, draft-ietf-aipref-attach):
  ``Content-Usage: [path] train-ai=n`` in a robots.txt group (longest path
  match, only where crawling is allowed) or ``Content-Usage: train-ai=n`` as a
  response header, an RFC 9651 dictionary read with http-sf; ``y``/``n``;
  unknown labels ignored;
* W3C TDMRep: ``/.well-known/tdmrep.json`` (an array of ``{"location",
  "tdm-reservation", "tdm-policy"}`` rules, the first match wins) and the
  ``tdm-reservation`` / ``tdm-policy`` response headers, which override it;
* X-Robots-Tag as Google documents it, with values scoped to one bot
  (``walsh-research: noindex``), plus the informal ``noai`` / ``noimageai``.

Each statement becomes a :class:`Preference` (source, signal, value, scope,
the purposes it speaks about, and whether it allows them); :func:`decide`
finds one that says no to a declared purpose. This module holds the purposes,
that model, the decision and the path patterns the vocabularies share; TDMRep
is read in :mod:`~scrapy_walsh_research.core.preferences.tdmrep`, the others in
:mod:`~scrapy_walsh_research.core.preferences.statements`. No Scrapy import: the
gate that fetches and applies them is :mod:`scrapy_walsh_research.gates.preferences`.
"""

from __future__ import annotations

import string
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

# -- purposes ------------------------------------------------------------------------

TDM = "tdm"
AI_INPUT = "ai-input"
AI_TRAIN = "ai-train"
SEARCH = "search"
#: every purpose a project may name in WALSH_PURPOSES, with what it means
PURPOSES: dict[str, str] = {
    TDM: "text and data mining of metadata: feed entries, headings, links (what the bot does)",
    AI_INPUT: "content given to AI models as input: retrieval, grounding, AI answers",
    AI_TRAIN: "training or fine-tuning AI models",
    SEARCH: "building a search index and search results",
}
#: purposes the contract forbids (R6): declaring one is refused at start-up
FORBIDDEN_PURPOSES: dict[str, str] = {
    AI_TRAIN: "R6: a Walsh-Research bot MUST NOT train models on fetched content",
    SEARCH: "R6: a Walsh-Research bot MUST NOT index fetched content for search",
}
ALL_PURPOSES: tuple[str, ...] = tuple(PURPOSES)
#: what a TDM reservation covers: TDM as the DSM Directive (art. 2) defines it,
#: any automated analysis, which AI training and AI input are (the European
#: Commission's reading, cited by the TDMRep group); search is not (the TDMRep
#: group's own reading: search engines are not affected by a reservation)
TDM_PURPOSES: tuple[str, ...] = (TDM, AI_TRAIN, AI_INPUT)

# -- sources and the statement model ----------------------------------------------

#: where a statement was read (a preference's ``source``)
FROM_ROBOTS = "robots.txt"
FROM_TDMREP = "tdmrep.json"
FROM_HEADER = "response header"
RESPONSE_SCOPE = "this response"
#: statements kept per source and record, and characters per value: a
#: hostile server's thousand headers must not make a record of megabytes
MAX_STATEMENTS = 32
MAX_VALUE = 200


@dataclass(frozen=True)
class Preference:
    """One statement a site made about one signal, where it applies, and
    which of our purposes it speaks about (``allows``: True yes, False no,
    None: states nothing usable)."""

    source: str
    signal: str
    value: str
    scope: str
    purposes: tuple[str, ...] = ()
    allows: bool | None = None

    def as_record(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "signal": self.signal,
            "value": self.value,
            "scope": self.scope,
            "purposes": list(self.purposes),
            "allows": self.allows,
        }

    def denies(self, declared: Iterable[str]) -> tuple[str, ...]:
        """The declared purposes this statement says no to."""
        if self.allows is not False:
            return ()
        wanted = set(declared)
        return tuple(p for p in self.purposes if p in wanted)


def clip(text: str) -> str:
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"


def bounded(statements: Iterable[Preference], limit: int) -> list[Preference]:
    """At most *limit* statements, in order, without ever dropping one that
    decides: a statement that repeats what an earlier one said (the same
    signal, scope and answer, ``y`` or ``yes`` alike) goes first, then those
    that state nothing usable, beyond what fits. What a hostile answer makes
    us hold stays bounded, and a site's "no" after a run of other statements
    is still read (the vocabularies are small: the deciding statements that
    remain are far fewer than *limit*)."""
    statements = list(statements)
    seen: set[tuple[str, str, str, tuple[str, ...], bool]] = set()
    keep: list[bool] = []
    for p in statements:
        key = (p.source, p.signal, p.scope, p.purposes, p.allows) if p.allows is not None else None
        keep.append(key is not None and key not in seen)
        if key is not None:
            seen.add(key)
    room = max(0, limit - sum(keep))
    out: list[Preference] = []
    for p, deciding in zip(statements, keep, strict=True):
        if deciding:
            out.append(p)
        elif p.allows is None and room > 0:
            out.append(p)
            room -= 1
    return out


def distinct(values: Iterable[str]) -> list[str]:
    """A field's lines without repeats, at most MAX_STATEMENTS of them."""
    return list(dict.fromkeys(values))[:MAX_STATEMENTS]


def decide(preferences: Iterable[Preference], declared: Iterable[str]) -> Preference | None:
    """The first statement that says no to a declared purpose, or None.

    Statements combine as draft-ietf-aipref-vocab §5.1 combines them: any
    no wins, whatever else says yes. A statement about a purpose the bot has
    not declared never denies."""
    wanted = tuple(declared)
    for preference in preferences:
        if preference.denies(wanted):
            return preference
    return None


def denial_reason(preference: Preference, declared: Iterable[str]) -> str:
    """Why *preference* denies: its source, signal, value and scope, and the
    declared purposes it says no to."""
    hit = ", ".join(preference.denies(declared))
    return (
        f"{preference.source} says no to {hit} ({preference.signal} = {preference.value}; "
        f"{preference.scope}), a purpose the bot declares (WALSH_PURPOSES)"
    )


# -- path patterns (RFC 9309 §2.2.2), shared by Content-Usage and TDMRep ------------

_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
#: printable ASCII kept as written; everything else is percent-encoded
_KEEP = frozenset(chr(c) for c in range(0x21, 0x7F)) - set('"<>\\^`{|}%')
_HEX = frozenset(string.hexdigits)


def normalize_path(text: str) -> str:
    """*text* with RFC 9309's encoding: escapes of unreserved characters
    decoded, other escapes upper-cased, non-ASCII and unsafe octets encoded."""
    data = text.encode("utf-8", errors="replace")
    out: list[str] = []
    i = 0
    while i < len(data):
        byte = data[i]
        if byte == 0x25 and _is_hex(data[i + 1 : i + 3]):
            value = int(data[i + 1 : i + 3], 16)
            char = chr(value)
            out.append(char if char in _UNRESERVED else f"%{value:02X}")
            i += 3
            continue
        char = chr(byte)
        out.append(char if char in _KEEP else f"%{byte:02X}")
        i += 1
    return "".join(out)


def _is_hex(pair: bytes) -> bool:
    return len(pair) == 2 and all(chr(b) in _HEX for b in pair)


def url_path(url: str) -> str:
    """The path and query of *url*, as robots.txt rules match it."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "/"
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def match_target(path: str) -> str:
    """*path* encoded for matching: :func:`normalize_path`, and a literal
    ``$`` or ``*`` as its escape (a rule writes them so to match them)."""
    return normalize_path(path).replace("$", "%24").replace("*", "%2A")


@dataclass(frozen=True)
class Pattern:
    """An RFC 9309 path pattern (``*`` any run, a final ``$`` the end),
    encoded once: a robots.txt may hold thousands of them, each asked about
    every URL of its origin.

    Matched by hand: the rule is tiny, and a regular expression built from a
    hostile pattern (``*a*a*a...``) could backtrack for a very long time; this
    is a left-to-right scan, at most one pass over the path per ``*``."""

    text: str
    parts: tuple[str, ...]
    anchored: bool
    #: how specific it is: the encoded pattern's length
    length: int

    @classmethod
    def of(cls, pattern: str) -> Pattern:
        encoded = normalize_path(pattern)
        anchored = encoded.endswith("$")
        body = (encoded[:-1] if anchored else encoded).replace("$", "%24")
        return cls(pattern, tuple(body.split("*")), anchored, len(encoded))

    def match(self, target: str) -> int | None:
        """:attr:`length` when the pattern matches *target* (a
        :func:`match_target`), else None."""
        parts = self.parts
        if not target.startswith(parts[0]):
            return None
        position = len(parts[0])
        if len(parts) == 1:
            return self.length if not self.anchored or position == len(target) else None
        for index in range(1, len(parts)):
            part = parts[index]
            if self.anchored and index == len(parts) - 1:
                fits = target.endswith(part) and len(target) - len(part) >= position
                return self.length if fits else None
            found = target.find(part, position)
            if found < 0:
                return None
            position = found + len(part)
        return self.length


def match_length(pattern: str, path: str) -> int | None:
    """How specific *pattern* is when it matches *path*, else None."""
    return Pattern.of(pattern).match(match_target(path))
