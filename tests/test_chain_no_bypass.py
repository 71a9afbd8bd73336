"""No way around a gate: paths an adversarial review found to a host a gate
should have kept us from (a Host header, redirects of the bundle's own
fetches, dot segments, a retry after the pacing gate, odd blocklist
spellings), each now closed, judged at the origin."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
import scrapy
from scrapy.utils.defer import deferred_from_coro

from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.sandbox import Reply
from tests.support.crawling import (
    BLOCKLIST_HOST,
    BLOCKLIST_PATH,
    TDMREP,
    base_settings,
    blocklist_doc,
    crawl,
    json_reply,
)

ALLOW_ALL = Reply(200, "User-agent: *\nAllow: /\n")
DISALLOW_ALL = Reply(200, "User-agent: *\nDisallow: /\n")


def block(server: Any, *domains: str) -> None:
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc(*domains)))


class HeaderSpider(scrapy.Spider):
    """A project spider whose start requests carry their own headers."""

    name = "headers"

    def __init__(self, urls: list[str], headers: dict[str, str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.urls, self.extra = urls, headers

    async def start(self) -> Any:
        for url in self.urls:
            yield scrapy.Request(url, headers=self.extra, dont_filter=True, callback=self.parse,
                                 errback=self.failed)  # fmt: skip

    def parse(self, response: Any) -> Any:
        yield {"url": response.url, "outcome": "fetched"}

    def failed(self, failure: Any) -> Any:
        yield {"url": failure.request.url, "outcome": "failed", "why": repr(failure.value)}


# -- 1. a Host header routes a request to another site than the gates judged ------


@pytest_twisted.ensureDeferred
async def test_a_host_in_default_request_headers_is_refused_before_any_request(server, tmp_path):
    block(server, "blocked.test")
    for host in ("blocked.test", "ok.test"):
        server.origin.route(host, "/robots.txt", ALLOW_ALL)
        server.origin.route(host, "/", Reply(200, host))
    settings = base_settings(
        server, tmp_path / "s", DEFAULT_REQUEST_HEADERS={"Host": "blocked.test"}
    )
    with pytest.raises(WalshConfigurationError, match="DEFAULT_REQUEST_HEADERS sets Host"):
        await crawl(settings, [server.url("ok.test")], tmp_path)
    assert server.origin.hits == []


@pytest_twisted.ensureDeferred
async def test_a_host_header_on_a_request_is_removed_the_url_host_is_what_goes_out(
    server, tmp_path
):
    from scrapy_walsh_research.sandbox.crawl import crawl_spider

    block(server, "blocked.test")
    for host in ("blocked.test", "ok.test"):
        server.origin.route(host, "/robots.txt", ALLOW_ALL)
        server.origin.route(host, "/", Reply(200, host))
    settings = base_settings(server, tmp_path / "s")
    items, _ = await deferred_from_coro(
        crawl_spider(
            HeaderSpider, settings, urls=[server.url("ok.test")], headers={"Host": "blocked.test"}
        )
    )
    assert server.origin.hits_for("blocked.test") == [], items
    assert [h.path for h in server.origin.hits_for("ok.test")] == ["/robots.txt", TDMREP, "/"]


# -- 2. robots.txt redirected to another host's disallowed path ---------------------


@pytest_twisted.ensureDeferred
async def test_a_robots_txt_redirect_into_another_hosts_disallowed_path_is_not_followed(
    server, tmp_path
):
    server.origin.route("victim.test", "/robots.txt", DISALLOW_ALL)
    server.origin.route("victim.test", "/admin/delete", Reply(200, "deleted"))
    server.origin.route(
        "hostile.test", "/robots.txt",
        Reply(301, "", {"Location": server.url("victim.test", "/admin/delete")}),
    )  # fmt: skip
    server.origin.route("hostile.test", "/", Reply(200, "x"))
    await crawl(base_settings(server, tmp_path / "s"), [server.url("hostile.test")], tmp_path)
    assert server.origin.hits_for("victim.test", "/admin/delete") == []


# -- 3. the blocklist URL redirected to a third party's disallowed path -------------


@pytest_twisted.ensureDeferred
async def test_a_blocklist_redirect_into_a_third_partys_disallowed_path_is_not_followed(
    server, tmp_path
):
    server.origin.route(
        BLOCKLIST_HOST, BLOCKLIST_PATH,
        Reply(302, "", {"Location": server.url("victim.test", "/private/list.json")}),
    )  # fmt: skip
    server.origin.route("victim.test", "/robots.txt", DISALLOW_ALL)
    server.origin.route("victim.test", "/private/list.json", json_reply(blocklist_doc()))
    server.origin.route("ok.test", "/robots.txt", ALLOW_ALL)
    server.origin.route("ok.test", "/", Reply(200, "x"))
    await crawl(base_settings(server, tmp_path / "s"), [server.url("ok.test")], tmp_path)
    assert server.origin.hits_for("victim.test", "/private/list.json") == []


# -- 4. dot segments: the gate matches one path, the server serves another ---------


def resolved(path: str) -> str:
    """The path a server serves for *path* (nginx, Apache: %2e decoded, dot segments removed)."""
    import posixpath
    from urllib.parse import unquote

    return posixpath.normpath(unquote(path))


@pytest_twisted.ensureDeferred
async def test_dot_segments_in_a_declared_line_do_not_reach_a_disallowed_path(server, tmp_path):
    server.origin.route("d.test", "/robots.txt", Reply(200, "User-agent: *\nDisallow: /private\n"))
    await crawl(
        base_settings(server, tmp_path / "s"),
        [server.url("d.test", "/open/../private/x")],
        tmp_path,
    )
    assert [h.path for h in server.origin.hits_for("d.test")] == ["/robots.txt"]


@pytest_twisted.ensureDeferred
async def test_a_redirect_with_encoded_dot_segments_does_not_reach_a_disallowed_path(
    server, tmp_path
):
    server.origin.route("v.test", "/robots.txt", Reply(200, "User-agent: *\nDisallow: /private\n"))
    server.origin.route("h.test", "/robots.txt", ALLOW_ALL)
    server.origin.route(
        "h.test", "/", Reply(302, "", {"Location": server.url("v.test", "/a/%2e%2e/private/x")})
    )
    await crawl(base_settings(server, tmp_path / "s"), [server.url("h.test")], tmp_path)
    served = [resolved(h.path) for h in server.origin.hits_for("v.test")]
    assert not [p for p in served if p.startswith("/private")], served


# -- 5. a Retry-After the pacing gate never sees -----------------------------------


def once_then_ok(status: int, headers: dict[str, str]) -> Any:
    calls = {"n": 0}

    def handler(hit: Any) -> Reply:
        calls["n"] += 1
        return Reply(status, "busy", headers) if calls["n"] == 1 else Reply(200, "ok")

    return handler


class ProjectRetry:
    """A project's own retry for rate limits."""

    def process_response(self, request: Any, response: Any, spider: Any = None) -> Any:
        if response.status in (429, 503) and not request.meta.get("project_retried"):
            retry = request.replace(dont_filter=True)
            retry.meta["project_retried"] = True
            return retry
        return response


@pytest_twisted.ensureDeferred
async def test_an_r5_gate_after_pacing_is_refused_before_any_request(server, tmp_path):
    """After the pacing gate, the R5 gate would retry before pacing saw the
    Retry-After: its hold would be skipped."""
    from scrapy_walsh_research.components import RETRY_MW

    server.origin.route("ra.test", "/robots.txt", ALLOW_ALL)
    server.origin.route("ra.test", "/x", once_then_ok(429, {"Retry-After": "4"}))
    settings = base_settings(server, tmp_path / "s", DOWNLOADER_MIDDLEWARES={RETRY_MW: 960})
    with pytest.raises(WalshConfigurationError, match="between the pacing gate"):
        await crawl(settings, [server.url("ra.test", "/x")], tmp_path)
    assert server.origin.hits == []


@pytest_twisted.ensureDeferred
async def test_a_project_middleware_between_pacing_and_the_wire_is_refused(server, tmp_path):
    server.origin.route("rb.test", "/robots.txt", ALLOW_ALL)
    server.origin.route("rb.test", "/x", once_then_ok(503, {"Retry-After": "4"}))
    settings = base_settings(
        server, tmp_path / "s", DOWNLOADER_MIDDLEWARES={f"{__name__}.ProjectRetry": 975}
    )
    with pytest.raises(WalshConfigurationError, match="ProjectRetry"):
        await crawl(settings, [server.url("rb.test", "/x")], tmp_path)
    assert server.origin.hits == []


@pytest_twisted.ensureDeferred
async def test_a_project_retry_before_pacing_still_waits_out_the_retry_after(server, tmp_path):
    server.origin.route("rc.test", "/robots.txt", ALLOW_ALL)
    server.origin.route("rc.test", "/x", once_then_ok(503, {"Retry-After": "3"}))
    settings = base_settings(
        server, tmp_path / "s", DOWNLOADER_MIDDLEWARES={f"{__name__}.ProjectRetry": 940}
    )
    await crawl(settings, [server.url("rc.test", "/x")], tmp_path)
    first, retry = server.origin.hits_for("rc.test", "/x")
    assert retry.t - first.t >= 3.0


# -- 6. schema-valid spellings of an opt-out that block nothing ---------------------


@pytest_twisted.ensureDeferred
async def test_odd_but_schema_valid_blocklist_spellings_still_block_each_host_named(
    server, tmp_path
):
    spellings = ["//one.test", "two.test, three.test", '"four.test"', "five.test?src=mail"]
    block(server, *spellings)
    hosts = ["one.test", "two.test", "three.test", "four.test", "five.test"]
    for host in hosts:
        server.origin.route(host, "/robots.txt", ALLOW_ALL)
        server.origin.route(host, "/", Reply(200, host))
    await crawl(base_settings(server, tmp_path / "s"), [server.url(h) for h in hosts], tmp_path)
    assert {h: len(server.origin.hits_for(h)) for h in hosts} == dict.fromkeys(hosts, 0)
