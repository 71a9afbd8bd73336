from __future__ import annotations

import pytest_twisted

from scrapy_walsh_research import USER_AGENT
from scrapy_walsh_research.sandbox import Reply
from tests.conftest import base_settings, crawl


@pytest_twisted.ensureDeferred
async def test_smoke(server, tmp_path):
    server.origin.route("site.test", "/robots.txt", Reply(200, "User-agent: *\nDisallow: /private\n"))
    server.origin.route("site.test", "/page", Reply(200, "hello", {"Content-Type": "text/plain"}))
    res = await crawl(
        base_settings(server, tmp_path / "state"),
        [server.url("site.test", "/page"), server.url("site.test", "/private/x")],
        tmp_path,
    )
    print(res.items, res.stats)
    print([(h.host, h.path, h.user_agent) for h in server.origin.hits])
    assert {i["outcome"] for i in res.items} == {"fetched", "denied"}
    assert all(h.user_agent == USER_AGENT for h in server.origin.hits)
