"""The usage-preference parsers (scrapy_walsh_research.core.preferences.model,
core.preferences.tdmrep, core.preferences.statements): the four vocabularies as spec tables,
and property-based tests showing no parser raises on any input a server can
send."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scrapy_walsh_research.core.preferences import model as P
from scrapy_walsh_research.core.preferences import statements as STMT
from scrapy_walsh_research.core.preferences import tdmrep as TDM
from scrapy_walsh_research.core.robots_policy import RobotsPolicy
from scrapy_walsh_research.settings import defaults
from scrapy_walsh_research.settings.options import purpose_problems

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOKEN = "Walsh-Research"
NOW = 1_900_000_000.0


def said(prefs: list[P.Preference]) -> dict[str, bool | None]:
    return {p.signal: p.allows for p in prefs}


# -- Content Signals ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            "search=yes, ai-input=no, ai-train=no",
            {"Content-Signal: search": True, "Content-Signal: ai-input": False,
             "Content-Signal: ai-train": False},
        ),
        ("ai-train=no,search=yes", {"Content-Signal: ai-train": False,
                                    "Content-Signal: search": True}),
        ("AI-Train = NO", {"Content-Signal: ai-train": False}),
        ("ai-train=maybe", {"Content-Signal: ai-train": None}),
        ("use=reference", {"Content-Signal: use": None}),
        ("ai-train", {}),
        ("", {}),
        ("=no, ai-input=", {}),
    ],
)  # fmt: skip
def test_content_signal_reads_yes_and_no_per_signal_and_nothing_else(value, expected):
    assert said(STMT.content_signal(value, source=P.FROM_HEADER, scope="x")) == expected


def test_content_signal_maps_each_signal_to_its_purpose():
    prefs = STMT.content_signal("search=no, ai-input=no, ai-train=no", source=P.FROM_HEADER, scope="x")
    assert {p.signal: p.purposes for p in prefs} == {
        "Content-Signal: search": ("search",),
        "Content-Signal: ai-input": ("ai-input",),
        "Content-Signal: ai-train": ("ai-train",),
    }


# -- IETF AI Preferences (draft-ietf-aipref-vocab §6) ---------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("train-ai=y, search=n", {"Content-Usage: train-ai": True, "Content-Usage: search": False}),
        # vocab §6.5.1: duplicated keys, the last wins; not a token: unknown
        ('train-ai=y, train-ai, search=n, search="n"',
         {"Content-Usage: train-ai": None, "Content-Usage: search": None}),
        # parameters are ignored; the last value applies
        ("train-ai;allow=n, train-ai=y", {"Content-Usage: train-ai": True}),
        ("train-ai=n;why=1", {"Content-Usage: train-ai": False}),
        # unknown labels are ignored
        ("foo=n, train-ai=n", {"Content-Usage: train-ai": False}),
        # upper case keys do not parse: the whole field states nothing
        ("Train-AI=n", {"Content-Usage": None}),
        ("train-ai=n,,", {"Content-Usage": None}),
        # the 2025 drafts' labels, honoured
        ("tdm=n", {"Content-Usage: tdm": False}),
        ("bots=n, train-genai=n", {"Content-Usage: bots": False,
                                   "Content-Usage: train-genai": False}),
    ],
)  # fmt: skip
def test_content_usage_is_an_rfc_9651_dictionary_of_y_n_tokens(value, expected):
    assert said(STMT.content_usage(value, source=P.FROM_HEADER, scope="x")) == expected


def test_an_earlier_drafts_root_label_covers_every_purpose():
    (pref,) = STMT.content_usage("all=n", source=P.FROM_HEADER, scope="x")
    assert set(pref.purposes) == set(P.PURPOSES) and pref.denies(["tdm"]) == ("tdm",)


# -- robots.txt: Content-Usage / Content-Signal of the selected group -----------------

ROBOTS = """User-agent: *
Content-Signal: search=yes, ai-train=no
Content-Usage: train-ai=n
Content-Usage: /docs/ tdm=n
Content-Usage: /docs/open/ tdm=y
Content-Usage: /twice train-ai=y
Content-Usage: /twice train-ai=n
Disallow: /private

User-agent: Other
Content-Usage: tdm=n
Content-Signal: ai-input=no
"""


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/a", {"Content-Usage: train-ai": False, "Content-Signal: search": True,
                "Content-Signal: ai-train": False}),
        ("/docs/x", {"Content-Usage: tdm": False, "Content-Signal: search": True,
                     "Content-Signal: ai-train": False}),
        # longest path wins
        ("/docs/open/x", {"Content-Usage: tdm": True, "Content-Signal: search": True,
                          "Content-Signal: ai-train": False}),
        # where crawling is disallowed, no preference applies
        ("/private/x", {}),
    ],
)  # fmt: skip
def test_robots_preferences_take_the_longest_path_of_the_selected_group_only(path, expected):
    policy = RobotsPolicy.parse(ROBOTS, TOKEN)
    assert said(list(policy.preferences(f"http://s.test{path}"))) == expected


def test_lines_with_the_same_longest_path_all_apply_and_a_no_wins():
    policy = RobotsPolicy.parse(ROBOTS, TOKEN)
    prefs = policy.preferences("http://s.test/twice")
    usage = [p for p in prefs if p.signal == "Content-Usage: train-ai"]
    assert [p.allows for p in usage] == [True, False]
    assert P.decide(prefs, ["ai-train"]) is not None


def test_a_preference_in_a_group_not_ours_does_not_apply():
    text = "User-agent: Other\nContent-Usage: tdm=n\nDisallow: /o\n\nUser-agent: *\nAllow: /\n"
    assert RobotsPolicy.parse(text, TOKEN).preferences("http://s.test/x") == ()
    named = (
        "User-agent: *\nContent-Usage: tdm=n\nAllow: /\n\nUser-agent: Walsh-Research\nAllow: /\n"
    )
    assert RobotsPolicy.parse(named, TOKEN).preferences("http://s.test/x") == ()


def test_a_content_usage_line_does_not_end_a_group_so_the_next_agents_share_it():
    """RFC 9309 (and Google's parser) end a group's agent lines only at
    Allow/Disallow; R2's selection is not changed for preferences, so here
    Other and * are one group and its preference is ours too (the stricter
    reading; docs/preferences.rst)."""
    text = "User-agent: Other\nContent-Usage: tdm=n\n\nUser-agent: *\nAllow: /\n"
    (pref,) = RobotsPolicy.parse(text, TOKEN).preferences("http://s.test/x")
    assert pref.allows is False


def test_a_named_group_states_preferences_for_us():
    text = "User-agent: *\nAllow: /\n\nUser-agent: Walsh-Research\nContent-Usage: tdm=n\n"
    (pref,) = RobotsPolicy.parse(text, TOKEN).preferences("http://s.test/x")
    assert pref.scope == "group User-agent: walsh-research; all paths" and pref.allows is False


def test_wildcards_and_the_end_anchor_match_as_in_rfc_9309():
    assert P.match_length("/a/*/c$", "/a/b/c") == 7
    assert P.match_length("/a/*/c$", "/a/b/cd") is None
    assert P.match_length("/*.pdf", "/x/y.pdf?z=1") == 6
    assert P.match_length("/a", "/ab") == 2  # a prefix match
    assert P.match_length("/%7Ea", "/~a") == 3  # unreserved escapes decoded
    assert P.match_length("/path/foo-%24", "/path/foo-$") is not None  # TDMRep §3.1.1


# -- TDMRep ------------------------------------------------------------------------------

SPEC_EXAMPLE = json.dumps(
    [
        {"location": "/directory-a/", "tdm-reservation": 1},
        {"location": "/directory-b/html/", "tdm-reservation": 1,
         "tdm-policy": "https://provider.com/policies/policy.json"},
        {"location": "/directory-b/images/*.jpg", "tdm-reservation": 0},
    ]
).encode()  # fmt: skip


@pytest.mark.parametrize(
    ("path", "reserved"),
    [
        ("/directory-a/report.pdf", True),
        ("/directory-b/html/page.html", True),
        ("/directory-b/images/cat.jpg", False),
        ("/elsewhere", None),
    ],
)
def test_the_tdmrep_spec_example_reads_as_the_spec_says(path, reserved):
    rule = TDM.tdm_rule_for(TDM.parse_tdmrep(SPEC_EXAMPLE), f"http://s.test{path}")
    assert (rule.reserved if rule else None) is reserved


def test_the_first_matching_tdmrep_rule_wins_and_an_unreadable_one_is_passed_over():
    body = json.dumps(
        [
            {"location": "/a/", "tdm-reservation": "maybe"},
            {"location": "/a/", "tdm-reservation": 1},
            {"location": "/", "tdm-reservation": 0},
        ]
    ).encode()
    tdm = TDM.parse_tdmrep(body)
    assert tdm.problems and "unset" in tdm.problems
    assert TDM.tdm_rule_for(tdm, "http://s.test/a/x").reserved is True
    assert TDM.tdm_rule_for(tdm, "http://s.test/b").reserved is False


@pytest.mark.parametrize(
    "body",
    [b"<html>not found</html>", b'"text"', b"42", b"null", b"[" * 100_000, b"\xff\xfe"],
)
def test_a_body_that_is_no_tdmrep_document_means_no_tdmrep_file(body):
    assert TDM.parse_tdmrep(body) is None


def test_one_rule_object_without_brackets_is_read_as_a_one_rule_file():
    tdm = TDM.parse_tdmrep(b'{"location": "/", "tdm-reservation": 1}')
    assert tdm is not None and tdm.rules[0].reserved is True


@pytest.mark.parametrize(
    ("reservations", "allows"),
    [(["1"], False), (["0"], True), (["0", "1"], False), (["1, 0"], False), (["yes"], None),
     ([], None)],
)  # fmt: skip
def test_tdm_headers_reserve_when_any_says_1(reservations, allows):
    prefs = TDM.tdm_header_preferences(reservations, ["https://p.test/policy"])
    assert (prefs[0].allows if prefs else None) is allows


# -- X-Robots-Tag -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["noindex"], [("noindex", ("search",))]),
        (["googlebot: noindex"], []),
        (["walsh-research: noai"], [("noai", ("ai-train", "ai-input"))]),
        (["Walsh-Research/1.0: noindex, nofollow"], [("noindex", ("search",)), ("nofollow", ())]),
        (["otherbot: noindex, walsh-research: noimageai"], [("noimageai", ("ai-train", "ai-input"))]),
        (["unavailable_after: 25 Jun 2010 15:00:00 PST"],
         [("unavailable_after: 25 Jun 2010 15:00:00 PST", ("search",))]),
        (["unavailable_after: 2999-01-01T00:00:00Z"], [("unavailable_after: 2999-01-01T00:00:00Z", ())]),
        (["max-snippet: 20"], [("max-snippet: 20", ())]),
        (["somethingelse"], []),
    ],
)  # fmt: skip
def test_x_robots_tag_applies_directives_for_every_bot_and_for_our_token(values, expected):
    prefs = STMT.x_robots_tag(values, TOKEN, NOW)
    assert [(p.value, p.purposes) for p in prefs] == expected


# -- purposes and the decision ------------------------------------------------------------


def test_a_preference_about_an_undeclared_purpose_never_denies():
    prefs = STMT.content_signal("ai-train=no, search=no", source=P.FROM_HEADER, scope="x")
    assert P.decide(prefs, defaults.WALSH_PURPOSES) is None
    denied = P.decide(prefs, ["tdm", "ai-train"])
    assert denied is not None and "ai-train" in P.denial_reason(denied, ["tdm", "ai-train"])


@pytest.mark.parametrize(
    ("purposes", "fragment"),
    [(["nonsense"], "not a purpose"), ([], "leaves out 'tdm'"), (["tdm", "search"], "R6"),
     (["tdm", "ai-train"], "R6"), (["ai-input"], "leaves out 'tdm'")],
)  # fmt: skip
def test_purposes_that_are_unknown_forbidden_or_without_tdm_are_problems(purposes, fragment):
    assert any(fragment in p for p in purpose_problems(purposes))


def test_the_default_and_tdm_with_ai_input_are_fine():
    assert purpose_problems(list(defaults.WALSH_PURPOSES)) == []
    assert purpose_problems(["tdm", "ai-input"]) == []


# -- property-based: no parser raises on any input ---------------------------------------

header_text = st.text(max_size=200) | st.sampled_from(
    ["search=yes, ai-train=no", "train-ai=n", "tdm=n;x", "walsh-research: noai", "1", "0"]
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=15), inner, max_size=4),
    max_leaves=20,
)  # fmt: skip
rule_like = st.fixed_dictionaries(
    {},
    optional={"location": json_values | st.text(alphabet="/ab*$%2é", max_size=10),
              "tdm-reservation": json_values | st.sampled_from([0, 1, "0", "1"]),
              "tdm-policy": json_values},
)  # fmt: skip
paths = st.text(alphabet="/ab.*$%2Fé?=#~ \t", max_size=20)


@FAST
@given(header_text, st.binary(max_size=200))
def test_no_content_signal_or_content_usage_value_raises(text, data):
    for prefs in (
        STMT.content_signal(text, source=P.FROM_HEADER, scope="x"),
        STMT.content_usage(text, source=P.FROM_HEADER, scope="x"),
        STMT.content_usage(data, source=P.FROM_HEADER, scope="x"),
    ):
        assert all(isinstance(p, P.Preference) for p in prefs)
        assert len(prefs) <= P.MAX_STATEMENTS + 1


@FAST
@given(st.binary(max_size=500) | st.lists(rule_like | json_values, max_size=8).map(
    lambda doc: json.dumps(doc).encode()), paths)  # fmt: skip
def test_no_tdmrep_body_raises(body, path):
    tdm = TDM.parse_tdmrep(body)
    if tdm is not None:
        for pref in TDM.tdm_file_preferences(tdm, "http://s.test/" + path):
            assert pref.source == P.FROM_TDMREP


@FAST
@given(st.lists(header_text, max_size=5), st.lists(header_text, max_size=3),
       st.floats(allow_nan=True, allow_infinity=True))  # fmt: skip
def test_no_response_headers_raise(values, policies, now):
    headers: dict[str, list[str]] = {
        "X-Robots-Tag": values, "tdm-reservation": values, "tdm-policy": policies,
        "Content-Usage": values, "content-signal": values,
    }  # fmt: skip
    prefs = STMT.response_preferences(headers, TOKEN, now)
    assert all(isinstance(p.as_record(), dict) for p in prefs)


LINES = st.one_of(
    st.sampled_from(["User-agent: *", "User-agent: Walsh-Research", "User-agent: *SomeBot*",
                     "Disallow: /p", "Allow: /", "Content-Usage: tdm=n",
                     "Content-Usage: /a train-ai=n", "Content-Signal: ai-train=no",
                     "Content-Signal: /b search=no", "Content-Usage:", "content-usage /x"]),
    st.text(max_size=40).map(lambda t: f"Content-Usage: {t}"),
    st.text(max_size=40).map(lambda t: f"Content-Signal: {t}"),
    st.text(max_size=40),
)  # fmt: skip


@FAST
@given(st.lists(LINES, max_size=20), paths)
def test_no_robots_txt_makes_the_preferences_raise(lines, path):
    policy = RobotsPolicy.parse("\n".join(lines), TOKEN)
    url = "http://s.test/" + path
    prefs = policy.preferences(url)
    assert all(p.source == P.FROM_ROBOTS for p in prefs)
    if not policy.allows(url):
        assert prefs == ()


def reference_match(pattern: str, path: str) -> bool:
    """RFC 9309 matching as a regular expression (small inputs only)."""
    anchored = pattern.endswith("$")
    body = pattern[:-1] if anchored else pattern
    regex = ".*".join(re.escape(part) for part in body.split("*"))
    return re.match(regex + ("$" if anchored else ""), path, re.S) is not None


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet="/ab*$", max_size=8), st.text(alphabet="/ab", max_size=8))
def test_pattern_matching_agrees_with_a_regular_expression_reference(pattern, path):
    assert (P.match_length(pattern, path) is not None) is reference_match(pattern, path)


@FAST
@given(st.text(max_size=100), st.text(max_size=100))
def test_no_pattern_or_path_raises(pattern, path):
    result: Any = P.match_length(pattern, path)
    assert result is None or result >= 0


def test_a_hostile_pattern_is_matched_in_linear_time():
    import time

    pattern = "/" + "*a" * 2000 + "$"
    started = time.perf_counter()
    assert P.match_length(pattern, "/" + "a" * 1999 + "b") is None
    assert time.perf_counter() - started < 0.5


def test_the_parsers_import_nothing_from_scrapy_or_twisted():
    """The parsers are pure (design.md): only the standard library and http-sf."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(P))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}  # fmt: skip
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not {m for m in imported if m.split(".")[0] in ("scrapy", "twisted")}, imported
    assert not {m for m in imported if m.startswith("scrapy_walsh_research")}, imported


def test_a_no_after_many_other_statements_is_still_read():
    """The bound on what one answer makes us hold never cuts off a site's
    no: repeats collapse, and what states nothing usable goes first."""
    declared = ("tdm",)
    many_keys = ",".join(f"k{i}=1" for i in range(100)) + ",ai-input=no"
    signals = STMT.content_signal(many_keys, source=P.FROM_HEADER, scope="x")
    assert len(signals) <= P.MAX_STATEMENTS
    assert P.decide(signals, ("ai-input",)) is not None
    headers = {"Content-Usage": ["train-ai=y"] * 16 + ["tdm=n"]}
    assert P.decide(STMT.response_preferences(headers, "Walsh-Research", 0.0), declared)
    robots = ["noindex"] * 40 + ["noai"]
    tags = STMT.x_robots_tag(robots, "Walsh-Research", 0.0)
    assert len(tags) <= P.MAX_STATEMENTS
    assert P.decide(tags, ("tdm", "ai-input")) is not None  # noai: AI input and training


def test_a_tdmrep_rule_with_a_long_location_still_matches():
    path = "/" + "a" * 300
    tdm = TDM.parse_tdmrep(json.dumps([{"location": path, "tdm-reservation": 1}]).encode())
    assert tdm is not None
    prefs = TDM.tdm_file_preferences(tdm, "https://x.test" + path)
    assert [p.allows for p in prefs] == [False]
    assert len(prefs[0].scope) <= P.MAX_VALUE
