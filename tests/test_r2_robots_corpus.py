"""R2 over real robots.txt files (tests/data/robots_corpus, see its README):
the lines beyond Allow and Disallow change nothing but their own effect.

Each file's decision is checked for the paths its own rules name, made
concrete, and a few probes, for the product token:

* a file with no Visit-time, Request-rate, Comment or ACAP line is decided
  as Protego decides over the group RFC 9309 selects (Protego's own
  ``can_fetch`` on that group's lines, both spellings of a dot-segment URL
  asked, as the bundle always did), with the same Crawl-delay and no
  interval, window, comment or ACAP group;
* a file with such lines is decided as the same file with those lines
  removed, except where its selected ACAP-crawler group denies (read here
  from the file's own ACAP lines); each Visit-time, Request-rate and Comment
  line of the selected group is read as docs/operators.rst says.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from protego import Protego

from scrapy_walsh_research.core.robots_policy import (
    RobotsPolicy,
    _groups,
    _resolved,
    _split,
    product_token,
)

TOKEN = "Walsh-Research"
CORPUS = Path(__file__).parent / "data" / "robots_corpus"
MANIFEST: dict[str, dict[str, Any]] = json.loads((CORPUS / "manifest.json").read_text())
ORIGIN = "https://site.test"
PROBES = ("/", "/index.html", "/search?q=1", "/private/x", "/a/b/../c", "/robots.txt")
_SELF = "corpus-oracle"

#: the lines beyond Allow and Disallow, by the field that starts them
EXTENSION_FIELDS = {
    "visit-time": "visit-time",
    "visit time": "visit-time",
    "request-rate": "request-rate",
    "request rate": "request-rate",
    "comment": "comment",
}


def kind(line: str) -> str | None:
    """Which extension line *line* is (``acap`` for every ACAP- field)."""
    key = (_split(line.split("#", 1)[0].strip()) or ("",))[0]
    if key.startswith("acap-"):
        return "acap"
    return EXTENSION_FIELDS.get(key)


def text_of(name: str) -> str:
    return (CORPUS / name).read_bytes().decode("utf-8", errors="replace")


def carries(text: str) -> list[str]:
    return sorted({k for line in text.splitlines() if (k := kind(line))})


def stripped(text: str) -> str:
    """*text* without its extension lines (every other line as it was)."""
    return "\n".join(line for line in text.splitlines() if kind(line) is None) + "\n"


def selected_lines(text: str) -> list[str]:
    """The lines of the groups RFC 9309 selects for the token (exact
    product token, merged, else ``*``)."""
    groups = _groups(text.lstrip("\ufeff"))
    token = TOKEN.lower()
    chosen = [g for g in groups if token in g.tokens] or [g for g in groups if "*" in g.tokens]
    return [line for g in chosen for line in g.lines]


def values(lines: list[str], *fields: str) -> list[str]:
    return [v for k, v in (_split(line) or ("", "") for line in lines) if k in fields]


def protego_decides(lines: list[str]) -> Any:
    """Protego's own decision over *lines* as one group (no fast path)."""
    parser = Protego.parse(f"User-agent: {_SELF}\n" + "\n".join(lines) + "\n")

    def allows(url: str) -> bool:
        resolved = _resolved(url)
        return parser.can_fetch(url, _SELF) and parser.can_fetch(resolved, _SELF)

    return allows, parser


def acap_oracle(text: str) -> Any:
    """The file's ACAP-crawler groups, read here: consecutive ACAP-crawler
    lines name a group, its ACAP-allow/disallow-crawl lines follow; the
    groups naming the token, else ``*``; decided by Protego's longest match."""
    groups: list[tuple[list[str], list[str]]] = []
    in_names = False
    for line in text.splitlines():
        key, value = _split(line.split("#", 1)[0].strip()) or ("", "")
        if key == "acap-crawler":
            if not in_names:
                groups.append(([], []))
                in_names = True
            groups[-1][0].append(product_token(value) or "")
        elif key in ("acap-disallow-crawl", "acap-allow-crawl") and groups:
            in_names = False
            rule = "Disallow" if key == "acap-disallow-crawl" else "Allow"
            groups[-1][1].append(f"{rule}: {value}")
    token = TOKEN.lower()
    chosen = [g for g in groups if token in g[0]] or [g for g in groups if "*" in g[0]]
    rules = [r for g in chosen for r in g[1]]
    return protego_decides(rules)[0] if rules else (lambda url: True), rules


def concrete(pattern: str) -> str:
    """A path a rule's pattern matches: ``*`` as ``x``, no ``$``, rooted."""
    path = pattern.split("$", 1)[0].replace("*", "x").strip()
    return path if path.startswith("/") else "/" + path


def urls_for(text: str) -> list[str]:
    paths: dict[str, None] = dict.fromkeys(PROBES)
    for line in text.splitlines():
        parsed = _split(line.split("#", 1)[0].strip())
        if parsed and (parsed[0] in ("allow", "disallow") or parsed[0].startswith("acap-")):
            if parsed[0] != "acap-crawler" and parsed[1]:
                path = concrete(parsed[1])
                paths.update(dict.fromkeys((path, path + "x", path.rstrip("/") + "/deeper")))
    return [ORIGIN + p for p in paths]


def interval_of(value: str) -> float | None:
    """Seconds per request a Request-rate value states (``n/s``, ``n/Ns``,
    ``n/Nm``, ``n/Nh``, an optional window after it), read here."""
    m = re.fullmatch(r"(\d+)/(\d+)([smhd]?)(\s+\d{3,4}-\d{3,4})?", value.strip(), re.I)
    if not m or int(m.group(1)) == 0 or int(m.group(2)) == 0:
        return None
    unit = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(3).lower()]
    return int(m.group(2)) * unit / int(m.group(1))


def window_of(value: str) -> str | None:
    """A Visit-time value as HHMM-HHMM, read here; None when it is not one."""
    m = re.fullmatch(r"(\d\d)(\d\d)\s*[- ]\s*(\d\d)(\d\d)", value.strip())
    if not m or int(m.group(1)) > 23 or int(m.group(3)) > 23:
        return None
    if int(m.group(2)) > 59 or int(m.group(4)) > 59:
        return None
    return f"{m.group(1)}{m.group(2)}-{m.group(3)}{m.group(4)}"


PLAIN = sorted(n for n, e in MANIFEST.items() if not e["carries"])
EXTENDED = sorted(n for n, e in MANIFEST.items() if e["carries"])


def test_the_corpus_is_what_its_manifest_says():
    on_disk = {p.name for p in CORPUS.iterdir()} - {"manifest.json", "README.md"}
    assert on_disk == set(MANIFEST)
    for name, entry in MANIFEST.items():
        assert carries(text_of(name)) == entry["carries"], name
        assert re.fullmatch(r"[0-9a-f]{40}", entry["commit"]) and entry["repo"] and entry["path"]
    kinds = {k for e in MANIFEST.values() for k in e["carries"]}
    assert {"visit-time", "request-rate", "acap"} <= kinds
    assert PLAIN and EXTENDED


@pytest.mark.parametrize("name", PLAIN)
def test_a_file_without_extension_lines_is_decided_as_protego_decides_its_selected_group(name):
    text = text_of(name)
    policy = RobotsPolicy.parse(text, TOKEN)
    lines = selected_lines(text)
    allows, parser = protego_decides(lines)
    for url in urls_for(text):
        assert policy.allows(url) == (allows(url) if lines else True), (name, url)
    assert policy.crawl_delay == (parser.crawl_delay(_SELF) if lines else None), name
    assert policy.request_rate_interval is None, name
    assert (policy.visit_windows, policy.malformed_visit_times, policy.comments) == ((), (), ())
    assert policy.acap_group == "", name


@pytest.mark.parametrize("name", EXTENDED)
def test_extension_lines_change_no_other_decision_and_acap_only_adds_denials(name):
    text = text_of(name)
    policy = RobotsPolicy.parse(text, TOKEN)
    without = RobotsPolicy.parse(stripped(text), TOKEN)
    acap_allows, acap_rules = acap_oracle(text)
    for url in urls_for(text):
        assert policy.allows(url) == (without.allows(url) and acap_allows(url)), (name, url)
        if without.allows(url) and not acap_allows(url):
            assert "ACAP" in policy.denial_reason(url), (name, url)
    assert policy.group == without.group
    assert policy.crawl_delay == without.crawl_delay, name
    assert policy.sitemaps == without.sitemaps, name
    assert policy.acap_group == ("*" if acap_rules else ""), name


@pytest.mark.parametrize("name", [n for n in EXTENDED if "acap" in MANIFEST[n]["carries"]])
def test_every_acap_disallow_of_the_selected_acap_group_is_denied_unless_an_acap_allow_is_longer(
    name,
):
    text = text_of(name)
    policy = RobotsPolicy.parse(text, TOKEN)
    allows, rules = acap_oracle(text)
    assert rules, name  # the ACAP-crawler: * group selects the bot
    denied = [concrete(r.split(":", 1)[1]) for r in rules if r.startswith("Disallow")]
    for path in denied:
        url = ORIGIN + path
        assert not policy.allows(url) or allows(url), (name, url)
    assert any(not policy.allows(ORIGIN + p) for p in denied), name


@pytest.mark.parametrize("name", EXTENDED)
def test_each_visit_time_request_rate_and_comment_line_of_the_selected_group_is_read(name):
    text = text_of(name)
    policy = RobotsPolicy.parse(text, TOKEN)
    lines = selected_lines(text)
    visit = values(lines, "visit-time", "visit time")
    expected = [w for w in dict.fromkeys(window_of(v) for v in visit) if w]
    assert [str(w) for w in policy.visit_windows] == expected, name
    assert list(policy.malformed_visit_times) == [v for v in visit if window_of(v) is None]
    rates = [i for i in map(interval_of, values(lines, "request-rate", "request rate")) if i]
    assert policy.request_rate_interval == (max(rates) if rates else None), name
    assert list(policy.comments) == [v for v in values(lines, "comment") if v], name
