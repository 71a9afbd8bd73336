"""R6: only declared targets reach the network: no followed links, no
sub-resources, no injected requests; metadata only."""

from __future__ import annotations

from typing import Any

import pytest_twisted
import scrapy
from scrapy import signals

from scrapy_walsh_research.preflight import SCOPE_MW, SCOPE_SPIDER_MW
from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.spiders.targets import TargetsSpider
from tests.conftest import base_settings, crawl

LINKY_HTML = """<html><head>
<link rel="stylesheet" href="/style.css"><script src="/app.js"></script>
<link rel="preload" href="/font.woff2" as="font">
</head><body>
<a href="/next">next</a> <a href="http://other.test/elsewhere">away</a>
<img src="/img.png"><iframe src="/frame.html"></iframe>
</body></html>"""
SUBRESOURCES = ["/style.css", "/app.js", "/font.woff2", "/next", "/img.png", "/frame.html"]


def linky_site(server: Any) -> str:
    o = server.origin
    o.route("site.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    o.route("site.test", "/", Reply(200, LINKY_HTML, {"Content-Type": "text/html"}))
    for path in SUBRESOURCES:
        o.route("site.test", path, Reply(200, "x"))
    o.route("other.test", "/elsewhere", Reply(200, "x"))
    return server.url("site.test", "/")


class FollowingSpider(TargetsSpider):
    """A spider that does what spiders usually do: follow every link and asset."""

    async def parse_target(self, response: Any) -> Any:
        async for out in super().parse_target(response):
            yield out
        for sel in response.css(
            "a::attr(href), img::attr(src), script::attr(src), link::attr(href), iframe::attr(src)"
        ):
            yield response.follow(sel.get(), callback=self.parse_target)
        yield {"file_urls": [response.urljoin("/img.png")]}


def assert_only_declared(server: Any) -> None:
    assert [h.path for h in server.origin.hits_for("site.test")] == ["/robots.txt", "/"]
    assert server.origin.hits_for("other.test") == []


@pytest_twisted.ensureDeferred
async def test_followed_links_and_sub_resources_are_never_requested(
    server, tmp_path, without_preflight
):
    # The start-up check refuses a media pipeline (tests/test_preflight.py);
    # with the check off, the R6 gate still denies the pipeline's download.
    url = linky_site(server)
    settings = base_settings(
        server,
        tmp_path / "s",
        ITEM_PIPELINES={"scrapy.pipelines.files.FilesPipeline": 1},
        FILES_STORE=str(tmp_path / "files"),
    )
    res = await crawl(settings, [url], tmp_path, spidercls=FollowingSpider)
    assert_only_declared(server)
    assert res.stats["walsh/scope/followup_dropped"] == 7
    assert res.stats["walsh/denied/R6"] == 1  # the FilesPipeline download of /img.png
    records = [i for i in res.items if "outcome" in i]
    assert [(r["outcome"], r["url"]) for r in records] == [("fetched", url)]
    assert "<a href" not in str(records[0])  # metadata, not content


@pytest_twisted.ensureDeferred
async def test_without_the_scope_guards_the_links_are_followed(server, tmp_path, without_preflight):
    url = linky_site(server)
    settings = base_settings(
        server,
        tmp_path / "s",
        DOWNLOADER_MIDDLEWARES={SCOPE_MW: None},
        SPIDER_MIDDLEWARES={SCOPE_SPIDER_MW: None},
    )
    await crawl(settings, [url], tmp_path, spidercls=FollowingSpider)
    assert {"/next", "/img.png"} <= {h.path for h in server.origin.hits_for("site.test")}


class InjectingExtension:
    """Another component that asks the engine for a sub-resource of the page."""

    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler
        self.injected: list[scrapy.Request] = []
        crawler.signals.connect(self.on_response, signal=signals.response_received)

    @classmethod
    def from_crawler(cls, crawler: Any) -> InjectingExtension:
        return cls(crawler)

    def on_response(self, response: Any, request: Any, spider: Any) -> None:
        if not self.injected and response.url.endswith("/"):
            self.injected.append(scrapy.Request(response.urljoin("/next"), dont_filter=True))
            self.crawler.engine.crawl(self.injected[0])


@pytest_twisted.ensureDeferred
async def test_a_request_injected_by_another_component_is_denied(server, tmp_path):
    url = linky_site(server)
    settings = base_settings(
        server, tmp_path / "s", EXTENSIONS={f"{__name__}.InjectingExtension": 0}
    )
    res = await crawl(settings, [url], tmp_path)
    assert res.crawler.get_extension(InjectingExtension).injected
    assert_only_declared(server)
    assert res.stats["walsh/denied/R6"] == 1


@pytest_twisted.ensureDeferred
async def test_redirects_are_followed_at_most_five_hops(server, tmp_path):
    o = server.origin
    o.route("hops.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    for i in range(7):
        o.route(
            "hops.test", f"/{i}", Reply(302, "", {"Location": server.url("hops.test", f"/{i + 1}")})
        )
    res = await crawl(
        base_settings(server, tmp_path / "s"), [server.url("hops.test", "/0")], tmp_path
    )
    assert [h.path for h in o.hits_for("hops.test")] == [
        "/robots.txt",
        "/0",
        "/1",
        "/2",
        "/3",
        "/4",
        "/5",
    ]
    assert res.items[0]["outcome"] == "failed"


@pytest_twisted.ensureDeferred
async def test_meta_refresh_is_not_followed(server, tmp_path):
    o = server.origin
    o.route("mr.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    page = '<html><head><meta http-equiv="refresh" content="0;url=/elsewhere"></head></html>'
    o.route("mr.test", "/", Reply(200, page, {"Content-Type": "text/html"}))
    o.route("mr.test", "/elsewhere", Reply(200, "x"))
    res = await crawl(base_settings(server, tmp_path / "s"), [server.url("mr.test", "/")], tmp_path)
    assert res.items[0]["outcome"] == "fetched"
    assert o.hits_for("mr.test", "/elsewhere") == []
