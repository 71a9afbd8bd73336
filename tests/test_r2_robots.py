"""R2: robots.txt per RFC 9309: exact product-token group selection, status
handling that fails closed, a 500 KiB parse limit, and no bypass."""

from __future__ import annotations

import itertools
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
import scrapy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scrapy_walsh_research.components import ROBOTS_MW
from scrapy_walsh_research.core.robots_policy import MAX_ROBOTS_BYTES, RobotsPolicy, decode_robots
from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.spiders.targets import TargetsSpider
from tests.support.crawling import (
    BLOCKLIST_HOST,
    BLOCKLIST_PATH,
    TDMREP,
    base_settings,
    blocklist_doc,
    crawl,
    gaps,
    json_reply,
)

TOKEN = "Walsh-Research"

# -- group selection (RFC 9309 §2.2.1) as a table ------------------------------------

SELECTION = [
    # (id, robots.txt, path, allowed)
    (
        "named group overrides * to block",
        "User-agent: *\nAllow: /\n\nUser-agent: Walsh-Research\nDisallow: /\n",
        "/x",
        False,
    ),
    (
        "named group overrides * to allow",
        "User-agent: *\nDisallow: /\n\nUser-agent: Walsh-Research\nAllow: /\n",
        "/x",
        True,
    ),
    (
        "named group with no rules still overrides *",
        "User-agent: *\nDisallow: /\n\nUser-agent: Walsh-Research\n",
        "/x",
        True,
    ),
    ("token match is case-insensitive", "User-agent: walsh-RESEARCH\nDisallow: /\n", "/x", False),
    (
        "version suffix is not part of the token",
        "User-agent: Walsh-Research/1.0\nDisallow: /\n",
        "/x",
        False,
    ),
    (
        "a prefix token does not claim us",
        "User-agent: *\nAllow: /\nUser-agent: Walsh\nDisallow: /\n",
        "/x",
        True,
    ),
    (
        "a longer token does not claim us",
        "User-agent: Walsh-Research-Extra\nDisallow: /\n",
        "/x",
        True,
    ),
    (
        "a token inside a longer value does not claim us",
        "User-agent: Mozilla Walsh-Research\nDisallow: /\n",
        "/x",
        True,
    ),
    (
        "all named groups are merged",
        "User-agent: Walsh-Research\nDisallow: /a\n\nUser-agent: Other\nDisallow: /\n\nUser-agent: Walsh-Research\nDisallow: /b\n",
        "/b",
        False,
    ),
    (
        "merged groups keep the first's rules",
        "User-agent: Walsh-Research\nDisallow: /a\n\nUser-agent: Walsh-Research\nDisallow: /b\n",
        "/a",
        False,
    ),
    (
        "a group may name several agents",
        "User-agent: Other\nUser-agent: Walsh-Research\nDisallow: /\n",
        "/x",
        False,
    ),
    (
        "* applies when no group names us",
        "User-agent: Other\nAllow: /\nUser-agent: *\nDisallow: /\n",
        "/x",
        False,
    ),
    (
        "all * groups are merged",
        "User-agent: *\nDisallow: /a\nUser-agent: Other\nAllow: /\nUser-agent: *\nDisallow: /b\n",
        "/b",
        False,
    ),
    ("no named and no * group: allow all", "User-agent: Other\nDisallow: /\n", "/x", True),
    ("empty file: allow all", "", "/x", True),
    (
        "longest path match wins",
        "User-agent: *\nDisallow: /p\nAllow: /p/public\n",
        "/p/public/x",
        True,
    ),
    ("allow wins a tie", "User-agent: *\nDisallow: /p\nAllow: /p\n", "/p", True),
    ("wildcard and end anchor", "User-agent: *\nDisallow: /*.pdf$\n", "/doc.pdf", False),
    (
        "unknown lines do not end a group",
        "User-agent: Walsh-Research\nFoo: bar\nUser-agent: *\nDisallow: /\n",
        "/x",
        False,
    ),
    (
        "sitemap does not end a group",
        "User-agent: Walsh-Research\nSitemap: http://x.test/s.xml\nUser-agent: *\nDisallow: /\n",
        "/x",
        False,
    ),
    ("rules before any group are ignored", "Disallow: /\nUser-agent: *\nAllow: /\n", "/x", True),
    ("comments are ignored", "User-agent: * # all\nDisallow: /x # not this\n", "/x", False),
    ("BOM is skipped", "\ufeffUser-agent: *\nDisallow: /\n", "/x", False),
    (
        "*SomeBot* names no token: not the global group",
        "User-agent: *SomeBot*\nDisallow: /\n",
        "/x",
        True,
    ),
    (
        "*SomeBot* does not merge into the * group",
        "User-agent: *\nDisallow: /a\n\nUser-agent: *SomeBot*\nDisallow: /\n",
        "/x",
        True,
    ),
    (
        "* followed by whitespace is still the global group",
        "User-agent: * SomeBot\nDisallow: /\n",
        "/x",
        False,
    ),
    (
        "*SomeBot* does not claim us either",
        "User-agent: *Walsh-Research*\nDisallow: /\n",
        "/x",
        True,
    ),
]


@pytest.mark.parametrize(
    ("robots", "path", "allowed"), [s[1:] for s in SELECTION], ids=[s[0] for s in SELECTION]
)
def test_group_selection_follows_rfc_9309(robots, path, allowed):
    assert RobotsPolicy.parse(robots, TOKEN).allows(f"http://site.test{path}") is allowed


def test_the_named_groups_crawl_delay_is_the_one_used():
    robots = "User-agent: *\nCrawl-delay: 10\n\nUser-agent: Walsh-Research\nCrawl-delay: 2\nRequest-rate: 1/5s\n"
    policy = RobotsPolicy.parse(robots, TOKEN)
    assert (policy.group, policy.crawl_delay, policy.request_rate_interval) == ("named", 2.0, 5.0)
    assert RobotsPolicy.parse("User-agent: *\nCrawl-delay: 10\n", TOKEN).crawl_delay == 10.0


# -- Google's reference suite, as data ----------------------------------------------

VECTORS = json.loads((Path(__file__).parent / "data/google_robots_vectors.json").read_text())
#: Google-only choices we answer differently, with the reason (also in docs/gates.rst).
GOOGLE_SPECIFIC_DIFFERENCES = {
    "ID_Encoding#3": "RFC 9309 §2.2.2 percent-encodes both sides; Google requires pre-encoded URLs",
    "ID_Encoding#5": "same as ID_Encoding#3",
    "GoogleOnly_LineTooLong#2": "Google truncates lines at 16,663 bytes; we keep rules as written",
    "GoogleOnly_LineTooLong#5": "same truncation, here it would widen an Allow",
}


def _vector_text(v: dict[str, Any]) -> str:
    if v.get("robots_txt_bytes_hex"):
        return decode_robots(bytes.fromhex(v["robots_txt_bytes_hex"]))[0]
    return v["robots_txt"]


def _answer(v: dict[str, Any]) -> bool:
    return RobotsPolicy.parse(_vector_text(v), v["user_agent"] or "").allows(v["url"] or "/")


ALL_VECTORS = VECTORS["vectors"] + VECTORS["derived_vectors"]


@pytest.mark.parametrize(
    "vector",
    [v for v in ALL_VECTORS if v["scope"] in ("rfc", "google-doc")],
    ids=lambda v: v["id"],
)
def test_google_vectors_of_rfc_and_documented_scope_all_pass(vector):
    assert _answer(vector) is vector["allowed"]


def test_google_specific_differences_are_exactly_the_documented_ones():
    differ = {
        v["id"]
        for v in ALL_VECTORS
        if v["scope"] == "google-specific" and _answer(v) is not v["allowed"]
    }
    assert differ == set(GOOGLE_SPECIFIC_DIFFERENCES)


def test_the_rfc_conflict_vector_follows_the_rfc():
    (v,) = [v for v in ALL_VECTORS if v["scope"] == "rfc-conflict"]
    assert _answer(v) is (not v["allowed"])  # RFC 9309 §2.2.2: %62%61%7A matches "baz"


def test_an_oversized_file_is_cut_at_500_kib_and_its_partial_last_line_dropped():
    head = b"User-agent: *\nDisallow: /early\n"
    pad = b"# " + b"x" * (MAX_ROBOTS_BYTES - len(head) - 20) + b"\n"
    body = head + pad + b"Allow: /early/but-this-line-is-cut-off\nDisallow: /late\n"
    text, truncated = decode_robots(body)
    assert truncated and len(text.encode()) <= MAX_ROBOTS_BYTES
    policy = RobotsPolicy.parse(text, TOKEN)
    assert not policy.allows("http://s.test/early/but")  # a cut Allow must not open the path
    assert policy.allows("http://s.test/late")  # beyond 500 KiB: not parsed


# -- the gate in a crawl ----------------------------------------------------------------


def site(server: Any, host: str, robots: Reply | None, *paths: str) -> list[str]:
    if robots is not None:
        server.origin.route(host, "/robots.txt", robots)
    for path in paths:
        server.origin.route(host, path, Reply(200, f"{host}{path}"))
    return [server.url(host, p) for p in paths]


def results(res: Any) -> list[tuple[str, str | None]]:
    return [(i["outcome"], i["rule"]) for i in sorted(res.items, key=lambda i: i["line"])]


@pytest_twisted.ensureDeferred
async def test_a_disallowed_path_is_never_requested(server, tmp_path):
    robots = Reply(
        200, "User-agent: *\nDisallow: /\n\nUser-agent: Walsh-Research\nDisallow: /private\n"
    )
    urls = site(server, "r.test", robots, "/open", "/private/doc")
    res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    assert results(res) == [("fetched", None), ("denied", "R2")]
    assert [h.path for h in server.origin.hits_for("r.test")] == ["/robots.txt", TDMREP, "/open"]
    assert res.stats["walsh/denied/R2"] == 1


@pytest_twisted.ensureDeferred
async def test_a_star_pattern_group_does_not_close_the_site_to_us(server, tmp_path):
    """``User-agent: *SomeBot*`` with ``Disallow: /`` (as real news and bank
    sites write it for one bot) is not the global group: our target is
    fetched, and the * group's own rule still applies."""
    robots = Reply(
        200,
        "User-agent: *SomeBot*\nDisallow: /\n\nUser-agent: *\nDisallow: /private\n",
    )
    urls = site(server, "pattern.test", robots, "/news", "/private/x")
    res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    assert results(res) == [("fetched", None), ("denied", "R2")]
    assert "/news" in [h.path for h in server.origin.hits_for("pattern.test")]
    assert server.origin.hits_for("pattern.test", "/private/x") == []


@pytest_twisted.ensureDeferred
async def test_without_the_r2_gate_the_disallowed_path_is_requested(
    server, tmp_path, without_preflight
):
    urls = site(
        server, "r.test", Reply(200, "User-agent: Walsh-Research\nDisallow: /\n"), "/private"
    )
    settings = base_settings(server, tmp_path / "s", DOWNLOADER_MIDDLEWARES={ROBOTS_MW: None})
    await crawl(settings, urls, tmp_path)
    assert server.origin.hits_for("r.test", "/private") != []


@pytest.mark.parametrize(
    ("status", "allowed"),
    [(404, True), (403, True), (401, True), (410, True), (429, False), (500, False), (503, False)],
)
@pytest_twisted.ensureDeferred
async def test_robots_status_codes_per_rfc_9309(server, tmp_path, status, allowed):
    """4xx: no rules. 429 and 5xx: unreachable, so nothing else is sent to
    the host; its targets wait for the next try (here past the bound: none),
    and their records say what happened, not that robots.txt disallows."""
    urls = site(server, "s.test", Reply(status, "User-agent: *\nAllow: /\n"), "/a", "/b")
    settings = base_settings(server, tmp_path / "s", WALSH_POLICY_WAIT=5)
    res = await crawl(settings, urls, tmp_path)
    expected = ("fetched", None) if allowed else ("skipped", "R2")
    assert results(res) == [expected, expected]
    # fetched once for both targets: an unreachable robots.txt is retried later, not per request
    assert len(server.origin.hits_for("s.test", "/robots.txt")) == 1
    if not allowed:
        assert [h.path for h in server.origin.hits_for("s.test")] == ["/robots.txt"]
        assert res.items[0]["reason"].startswith(f"robots.txt answered {status} on 1 try")
        assert "while its robots.txt is unknown (RFC 9309 §2.3.1.4)" in res.items[0]["reason"]


@pytest_twisted.ensureDeferred
async def test_a_robots_timeout_disallows_the_host(server, tmp_path):
    urls = site(server, "slow.test", Reply(200, "User-agent: *\nAllow: /\n", delay=3), "/a")
    settings = base_settings(server, tmp_path / "s", DOWNLOAD_TIMEOUT=1, WALSH_POLICY_WAIT=5)
    res = await crawl(settings, urls, tmp_path)
    assert results(res) == [("skipped", "R2")]
    assert "/a" not in [h.path for h in server.origin.hits_for("slow.test")]


@pytest_twisted.ensureDeferred
async def test_a_connection_error_on_robots_disallows_the_host(server, tmp_path):
    res = await crawl(
        base_settings(server, tmp_path / "s", WALSH_POLICY_WAIT=5),
        ["http://closed.test:9/page"],
        tmp_path,
    )
    assert results(res) == [("skipped", "R2")]
    assert "robots.txt fetch failed (" in res.items[0]["reason"]


@pytest_twisted.ensureDeferred
async def test_robots_redirects_are_followed_up_to_five_hops(server, tmp_path):
    hops = ["/robots.txt", "/r1", "/r2", "/r3", "/r4", "/r5"]
    for here, there in itertools.pairwise(hops):
        server.origin.route(
            "five.test", here, Reply(301, "", {"Location": server.url("five.test", there)})
        )
    server.origin.route("five.test", "/r5", Reply(200, "User-agent: *\nDisallow: /no\n"))
    for here, there in itertools.pairwise([*hops, "/r6"]):
        server.origin.route(
            "six.test", here, Reply(301, "", {"Location": server.url("six.test", there)})
        )
    server.origin.route("six.test", "/r6", Reply(200, "User-agent: *\nAllow: /\n"))
    urls = site(server, "five.test", None, "/yes", "/no") + site(server, "six.test", None, "/yes")
    res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    assert results(res) == [("fetched", None), ("denied", "R2"), ("denied", "R2")]
    assert server.origin.hits_for("six.test", "/r6") == []  # the sixth hop is not taken


@pytest_twisted.ensureDeferred
async def test_a_robots_redirect_into_a_blocked_host_is_not_followed(server, tmp_path):
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("blocked.test")))
    server.origin.route(
        "hop.test",
        "/robots.txt",
        Reply(301, "", {"Location": server.url("blocked.test", "/robots.txt")}),
    )
    urls = site(server, "hop.test", None, "/page")
    res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    assert results(res) == [("denied", "R2")]
    assert server.origin.hits_for("blocked.test") == []


@pytest_twisted.ensureDeferred
async def test_a_redirect_into_a_disallowed_path_is_denied_and_not_followed(server, tmp_path):
    urls = site(server, "d.test", Reply(200, "User-agent: *\nDisallow: /secret\n"), "/secret/x")
    server.origin.route("d.test", "/go", Reply(302, "", {"Location": urls[0]}))
    res = await crawl(
        base_settings(server, tmp_path / "s"), [server.url("d.test", "/go")], tmp_path
    )
    assert results(res) == [("denied", "R2")]
    assert res.items[0]["final_url"] == urls[0]
    assert server.origin.hits_for("d.test", "/secret/x") == []


@pytest_twisted.ensureDeferred
async def test_the_last_good_copy_is_used_when_robots_becomes_unreachable(server, tmp_path):
    state = tmp_path / "s"
    urls = site(
        server, "lg.test", Reply(200, "User-agent: *\nDisallow: /private\n"), "/public", "/private"
    )
    await crawl(base_settings(server, state), urls, tmp_path)
    server.origin.route("lg.test", "/robots.txt", Reply(503, "down"))
    age_stored_robots(state, 2 * 86400)  # two days later: the stored copy is stale
    res = await crawl(base_settings(server, state), urls, tmp_path)
    assert results(res) == [("fetched", None), ("denied", "R2")]
    assert res.stats["walsh/robots/last_good_used"] == 1
    assert [h.path for h in server.origin.hits_for("lg.test")].count("/robots.txt") == 2


def age_stored_robots(state: Path, seconds: float) -> None:
    """Make every stored robots.txt copy *seconds* older, as if time had passed."""
    db = sqlite3.connect(state / "state.sqlite3")
    with db:
        for ns in ("robots", "robots_4xx"):
            db.execute(
                "UPDATE kv SET value = json_set(value, '$.fetched_at',"
                " json_extract(value, '$.fetched_at') - ?) WHERE namespace = ?",
                (seconds, ns),
            )
    db.close()


@pytest_twisted.ensureDeferred
async def test_a_stored_robots_copy_is_reused_within_its_ttl_and_refetched_after(server, tmp_path):
    state = tmp_path / "s"
    urls = site(server, "ttl.test", Reply(200, "User-agent: *\nDisallow: /private\n"), "/public")
    await crawl(base_settings(server, state), urls, tmp_path)
    await crawl(base_settings(server, state), urls, tmp_path)
    robots = lambda: [h.path for h in server.origin.hits_for("ttl.test")].count("/robots.txt")  # noqa: E731
    assert robots() == 1  # the second run used the copy from the first
    age_stored_robots(state, 86400 + 1)
    res = await crawl(base_settings(server, state), urls, tmp_path)
    assert robots() == 2  # past WALSH_POLICY_TTL (24 h): fetched again
    assert results(res) == [("fetched", None)]


@pytest_twisted.ensureDeferred
async def test_an_oversized_robots_txt_is_not_downloaded_in_full(server, tmp_path):
    body = "User-agent: *\nDisallow: /early\n" + ("#" * 1000 + "\n") * 3000 + "Disallow: /late\n"
    urls = site(server, "big.test", Reply(200, body), "/early", "/late")
    res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    assert results(res) == [("denied", "R2"), ("fetched", None)]
    assert res.stats["walsh/robots/truncated"] == 1
    # ~3 MB served; what was read stays near the 500 KiB limit
    assert res.stats["downloader/response_bytes"] < 2 * MAX_ROBOTS_BYTES


@pytest_twisted.ensureDeferred
async def test_garbage_robots_txt_is_read_as_no_rules_and_the_crawl_goes_on(server, tmp_path):
    garbage = bytes(range(256)) * 50 + b"\n<html><body>Not a robots file</body></html>"
    urls = site(server, "junk.test", Reply(200, garbage), "/a")
    res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    assert results(res) == [("fetched", None)]


class BypassSpider(TargetsSpider):
    async def start(self) -> Any:
        async for obj in super().start():
            if isinstance(obj, scrapy.Request):
                obj.meta["dont_obey_robotstxt"] = True
            yield obj


@pytest_twisted.ensureDeferred
async def test_dont_obey_robotstxt_does_not_bypass_the_gate(server, tmp_path):
    urls = site(server, "nb.test", Reply(200, "User-agent: *\nDisallow: /\n"), "/a")
    res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path, spidercls=BypassSpider)
    assert results(res) == [("denied", "R2")]


@pytest_twisted.ensureDeferred
async def test_robots_is_refetched_after_its_ttl(server, tmp_path):
    urls = site(server, "ttl.test", Reply(200, "User-agent: *\nAllow: /\n"), "/a", "/b", "/c")
    res = await crawl(base_settings(server, tmp_path / "s", WALSH_POLICY_TTL=2.5), urls, tmp_path)
    assert results(res) == [("fetched", None)] * 3
    fetched = [h.t for h in server.origin.hits_for("ttl.test", "/robots.txt")]
    assert len(fetched) >= 2  # fetched again once the TTL passed,
    assert min(gaps(server.origin.hits_for("ttl.test", "/robots.txt"))) >= 2.5  # not sooner


# -- property-based: any robots.txt a server sends ----------------------------------

AGENTS = ["Walsh-Research", "walsh-research", "WALSH-RESEARCH/1.0", "Walsh", "Walsh-Researcher",
          "*", "Other", "Walsh-Research bot", "*SomeBot*", "* SomeBot", "*Walsh-Research*"]  # fmt: skip
LINE = st.one_of(
    st.sampled_from(AGENTS).map(lambda a: f"User-agent: {a}"),
    st.sampled_from(
        [
            "Disallow: /",
            "Allow: /",
            "Disallow:",
            "Crawl-delay: 5",
            "Foo: bar",
            "Sitemap: http://x.test/s",
            "",
            "# c",
            "Request-rate: 1/9s",
        ]
    ),
    st.text(max_size=40),
)


def reference_selection(groups: list[tuple[list[str], str]]) -> set[str]:
    """RFC 9309 §2.2.1 in a few lines: the paths of every group naming our
    product token exactly (case-insensitive), else of every * group."""

    def token(agent: str) -> str:
        agent = agent.strip()
        if agent == "*" or (agent.startswith("*") and agent[1].isspace()):
            return "*"
        run = ""
        for ch in agent:
            if not (ch.isascii() and (ch.isalpha() or ch in "-_")):
                break
            run += ch
        return run.lower()

    named = {path for agents, path in groups if "walsh-research" in map(token, agents)}
    return named or {path for agents, path in groups if "*" in map(token, agents)}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.lists(st.sampled_from(AGENTS), min_size=1, max_size=3),
                          st.booleans()), max_size=6))  # fmt: skip
def test_group_selection_agrees_with_a_reference(spec):
    groups = [(agents, f"/g{i}") for i, (agents, _) in enumerate(spec)]
    text = "".join(
        "".join(f"User-agent: {a}\n" for a in agents)
        + f"Disallow: {path}\n"
        + ("\n" if blank else "")
        for (agents, path), (_, blank) in zip(groups, spec, strict=True)
    )
    policy = RobotsPolicy.parse(text, TOKEN)
    expected = reference_selection(groups)
    for _, path in groups:
        assert policy.allows(f"http://site.test{path}") is (path not in expected), text


@settings(max_examples=400, deadline=None)
@given(st.lists(LINE, max_size=30), st.text(max_size=60))
def test_no_robots_txt_raises_and_every_interval_is_a_finite_non_negative_number(lines, path):
    policy = RobotsPolicy.parse("\n".join(lines), TOKEN)
    assert isinstance(policy.allows("http://site.test/" + path), bool)
    for value in (policy.crawl_delay, policy.request_rate_interval):
        assert value is None or 0 <= value < float("inf")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_any_bytes_decode_and_parse(body):
    text, _ = decode_robots(body)
    RobotsPolicy.parse(text, TOKEN).allows("http://site.test/x")


@pytest_twisted.ensureDeferred
async def test_a_failed_robots_fetch_keeps_its_backoff_across_a_restart(server, tmp_path):
    """The next try after a 503 is stored with the answer: a restart (or another
    worker) does not ask again before it."""
    state = tmp_path / "s"
    server.origin.route("flaky.test", "/robots.txt", Reply(503, "down"))
    server.origin.route("flaky.test", "/x", Reply(200, "x"))
    url = server.url("flaky.test", "/x")
    for _ in range(2):
        res = await crawl(base_settings(server, state, WALSH_POLICY_WAIT=5), [url], tmp_path)
        assert (res.items[0]["outcome"], res.items[0]["rule"]) == ("skipped", "R2")
    assert [h.path for h in server.origin.hits_for("flaky.test")] == ["/robots.txt"]


def large_robots(host: str = "big.test") -> str:
    """A robots.txt near the 500 KiB limit: thousands of rules, one that matters."""
    line = f"Disallow: /private/{host}/" + "x" * 40 + "/\n"
    return "User-agent: *\nAllow: /\nDisallow: /secret\n" + line * (
        MAX_ROBOTS_BYTES // len(line) - 1
    )


@pytest_twisted.ensureDeferred
async def test_a_large_robots_txt_is_parsed_in_a_worker_process():
    """Parsed in a thread, a 500 KiB file's pure-Python parse held the GIL
    often enough to stall the reactor; it is parsed in a worker process and
    comes back as the same policy."""
    import os

    from scrapy.utils.defer import deferred_from_coro

    from scrapy_walsh_research.gates import robots

    text = large_robots()
    policy, digest = await deferred_from_coro(robots._parse(text))
    here, _ = robots._parse_here(text)
    assert policy.group == here.group and digest == robots._sha256(text)
    for path in ("/secret/a", "/public", f"/private/big.test/{'x' * 40}/z"):
        assert policy.allows(f"http://big.test{path}") is here.allows(f"http://big.test{path}")
    assert not policy.allows("http://big.test/secret/a")
    workers = robots._pool._processes  # the pool that parsed it
    assert workers and all(pid != os.getpid() for pid in workers)


@pytest_twisted.ensureDeferred
async def test_without_a_worker_process_a_large_robots_txt_is_parsed_in_a_thread(monkeypatch):
    from scrapy_walsh_research.gates import robots

    def no_pool() -> Any:
        raise OSError("no processes here")

    from scrapy.utils.defer import deferred_from_coro

    monkeypatch.setattr(robots, "_parser_pool", no_pool)
    policy, _ = await deferred_from_coro(robots._parse(large_robots()))
    assert not policy.allows("http://big.test/secret/a")
    assert policy.allows("http://big.test/public")


RULE_PATHS = st.text(alphabet="/ab.*$%2Fé?=", min_size=0, max_size=8)


@settings(max_examples=1000, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["Allow", "Disallow"]), RULE_PATHS), max_size=12),
    st.lists(st.text(alphabet="/ab.*$%2Fé?=#", max_size=10), min_size=1, max_size=10),
)
def test_the_fast_rule_lookup_answers_exactly_as_protego(rules, paths):
    """RobotsPolicy answers from an index of the plain rules (a 500 KiB file:
    2.5 ms -> ~7 us per answer); Protego's own answer is the reference."""
    from protego import Protego

    text = "User-agent: *\n" + "".join(f"{f}: {p}\n" for f, p in rules)
    policy, protego = RobotsPolicy.parse(text, "walsh-research"), Protego.parse(text)
    assert policy._rules is not None
    for path in [*paths, "/robots.txt", "/robots.txt?x", "/a/robots.txt"]:
        url = "http://site.test" + (path if path.startswith("/") else "/" + path)
        assert policy._rules.can_fetch(url) is protego.can_fetch(url, "walsh-research"), (text, url)


def test_a_large_robots_txt_answers_in_microseconds():
    import time

    policy = RobotsPolicy.parse(large_robots(), "walsh-research")
    started = time.perf_counter()
    for i in range(200):
        policy._decide(f"http://big.test/p/{i}")
    assert (time.perf_counter() - started) / 200 < 0.5e-3  # Protego alone: 2.5 ms
    assert not policy.allows("http://big.test/secret/x")
