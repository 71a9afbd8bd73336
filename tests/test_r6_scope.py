"""R6: only declared targets reach the network: no followed links, no
sub-resources, no injected requests; metadata only."""

from __future__ import annotations

from typing import Any

import pytest_twisted
import scrapy
from scrapy import signals
from scrapy.utils.defer import deferred_from_coro

from scrapy_walsh_research.components import SCOPE_MW, SCOPE_SPIDER_MW
from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.spiders.targets import TargetsSpider
from tests.support.crawling import TDMREP, base_settings, crawl

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
    assert [h.path for h in server.origin.hits_for("site.test")] == ["/robots.txt", TDMREP, "/"]
    assert server.origin.hits_for("other.test") == []


@pytest_twisted.ensureDeferred
async def test_followed_links_and_sub_resources_are_never_requested(
    server, tmp_path, without_preflight
):
    # The start-up check refuses a media pipeline (tests/test_startup_check.py);
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
        # a followed link to a host the origin does not serve: its robots.txt
        # stays unknown, and the crawl need not wait the default 300 s for it
        WALSH_POLICY_WAIT=3,
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
        TDMREP,
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


# -- no per-request escape hatch ---------------------------------------------------

FORGERIES = [
    {"walsh_internal": "blocklist"},
    {"walsh_internal": "robots"},
    {"walsh_internal": "schema"},
    {"walsh_internal": "llms"},
    {"walsh_internal": "target.0000000000000000.00000000000000000000000000000000"},
    {"walsh_target": {"line": 1, "url": "x", "canonical_url": "x"}, "is_start_request": True},
]


def forbidden_site(server: Any) -> tuple[str, str]:
    """A blocked host and a host whose robots.txt disallows /private."""
    from tests.support.crawling import BLOCKLIST_HOST, BLOCKLIST_PATH, blocklist_doc, json_reply

    o = server.origin
    o.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("blocked.test")))
    o.route("blocked.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    o.route("blocked.test", "/forged", Reply(200, "x"))
    o.route("closed.test", "/robots.txt", Reply(200, "User-agent: *\nDisallow: /private\n"))
    o.route("closed.test", "/private", Reply(200, "x"))
    return server.url("blocked.test", "/forged"), server.url("closed.test", "/private")


class ForgingSpider(scrapy.Spider):
    """A project spider whose start requests claim to be the bundle's own."""

    name = "forging"

    def __init__(self, urls: list[str], forged: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.urls, self.forged = urls, forged

    async def start(self) -> Any:
        for url in self.urls:
            yield scrapy.Request(url, meta=dict(self.forged), dont_filter=True,
                                 callback=self.parse, errback=self.failed)  # fmt: skip

    def parse(self, response: Any) -> Any:
        yield {"url": response.url, "outcome": "fetched", "rule": None}

    def failed(self, failure: Any) -> Any:
        exc = failure.value
        yield {"url": failure.request.url, "outcome": getattr(exc, "outcome", "failed"),
               "rule": getattr(exc, "rule", None)}  # fmt: skip


@pytest_twisted.ensureDeferred
async def test_a_start_request_with_a_forged_internal_marker_passes_every_gate(server, tmp_path):
    from scrapy_walsh_research.sandbox.crawl import crawl_spider

    blocked, private = forbidden_site(server)
    for forged in FORGERIES:
        settings = base_settings(server, tmp_path / "s")
        items, _ = await deferred_from_coro(
            crawl_spider(ForgingSpider, settings, urls=[blocked, private], forged=forged)
        )
        assert {(i["url"], i["outcome"], i["rule"]) for i in items} == {
            (blocked, "denied", "R3"),
            (private, "denied", "R2"),
        }, forged
    assert server.origin.hits_for("blocked.test") == []  # not even robots.txt
    assert [h.path for h in server.origin.hits_for("closed.test")] == ["/robots.txt"]


class ForgingExtension:
    """Another component injects requests that claim to be the bundle's own."""

    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler
        self.injected: list[Any] = []
        crawler.signals.connect(self.on_response, signal=signals.response_received)

    @classmethod
    def from_crawler(cls, crawler: Any) -> ForgingExtension:
        return cls(crawler)

    def on_response(self, response: Any, request: Any, spider: Any) -> None:
        if self.injected or not response.url.endswith("/"):
            return
        targets = getattr(self.crawler.spider, "forged_urls", [])
        for url, forged in zip(targets * len(FORGERIES), FORGERIES * len(targets), strict=True):
            self.injected.append(scrapy.Request(url, meta=dict(forged), dont_filter=True))
            self.crawler.engine.crawl(self.injected[-1])


@pytest_twisted.ensureDeferred
async def test_an_injected_request_with_a_forged_marker_is_denied_by_r6(server, tmp_path):
    blocked, private = forbidden_site(server)
    url = linky_site(server)

    class Spider(TargetsSpider):
        forged_urls = [blocked, private]

    settings = base_settings(server, tmp_path / "s", EXTENSIONS={f"{__name__}.ForgingExtension": 0})
    res = await crawl(settings, [url], tmp_path, spidercls=Spider)
    assert len(res.crawler.get_extension(ForgingExtension).injected) == 2 * len(FORGERIES)
    assert res.stats["walsh/denied/R6"] == 2 * len(FORGERIES)
    assert res.stats["walsh/internal/forged"] >= 2 * (len(FORGERIES) - 1)
    assert server.origin.hits_for("blocked.test") == []
    assert server.origin.hits_for("closed.test") == []
    assert_only_declared(server)
