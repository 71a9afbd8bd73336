"""PREF: usage preferences honoured by declared purpose, at the origin.

What a host states before any request (robots.txt Content-Signal and
Content-Usage lines of the group selected for us, /.well-known/tdmrep.json)
denies a target with no request; what comes with the response (tdm-reservation,
Content-Usage, Content-Signal, X-Robots-Tag) withholds it: status and
validators only. A statement about a purpose the bot has not declared never
denies. Every record carries what applied to its URL.

Most rules are judged from one crawl over many hosts (the frontier interleaves
them, so the crawl costs about one host's chain of intervals).
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from scrapy.utils.defer import deferred_from_coro

from scrapy_walsh_research.components import PREFERENCES_MW
from scrapy_walsh_research.core.contract import USER_AGENT
from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.sandbox import Reply, SandboxServer
from tests.support.crawling import (
    BLOCKLIST_HOST,
    BLOCKLIST_PATH,
    SCHEMA_PATH,
    SCHEMA_TEXT,
    CrawlResult,
    base_settings,
    blocklist_doc,
    crawl,
    crawl_task,
    json_reply,
)

TDMREP = "/.well-known/tdmrep.json"
ALLOW = "User-agent: *\nAllow: /\n"
MD = {"Content-Type": "text/markdown"}
BODY = "# Secret heading\n\nSee [a link](/elsewhere).\n"


def tdmrep(*rules: dict[str, Any]) -> Reply:
    return Reply(200, json.dumps(list(rules)), {"Content-Type": "application/json"})


def route_host(server: SandboxServer, host: str, robots: str | None = ALLOW,
               tdm: Reply | None = None, pages: dict[str, Reply] | None = None) -> None:  # fmt: skip
    if robots is not None:
        server.origin.route(host, "/robots.txt", Reply(200, robots))
    if tdm is not None:
        server.origin.route(host, TDMREP, tdm)
    for path, reply in (pages or {}).items():
        server.origin.route(host, path, reply)


def page(**headers: str | list[str]) -> Reply:
    return Reply(200, BODY, {**MD, **headers})


@dataclass
class Scenario:
    server: SandboxServer
    res: CrawlResult
    state: Path

    def record(self, host: str, path: str) -> dict[str, Any]:
        return self.res.by_url()[self.server.url(host, path)]

    def paths(self, host: str) -> list[str]:
        return [h.path for h in self.server.origin.hits_for(host)]

    def outcome(self, host: str, path: str) -> tuple[str, str | None]:
        rec = self.record(host, path)
        return rec["outcome"], rec["rule"]


def install(server: SandboxServer) -> list[str]:
    """The hosts of the one scenario crawl, and its list."""
    huge = "[" + " " * (600 * 1024) + "]"
    route_host(server, "reserved.test", tdm=tdmrep(
        {"location": "/reserved/", "tdm-reservation": 1,
         "tdm-policy": "https://reserved.test/policy.json"},
        {"location": "/", "tdm-reservation": 0},
    ), pages={"/reserved/a": page(), "/open": page(), "/open2": page()})  # fmt: skip
    route_host(server, "signal.test",
               robots="User-agent: *\nContent-Signal: search=yes, ai-train=no, ai-input=no\nAllow: /\n",
               pages={"/page": page()})  # fmt: skip
    route_host(server, "usage.test",
               robots="User-agent: *\nContent-Usage: train-ai=n\nContent-Usage: /members/ bots=n\n"
                      "Disallow: /private\n",
               pages={"/members/x": page(), "/public": page(), "/private/x": page()})  # fmt: skip
    route_host(server, "header.test", pages={
        "/reserved": page(**{"tdm-reservation": "1", "tdm-policy": "https://header.test/p.json",
                             "ETag": '"v1"', "Last-Modified": "Sat, 21 Nov 2026 00:00:00 GMT"}),
        "/zero": page(**{"tdm-reservation": "0"}),
        "/conflict": page(**{"tdm-reservation": ["1", "0"]}),
    })  # fmt: skip
    route_host(server, "override.test", tdm=tdmrep({"location": "/", "tdm-reservation": 0}),
               pages={"/doc": page(**{"tdm-reservation": "1"})})  # fmt: skip
    route_host(server, "cusage.test", pages={
        "/a": page(**{"Content-Usage": "tdm=n"}),
        "/b": page(**{"Content-Usage": ["train-ai=n", "search=n"]}),
    })  # fmt: skip
    route_host(server, "xrt.test", pages={
        "/a": page(**{"X-Robots-Tag": ["googlebot: noindex", "noai"]}),
    })  # fmt: skip
    route_host(server, "huge.test", tdm=Reply(200, huge), pages={"/a": page()})
    route_host(server, "nested.test", tdm=Reply(200, "[" * 100_000), pages={"/a": page()})
    route_host(server, "html.test", tdm=Reply(200, "<html>Not found</html>",
                                              {"Content-Type": "text/html"}),
               pages={"/a": page()})  # fmt: skip
    route_host(server, "moved.test", pages={"/a": page()},
               tdm=Reply(301, "", {"Location": server.url("elsewhere.test", TDMREP)}))  # fmt: skip
    route_host(server, "elsewhere.test", tdm=tdmrep({"location": "/", "tdm-reservation": 1}))
    route_host(server, "hop.test", pages={"/a": page()},
               tdm=Reply(301, "", {"Location": server.url("blocked.test", TDMREP)}))  # fmt: skip
    route_host(server, "blocked.test", tdm=tdmrep({"location": "/", "tdm-reservation": 1}))
    route_host(server, "nofile.test", robots="User-agent: *\nDisallow: /.well-known/\n",
               pages={"/a": page()})  # fmt: skip
    route_host(server, "hopdown.test", pages={"/a": page()},
               tdm=Reply(301, "", {"Location": server.url("down.test", TDMREP)}))  # fmt: skip
    route_host(server, "down.test", robots=None,
               tdm=tdmrep({"location": "/", "tdm-reservation": 1}))  # fmt: skip
    server.origin.route("down.test", "/robots.txt", Reply(503, "busy"))
    targets = [("reserved.test", "/reserved/a"), ("reserved.test", "/open"),
               ("reserved.test", "/open2"), ("signal.test", "/page"),
               ("usage.test", "/members/x"), ("usage.test", "/public"), ("usage.test", "/private/x"),
               ("header.test", "/reserved"), ("header.test", "/zero"), ("header.test", "/conflict"),
               ("override.test", "/doc"), ("cusage.test", "/a"), ("cusage.test", "/b"),
               ("xrt.test", "/a"), ("huge.test", "/a"), ("nested.test", "/a"), ("html.test", "/a"),
               ("moved.test", "/a"), ("hop.test", "/a"), ("nofile.test", "/a"),
               ("hopdown.test", "/a")]  # fmt: skip
    return [server.url(h, p) for h, p in targets]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Any:
    server = SandboxServer().start()
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("blocked.test")))
    server.origin.route(BLOCKLIST_HOST, SCHEMA_PATH, Reply(200, SCHEMA_TEXT.read_text()))
    lines = install(server)
    work = tmp_path_factory.mktemp("pref")
    # down.test's robots.txt stays unreachable: its wait ends at once
    settings = base_settings(server, work / "s", WALSH_POLICY_WAIT=5)
    res = pytest_twisted.blockon(deferred_from_coro(crawl_task(settings, lines, work)))
    yield Scenario(server, res, work / "s")
    pytest_twisted.blockon(server.stop())


# -- before the request: robots.txt and tdmrep.json -----------------------------------


def test_a_tdm_reservation_in_tdmrep_json_denies_the_target_with_no_request(scenario):
    assert scenario.outcome("reserved.test", "/reserved/a") == ("denied", "PREF")
    reason = scenario.record("reserved.test", "/reserved/a")["reason"]
    assert "tdmrep.json" in reason and "tdm-reservation = 1" in reason and "/reserved/" in reason
    assert "/reserved/a" not in scenario.paths("reserved.test")
    assert scenario.outcome("reserved.test", "/open") == ("fetched", None)


def test_tdmrep_json_is_fetched_once_per_origin_through_every_gate_before_its_first_target(
    scenario,
):
    paths = scenario.paths("reserved.test")
    assert paths == ["/robots.txt", TDMREP, "/open", "/open2"]
    hits = scenario.server.origin.hits_for("reserved.test")
    assert {h.user_agent for h in hits} == {USER_AGENT}
    assert min(b.t - a.t for a, b in itertools.pairwise(hits)) >= 1.0  # R4 pacing
    assert scenario.res.stats["walsh/preferences/status/200"] >= 1


def test_a_preference_about_an_undeclared_purpose_never_denies(scenario):
    assert scenario.outcome("signal.test", "/page") == ("fetched", None)
    signals = {
        p["signal"]: p["value"] for p in scenario.record("signal.test", "/page")["preferences"]
    }
    assert (
        signals["Content-Signal: ai-train"] == "no" and signals["Content-Signal: ai-input"] == "no"
    )
    assert scenario.outcome("usage.test", "/public") == ("fetched", None)  # train-ai=n


def test_content_usage_in_robots_txt_applies_by_longest_path_and_only_where_allowed(scenario):
    assert scenario.outcome("usage.test", "/members/x") == ("denied", "PREF")
    assert "Content-Usage: bots" in scenario.record("usage.test", "/members/x")["reason"]
    assert "/members/x" not in scenario.paths("usage.test")
    public = scenario.record("usage.test", "/public")["preferences"]
    assert [p["signal"] for p in public] == ["Content-Usage: train-ai"]
    private = scenario.record("usage.test", "/private/x")
    assert (private["outcome"], private["rule"], private["preferences"]) == ("denied", "R2", None)


def test_a_gate_that_refuses_the_tdmrep_fetch_leaves_only_the_headers_to_reserve(scenario):
    assert TDMREP not in scenario.paths("nofile.test")  # robots.txt disallows it
    assert scenario.outcome("nofile.test", "/a") == ("fetched", None)
    assert scenario.server.origin.hits_for("blocked.test") == []  # a hop into a blocked host
    assert scenario.outcome("hop.test", "/a") == ("fetched", None)


def test_a_gate_refusal_that_passes_by_itself_leaves_the_file_unknown_not_absent(scenario):
    # the file moved to an origin whose robots.txt is unreachable: R2 refuses
    # the hop for now, so what the file says is unknown: not requested, and
    # the record says so without claiming a reservation
    assert scenario.paths("down.test") == ["/robots.txt"]
    assert scenario.outcome("hopdown.test", "/a") == ("skipped", "PREF")
    reason = scenario.record("hopdown.test", "/a")["reason"]
    assert "unknown" in reason and "says no" not in reason
    assert "/a" not in scenario.paths("hopdown.test")


def test_a_tdmrep_redirect_to_another_origin_is_followed_through_that_origins_gates(scenario):
    assert scenario.paths("elsewhere.test") == ["/robots.txt", TDMREP]
    assert scenario.outcome("moved.test", "/a") == ("denied", "PREF")
    assert "/a" not in scenario.paths("moved.test")


def test_a_tdmrep_json_past_500_kib_is_not_read_and_its_origin_is_not_requested(scenario):
    assert scenario.outcome("huge.test", "/a") == ("skipped", "PREF")
    reason = scenario.record("huge.test", "/a")["reason"]
    assert "larger than 500 KiB" in reason and "says no" not in reason
    assert scenario.paths("huge.test") == ["/robots.txt", TDMREP]
    assert scenario.res.stats["walsh/preferences/too_large"] == 1


def test_a_tdmrep_json_that_is_no_tdmrep_document_means_no_reservation(scenario):
    for host in ("nested.test", "html.test"):
        assert scenario.outcome(host, "/a") == ("fetched", None), host
    assert scenario.res.stats["walsh/preferences/not_tdmrep"] == 2


# -- with the response: headers ------------------------------------------------------


def test_a_tdm_reservation_header_withholds_the_content_keeping_status_and_validators(scenario):
    record = scenario.record("header.test", "/reserved")
    assert (record["outcome"], record["rule"]) == ("withheld", "PREF")
    assert (record["status"], record["etag"]) == (200, '"v1"')
    assert record["last_modified"] == "Sat, 21 Nov 2026 00:00:00 GMT"
    for field in ("sha256", "content_length", "content_type", "headings", "links", "structured"):
        assert record.get(field) is None, field
    assert "Secret heading" not in json.dumps(record)
    signals = [(p["source"], p["signal"], p["value"]) for p in record["preferences"]]
    assert ("response header", "tdm-reservation", "1") in signals
    assert ("response header", "tdm-policy", "https://header.test/p.json") in signals


def test_tdm_reservation_headers_that_conflict_reserve(scenario):
    assert scenario.outcome("header.test", "/zero") == ("fetched", None)
    assert scenario.outcome("header.test", "/conflict") == ("withheld", "PREF")


def test_the_tdm_reservation_header_overrides_the_file(scenario):
    record = scenario.record("override.test", "/doc")
    assert (record["outcome"], record["rule"]) == ("withheld", "PREF")
    assert [p["source"] for p in record["preferences"]] == ["response header"]


def test_a_content_usage_header_that_says_no_to_tdm_withholds(scenario):
    assert scenario.outcome("cusage.test", "/a") == ("withheld", "PREF")
    b = scenario.record("cusage.test", "/b")  # train-ai=n and search=n: not declared
    assert (b["outcome"], b["structured"]) == ("fetched", "markdown")
    assert {p["signal"] for p in b["preferences"]} == {"Content-Usage: train-ai",
                                                       "Content-Usage: search"}  # fmt: skip


def test_x_robots_tag_for_another_bot_is_ignored_and_noai_is_recorded(scenario):
    record = scenario.record("xrt.test", "/a")
    assert record["outcome"] == "fetched"  # noai: ai-train and ai-input, not declared
    assert [(p["value"], p["scope"]) for p in record["preferences"]] == [
        ("noai", "this response; for every bot")
    ]


def test_the_audit_log_stores_the_preferences_of_each_decision(scenario):
    db = sqlite3.connect(scenario.state / "audit.sqlite3")
    try:
        rows = [json.loads(r[0]) for r in db.execute("SELECT entry FROM audit")]
    finally:
        db.close()
    decisions = {e["url"]: e for e in rows if e["event"] == "decision"}
    denied = decisions[scenario.server.url("reserved.test", "/reserved/a")]
    assert denied["rule"] == "PREF"
    assert any(p["source"] == "tdmrep.json" for p in denied["preferences"])
    withheld = decisions[scenario.server.url("header.test", "/reserved")]
    assert withheld["outcome"] == "withheld" and withheld["preferences"]


def test_the_evidence_report_shows_what_each_host_stated_and_what_the_bot_did(scenario):
    from scrapy_walsh_research.evidence.host_evidence import by_host
    from scrapy_walsh_research.evidence.pages import host_page

    db = sqlite3.connect(scenario.state / "audit.sqlite3")
    try:
        log = [json.loads(r[0]) for r in db.execute("SELECT entry FROM audit")]
    finally:
        db.close()
    hosts = by_host(log)
    ev = hosts["reserved.test"]
    stated = {(v["source"], v["signal"], v["value"], v["scope"]): v["did"]
              for v in ev.stated_preferences()}  # fmt: skip
    assert stated[("tdmrep.json", "tdm-reservation", "1", "location /reserved/")] == {
        "denied (PREF)": 1
    }
    assert stated[("tdmrep.json", "tdm-reservation", "0", "location /")] == {"fetched": 2}
    assert ev.purposes() == ["tdm"]
    page = host_page(ev)
    assert '<table id="preferences">' in page and "denied (PREF): 1" in page
    assert '<span id="purposes">tdm</span>' in page
    assert ev.as_json()["stated_preferences"]
    header = host_page(hosts["header.test"])
    assert "withheld (PREF): 2" in header


def test_the_attestation_states_the_declared_purposes():
    from scrapy.settings import Settings

    from scrapy_walsh_research.evidence.attestation import attest

    assert attest(Settings({}))["purposes"] == ["tdm"]
    assert attest(Settings({"WALSH_PURPOSES": '["tdm", "ai-input"]'}))["purposes"] == [
        "tdm", "ai-input"]  # fmt: skip
    refused = attest(Settings({"WALSH_PURPOSES": "search"}))
    assert "MUST NOT index" in refused["purposes"]["refused"]
    reasons = refused["evidence"]["R6_no_recursion_metadata_only"]["reason"]
    assert any("WALSH_PURPOSES" in r for r in reasons)


# -- declared purposes -----------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_a_declared_purpose_makes_the_same_statements_deny(server, tmp_path):
    route_host(server, "signal.test",
               robots="User-agent: *\nContent-Signal: ai-input=no\nAllow: /\n",
               pages={"/page": page()})  # fmt: skip
    route_host(server, "xrt.test", pages={
        "/a": page(**{"X-Robots-Tag": "walsh-research: noai"}),
        "/b": page(**{"Content-Signal": "ai-input=no"}),
    })  # fmt: skip
    urls = [server.url("signal.test", "/page"), server.url("xrt.test", "/a"),
            server.url("xrt.test", "/b")]  # fmt: skip
    settings = base_settings(server, tmp_path / "s", WALSH_PURPOSES="tdm,ai-input")
    res = await crawl(settings, urls, tmp_path)
    got = {r["url"]: (r["outcome"], r["rule"]) for r in res.items}
    assert got == {urls[0]: ("denied", "PREF"), urls[1]: ("withheld", "PREF"),
                   urls[2]: ("withheld", "PREF")}  # fmt: skip
    assert "/page" not in [h.path for h in server.origin.hits_for("signal.test")]
    assert "Content-Signal: ai-input" in res.by_url()[urls[0]]["reason"]


@pytest.mark.parametrize(
    ("purposes", "fragment"),
    [(["nonsense"], "not a purpose"), ([], "leaves out 'tdm'"), ("", "leaves out 'tdm'"),
     (["tdm", "search"], "MUST NOT index"), ("tdm,ai-train", "MUST NOT train"), (7, "not a list")],
)  # fmt: skip
@pytest_twisted.ensureDeferred
async def test_walsh_purposes_that_are_nonsense_empty_or_forbidden_stop_the_crawl(
    server, tmp_path, purposes, fragment
):
    route_host(server, "a.test", pages={"/a": page()})
    settings = base_settings(server, tmp_path / "s", WALSH_PURPOSES=purposes)
    with pytest.raises(WalshConfigurationError, match="WALSH_PURPOSES") as info:
        await crawl(settings, [server.url("a.test", "/a")], tmp_path)
    assert fragment in str(info.value)
    assert server.origin.hits == []


# -- unknown answers -----------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_an_unreachable_tdmrep_json_is_unknown_until_fetched_or_a_last_good_copy(
    server, tmp_path
):
    """Unknown (503, a timeout): nothing requested from the origin, and once
    the wait ends (here at once) a record that says so, not a reservation."""
    state = tmp_path / "s"
    route_host(server, "down.test", tdm=Reply(503, "busy"), pages={"/a": page(), "/b": page()})
    route_host(server, "slow.test", tdm=Reply(200, "[]", delay=3), pages={"/a": page()})
    route_host(server, "lg.test", tdm=tdmrep(), pages={"/a": page()})
    route_host(server, "nf.test", tdm=Reply(404, "none"), pages={"/a": page()})
    urls = [server.url("down.test", "/a"), server.url("down.test", "/b"),
            server.url("slow.test", "/a"), server.url("lg.test", "/a"),
            server.url("nf.test", "/a")]  # fmt: skip
    settings = base_settings(server, state, WALSH_POLICY_WAIT=0)
    first = await crawl({**settings, "DOWNLOAD_TIMEOUT": 1}, urls, tmp_path)
    got = {r["url"]: (r["outcome"], r["rule"]) for r in first.items}
    assert got == {urls[0]: ("skipped", "PREF"), urls[1]: ("skipped", "PREF"),
                   urls[2]: ("skipped", "PREF"), urls[3]: ("fetched", None),
                   urls[4]: ("fetched", None)}  # fmt: skip
    reason = first.by_url()[urls[0]]["reason"]
    assert reason.startswith("tdmrep.json answered 503 on 1 try") and "says no" not in reason
    assert [h.path for h in server.origin.hits_for("down.test")] == ["/robots.txt", TDMREP]
    # a day later lg.test's file is down too: its last good answer holds; down.test's
    # backoff still runs, stored, so the restart sends it nothing
    db = sqlite3.connect(state / "state.sqlite3")
    with db:
        db.execute(
            "UPDATE kv SET value = json_set(value, '$.fetched_at',"
            " json_extract(value, '$.fetched_at') - 86401) WHERE namespace = 'tdmrep'"
        )
    db.close()
    # nf.test had no file, and its file is down now: "no file" is no copy of
    # one, so its reservations are unknown again (not requested)
    server.origin.route("lg.test", TDMREP, Reply(503, "busy"))
    server.origin.route("nf.test", TDMREP, Reply(503, "busy"))
    second = await crawl(settings, [urls[0], urls[3], urls[4]], tmp_path)
    assert [(r["outcome"], r["rule"]) for r in sorted(second.items, key=lambda r: r["line"])] == [
        ("skipped", "PREF"), ("fetched", None), ("skipped", "PREF")]  # fmt: skip
    assert second.stats["walsh/preferences/last_good_used"] == 1
    assert [h.path for h in server.origin.hits_for("down.test")] == ["/robots.txt", TDMREP]


# -- the mechanism ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_without_the_pref_gate_a_reserved_target_is_requested(
    server, tmp_path, without_preflight
):
    route_host(server, "r.test", tdm=tdmrep({"location": "/", "tdm-reservation": 1}),
               pages={"/a": page()})  # fmt: skip
    settings = base_settings(server, tmp_path / "s", DOWNLOADER_MIDDLEWARES={PREFERENCES_MW: None})
    res = await crawl(settings, [server.url("r.test", "/a")], tmp_path)
    assert res.items[0]["outcome"] == "fetched"
    assert server.origin.hits_for("r.test", "/a") != []
