"""The statements sites make in Content Signals, IETF AI Preferences
(``Content-Usage``) and X-Robots-Tag, in a robots.txt group or a response's
headers, read as :class:`Preference` statements.

Read tolerantly: a value no parser can read states nothing, and nothing
here raises on any input. No Scrapy import.
"""

from __future__ import annotations

import datetime
import email.utils
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import http_sf

from scrapy_walsh_research.core.preferences.model import (
    AI_INPUT,
    AI_TRAIN,
    ALL_PURPOSES,
    FROM_HEADER,
    FROM_ROBOTS,
    MAX_STATEMENTS,
    RESPONSE_SCOPE,
    SEARCH,
    Pattern,
    Preference,
    bounded,
    clip,
    distinct,
    match_target,
    url_path,
)
from scrapy_walsh_research.core.preferences.tdmrep import (
    TDM_POLICY,
    TDM_RESERVATION,
    tdm_header_preferences,
)

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
            Preference(source, f"{CONTENT_SIGNAL}: {key}", clip(value), scope, purposes, allows)
        )
    return bounded(out, MAX_STATEMENTS)


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
        return [Preference(source, CONTENT_USAGE, clip(note), scope)]
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
            Preference(source, f"{CONTENT_USAGE}: {key}", clip(stated), scope, purposes, allows)
        )
    return bounded(out, MAX_STATEMENTS)


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
    scope = clip(f"group User-agent: {group}; {where}")
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
    return bounded(out, 2 * MAX_STATEMENTS)


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
                    FROM_HEADER, X_ROBOTS_TAG, clip(stated), scope, purposes,
                    False if purposes else None,
                )
            )  # fmt: skip
    return bounded(out, MAX_STATEMENTS)


# -- one response's headers ------------------------------------------------------------


def response_preferences(
    headers: Mapping[str, Sequence[str]], token: str, now: float
) -> list[Preference]:
    """Every statement the headers of one response make (names any case)."""
    lower: dict[str, list[str]] = {}
    for name, values in headers.items():
        lower.setdefault(name.lower(), []).extend(values)
    out = tdm_header_preferences(lower.get(TDM_RESERVATION, []), lower.get(TDM_POLICY, []))
    for value in distinct(lower.get("content-usage", [])):
        out += content_usage(value, source=FROM_HEADER, scope=RESPONSE_SCOPE)
    for value in distinct(lower.get("content-signal", [])):
        out += content_signal(value, source=FROM_HEADER, scope=RESPONSE_SCOPE)
    out += x_robots_tag(distinct(lower.get("x-robots-tag", [])), token, now)
    return bounded(out, 4 * MAX_STATEMENTS)
