"""RFC 9309 group selection for one product token, with Protego matching paths.

Why not Protego alone: Protego picks a group by token-boundary *substring*
(``User-agent: Walsh`` claims ``Walsh-Research``; ``Walsh-Research/1.0``
does not match the bare token) and closes a group on any non-rule line.
RFC 9309 §2.2.1 asks for an exact, case-insensitive product-token match with
all matching groups merged, else the ``*`` groups, else no rules; and only
allow/disallow lines end a group. No library does that selection, so it is
written here, over raw lines; the selected group's own lines are then handed
to Protego's public API, which does the path matching (longest match,
wildcards, ``$``, percent-encoding), Crawl-delay and Request-rate.

The 1996 extension proposal's lines are read from the selected group too,
and where they and RFC 9309 differ the reading that protects the site wins:

* ``Visit-time``: every window the group states, each read by Protego
  (:mod:`scrapy_walsh_research.core.visit_time`); one Protego cannot read is
  kept apart, for the gate to name in a warning;
* ``Request-rate``: each line read by Protego on its own (Protego keeps the
  last one), the slowest wins, and a rate stated for a window holds at all
  times;
* ``Comment``: relayed to the operator as written (Protego drops the line);
* ACAP (the publishers' access protocol): ``ACAP-crawler`` groups, selected
  as user-agent groups are (exact token, else ``*``), whose
  ``ACAP-disallow-crawl``/``ACAP-allow-crawl`` paths are decided by longest
  match (Protego, over those lines alone) and *added* to the group's rules:
  a URL is fetched only when both allow it. Protego knows no ACAP line, so
  the groups are found here.
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlparse, urlsplit, urlunsplit

from protego import Protego

from scrapy_walsh_research.core.preferences.model import Preference
from scrapy_walsh_research.core.preferences.statements import (
    ROBOTS_FIELDS,
    RobotsStatement,
    robots_preferences,
    robots_statement,
)
from scrapy_walsh_research.core.request_rate import slowest_rate
from scrapy_walsh_research.core.urls import canonical_url, is_http_url
from scrapy_walsh_research.core.visit_time import VISIT_TIME_FIELDS, VisitWindow

#: RFC 9309 §2.5: parse at least 500 KiB; we parse exactly that much.
MAX_ROBOTS_BYTES = 500 * 1024

_UA_FIELDS = ("user-agent", "useragent", "user agent")
_RULE_FIELDS = frozenset(
    {"allow", "disallow", "dissallow", "dissalow", "disalow", "diasllow", "disallaw"}
)
#: Protego's spellings of the Sitemap line
_SITEMAP_FIELDS = frozenset({"sitemap", "sitemaps", "site-map"})
_SITE_WIDE_FIELDS = _SITEMAP_FIELDS | {"host"}
# The product token of a user-agent line: its leading run of RFC 9309
# identifier characters (so "Walsh-Research/1.0" reads as "Walsh-Research").
_TOKEN_RE = re.compile(r"[A-Za-z_-]+")
# Inside the synthetic single-group file handed to Protego.
_SELF = "walsh-research-selected-group"
#: Protego's spellings of the Request-rate line
_REQUEST_RATE_FIELDS = frozenset({"request-rate", "request rate"})
_COMMENT_FIELD = "comment"
#: the Comment lines relayed to the operator, and how much of each (a file
#: is the site's to write: 500 KiB of comments must not flood the log)
MAX_COMMENTS = 20
MAX_COMMENT_CHARS = 300
_ACAP_CRAWLER = "acap-crawler"
#: ACAP's crawl permissions, as the RFC 9309 rule each stands for
_ACAP_RULES = {"acap-disallow-crawl": "Disallow", "acap-allow-crawl": "Allow"}


def _split(line: str) -> tuple[str, str] | None:
    """Split a comment-stripped line into (lower-cased field, value)."""
    if ":" in line:
        key, value = line.split(":", 1)
        return key.strip().lower(), value.strip()
    lowered = line.lower()
    for ua in _UA_FIELDS:  # "User-agent Foo": accepted without the colon
        if lowered.startswith(ua + " ") or lowered.startswith(ua + "\t"):
            return ua, line[len(ua) :].strip()
    words = line.split(None, 1)
    if len(words) == 2 and words[0].lower() in _RULE_FIELDS:
        return words[0].lower(), words[1].strip()
    return None


def product_token(value: str) -> str | None:
    """``"*"`` for the global group, else the leading identifier run, lower-cased.

    ``*`` names the global group only alone or followed by whitespace
    (RFC 9309 §2.2.1; Google's parser, robots.cc ``HandleUserAgent``): a
    pattern such as ``*SomeBot*``, which sites write for one bot, starts with
    no identifier character, so it names no token at all. Read as ``*``, its
    ``Disallow: /`` closed whole sites to us.
    """
    value = value.strip()
    if value == "*" or (value.startswith("*") and value[1].isspace()):
        return "*"
    m = _TOKEN_RE.match(value)
    return m.group(0).lower() if m else None


@dataclass
class _Group:
    tokens: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def _grouped(
    lines: Iterable[tuple[str, str, str]], agents: Container[str], rules: Container[str]
) -> list[_Group]:
    """Groups as RFC 9309 §2.2 makes them, over ``(field, value, kept)``
    lines: consecutive *agents* lines name one group (each its product
    token), and the lines after them are its own (*kept* of each) until an
    agents line that follows one of its *rules* starts the next group. A
    line before any agents line belongs to no group."""
    groups: list[_Group] = []
    current: _Group | None = None
    seen_rule = False
    for key, value, kept in lines:
        if key in agents:
            if current is None or seen_rule:
                current = _Group()
                groups.append(current)
                seen_rule = False
            token = product_token(value)
            if token:
                current.tokens.append(token)
        elif current is not None:
            seen_rule = seen_rule or key in rules
            current.lines.append(kept)
    return groups


def _selected(groups: list[_Group], token: str) -> tuple[str, list[str]]:
    """The groups RFC 9309 §2.2.1 selects for *token* (lower-cased): those
    naming it exactly, merged (``"named"``), else the ``*`` groups (``"*"``),
    else none (``""``); and their lines, in file order."""
    named = [g for g in groups if token in g.tokens]
    chosen = named or [g for g in groups if "*" in g.tokens]
    label = "named" if named else "*" if chosen else ""
    return label, [line for g in chosen for line in g.lines]


def _groups(text: str) -> list[_Group]:
    """The user-agent groups of *text*: each keeps its lines as written
    (comments stripped) but the site-wide ones; only allow/disallow lines
    end a group."""

    def lines() -> Iterator[tuple[str, str, str]]:
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            parsed = _split(line) if line else None  # blank lines never end a group
            if parsed is not None and parsed[0] not in _SITE_WIDE_FIELDS:
                yield parsed[0], parsed[1], line

    return _grouped(lines(), _UA_FIELDS, _RULE_FIELDS)


def _acap_rules(text: str, token: str) -> tuple[str, list[str]]:
    """The ``ACAP-crawler`` group selected for *token* (``"named"``, ``"*"``,
    or ``""`` for none) and its crawl permissions as Allow/Disallow lines.

    Grouped and selected as user-agent groups are (:func:`_grouped`,
    :func:`_selected`), over the ``ACAP-crawler`` lines and the permissions
    alone: other ACAP lines, and user-agent lines, neither end nor start an
    ACAP group (the two are separate records); permissions before any
    ``ACAP-crawler`` line belong to no group and are not read."""

    def lines() -> Iterator[tuple[str, str, str]]:
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line.lower().startswith("acap-"):
                continue
            key, value = _split(line) or ("", "")
            if key == _ACAP_CRAWLER:
                yield key, value, ""
            elif key in _ACAP_RULES:
                yield key, value, f"{_ACAP_RULES[key]}: {value}"

    return _selected(_grouped(lines(), (_ACAP_CRAWLER,), _ACAP_RULES), token)


#: answers remembered per policy (one origin's robots.txt)
MEMO_SIZE = 4096


@dataclass(frozen=True)
class RobotsPolicy:
    """The rules that apply to one product token on one origin.

    ``group`` is ``"named"`` when groups naming the token were merged,
    ``"*"`` when the global groups apply, ``"none"`` when nothing applies,
    ``"allow-all"``/``"disallow-all"`` for the status-code outcomes of
    RFC 9309 §2.3.1.
    """

    group: str
    _parser: Protego | None = None
    reason: str = ""
    _memo: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)
    #: Protego's answers, found without trying every rule (see _Rules)
    _rules: _Rules | None = field(default=None, compare=False, repr=False)
    #: the selected group's Content-Usage and Content-Signal lines (usage
    #: preferences: chosen by the same selection as the rules, never another)
    stated: tuple[RobotsStatement, ...] = ()
    _stated_memo: dict[str, tuple[Preference, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )
    #: the file's ``Sitemap:`` values as written (site-wide lines, outside
    #: every group: the same whichever group was selected);
    #: :meth:`sitemap_urls` resolves them
    sitemaps: tuple[str, ...] = ()
    #: the selected group's Visit-time windows (UTC; a visit is inside all)
    visit_windows: tuple[VisitWindow, ...] = ()
    #: its Visit-time values that could not be read (ignored, and named)
    malformed_visit_times: tuple[str, ...] = ()
    #: its Comment lines, for the operator
    comments: tuple[str, ...] = ()
    #: the slowest of its Request-rate lines, as seconds per request
    _rate_interval: float | None = None
    #: the selected ACAP-crawler group (``"named"``, ``"*"``; ``""``: none)
    #: and its crawl permissions, read by Protego
    acap_group: str = ""
    _acap: Protego | None = field(default=None, compare=False, repr=False)

    @classmethod
    def parse(cls, text: str, token: str) -> RobotsPolicy:
        token = token.lower()
        group, lines = _selected(_groups(text.lstrip("\ufeff")), token)
        sitemaps = declared_sitemaps(text)
        acap_group, acap_lines = _acap_rules(text.lstrip("\ufeff"), token)
        acap: dict[str, Any] = {"acap_group": "", "_acap": None}
        if acap_lines:  # a record of its own: it applies with no group for us too
            acap_text = "\n".join([f"User-agent: {_SELF}", *acap_lines, ""])
            acap = {"acap_group": acap_group, "_acap": Protego.parse(acap_text)}
        if not group:
            return cls("none", sitemaps=sitemaps, **acap)
        label = token if group == "named" else "*"
        stated = tuple(
            robots_statement(key, value, label)
            for key, value in (_split(line) or ("", "") for line in lines)
            if key in ROBOTS_FIELDS
        )
        fields = [_split(line) or ("", "") for line in lines]
        windows, malformed = [], []
        # each distinct value read once (Protego per line: a file of 1,600
        # distinct lines takes 30 ms)
        for value in dict.fromkeys(v for k, v in fields if k in VISIT_TIME_FIELDS):
            window = VisitWindow.read(value)
            if window is None:
                malformed.append(_printable(value[:MAX_COMMENT_CHARS]))
            elif window not in windows:
                windows.append(window)
        extensions: dict[str, Any] = {
            "visit_windows": tuple(windows),
            "malformed_visit_times": tuple(malformed),
            "comments": tuple(
                _printable(v[:MAX_COMMENT_CHARS]) for k, v in fields if k == _COMMENT_FIELD and v
            )[:MAX_COMMENTS],
            "_rate_interval": slowest_rate(
                dict.fromkeys(v for k, v in fields if k in _REQUEST_RATE_FIELDS)
            ),
            **acap,
        }
        parser = Protego.parse(f"User-agent: {_SELF}\n" + "\n".join(lines) + "\n")
        rules = _Rules.of(parser)
        if rules is not None:
            # The rules are answered from *rules*; the parser kept is read for
            # Crawl-delay and Request-rate only. Without the 7000 rule objects
            # of a 500 KiB file, loading a policy parsed elsewhere costs ~3 ms
            # instead of a pass of the garbage collector over the whole crawl's
            # heap (0.1 s on the reactor per robots.txt, measured).
            rest = [line for line in lines if (_split(line) or ("",))[0] not in _RULE_FIELDS]
            parser = Protego.parse(f"User-agent: {_SELF}\n" + "\n".join(rest) + "\n")
        return cls(
            group, parser, _rules=rules, stated=stated, sitemaps=sitemaps,
            **extensions,
        )  # fmt: skip

    @classmethod
    def allow_all(cls, reason: str) -> RobotsPolicy:
        return cls("allow-all", None, reason)

    @classmethod
    def disallow_all(cls, reason: str) -> RobotsPolicy:
        return cls("disallow-all", None, reason)

    def allows(self, url: str) -> bool:
        if self.group == "disallow-all":
            return False
        if self._parser is None:
            return not self.acap_denies(url)  # no group for us: ACAP's alone
        # Remembered per URL: the frontier asks about each queued request
        # again and again, and a 500 KiB robots.txt (7000 rules) takes 1.6 ms
        # per answer (seconds of reactor time per pass over a long queue).
        memo = self._memo
        known = memo.get(url)
        if known is None:
            known = self._decide(url)
            if len(memo) >= MEMO_SIZE:
                memo.clear()
            memo[url] = known
        return known

    def preferences(self, url: str) -> tuple[Preference, ...]:
        """The usage preferences the selected group states for *url*: none
        where crawling is disallowed (draft-ietf-aipref-attach §3.1)."""
        if not self.stated or not self.allows(url):
            return ()
        known = self._stated_memo.get(url)
        if known is None:
            known = tuple(robots_preferences(self.stated, url))
            if len(self._stated_memo) >= MEMO_SIZE:
                self._stated_memo.clear()
            self._stated_memo[url] = known
        return known

    def _can_fetch(self, url: str) -> bool:
        assert self._parser is not None
        if self._rules is not None:
            return self._rules.can_fetch(url)
        return self._parser.can_fetch(url, _SELF)

    def _decide(self, url: str) -> bool:
        return self._decide_by(self._can_fetch, url) and not self.acap_denies(url)

    @staticmethod
    def _decide_by(can_fetch: Any, url: str) -> bool:
        if not can_fetch(url):
            return False
        # A server resolves dot segments (and %2e spellings of them) before
        # it serves a path: /open/../private/x is /private/x to it. Matching
        # only the raw path would let such a URL past a Disallow; both
        # spellings must be allowed (the stricter reading protects the site).
        resolved = _resolved(url)
        return resolved == url or bool(can_fetch(resolved))

    def acap_denies(self, url: str) -> bool:
        """Whether the selected ACAP-crawler group's permissions deny *url*."""
        acap = self._acap
        if acap is None:
            return False
        return not self._decide_by(lambda u: acap.can_fetch(u, _SELF), url)

    def denial_reason(self, url: str) -> str:
        """Why *url* is not allowed (the record's reason)."""
        if self.reason:
            return self.reason
        if self._parser is None or self._decide_by(self._can_fetch, url):
            return (
                f"robots.txt ACAP-disallow-crawl ({self.acap_group} ACAP-crawler group) "
                "disallows this path"
            )
        return f"robots.txt ({self.group} group) disallows this path"

    def sitemap_urls(self, robots_url: str) -> tuple[str, ...]:
        """The sitemaps this robots.txt declares, as absolute http(s) URLs
        (on any host: sitemaps.org lets a robots.txt name another host's):
        a relative value resolved against *robots_url*, as crawler-commons
        and Scrapy do; one URL spelt twice given once; anything else dropped."""
        out: dict[str, str] = {}
        for value in self.sitemaps:
            try:
                # a value with a scheme is taken as it is ("https://" is not
                # the robots.txt itself, as urljoin would make it)
                url = value if urlsplit(value).scheme else urljoin(robots_url, value)
            except ValueError:
                continue
            if is_http_url(url):
                out.setdefault(canonical_url(url), url)
        return tuple(out.values())

    @property
    def crawl_delay(self) -> float | None:
        """The selected group's Crawl-delay in seconds (non-standard, honoured per R4)."""
        return self._parser.crawl_delay(_SELF) if self._parser else None

    @property
    def request_rate_interval(self) -> float | None:
        """Seconds per request implied by the selected group's Request-rate:
        the slowest of its lines, at all times (a window is not read: the
        rate it states is kept outside it too, the stricter reading)."""
        return self._rate_interval


def _printable(text: str) -> str:
    """*text* (the site's, for the operator's log and report) with each
    character that is not printable (ESC, BEL, NUL) replaced by U+FFFD."""
    return "".join(c if c.isprintable() else "\ufffd" for c in text)


class _Rules:
    """Protego's ``can_fetch`` for the selected group, in O(distinct rule
    lengths) instead of O(rules).

    Protego tries the rules longest first (allow before disallow at equal
    length) and the first that matches decides; with ``Allow: /`` in a file
    every URL is tried against every rule: 2.5 ms per answer for a 500 KiB
    file of 7000 rules, and the frontier asks about each queued URL of a host
    when its robots.txt arrives (60 URLs: a 0.15 s reactor stall). The same
    answer: a plain rule (no ``*`` or ``$``) matches exactly when it is a
    prefix of the URL, so the longest matching plain rule is the longest
    prefix of the URL found among them (one dict lookup per distinct rule
    length); the others are tried in Protego's order until none could beat
    it. tests/test_r2_robots.py checks this against Protego itself. Built
    from Protego's internals (0.7); without them, Protego is asked."""

    def __init__(self, rule_set: Any) -> None:
        from protego._utils import _quote_path

        self._quote = _quote_path
        plain: dict[str, bool] = {}
        special = []
        for rule in rule_set._rules:  # in Protego's order
            pattern = rule.value
            allow = rule.field == "allow"
            if pattern._contains_asterisk or pattern._contains_dollar:
                special.append(((pattern.priority, allow), pattern))
            else:
                plain[pattern._pattern] = plain.get(pattern._pattern, False) or allow
        self._plain = plain
        self._lengths = sorted({len(p) for p in plain}, reverse=True)
        self._special = special

    @classmethod
    def of(cls, parser: Protego) -> _Rules | None:
        try:
            rule_set = parser._get_matching_rule_set(_SELF)
            if rule_set is None:
                return None
            return cls(rule_set)
        except (AttributeError, ImportError, TypeError):  # another Protego: ask it
            return None

    def can_fetch(self, url: str) -> bool:
        if "/robots.txt" in url and urlparse(url).path == "/robots.txt":
            return True  # as Protego: robots.txt itself is always allowed
        path = self._quote(url)
        best: tuple[int, bool] | None = None
        size = len(path)
        for length in self._lengths:
            if length <= size:
                allow = self._plain.get(path[:length])
                if allow is not None:
                    best = (length, allow)
                    break
        for key, pattern in self._special:
            if best is not None and key <= best:
                break  # in Protego's order: none left could win
            if pattern.match(path):
                best = key
                break
        return True if best is None else best[1]


def declared_sitemaps(text: str) -> tuple[str, ...]:
    """The values of *text*'s ``Sitemap:`` lines, in order, each once.

    Site-wide lines, read wherever they stand (RFC 9309 §2.2.4 leaves
    "other records" to the parser; sitemaps.org: "independent of the
    user-agent line"). Protego has them too (``Protego.sitemaps``), but only
    for a file it parsed whole; the policy keeps Protego's parse of the
    selected group alone, so the lines are read here, with the same
    spellings (``Sitemap``, ``Sitemaps``, ``Site-map``, with or without the
    colon).
    """
    out: dict[str, None] = {}
    for raw in text.lstrip("\ufeff").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, value = _split(line) or ("", "")
        if key not in _SITEMAP_FIELDS:
            words = line.split(None, 1)  # "Sitemap https://...": no colon after the field
            if len(words) < 2 or words[0].lower() not in _SITEMAP_FIELDS:
                continue
            value = words[1].strip()
        if value:
            out.setdefault(value, None)
    return tuple(out)


def decode_robots(body: bytes) -> tuple[str, bool]:
    """Decode at most :data:`MAX_ROBOTS_BYTES` of a robots.txt body.

    Returns the text and whether it was truncated. When truncated, the last,
    partial line is dropped: a cut ``Allow: /public-page`` would otherwise
    read as ``Allow: /`` and open the whole site.
    """
    for bom in (b"\xef\xbb\xbf", b"\xef\xbb", b"\xef"):  # a full or cut UTF-8 BOM
        if body.startswith(bom):
            body = body[len(bom) :]
            break
    truncated = len(body) > MAX_ROBOTS_BYTES
    if truncated:
        body = body[:MAX_ROBOTS_BYTES]
        cut = max(body.rfind(b"\n"), body.rfind(b"\r"))
        body = body[: cut + 1] if cut >= 0 else b""
    return body.decode("utf-8", errors="replace"), truncated


_DOT = re.compile(r"%2e", re.IGNORECASE)


def _resolved(url: str) -> str:
    """*url* with ``%2e`` decoded and dot segments removed (RFC 3986 §5.2.4),
    as a server would serve it; *url* itself when there is nothing to resolve."""
    parts = urlsplit(url)
    path = _DOT.sub(".", parts.path)
    if "." not in path:
        return url
    segments = path.split("/")
    if not any(s in (".", "..") for s in segments):
        return url
    out: list[str] = []
    for segment in segments[1:]:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    if segments[-1] in (".", ".."):
        out.append("")
    return urlunsplit(parts._replace(path="/" + "/".join(out)))
