"""Behind a forward proxy (``http_proxy``), every gate still keys on the target host."""

from __future__ import annotations

import pytest_twisted

from scrapy_walsh_research import USER_AGENT
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
from tests.support.proxy import RecordingProxy


@pytest_twisted.ensureDeferred
async def test_gates_key_on_the_target_host_behind_a_forward_proxy(server, tmp_path, monkeypatch):
    proxy = RecordingProxy(server.port).start()
    for name in ("no_proxy", "NO_PROXY", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", proxy.url)
    try:
        server.origin.route(
            BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("blocked.test"))
        )
        server.origin.route(
            "open.test", "/robots.txt", Reply(200, "User-agent: Walsh-Research\nDisallow: /no\n")
        )
        server.origin.route("open.test", "/yes", Reply(200, "ok"))
        urls = [
            server.url("open.test", "/yes"),
            server.url("open.test", "/no"),
            server.url("blocked.test", "/"),
        ]
        res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    finally:
        await proxy.stop()
    got = [(i["outcome"], i["rule"]) for i in sorted(res.items, key=lambda i: i["line"])]
    assert got == [("fetched", None), ("denied", "R2"), ("denied", "R3")]
    # the requests really went through the proxy, addressed to the target hosts
    assert server.url("open.test", "/robots.txt") in proxy.seen
    assert server.url("open.test", "/yes") in proxy.seen
    assert not any("blocked.test" in uri or uri.endswith("/no") for uri in proxy.seen)
    assert {h.user_agent for h in server.origin.hits} == {USER_AGENT}
    assert [h.path for h in server.origin.hits_for("open.test")] == ["/robots.txt", TDMREP, "/yes"]
