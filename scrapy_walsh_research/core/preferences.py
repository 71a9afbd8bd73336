"""What sites say beyond allow/disallow: usage preferences, read for the
purposes the bot declares.

Four vocabularies, each read tolerantly (a value no parser can read states
nothing; no function here raises on any input, ``tests/
test_preferences_parsers.py`` fuzzes them):

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
finds one that says no to a declared purpose. No Scrapy import: the gate
that fetches and applies them is :mod:`scrapy_walsh_research.usage`.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import http_sf

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


def _clip(text: str) -> str:
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"


def _bounded(statements: Iterable[Preference], limit: int) -> list[Preference]:
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


def _distinct(values: Iterable[str]) -> list[str]:
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


# -- Content Signals --------------------------------------------------------------

CONTENT_SIGNAL = "Content-Signal"
#: Cloudflare's three signals and the purpose each speaks about
CONTENT_SIGNAL_PURPOSES: dict[str, tuple[str, ...]] = {
    "search": (SEARCH,),
    "ai-input": (AI_INPUT,),
    "ai-train": (AI_TRAIN,),
}
_KEY = re.compile(r"[a-z0-9][a-z0-9_.-]{0,39}")
_YES = frozenset({"yes", "y"})
_NO = frozenset({"no", "n"})


def content_signal(text: str, *, source: str, scope: str) -> list[Preference]:
    """The signals of one ``Content-Signal`` value: ``key=value`` pairs split
    by commas. Keys are read case-insensitively, ``yes``/``no`` (also ``y``/
    ``n``) likewise; other keys (``use=reference``) are kept as stated but
    speak about no purpose; pairs that are not ``key=value`` are skipped."""
    out: list[Preference] = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        value = value.strip().strip("\"'").lower()
        if not sep or not _KEY.fullmatch(key) or not value:
            continue
        purposes = CONTENT_SIGNAL_PURPOSES.get(key, ())
        allows = (True if value in _YES else False if value in _NO else None) if purposes else None
        out.append(
            Preference(source, f"{CONTENT_SIGNAL}: {key}", _clip(value), scope, purposes, allows)
        )
    return _bounded(out, MAX_STATEMENTS)


# -- IETF AI Preferences ----------------------------------------------------------

CONTENT_USAGE = "Content-Usage"
#: draft-ietf-aipref-vocab's labels (case-sensitive) and our purposes
CONTENT_USAGE_PURPOSES: dict[str, tuple[str, ...]] = {
    "train-ai": (AI_TRAIN,),
    "search": (SEARCH,),
}
#: labels of the 2025 drafts, still in deployed files; honoured (the stricter
#: reading: the current draft would ignore them). ``tdm``, ``all`` and
#: ``bots`` were the root category, "automated processing", covering every use.
EARLIER_LABELS: dict[str, tuple[str, ...]] = {
    "tdm": ALL_PURPOSES,
    "all": ALL_PURPOSES,
    "bots": ALL_PURPOSES,
    "ai": (AI_TRAIN,),
    "genai": (AI_TRAIN,),
    "train-genai": (AI_TRAIN,),
    "inference": (AI_INPUT,),
    "ai-use": (AI_INPUT,),
    "ai-output": (AI_INPUT,),
}


def content_usage(value: str | bytes, *, source: str, scope: str) -> list[Preference]:
    """The preferences of one ``Content-Usage`` statement: an RFC 9651
    dictionary (http-sf), Token ``y``/``n`` per label; unknown labels and
    all parameters ignored; a value that is not a dictionary states nothing
    (kept, with ``allows`` None, so the record shows it was seen)."""
    data = value.encode("utf-8", errors="replace") if isinstance(value, str) else value
    text = data.decode("latin-1")
    try:
        parsed = http_sf.parse(data, tltype="dictionary")
    except Exception:  # RFC 9651 §4.2: a field that does not parse is ignored as a whole
        note = f"not an RFC 9651 dictionary: {text}"
        return [Preference(source, CONTENT_USAGE, _clip(note), scope)]
    if not isinstance(parsed, dict):
        return []
    out: list[Preference] = []
    for key, member in parsed.items():
        purposes = CONTENT_USAGE_PURPOSES.get(key) or EARLIER_LABELS.get(key)
        if purposes is None:
            continue  # vocab §6.4: unknown labels MUST be ignored
        item = member[0] if isinstance(member, tuple) else member
        token = str(item) if isinstance(item, http_sf.Token) else None
        allows = True if token == "y" else False if token == "n" else None
        stated = token if token is not None else f"{item!r} (not a y/n token)"
        out.append(
            Preference(source, f"{CONTENT_USAGE}: {key}", _clip(stated), scope, purposes, allows)
        )
    return _bounded(out, MAX_STATEMENTS)


# -- robots.txt: Content-Usage and Content-Signal lines of the selected group ------

#: robots.txt fields that state usage preferences, and their readers
ROBOTS_FIELDS = ("content-usage", "content-signal")


@dataclass(frozen=True)
class RobotsStatement:
    """One ``Content-Usage`` or ``Content-Signal`` line of the group
    selected for our token: its optional path, and what it states, read once
    (a hostile 400 KB line takes 0.16 s to read: never per URL)."""

    field: str
    path: str
    pattern: Pattern | None
    preferences: tuple[Preference, ...]


def robots_statement(field: str, value: str, group: str) -> RobotsStatement:
    """Read one line of the group for *group* (its label): a value that
    starts with ``/`` begins with a path, which ends at the first space or
    tab; otherwise the whole value is the statement, for all paths
    (draft-ietf-aipref-attach §3.2)."""
    value = value.strip()
    path, statement = "", value
    if value.startswith("/"):
        path, _, rest = value.replace("\t", " ").partition(" ")
        statement = rest.strip()
    where = f"path {path}" if path else "all paths"
    scope = _clip(f"group User-agent: {group}; {where}")
    reader = content_usage if field == "content-usage" else content_signal
    stated = tuple(reader(statement, source=FROM_ROBOTS, scope=scope))
    return RobotsStatement(field, path, Pattern.of(path) if path else None, stated)


def robots_preferences(statements: Iterable[RobotsStatement], url: str) -> list[Preference]:
    """The statements that apply to *url*: per field, those whose path is
    the longest match (several lines with that path all apply, and any no
    wins). The caller asks only where robots.txt allows crawling: elsewhere
    no preference applies (draft-ietf-aipref-attach §3.1)."""
    target = match_target(url_path(url))
    out: list[Preference] = []
    for field in ROBOTS_FIELDS:
        best: list[RobotsStatement] = []
        best_length = -1
        for statement in statements:
            if statement.field != field:
                continue
            pattern = statement.pattern
            length = pattern.match(target) if pattern is not None else 0
            if length is None or length < best_length:
                continue
            if length > best_length:
                best, best_length = [], length
            best.append(statement)
        for statement in best:
            out += statement.preferences
    return _bounded(out, 2 * MAX_STATEMENTS)


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
            TdmRule(location, reserved, _clip(policy) if isinstance(policy, str) else None)
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
    scope = _clip(f"location {rule.location}")
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
            out.append(Preference(FROM_HEADER, TDM_POLICY, _clip(policy), RESPONSE_SCOPE))
        return out
    if "0" in values:
        return [Preference(FROM_HEADER, TDM_RESERVATION, "0", RESPONSE_SCOPE, TDM_PURPOSES, True)]
    return []


# -- X-Robots-Tag ---------------------------------------------------------------------

X_ROBOTS_TAG = "X-Robots-Tag"
#: directives that speak about our purposes (noai/noimageai are informal,
#: DeviantArt's, widely copied: no AI use of the page or its images)
X_ROBOTS_TAG_PURPOSES: dict[str, tuple[str, ...]] = {
    "noindex": (SEARCH,),
    "none": (SEARCH,),
    "noai": (AI_TRAIN, AI_INPUT),
    "noimageai": (AI_TRAIN, AI_INPUT),
}
#: directives with a value after a colon (Google's list)
_VALUED = frozenset({"max-snippet", "max-image-preview", "max-video-preview", "unavailable_after"})
#: every directive Google documents, and the informal ones: a name before a
#: colon that is none of these is a user agent
_DIRECTIVES = frozenset(
    {"all", "noindex", "nofollow", "none", "nosnippet", "indexifembedded", "notranslate",
     "noimageindex", "noarchive", "nocache", "noodp", "noydir", "noai", "noimageai", *_VALUED}
)  # fmt: skip
_AGENT = re.compile(r"[a-z_-]+")


def _when(text: str) -> datetime.datetime | None:
    """An ``unavailable_after`` date: RFC 822/850 or ISO 8601, UTC unless it says."""
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        try:
            when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when


def x_robots_tag(values: Sequence[str], token: str, now: float) -> list[Preference]:
    """The directives of X-Robots-Tag headers that apply to *token*: those
    for every bot, and those after ``<agent>:`` where the agent is our
    product token (case-insensitive; ``Walsh-Research/1.0`` counts). Within
    one header value, an ``agent:`` prefix holds for the directives after it
    (``bot: noindex, nofollow``), as Google reads it. ``unavailable_after``
    in the past reads as ``noindex``."""
    ours = token.lower()
    out: list[Preference] = []
    for value in values:
        agent: str | None = None
        for raw in value.split(","):
            item = raw.strip()
            head, sep, rest = item.partition(":")
            name = head.strip().lower()
            if sep and name not in _DIRECTIVES:
                m = _AGENT.match(name)
                agent = m.group(0) if m else name
                head, sep, rest = rest.strip().partition(":")
                name = head.strip().lower()
            if not name or name not in _DIRECTIVES or (agent is not None and agent != ours):
                continue
            argument = rest.strip() if sep else ""
            purposes = X_ROBOTS_TAG_PURPOSES.get(name, ())
            if name == "unavailable_after":
                when = _when(argument)
                if when is not None and when.timestamp() <= now:
                    purposes = (SEARCH,)
            stated = f"{name}: {argument}" if argument else name
            scope = f"{RESPONSE_SCOPE}; " + (f"for {agent}" if agent else "for every bot")
            out.append(
                Preference(
                    FROM_HEADER, X_ROBOTS_TAG, _clip(stated), scope, purposes,
                    False if purposes else None,
                )
            )  # fmt: skip
    return _bounded(out, MAX_STATEMENTS)


# -- one response's headers ------------------------------------------------------------


def response_preferences(
    headers: Mapping[str, Sequence[str]], token: str, now: float
) -> list[Preference]:
    """Every statement the headers of one response make (names any case)."""
    lower: dict[str, list[str]] = {}
    for name, values in headers.items():
        lower.setdefault(name.lower(), []).extend(values)
    out = tdm_header_preferences(lower.get(TDM_RESERVATION, []), lower.get(TDM_POLICY, []))
    for value in _distinct(lower.get("content-usage", [])):
        out += content_usage(value, source=FROM_HEADER, scope=RESPONSE_SCOPE)
    for value in _distinct(lower.get("content-signal", [])):
        out += content_signal(value, source=FROM_HEADER, scope=RESPONSE_SCOPE)
    out += x_robots_tag(_distinct(lower.get("x-robots-tag", [])), token, now)
    return _bounded(out, 4 * MAX_STATEMENTS)


def unknown_file_preference(why: str) -> Preference:
    """A tdmrep.json whose answer is unknown (unreachable, too large), read as
    a reservation of the whole origin until it can be read: the stricter
    reading, as RFC 9309 reads an unreachable robots.txt."""
    return Preference(
        FROM_TDMREP, TDM_RESERVATION, "unknown", _clip(f"whole origin: {why}"), TDM_PURPOSES, False
    )
