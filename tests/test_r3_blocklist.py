"""R3: the operator blocklist is consulted first, matched by apex and subdomain,
validated against the schema, and never lost on failure (also across restarts)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import pytest_twisted
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scrapy_walsh_research.components import BLOCKLIST_MW
from scrapy_walsh_research.core.blocklist.document import BlocklistError, refresh_seconds
from scrapy_walsh_research.core.blocklist.entries import DomainSet, normalize_entry
from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.sandbox import Reply
from tests.support.crawling import (
    BLOCKLIST_HOST,
    BLOCKLIST_PATH,
    SCHEMA_PATH,
    base_settings,
    blocklist_doc,
    crawl,
    json_reply,
    sleep,
)


def serve_hosts(server: Any, *hosts: str) -> None:
    for host in hosts:
        server.origin.route(host, "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
        server.origin.route(host, "/", Reply(200, f"home of {host}"))


def outcomes(res: Any) -> dict[str, tuple[str, str | None]]:
    return {i["url"]: (i["outcome"], i["rule"]) for i in res.items}


# -- matching -----------------------------------------------------------------

MATCH_TABLE = [
    # (entry, host, blocked)
    ("blocked.test", "blocked.test", True),
    ("blocked.test", "www.blocked.test", True),
    ("blocked.test", "a.b.blocked.test", True),
    ("blocked.test", "xblocked.test", False),
    ("blocked.test", "blocked.test.evil", False),
    ("blocked.test", "BLOCKED.Test.", True),
    ("Blocked.TEST.", "blocked.test", True),
    ("blocked.test", "blocked.test:8443", True),
    ("www.blocked.test", "blocked.test", False),
    ("bücher.test", "xn--bcher-kva.test", True),
    ("xn--bcher-kva.test", "shop.bücher.test", True),
    ("https://blocked.test/some/path", "blocked.test", True),
    ("*.blocked.test", "www.blocked.test", True),
    ("blocked.test:8080", "blocked.test", True),
    ("192.0.2.7", "192.0.2.7", True),
    ("2.7", "192.0.2.7", False),
    # every spelling of an address is that address (more in tests/test_chain_one_host.py)
    ("127.0.0.1", "2130706433", True),
    ("2130706433", "[::ffff:7f00:1]", True),
    ("faß.test", "fass.test", True),  # what Scrapy contacts for http://faß.test/
]


@pytest.mark.parametrize(("entry", "host", "blocked"), MATCH_TABLE)
def test_host_is_blocked_when_it_equals_or_is_under_an_entry(entry, host, blocked):
    domains = DomainSet.from_entries([{"domain": entry}], source="test")
    assert (domains.match(host) is not None) is blocked


def test_lookup_cost_does_not_grow_with_the_list():
    class CountingDict(dict):
        lookups = 0

        def get(self, key, default=None):
            CountingDict.lookups += 1
            return super().get(key, default)

    for size in (10, 100_000):
        listed = DomainSet.from_entries(
            [{"domain": f"site{i}.test"} for i in range(size)], source="test"
        )
        domains = DomainSet.from_index(CountingDict(listed.entries))
        CountingDict.lookups = 0
        assert domains.match("a.b.c.unlisted.test") is None
        assert CountingDict.lookups == 5  # one per label suffix, whatever the size


def test_an_unusable_entry_is_reported_not_silently_dropped(caplog):
    with caplog.at_level(logging.ERROR):
        domains = DomainSet.from_entries([{"domain": "  "}, {"domain": "ok.test"}], "t")
    assert len(domains) == 1
    assert "no usable domain" in caplog.text
    assert normalize_entry("HTTPS://Www.Ex.test:99/x") == "www.ex.test"


# -- the gate in a crawl -------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_blocked_apex_and_subdomain_receive_no_request_at_all(server, tmp_path):
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("blocked.test")))
    serve_hosts(server, "blocked.test", "www.blocked.test", "xblocked.test")
    urls = [server.url(h) for h in ("blocked.test", "www.blocked.test", "xblocked.test")]
    res = await crawl(base_settings(server, tmp_path / "state"), urls, tmp_path)
    assert outcomes(res) == {
        urls[0]: ("denied", "R3"),
        urls[1]: ("denied", "R3"),
        urls[2]: ("fetched", None),
    }
    assert server.origin.hits_for("blocked.test") == []
    assert server.origin.hits_for("www.blocked.test") == []  # not even robots.txt
    assert res.stats["walsh/denied/R3"] == 2
    assert "blocked.test" in res.by_url()[urls[1]]["reason"]


@pytest_twisted.ensureDeferred
async def test_without_the_r3_gate_the_blocked_host_is_contacted(
    server, tmp_path, without_preflight
):
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("blocked.test")))
    serve_hosts(server, "blocked.test")
    settings = base_settings(
        server, tmp_path / "state", DOWNLOADER_MIDDLEWARES={BLOCKLIST_MW: None}
    )
    await crawl(settings, [server.url("blocked.test")], tmp_path)
    assert server.origin.hits_for("blocked.test") != []


@pytest_twisted.ensureDeferred
async def test_blocklist_extra_adds_local_entries(server, tmp_path):
    serve_hosts(server, "local.test", "fine.test")
    settings = base_settings(server, tmp_path / "state", WALSH_BLOCKLIST_EXTRA=["local.test"])
    urls = [server.url("sub.local.test"), server.url("fine.test")]
    res = await crawl(settings, urls, tmp_path)
    assert outcomes(res)[urls[0]] == ("denied", "R3")
    assert outcomes(res)[urls[1]] == ("fetched", None)
    assert "WALSH_BLOCKLIST_EXTRA" in res.by_url()[urls[0]]["reason"]


@pytest_twisted.ensureDeferred
async def test_a_redirect_into_a_blocked_host_is_denied_and_not_followed(server, tmp_path):
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("blocked.test")))
    serve_hosts(server, "open.test", "blocked.test")
    target = server.url("blocked.test", "/landing")
    server.origin.route("open.test", "/go", Reply(302, "", {"Location": target}))
    res = await crawl(
        base_settings(server, tmp_path / "state"), [server.url("open.test", "/go")], tmp_path
    )
    record = res.items[0]
    assert (record["outcome"], record["rule"]) == ("denied", "R3")
    assert record["final_url"] == target
    assert server.origin.hits_for("blocked.test") == []


# -- adopt, reject, retain ---------------------------------------------------------

FAILURES = {
    "http-503": Reply(503, "down"),
    "http-404": Reply(404, "gone"),
    "not-json": Reply(200, "User-agent: *\nDisallow: /\n", {"Content-Type": "text/plain"}),
    "schema-invalid": json_reply({"contract": "walsh-research-blocklist/v1", "blocked": "all"}),
    "bad-format": json_reply({**blocklist_doc(), "updated": "last tuesday"}),
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
@pytest_twisted.ensureDeferred
async def test_a_failed_refresh_keeps_the_last_list_across_a_restart(server, tmp_path, failure):
    state = tmp_path / "state"
    serve_hosts(server, "blocked.test")
    url = server.url("www.blocked.test")
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("blocked.test")))
    first = await crawl(base_settings(server, state), [url], tmp_path)
    assert outcomes(first)[url] == ("denied", "R3")

    # a new process; the list is due for refresh (WALSH_BLOCKLIST_URL changed) and it fails
    server.origin.route(BLOCKLIST_HOST, "/v2/blocklist.json", FAILURES[failure])
    settings = base_settings(
        server, state, WALSH_BLOCKLIST_URL=server.url(BLOCKLIST_HOST, "/v2/blocklist.json")
    )
    second = await crawl(settings, [url], tmp_path)
    assert server.origin.hits_for(BLOCKLIST_HOST, "/v2/blocklist.json") != []
    assert outcomes(second)[url] == ("denied", "R3")
    assert second.stats["walsh/blocklist/fetch_failed"] == 1
    assert server.origin.hits_for("www.blocked.test") == []


@pytest.mark.parametrize("failure", ["schema-invalid", "bad-format"])
@pytest_twisted.ensureDeferred
async def test_a_schema_invalid_document_is_never_adopted(server, tmp_path, failure, caplog):
    serve_hosts(server, "blocked.test")
    doc = FAILURES[failure]
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, doc)
    with caplog.at_level(logging.ERROR):
        res = await crawl(
            base_settings(server, tmp_path / "state"), [server.url("blocked.test")], tmp_path
        )
    assert res.stats["walsh/blocklist/rejected"] == 1
    assert "walsh/blocklist/adopted" not in res.stats
    assert "schema-invalid" in caplog.text


@pytest_twisted.ensureDeferred
async def test_first_ever_failure_crawls_with_an_empty_list_logged_at_error(
    server, tmp_path, caplog
):
    """Spec §5.2: a first-ever failure yields an empty list. (The crawl
    first waits for the list, WALSH_POLICY_WAIT, here 0: tests/test_chain_unknown_documents.py.)"""
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, Reply(503, "down"))
    serve_hosts(server, "fine.test")
    settings = base_settings(server, tmp_path / "state", WALSH_POLICY_WAIT=0)
    with caplog.at_level(logging.ERROR):
        res = await crawl(settings, [server.url("fine.test")], tmp_path)
    assert res.items[0]["outcome"] == "fetched", res.items[0]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert any("no list was ever adopted" in r.getMessage() for r in errors)


@pytest_twisted.ensureDeferred
async def test_an_unreachable_schema_falls_back_to_the_bundled_copy(server, tmp_path):
    server.origin.route(BLOCKLIST_HOST, SCHEMA_PATH, Reply(500, "oops"))
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("blocked.test")))
    res = await crawl(
        base_settings(server, tmp_path / "state"), [server.url("blocked.test")], tmp_path
    )
    assert res.stats["walsh/blocklist/schema_fallback"] == 1
    assert res.stats["walsh/blocklist/adopted"] == 1
    assert res.items[0]["rule"] == "R3"


@pytest_twisted.ensureDeferred
async def test_the_list_is_refreshed_on_its_refresh_duration_during_a_crawl(server, tmp_path):
    versions = iter([blocklist_doc(refresh="PT1S")])

    def serve(hit: Any) -> Reply:
        # first fetch: empty list; every later fetch: late.test is blocked
        return json_reply(next(versions, blocklist_doc("late.test", refresh="PT1S")))

    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, serve)
    serve_hosts(server, "early.test", "late.test")
    server.origin.route("early.test", "/2", Reply(200, "two"))
    urls = [server.url("early.test"), server.url("early.test", "/2"), server.url("late.test")]
    settings = base_settings(server, tmp_path / "state", WALSH_BLOCKLIST_MIN_REFRESH=1)
    res = await crawl(settings, urls, tmp_path)
    fetches = server.origin.hits_for(BLOCKLIST_HOST, BLOCKLIST_PATH)
    assert len(fetches) >= 2
    assert outcomes(res)[urls[2]] == ("denied", "R3")
    # late.test may have been asked for robots.txt before the list changed; nothing after
    assert all(h.t < fetches[1].t for h in server.origin.hits_for("late.test"))
    assert server.origin.hits_for("late.test", "/") == []


@pytest_twisted.ensureDeferred
async def test_a_persisted_fresh_list_is_not_refetched_on_restart(server, tmp_path):
    state = tmp_path / "state"
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("blocked.test")))
    serve_hosts(server, "blocked.test")
    await crawl(base_settings(server, state), [server.url("blocked.test")], tmp_path)
    await crawl(base_settings(server, state), [server.url("blocked.test")], tmp_path)
    assert len(server.origin.hits_for(BLOCKLIST_HOST, BLOCKLIST_PATH)) == 1


@pytest_twisted.ensureDeferred
async def test_a_due_list_is_refetched_before_any_target_on_restart_after_distress_eased(
    server, tmp_path
):
    """The operator host answered 503, then recovered at the last answer of
    a run. On restart its interval is the floor again: the due list is
    fetched before the targets, not deferred for the interval it had in
    distress while the old list lets a newly opted-out host be contacted."""
    state = tmp_path / "state"
    answers = [Reply(503, "down"), json_reply(blocklist_doc(refresh="PT1S"))]
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, lambda hit: answers[0])
    serve_hosts(server, "optout.test")
    settings = base_settings(
        server, state, WALSH_BLOCKLIST_MIN_REFRESH=1, WALSH_BLOCKLIST_EXTRA=["local.test"],
        WALSH_ADAPTIVE_BACKOFF=5, WALSH_ADAPTIVE_RECOVERY=2,
    )  # fmt: skip
    denied = [server.url("local.test")]  # a target that sends nothing, to run the gate
    await crawl(settings, denied, tmp_path)  # schema, then the list: 503 (distress, ~5 s)
    answers.pop(0)
    # schema and list, each waiting out the distress interval; the list's
    # answer is the second in a row without a signal: the host has recovered
    second = await crawl(settings, denied, tmp_path)
    assert second.stats.get("walsh/adaptive/recovered") == 1
    answers[0] = json_reply(blocklist_doc("optout.test", refresh="PT1S"))
    await sleep(1.1)  # the adopted list is due (PT1S)
    url = server.url("optout.test")
    third = await crawl(settings, [url], tmp_path)
    assert server.origin.hits_for("optout.test") == []
    assert outcomes(third)[url] == ("denied", "R3")
    assert len(server.origin.hits_for(BLOCKLIST_HOST, BLOCKLIST_PATH)) == 3
    assert "walsh/blocklist/deferred" not in third.stats


@pytest_twisted.ensureDeferred
async def test_a_plain_http_blocklist_url_is_refused_at_start_up(server, tmp_path):
    settings = base_settings(server, tmp_path / "state", WALSH_BLOCKLIST_ALLOW_HTTP=False)
    with pytest.raises(WalshConfigurationError, match="WALSH_BLOCKLIST_ALLOW_HTTP"):
        await crawl(settings, [server.url("fine.test")], tmp_path)
    assert server.origin.hits == []


# -- operator documents a CDN, a gateway or a typo can produce --------------------

GATEWAY_ERRORS = {
    "empty-object": {},
    "error-object": {"error": "Bad Gateway", "status": 502},
    "array": [],
    "null": None,
}


@pytest.mark.parametrize(
    ("schema", "document"),
    [
        ("{}", "empty-object"),
        ('{"error": "Bad Gateway"}', "error-object"),
        ("true", "array"),
        ("not json", "null"),
    ],
)
@pytest_twisted.ensureDeferred
async def test_a_fetched_schema_never_weakens_the_published_one(server, tmp_path, schema, document):
    """After a good list, the schema URL and the blocklist URL both answer
    garbage (a CDN error page): nothing is adopted, every opt-out holds."""
    state = tmp_path / "state"
    serve_hosts(server, "blocked.test")
    url = server.url("www.blocked.test")
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("blocked.test")))
    await crawl(base_settings(server, state), [url], tmp_path)

    server.origin.route(BLOCKLIST_HOST, "/v2/schema.json", Reply(200, schema))
    server.origin.route(BLOCKLIST_HOST, "/v2/list.json", json_reply(GATEWAY_ERRORS[document]))
    settings = base_settings(
        server,
        state,
        WALSH_BLOCKLIST_URL=server.url(BLOCKLIST_HOST, "/v2/list.json"),
        WALSH_BLOCKLIST_SCHEMA_URL=server.url(BLOCKLIST_HOST, "/v2/schema.json"),
    )
    second = await crawl(settings, [url], tmp_path)
    assert server.origin.hits_for(BLOCKLIST_HOST, "/v2/list.json") != []
    assert second.stats["walsh/blocklist/rejected"] == 1
    assert outcomes(second)[url] == ("denied", "R3")
    assert server.origin.hits_for("www.blocked.test") == []
    assert server.origin.hits_for("blocked.test") == []

    third = await crawl(settings, [url], tmp_path)  # and nothing bad was persisted
    assert outcomes(third)[url] == ("denied", "R3")
    assert server.origin.hits_for("www.blocked.test") == []


@pytest_twisted.ensureDeferred
async def test_a_published_schema_that_differs_can_only_add_constraints(server, tmp_path):
    from scrapy_walsh_research.core.blocklist.schema import bundled_schema

    stricter = bundled_schema()
    stricter["properties"]["operator"]["const"] = "Someone Else"
    server.origin.route(BLOCKLIST_HOST, SCHEMA_PATH, json_reply(stricter))
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("blocked.test")))
    serve_hosts(server, "fine.test")
    res = await crawl(base_settings(server, tmp_path / "s"), [server.url("fine.test")], tmp_path)
    assert res.stats["walsh/blocklist/schema_differs"] == 1
    assert res.stats["walsh/blocklist/rejected"] == 1  # fails the published schema's extra rule


REFRESH_TABLE = [
    # (refresh, seconds, clamped)
    ("PT6H", 21600, False),
    ("P1D", 86400, False),
    ("PT90S", 90, False),
    ("PT0.5S", 60, True),
    ("PT0S", 60, True),
    ("PT", 60, True),
    ("P1M", 86400, True),
    ("P1Y", 86400, True),
    ("P0.5Y", 86400, True),
    ("P36500D", 86400, True),
    ("PT99999999999H", 86400, True),
    ("P99999999999Y", 86400, True),
    (None, 21600, False),
]


@pytest.mark.parametrize(("value", "seconds", "clamped"), REFRESH_TABLE)
def test_refresh_is_clamped_to_a_logged_range(value, seconds, clamped):
    got, why = refresh_seconds(value, 60.0, 86400.0)
    assert got == pytest.approx(seconds)
    assert (why is not None) is clamped


@pytest.mark.parametrize("value", ["P", "P-1D", "6 hours", "PT1e5S", "", "PXH"])
def test_a_refresh_that_is_no_duration_rejects_the_document(value):
    with pytest.raises(BlocklistError, match="refresh"):
        refresh_seconds(value, 60.0, 86400.0)


@pytest.mark.parametrize("refresh", ["PT99999999999H", "P1M", "PT0.5S", "P36500D"])
@pytest_twisted.ensureDeferred
async def test_an_extreme_refresh_neither_breaks_the_crawl_nor_floods_the_operator(
    server, tmp_path, refresh
):
    state = tmp_path / "state"
    doc = blocklist_doc("blocked.test", refresh=refresh)
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(doc))
    serve_hosts(server, "blocked.test", "a.test", "b.test", "c.test")
    urls = [server.url(h) for h in ("a.test", "b.test", "c.test", "www.blocked.test")]
    for _ in range(2):  # a second run must not be stuck on what the first stored
        res = await crawl(base_settings(server, state), urls, tmp_path)
        assert [outcomes(res)[u] for u in urls] == [("fetched", None)] * 3 + [("denied", "R3")]
    assert len(server.origin.hits_for(BLOCKLIST_HOST, BLOCKLIST_PATH)) == 1
    assert server.origin.hits_for("www.blocked.test") == []


@pytest_twisted.ensureDeferred
async def test_a_stored_fetch_time_in_the_future_does_not_delay_the_refresh(server, tmp_path):
    import time

    from scrapy_walsh_research.state import SQLiteStateStore

    state = tmp_path / "state"
    state.mkdir()
    store = SQLiteStateStore(state / "state.sqlite3")
    url = server.url(BLOCKLIST_HOST, BLOCKLIST_PATH)
    skewed = {"url": url, "document": blocklist_doc(), "fetched_at": time.time() + 3600}
    await store.put("blocklist", "adopted", skewed)
    await store.close()
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("new.test")))
    serve_hosts(server, "new.test")
    res = await crawl(base_settings(server, state), [server.url("new.test")], tmp_path)
    assert len(server.origin.hits_for(BLOCKLIST_HOST, BLOCKLIST_PATH)) == 1
    assert res.stats["walsh/blocklist/future_fetch_time"] == 1
    assert outcomes(res)[server.url("new.test")] == ("denied", "R3")
    assert server.origin.hits_for("new.test") == []


@pytest_twisted.ensureDeferred
async def test_a_stored_list_that_does_not_validate_is_never_restored(server, tmp_path):
    import time

    from scrapy_walsh_research.state import SQLiteStateStore

    state = tmp_path / "state"
    state.mkdir()
    store = SQLiteStateStore(state / "state.sqlite3")
    url = server.url(BLOCKLIST_HOST, BLOCKLIST_PATH)
    garbage = {"url": url, "document": {"error": "Bad Gateway"}, "fetched_at": time.time()}
    await store.put("blocklist", "adopted", garbage)
    await store.close()
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("new.test")))
    serve_hosts(server, "new.test")
    res = await crawl(base_settings(server, state), [server.url("new.test")], tmp_path)
    assert res.stats["walsh/blocklist/stored_rejected"] == 1
    assert len(server.origin.hits_for(BLOCKLIST_HOST, BLOCKLIST_PATH)) == 1  # fetched at once
    assert outcomes(res)[server.url("new.test")] == ("denied", "R3")


# -- the operator's documents come over https, and never from a blocked host -------


@pytest_twisted.ensureDeferred
async def test_a_blocklist_redirect_into_a_blocked_host_is_not_followed(server, tmp_path):
    serve_hosts(server, "fine.test")
    hijack = server.url("evil.test", "/list.json")
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, Reply(302, "", {"Location": hijack}))
    server.origin.route("evil.test", "/list.json", json_reply(blocklist_doc()))
    settings = base_settings(server, tmp_path / "s", WALSH_BLOCKLIST_EXTRA=["evil.test"])
    res = await crawl(settings, [server.url("fine.test")], tmp_path)
    assert server.origin.hits_for("evil.test") == []
    assert res.stats["walsh/blocklist/fetch_failed"] == 1
    assert res.stats["walsh/denied/R3"] == 1


@pytest_twisted.ensureDeferred
async def test_a_schema_redirect_into_a_blocked_host_is_not_followed(server, tmp_path):
    serve_hosts(server, "fine.test")
    hijack = server.url("evil.test", "/schema.json")
    server.origin.route(BLOCKLIST_HOST, SCHEMA_PATH, Reply(302, "", {"Location": hijack}))
    settings = base_settings(server, tmp_path / "s", WALSH_BLOCKLIST_EXTRA=["evil.test"])
    res = await crawl(settings, [server.url("fine.test")], tmp_path)
    assert server.origin.hits_for("evil.test") == []
    assert res.stats["walsh/blocklist/schema_fallback"] == 1
    assert res.stats["walsh/blocklist/adopted"] == 1


@pytest.mark.parametrize("what", ["blocklist", "schema"])
@pytest_twisted.ensureDeferred
async def test_an_https_document_redirected_to_http_is_not_followed(server, tmp_path, what):
    server.start_tls()
    serve_hosts(server, "fine.test")
    plain = server.url(BLOCKLIST_HOST, "/plain.json")
    server.origin.route(BLOCKLIST_HOST, "/plain.json", json_reply(blocklist_doc()))
    server.origin.route(BLOCKLIST_HOST, "/moved", Reply(301, "", {"Location": plain}))
    settings = base_settings(
        server,
        tmp_path / "s",
        WALSH_BLOCKLIST_ALLOW_HTTP=False,
        WALSH_BLOCKLIST_URL=server.tls_url(BLOCKLIST_HOST, BLOCKLIST_PATH),
        WALSH_BLOCKLIST_SCHEMA_URL=server.tls_url(BLOCKLIST_HOST, SCHEMA_PATH),
    )
    key = "WALSH_BLOCKLIST_URL" if what == "blocklist" else "WALSH_BLOCKLIST_SCHEMA_URL"
    settings[key] = server.tls_url(BLOCKLIST_HOST, "/moved")
    res = await crawl(settings, [server.url("fine.test")], tmp_path)
    moved = server.origin.hits_for(BLOCKLIST_HOST, "/moved")
    assert len(moved) == 1 and moved[0].headers["host"].endswith(f":{server.tls_port}")
    assert server.origin.hits_for(BLOCKLIST_HOST, "/plain.json") == []
    assert res.stats["walsh/denied/R3"] == 1


# -- property-based: any document the blocklist URL serves ---------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = ["contract", "updated", "operator", "contact", "policy", "refresh", "blocked"]


@st.composite
def near_documents(draw: Any) -> Any:
    """A valid document with some fields dropped or replaced by any JSON."""
    doc: dict[str, Any] = blocklist_doc("a.test", "b.test")
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=3, unique=True)):
        if draw(st.booleans()):
            doc.pop(name)
        else:
            doc[name] = draw(JSON)
    if draw(st.booleans()) and isinstance(doc.get("blocked"), list) and doc["blocked"]:
        doc["blocked"][0] = draw(
            st.dictionaries(st.sampled_from(["domain", "added", "reason"]), JSON)
        )
    return doc


@pytest.fixture(scope="module")
def gate(tmp_path_factory: Any) -> Any:
    from scrapy.utils.test import get_crawler

    from scrapy_walsh_research.gates.blocklist import BlocklistMiddleware

    state = tmp_path_factory.mktemp("state")
    return BlocklistMiddleware(get_crawler(settings_dict={"WALSH_STATE_DIR": str(state)}))


def reference_valid(doc: Any) -> bool:
    from jsonschema import Draft202012Validator

    from scrapy_walsh_research.core.blocklist.schema import bundled_schema

    validator = Draft202012Validator(
        bundled_schema(), format_checker=Draft202012Validator.FORMAT_CHECKER
    )
    return validator.is_valid(doc)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(near_documents(), JSON))
def test_a_document_is_adopted_exactly_when_the_published_schema_accepts_it(gate, doc):
    try:
        adopted = gate.builder.parse(doc, url="https://x.test/b.json", fetched_at=0.0)
    except BlocklistError:
        adopted = None
    valid = reference_valid(doc)
    if adopted is not None:
        assert valid
        assert 60 <= adopted.refresh <= 86400
    elif valid:  # rejected although the schema accepts it: only an unreadable refresh
        with pytest.raises(BlocklistError, match="refresh"):
            refresh_seconds(doc.get("refresh"), 60.0, 86400.0)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_are_adopted_or_rejected_never_raised(gate, body):
    try:
        gate.builder.parse(body, url="https://x.test/b.json", fetched_at=0.0)
    except BlocklistError:
        pass


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        st.none(),
        st.text(max_size=30),
        st.from_regex(r"P(\d{1,15}[YMWD])*(T(\d{1,15}(\.\d{1,3})?[HMS])*)?", fullmatch=True),
    )
)
def test_refresh_is_in_range_or_rejects_the_document(value):
    try:
        seconds, _ = refresh_seconds(value, 60.0, 86400.0)
    except BlocklistError:
        return
    assert 60.0 <= seconds <= 86400.0


def test_a_schema_format_that_cannot_be_checked_stops_the_crawl_at_start_up(tmp_path):
    """jsonschema skips a format it has no checker for, silently: without
    rfc3339-validator an 'updated' that is no date-time would be adopted.
    The gate refuses to start instead, naming what to install."""
    import re
    import subprocess
    import sys

    script = (
        "import sys; sys.modules['rfc3339_validator'] = None\n"  # as if not installed
        "from scrapy.utils.test import get_crawler\n"
        "from scrapy_walsh_research.gates.blocklist.middleware import BlocklistMiddleware\n"
        f"crawler = get_crawler(settings_dict={{'WALSH_STATE_DIR': {str(tmp_path)!r}}})\n"
        "BlocklistMiddleware(crawler)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "WalshConfigurationError" in run.stderr and "['date-time']" in run.stderr
    assert "rfc3339-validator" in run.stderr
    # and with it installed, every format the bundled schema names has a checker
    from jsonschema.validators import validator_for

    from scrapy_walsh_research.core.blocklist.document import REQUIRED_FORMATS
    from scrapy_walsh_research.core.blocklist.schema import bundled_schema, bundled_schema_text

    schema = bundled_schema()
    named = {m.group(1) for m in re.finditer(r'"format":\s*"([^"]+)"', bundled_schema_text())}
    assert named == REQUIRED_FORMATS <= set(validator_for(schema).FORMAT_CHECKER.checkers)
