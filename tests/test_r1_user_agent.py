"""R1: every request on the wire carries exactly the Walsh-Research User-Agent."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import pytest_twisted
import scrapy

from scrapy_walsh_research import USER_AGENT
from scrapy_walsh_research.components import USERAGENT_MW
from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.spiders.targets import TargetsSpider
from tests.support.crawling import base_settings, crawl


class SpoofingSpider(TargetsSpider):
    """A spider that tries its own User-Agent on every request."""

    async def start(self) -> Any:
        async for obj in super().start():
            if isinstance(obj, scrapy.Request):
                obj.headers[b"User-Agent"] = b"Spoofed/9.9"
            yield obj


class SpoofingMiddleware:
    """Another downloader middleware that sets a User-Agent (runs before R1)."""

    def process_request(self, request: scrapy.Request) -> None:
        request.headers[b"User-Agent"] = b"Middleware/1.0"


def serve_mixed_site(server: Any) -> list[str]:
    o = server.origin
    o.route("ua.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    o.route("ua.test", "/page", Reply(200, "ok"))
    o.route("ua.test", "/moved", Reply(301, "", {"Location": server.url("ua.test", "/page2")}))
    o.route("ua.test", "/page2", Reply(200, "ok2"))
    calls = {"n": 0}

    def flaky(hit: Any) -> Reply:
        calls["n"] += 1
        return Reply(500 if calls["n"] == 1 else 200, "flaky")

    o.route("ua.test", "/flaky", flaky)
    return [server.url("ua.test", p) for p in ("/page", "/moved", "/flaky")]


@pytest_twisted.ensureDeferred
async def test_every_request_on_the_wire_has_the_exact_user_agent(server, tmp_path):
    urls = serve_mixed_site(server)
    settings = base_settings(
        server,
        tmp_path / "state",
        USER_AGENT="ProjectSetting/1.0",
        DOWNLOADER_MIDDLEWARES={f"{__name__}.SpoofingMiddleware": 600},
    )
    res = await crawl(settings, urls, tmp_path, spidercls=SpoofingSpider)
    hits = server.origin.hits
    paths = {(h.host, h.path) for h in hits}
    # targets, robots.txt, blocklist, schema, the redirect hop and the retry all went out
    assert {
        ("ua.test", "/robots.txt"),
        ("ua.test", "/page"),
        ("ua.test", "/moved"),
        ("ua.test", "/page2"),
        ("operator.test", "/.well-known/walsh-research/blocklist.json"),
        ("operator.test", "/.well-known/walsh-research/blocklist.schema.json"),
    } <= paths
    assert len(server.origin.hits_for("ua.test", "/flaky")) == 2
    assert [h.user_agent for h in hits] == [USER_AGENT] * len(hits)
    assert all(i["outcome"] == "fetched" for i in res.items)
    assert res.stats["walsh/useragent/replaced"] >= 4


@pytest_twisted.ensureDeferred
async def test_without_the_r1_gate_a_spider_header_reaches_the_wire(
    server, tmp_path, without_preflight
):
    urls = serve_mixed_site(server)
    settings = base_settings(
        server, tmp_path / "state", DOWNLOADER_MIDDLEWARES={USERAGENT_MW: None}
    )
    await crawl(settings, urls[:1], tmp_path, spidercls=SpoofingSpider)
    assert server.origin.hits_for("ua.test", "/page")[0].user_agent == "Spoofed/9.9"


@pytest.mark.parametrize(
    ("project", "warned"),
    [
        ({"USER_AGENT": "shop (+http://www.yourdomain.com)"}, "USER_AGENT='shop (+http://www.yourdomain.com)'"),
        ({"DEFAULT_REQUEST_HEADERS": {"User-Agent": "shop/1.0"}}, "DEFAULT_REQUEST_HEADERS['User-Agent']='shop/1.0'"),
        ({}, None),
        ({"USER_AGENT": USER_AGENT}, None),
    ],
)
@pytest_twisted.ensureDeferred
async def test_a_projects_own_user_agent_is_replaced_with_one_warning_naming_the_setting(
    server, tmp_path, caplog, project, warned
):
    urls = serve_mixed_site(server)
    settings = base_settings(server, tmp_path / "state", **project)
    with caplog.at_level(logging.WARNING, logger="scrapy_walsh_research.gates.useragent"):
        await crawl(settings, urls[:1], tmp_path)
    said = [r.getMessage() for r in caplog.records if "is not sent" in r.getMessage()]
    if warned is None:
        assert said == []
    else:
        assert len(said) == 1 and said[0].startswith(warned), said
        assert USER_AGENT in said[0] and "Remove it from your settings" in said[0]
    assert {h.user_agent for h in server.origin.hits} == {USER_AGENT}
