"""The add-on, the explicit-middlewares route, and the start-up check that
refuses a non-conformant configuration before any request is sent, whoever
set it: the project, a spider, or another add-on."""

from __future__ import annotations

import pytest
import pytest_twisted
from scrapy.utils.misc import load_object

from scrapy_walsh_research import USER_AGENT
from scrapy_walsh_research.components import (
    BLOCKLIST_MW,
    DOWNLOADER_MIDDLEWARES,
    FRONTIER,
    PACING_MW,
    RECORD_PIPELINE,
    RETRY_MW,
    ROBOTS_MW,
    SCOPE_MW,
    SCOPE_SPIDER_MW,
    SITEMAPS_MW,
    SPIDER_MIDDLEWARES,
    STARTUP_CHECK,
    USERAGENT_MW,
    WIRE_HANDLER,
)
from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.sandbox import Reply
from tests.support.crawling import (
    BLOCKLIST_HOST,
    BLOCKLIST_PATH,
    base_settings,
    blocklist_doc,
    crawl,
    json_reply,
)

SCRAPY_ROBOTS = "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"
SCRAPY_RETRY = "scrapy.downloadermiddlewares.retry.RetryMiddleware"
SCRAPY_HTTP11 = "scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler"


class BareDownloader:
    """A DOWNLOADER that is not Scrapy's: nothing says it calls the middlewares."""


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
        EXTENSIONS={STARTUP_CHECK: 1000},
        ITEM_PIPELINES={RECORD_PIPELINE: 100},
        CONCURRENT_REQUESTS=1,
        DOWNLOAD_DELAY=0,
        DOWNLOAD_DELAY_JITTER=0,
        REDIRECT_MAX_TIMES=5,
        METAREFRESH_ENABLED=False,  # Scrapy's default is True
    )
    await assert_obeys_r1_to_r3(server, settings, tmp_path)


REFUSALS = {
    "not serial": ({"CONCURRENT_REQUESTS": 8}, "CONCURRENT_REQUESTS=8"),
    "opt-outs read yearly": ({"WALSH_BLOCKLIST_MAX_REFRESH": 3e7}, "WALSH_BLOCKLIST_MAX_REFRESH"),
    "robots.txt cached for a year": ({"WALSH_POLICY_TTL": 3e7}, "WALSH_POLICY_TTL"),
    "a failed blocklist never retried": (
        {"WALSH_BLOCKLIST_RETRY_DELAY": 3e9},
        "WALSH_BLOCKLIST_RETRY_DELAY",
    ),
    "a Visit-time window waited for beyond a day": (
        {"WALSH_VISIT_TIME_WAIT": 2e5},
        "WALSH_VISIT_TIME_WAIT=200000",
    ),
    "record pipeline missing": ({"ITEM_PIPELINES": {RECORD_PIPELINE: None}}, "RecordPipeline"),
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
    # the adaptive half of R4/R5 (docs/adaptive.rst): off or below its floors
    "load factor below its floor": (
        {"WALSH_ADAPTIVE_FACTOR": 1},
        "Set WALSH_ADAPTIVE_FACTOR to 4 or more",
    ),
    "load factor off": (
        {"WALSH_ADAPTIVE_FACTOR": "off"},
        "WALSH_ADAPTIVE_FACTOR='off' is not a number",
    ),
    "adaptive cap below its floor": (
        {"WALSH_ADAPTIVE_MAX_DELAY": 5},
        "Set WALSH_ADAPTIVE_MAX_DELAY to 30 or more",
    ),
    "distress backoff that does not grow": (
        {"WALSH_ADAPTIVE_BACKOFF": 1},
        "Set WALSH_ADAPTIVE_BACKOFF to 2 or more",
    ),
    "distress eased after one answer": (
        {"WALSH_ADAPTIVE_RECOVERY": 1},
        "Set WALSH_ADAPTIVE_RECOVERY to 2 or more",
    ),
    "give-up shorter than the cap": (
        {"WALSH_ADAPTIVE_GIVE_UP": 10},
        "Set WALSH_ADAPTIVE_GIVE_UP to 60 or more",
    ),
    "scope guard missing": ({"DOWNLOADER_MIDDLEWARES": {SCOPE_MW: None}}, "R6 gate"),
    "link-dropping middleware missing": (
        {"SPIDER_MIDDLEWARES": {SCOPE_SPIDER_MW: None}},
        "SPIDER_MIDDLEWARES",
    ),
    # Settings that route around the gates (docs/readings.rst has the audit)
    "http cache": ({"HTTPCACHE_ENABLED": True}, "Set HTTPCACHE_ENABLED=False"),
    "meta refresh": ({"METAREFRESH_ENABLED": True}, "Set METAREFRESH_ENABLED=False"),
    "ajax crawl": ({"AJAXCRAWL_ENABLED": True}, "Set AJAXCRAWL_ENABLED=False"),
    "files pipeline": (
        {"ITEM_PIPELINES": {"scrapy.pipelines.files.FilesPipeline": 1}},
        "ITEM_PIPELINES enables scrapy.pipelines.files.FilesPipeline",
    ),
    "images pipeline": (
        {"ITEM_PIPELINES": {"scrapy.pipelines.images.ImagesPipeline": 1}},
        "ITEM_PIPELINES enables scrapy.pipelines.images.ImagesPipeline",
    ),
    "stock http handler": (
        {"DOWNLOAD_HANDLERS": {"http": SCRAPY_HTTP11}},
        f"DOWNLOAD_HANDLERS['http'] is {SCRAPY_HTTP11}",
    ),
    "stock https handler": (
        {"DOWNLOAD_HANDLERS": {"https": SCRAPY_HTTP11}},
        f"Set DOWNLOAD_HANDLERS['https'] to '{WIRE_HANDLER}'",
    ),
    # the engine takes three only where the wire-timed handler sends one at a time
    "three taken, another http handler": (
        {"DOWNLOAD_HANDLERS": {"http": SCRAPY_HTTP11}, "CONCURRENT_REQUESTS": 3},
        f"CONCURRENT_REQUESTS=3 without {WIRE_HANDLER} for http: R4 requires serial requests",
    ),
    "two taken without the explicit handlers": (
        {"DOWNLOAD_HANDLERS": {"https": SCRAPY_HTTP11}, "CONCURRENT_REQUESTS": 2},
        "Set DOWNLOAD_HANDLERS to it for http and https, or CONCURRENT_REQUESTS=1.",
    ),
    "more than three taken": ({"CONCURRENT_REQUESTS": 4}, "Set CONCURRENT_REQUESTS=3"),
    "reactorless": ({"TWISTED_REACTOR_ENABLED": False}, "Set TWISTED_REACTOR_ENABLED=True"),
    "another downloader": (
        {"DOWNLOADER": f"{__name__}.BareDownloader"},
        f"DOWNLOADER={__name__}.BareDownloader",
    ),
    "start-up check extension disabled": (
        {"EXTENSIONS": {STARTUP_CHECK: None}},
        f"EXTENSIONS disables {STARTUP_CHECK}",
    ),
    "sitemaps fetched for fewer targets than they cost": (
        {"WALSH_SITEMAP_MIN_TARGETS": 1},
        "WALSH_SITEMAP_MIN_TARGETS=1",
    ),
    "sitemaps gate before the policy gates": (
        {"DOWNLOADER_MIDDLEWARES": {SITEMAPS_MW: 105}},
        "orders the sitemaps gate (105) at or before the preferences gate",
    ),
    "spider middleware after the link guard": (
        {"SPIDER_MIDDLEWARES": {"scrapy.spidermiddlewares.depth.DepthMiddleware": 1}},
        "DepthMiddleware (1) at or after the R6 guard",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
@pytest_twisted.ensureDeferred
async def test_a_non_conformant_configuration_is_refused_before_any_request(server, tmp_path, case):
    overrides, names = REFUSALS[case]
    # where a cache or a media pipeline would write if the check let them run
    stores = {"HTTPCACHE_DIR": str(tmp_path / "cache"), "FILES_STORE": str(tmp_path / "files")}
    settings = base_settings(server, tmp_path / "s", **stores, **overrides)
    with pytest.raises(WalshConfigurationError, match="refusing to crawl") as info:
        await crawl(settings, world(server), tmp_path)
    assert names in str(info.value)
    assert server.origin.hits == []


EVERY_GATE_OFF = {
    "DOWNLOADER_MIDDLEWARES": dict.fromkeys(DOWNLOADER_MIDDLEWARES),
    "SPIDER_MIDDLEWARES": dict.fromkeys(SPIDER_MIDDLEWARES),
}


async def refusal(server, settings, tmp_path) -> str:
    """The start-up refusal's message, after asserting that the origin received nothing."""
    try:
        await crawl(settings, world(server), tmp_path)
    except WalshConfigurationError as exc:
        refused = str(exc)
    else:
        refused = ""
    assert [(h.host, h.path, h.user_agent) for h in server.origin.hits] == []
    assert "refusing to crawl" in refused
    return refused


@pytest.mark.parametrize("extension", ["enabled", "disabled"])
@pytest_twisted.ensureDeferred
async def test_the_addon_with_every_gate_component_disabled_is_refused(server, tmp_path, extension):
    # No gate is built, so none can run the check: the add-on and its
    # extension must, or the crawl goes out with the project's User-Agent.
    settings = base_settings(
        server,
        tmp_path / "s",
        USER_AGENT="myproject (+http://www.yourdomain.com)",
        **EVERY_GATE_OFF,
    )
    if extension == "disabled":
        settings["EXTENSIONS"] = {STARTUP_CHECK: None}
    refused = await refusal(server, settings, tmp_path)
    for rule in ("R1", "R2", "R3", "R4", "R5", "R6"):
        assert f"{rule} gate" in refused
    assert "SPIDER_MIDDLEWARES" in refused


class LateAddon:
    """Another add-on, loaded after ours: it turns the HTTP cache on and every gate off."""

    def update_settings(self, settings):
        settings.set("HTTPCACHE_ENABLED", True, "addon")
        for name, paths in (
            ("DOWNLOADER_MIDDLEWARES", DOWNLOADER_MIDDLEWARES),
            ("SPIDER_MIDDLEWARES", SPIDER_MIDDLEWARES),
        ):
            for path in paths:
                settings.set_in_component_priority_dict(name, load_object(path), None)


@pytest_twisted.ensureDeferred
async def test_settings_an_addon_changes_after_ours_are_checked_too(server, tmp_path):
    # Our add-on's own check has passed by then; the start-up-check extension,
    # built after every add-on, is what refuses.
    settings = base_settings(server, tmp_path / "s", HTTPCACHE_DIR=str(tmp_path / "cache"))
    settings["ADDONS"] = {**settings["ADDONS"], f"{__name__}.LateAddon": 10}
    refused = await refusal(server, settings, tmp_path)
    assert "Set HTTPCACHE_ENABLED=False" in refused
    assert "R3 gate" in refused


def meta_refresh_world(server):
    landing = server.url("elsewhere.test", "/landing")
    server.origin.route(
        "a.test",
        "/page",
        Reply(
            200,
            f'<html><head><meta http-equiv="refresh" content="0; url={landing}"></head></html>',
            {"Content-Type": "text/html"},
        ),
    )
    server.origin.route("elsewhere.test", "/landing", Reply(200, "landed"))
    return [server.url("a.test", "/page")]


@pytest_twisted.ensureDeferred
async def test_meta_refresh_would_parse_html_and_fetch_another_host(
    server, tmp_path, without_preflight
):
    # What the refusal prevents: with the check off, the page's HTML is parsed
    # and its refresh target, on a host nobody declared, is requested.
    settings = base_settings(server, tmp_path / "s", METAREFRESH_ENABLED=True)
    await crawl(settings, meta_refresh_world(server), tmp_path)
    assert [h.path for h in server.origin.hits_for("elsewhere.test")][-1] == "/landing"


@pytest_twisted.ensureDeferred
async def test_meta_refresh_is_refused_before_any_request(server, tmp_path):
    settings = base_settings(server, tmp_path / "s", METAREFRESH_ENABLED=True)
    with pytest.raises(WalshConfigurationError, match="METAREFRESH_ENABLED=True"):
        await crawl(settings, meta_refresh_world(server), tmp_path)
    assert server.origin.hits == []
