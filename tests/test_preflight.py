"""The add-on, the explicit-middlewares route, and the start-up check that
refuses a non-conformant configuration before any request is sent."""

from __future__ import annotations

import pytest
import pytest_twisted

from scrapy_walsh_research import USER_AGENT
from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.preflight import (
    BLOCKLIST_MW,
    DOWNLOADER_MIDDLEWARES,
    FRONTIER,
    PACING_MW,
    RETRY_MW,
    ROBOTS_MW,
    SCOPE_MW,
    SCOPE_SPIDER_MW,
    SPIDER_MIDDLEWARES,
    USERAGENT_MW,
    WIRE_HANDLER,
)
from scrapy_walsh_research.sandbox import Reply
from tests.conftest import (
    BLOCKLIST_HOST,
    BLOCKLIST_PATH,
    base_settings,
    blocklist_doc,
    crawl,
    json_reply,
)

SCRAPY_ROBOTS = "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"
SCRAPY_RETRY = "scrapy.downloadermiddlewares.retry.RetryMiddleware"


def world(server):
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("blocked.test")))
    server.origin.route(
        "a.test",
        "/robots.txt",
        Reply(
            200, "User-agent: Walsh\nDisallow: /\n\nUser-agent: Walsh-Research/1.0\nDisallow: /no\n"
        ),
    )
    server.origin.route("a.test", "/yes", Reply(200, "ok"))
    return [
        server.url("a.test", "/yes"),
        server.url("a.test", "/no"),
        server.url("blocked.test", "/"),
    ]


async def assert_obeys_r1_to_r3(server, settings, tmp_path):
    res = await crawl(settings, world(server), tmp_path)
    assert [(i["outcome"], i["rule"]) for i in sorted(res.items, key=lambda i: i["line"])] == [
        ("fetched", None),
        ("denied", "R2"),
        ("denied", "R3"),
    ]
    assert {h.user_agent for h in server.origin.hits} == {USER_AGENT}
    assert server.origin.hits_for("blocked.test") == []
    assert server.origin.hits_for("a.test", "/no") == []


@pytest_twisted.ensureDeferred
async def test_the_addon_alone_makes_a_stock_project_obey_r1_to_r3(server, tmp_path):
    # what `scrapy startproject` writes, plus the one ADDONS line
    settings = base_settings(
        server,
        tmp_path / "s",
        ROBOTSTXT_OBEY=True,
        CONCURRENT_REQUESTS_PER_DOMAIN=1,
        DOWNLOAD_DELAY=1,
        USER_AGENT="myproject (+http://www.yourdomain.com)",
    )
    await assert_obeys_r1_to_r3(server, settings, tmp_path)


@pytest_twisted.ensureDeferred
async def test_explicit_downloader_middlewares_obey_r1_to_r3(server, tmp_path):
    settings = base_settings(server, tmp_path / "s")
    del settings["ADDONS"]
    settings.update(
        DOWNLOADER_MIDDLEWARES={SCRAPY_ROBOTS: None, SCRAPY_RETRY: None, **DOWNLOADER_MIDDLEWARES},
        SPIDER_MIDDLEWARES=SPIDER_MIDDLEWARES,
        SCHEDULER=FRONTIER,
        DOWNLOAD_HANDLERS={"http": WIRE_HANDLER, "https": WIRE_HANDLER},
        CONCURRENT_REQUESTS=1,
        DOWNLOAD_DELAY=0,
        DOWNLOAD_DELAY_JITTER=0,
        REDIRECT_MAX_TIMES=5,
    )
    await assert_obeys_r1_to_r3(server, settings, tmp_path)


REFUSALS = {
    "not serial": ({"CONCURRENT_REQUESTS": 8}, "CONCURRENT_REQUESTS=8"),
    "blocklist after robots": ({"DOWNLOADER_MIDDLEWARES": {BLOCKLIST_MW: 150}}, "blocklist gate"),
    "blocklist gate missing": ({"DOWNLOADER_MIDDLEWARES": {BLOCKLIST_MW: None}}, "R3 gate"),
    "robots gate missing": ({"DOWNLOADER_MIDDLEWARES": {ROBOTS_MW: None}}, "R2 gate"),
    "ua gate missing": ({"DOWNLOADER_MIDDLEWARES": {USERAGENT_MW: None}}, "R1 gate"),
    "scrapy robots beside ours": (
        {"DOWNLOADER_MIDDLEWARES": {SCRAPY_ROBOTS: 100}, "ROBOTSTXT_OBEY": True},
        "ROBOTSTXT_OBEY",
    ),
    "a middleware after the ua gate": (
        {
            "DOWNLOADER_MIDDLEWARES": {
                "scrapy.downloadermiddlewares.defaultheaders.DefaultHeadersMiddleware": 1100
            }
        },
        "DefaultHeadersMiddleware (1100)",
    ),
    "too many redirects": ({"REDIRECT_MAX_TIMES": 20}, "REDIRECT_MAX_TIMES=20"),
    "pacing gate missing": ({"DOWNLOADER_MIDDLEWARES": {PACING_MW: None}}, "R4 gate"),
    "retry gate missing": ({"DOWNLOADER_MIDDLEWARES": {RETRY_MW: None}}, "R5 gate"),
    "pacing before robots": ({"DOWNLOADER_MIDDLEWARES": {PACING_MW: 90}}, "pacing gate (90)"),
    "scrapy retry beside ours": (
        {"DOWNLOADER_MIDDLEWARES": {SCRAPY_RETRY: 560}},
        "RETRY_ENABLED=False",
    ),
    "minimum delay under 1 s": ({"WALSH_MIN_DELAY": 0.2}, "WALSH_MIN_DELAY=0.2"),
    "scope guard missing": ({"DOWNLOADER_MIDDLEWARES": {SCOPE_MW: None}}, "R6 gate"),
    "link-dropping middleware missing": (
        {"SPIDER_MIDDLEWARES": {SCOPE_SPIDER_MW: None}},
        "SPIDER_MIDDLEWARES",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
@pytest_twisted.ensureDeferred
async def test_a_non_conformant_configuration_is_refused_before_any_request(server, tmp_path, case):
    overrides, names = REFUSALS[case]
    settings = base_settings(server, tmp_path / "s", **overrides)
    with pytest.raises(WalshConfigurationError, match="refusing to crawl") as info:
        await crawl(settings, world(server), tmp_path)
    assert names in str(info.value)
    assert server.origin.hits == []
