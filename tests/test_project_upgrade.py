"""A project written for 0.2.0 keeps working on 0.3.0: its component paths
and setting names still do what they did, and say what to write instead
(``WalshDeprecationWarning``), until 0.4.0."""

from __future__ import annotations

import importlib
import re
import sys
import warnings
from typing import Any

import pytest
import pytest_twisted
from scrapy.settings import Settings
from scrapy.utils.misc import load_object

import scrapy_walsh_research
from scrapy_walsh_research import components
from scrapy_walsh_research._moved import MOVED, RENAMED
from scrapy_walsh_research.errors import WalshDeprecationWarning
from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.settings.options import (
    deprecated_names,
    policy_cache_size,
    policy_retry_delay,
    policy_ttl,
)
from tests.support.crawling import TDMREP, base_settings, crawl

#: the README's by-hand block as 0.2.0 published it, word for word
BLOCK_0_2_0 = """
SPIDER_MODULES = ["scrapy_walsh_research.spiders", *SPIDER_MODULES]  # the targets spider
DOWNLOADER_MIDDLEWARES = {
    "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,  # R2 below replaces it
    "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,  # R5 below replaces it
    "scrapy_walsh_research.scope.ScopeDownloaderMiddleware": 55,  # R6, first
    "scrapy_walsh_research.cadence.CadenceMiddleware": 60,  # R8
    "scrapy_walsh_research.blocklist.BlocklistMiddleware": 80,  # R3, before robots.txt
    "scrapy_walsh_research.robots.RobotsTxtMiddleware": 100,  # R2
    "scrapy_walsh_research.usage.UsagePreferencesMiddleware": 110,  # PREF, after robots.txt
    "scrapy_walsh_research.validators.ConditionalRequestMiddleware": 520,  # R7
    "scrapy_walsh_research.structured.NegotiationMiddleware": 530,  # R9
    "scrapy_walsh_research.retry.RetryMiddleware": 550,  # R5
    "scrapy_walsh_research.pacing.PacingMiddleware": 950,  # R4
    "scrapy_walsh_research.useragent.UserAgentMiddleware": 1000,  # R1, the last one
}
SPIDER_MIDDLEWARES = {"scrapy_walsh_research.scope.ScopeSpiderMiddleware": 5}  # R6
SCHEDULER = "scrapy_walsh_research.frontier.FrontierScheduler"
DOWNLOAD_HANDLERS = {
    "http": "scrapy_walsh_research.wire.WireTimedHTTP11DownloadHandler",
    "https": "scrapy_walsh_research.wire.WireTimedHTTP11DownloadHandler",
}
EXTENSIONS = {
    "scrapy_walsh_research.preflight.StartupCheck": 1000,  # checks even with no gate
    "scrapy_walsh_research.extensions.progress.Progress": 600,  # done/total, ETA
    "scrapy_walsh_research.extensions.heap.HeapFreeze": 610,
}
ITEM_PIPELINES = {"scrapy_walsh_research.records.RecordPipeline": 100}  # cadence with each record
USER_AGENT = "Mozilla/5.0 (compatible; Walsh-Research/1.0; +https://wal.sh/bot/)"  # R1
CONCURRENT_REQUESTS = 1
CONCURRENT_REQUESTS_PER_DOMAIN = 1
DOWNLOAD_DELAY = 0  # pacing replaces Scrapy's slot delay, its jitter and AutoThrottle
DOWNLOAD_DELAY_JITTER = 0
AUTOTHROTTLE_ENABLED = False
REDIRECT_MAX_TIMES = 5
METAREFRESH_ENABLED = False  # Scrapy's default is True
DOWNLOAD_MAXSIZE = 16 * 1024 * 1024  # metadata, not content: not Scrapy's 1 GiB
DOWNLOAD_WARNSIZE = 4 * 1024 * 1024
"""
#: the component paths of that block that moved in 0.3.0
MOVED_PATHS = sorted(
    {
        path
        for path in re.findall(r'"(scrapy_walsh_research\.[\w.]+)"', BLOCK_0_2_0)
        if path.rpartition(".")[0] in MOVED
    }
)


def settings_0_2_0(**more: Any) -> dict[str, Any]:
    namespace: dict[str, Any] = {"SPIDER_MODULES": []}
    exec(BLOCK_0_2_0, namespace)
    return {k: v for k, v in namespace.items() if k.isupper()} | more


def test_the_0_2_0_block_names_components_that_moved():
    assert len(MOVED_PATHS) == 14, MOVED_PATHS  # every gate, the frontier, the wire, the check


@pytest.mark.parametrize("old", MOVED_PATHS)
def test_a_0_2_0_component_path_is_the_same_component_as_its_public_path(old):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WalshDeprecationWarning)
        component = load_object(old)
    public = components.name_of(component)
    assert public in components.PUBLIC, (old, public)
    assert load_object(public) is component
    assert getattr(scrapy_walsh_research, public.rpartition(".")[2]) is component


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_imports_warns_and_hands_on_what_lives_elsewhere_now(old, monkeypatch):
    for name in [m for m in sys.modules if m == old or m.startswith(f"{old}.")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.warns(WalshDeprecationWarning, match=old.replace(".", r"\.")):
        module = importlib.import_module(old)
    homes = [importlib.import_module(home) for home in MOVED[old]]
    names = [n for n in dir(homes[0]) if not n.startswith("_")]
    assert names
    for name in names:
        assert getattr(module, name) is getattr(homes[0], name), name


def test_a_renamed_class_still_imports_by_its_0_2_0_name():
    (old_module, old_name), new_name = next(iter(RENAMED.items()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WalshDeprecationWarning)
        module = importlib.import_module(old_module)
    with pytest.warns(WalshDeprecationWarning, match=new_name):
        cls = getattr(module, old_name)
    assert cls is scrapy_walsh_research.PreferencesMiddleware


def test_the_0_2_0_retry_delay_setting_is_read_until_the_new_one_is_set():
    assert policy_retry_delay(Settings({"WALSH_ROBOTS_RETRY_DELAY": 7})) == 7.0
    both = Settings({"WALSH_ROBOTS_RETRY_DELAY": 7, "WALSH_POLICY_RETRY_DELAY": 9})
    assert policy_retry_delay(both) == 9.0
    # as for any setting, the higher priority wins: -s OLD=... beats the project
    ranked = Settings({"WALSH_POLICY_RETRY_DELAY": 9}, priority="project")
    ranked.set("WALSH_ROBOTS_RETRY_DELAY", 5, priority="cmdline")
    assert policy_retry_delay(ranked) == 5.0
    assert policy_retry_delay(Settings()) == 60.0
    (line,) = deprecated_names(Settings({"WALSH_ROBOTS_RETRY_DELAY": 7}))
    assert "WALSH_POLICY_RETRY_DELAY" in line


def test_the_0_3_0_policy_cache_settings_are_read_until_the_new_ones_are_set():
    # WALSH_ROBOTS_TTL and WALSH_ROBOTS_CACHE_SIZE govern tdmrep.json too
    assert policy_ttl(Settings({"WALSH_ROBOTS_TTL": 7})) == 7.0
    assert policy_ttl(Settings({"WALSH_ROBOTS_TTL": 7, "WALSH_POLICY_TTL": 9})) == 9.0
    assert policy_ttl(Settings()) == 86400.0
    assert policy_cache_size(Settings({"WALSH_ROBOTS_CACHE_SIZE": 5})) == 5
    both = Settings({"WALSH_ROBOTS_CACHE_SIZE": 5, "WALSH_POLICY_CACHE_SIZE": 6})
    assert policy_cache_size(both) == 6
    assert policy_cache_size(Settings()) == 1000
    said = deprecated_names(Settings({"WALSH_ROBOTS_TTL": 7, "WALSH_ROBOTS_CACHE_SIZE": 5}))
    assert [line.split(",")[0] for line in said] == [
        "WALSH_ROBOTS_TTL is the 0.3.0 name of WALSH_POLICY_TTL",
        "WALSH_ROBOTS_CACHE_SIZE is the 0.3.0 name of WALSH_POLICY_CACHE_SIZE",
    ]


def test_the_start_up_check_refuses_a_policy_ttl_over_a_day_by_its_0_3_0_name():
    from scrapy_walsh_research.settings.check import problems

    found = problems(Settings({"WALSH_ROBOTS_TTL": 3e7}))
    assert any(p.startswith("WALSH_ROBOTS_TTL=3e+07:") for p in found), found


def test_the_start_up_check_refuses_a_bad_retry_delay_by_the_name_the_project_wrote():
    from scrapy_walsh_research.settings.check import problems

    found = problems(Settings(settings_0_2_0(WALSH_ROBOTS_RETRY_DELAY=0)))
    assert any(p.startswith("WALSH_ROBOTS_RETRY_DELAY=0:") for p in found), found


@pytest_twisted.ensureDeferred
async def test_a_0_2_0_settings_block_still_crawls_and_warns_once_per_old_name(server, tmp_path):
    server.origin.route("old.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    server.origin.route("old.test", "/page", Reply(200, "a page"))
    settings = base_settings(server, tmp_path / "s", **settings_0_2_0(WALSH_ROBOTS_RETRY_DELAY=30))
    del settings["ADDONS"]  # 0.2.0's by-hand wiring, no add-on
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = await crawl(settings, [server.url("old.test", "/page")], tmp_path)
    assert [(r["outcome"], r["rule"]) for r in res.items] == [("fetched", None)]
    assert [h.path for h in server.origin.hits_for("old.test")] == ["/robots.txt", TDMREP, "/page"]
    said = [str(w.message) for w in caught if issubclass(w.category, WalshDeprecationWarning)]
    for old in MOVED_PATHS:
        named = [line for line in said if f"names {old}, a 0.2.0 path" in line]
        assert len(named) == 1, (old, said)
        assert f"write {components.name_of(load_object(old))}" in named[0]
    assert sum("WALSH_ROBOTS_RETRY_DELAY is the 0.2.0 name" in line for line in said) == 1
