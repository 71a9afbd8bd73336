"""The targets spider: one record per list line, metadata only, bad lines reported."""

from __future__ import annotations

import hashlib
import logging
import re

import pytest
import pytest_twisted

from scrapy_walsh_research.records import OUTCOMES
from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.spiders.targets import TargetsSpider
from tests.conftest import TDMREP, base_settings, crawl

BODY = b"<html><body>secret page content</body></html>"


@pytest_twisted.ensureDeferred
async def test_exactly_one_record_per_line_with_metadata_and_no_body(server, tmp_path, caplog):
    o = server.origin
    o.route("t.test", "/robots.txt", Reply(200, "User-agent: *\nDisallow: /no\n"))
    o.route(
        "t.test",
        "/page",
        Reply(
            200,
            BODY,
            {
                "Content-Type": "text/html",
                "ETag": '"v1"',
                "Last-Modified": "Sat, 21 Nov 2026 00:00:00 GMT",
            },
        ),
    )
    o.route("t.test", "/gone", Reply(404, "nope"))
    page = server.url("t.test", "/page")
    lines = [
        "# a comment",
        "",
        page,
        "ftp://t.test/file",
        "not a url at all",
        page.replace("/page", "/page/#frag"),  # same canonical URL
        server.url("t.test", "/no"),
        server.url("t.test", "/gone"),
        "http://closed.test:9/x",
    ]
    # (the closed port's robots.txt is not waited for: WALSH_POLICY_WAIT=0)
    settings = base_settings(server, tmp_path / "s", WALSH_POLICY_WAIT=0)
    with caplog.at_level(logging.WARNING):
        res = await crawl(settings, lines, tmp_path)
    got = sorted(res.items, key=lambda i: i["line"])
    assert [(i["line"], i["outcome"], i["rule"]) for i in got] == [
        (3, "fetched", None),
        (4, "invalid", None),
        (5, "invalid", None),
        (6, "duplicate", None),
        (7, "denied", "R2"),
        (8, "failed", None),
        (9, "skipped", "R2"),  # robots.txt of a closed port is unreachable: fail closed
    ]
    fetched = got[0]
    assert fetched["url"] == page and fetched["canonical_url"] == page
    assert fetched["status"] == 200
    assert fetched["content_type"] == "text/html"
    assert fetched["content_length"] == len(BODY)
    assert fetched["sha256"] == hashlib.sha256(BODY).hexdigest()
    assert fetched["etag"] == '"v1"'
    assert fetched["last_modified"] == "Sat, 21 Nov 2026 00:00:00 GMT"
    assert fetched["final_url"] == page and fetched["fetched_at"]
    assert got[4]["reason"] and got[5]["status"] == 404
    assert all(BODY.decode() not in str(v) for i in got for v in i.values())
    assert all(i["outcome"] in OUTCOMES for i in got)
    assert "line 4: not an http(s) URL" in caplog.text and "line 5" in caplog.text
    assert res.stats["walsh/outcome/invalid"] == 2
    assert [h.path for h in server.origin.hits_for("t.test")] == [
        "/robots.txt", TDMREP, "/page", "/gone"]  # fmt: skip


def test_a_missing_list_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="-a list=FILE"):
        TargetsSpider()
    with pytest.raises(ValueError, match="does not exist"):
        TargetsSpider(list=str(tmp_path / "nope.txt"))


@pytest_twisted.ensureDeferred
async def test_a_long_crawl_logs_progress_with_an_eta_from_the_busiest_host(
    server, tmp_path, caplog
):
    """Every LOGSTATS_INTERVAL: done/total, outcomes by rule, and an ETA no
    schedule could beat (here: the one host's chain of 1 s intervals)."""
    server.origin.route("slow.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    for i in range(5):
        server.origin.route("slow.test", f"/p/{i}", Reply(200, "x"))
    lines = [server.url("slow.test", f"/p/{i}") for i in range(5)] + ["not a url"]
    settings = base_settings(server, tmp_path / "s", LOGSTATS_INTERVAL=1.5)
    with caplog.at_level(logging.INFO, logger="scrapy_walsh_research.extensions.progress"):
        await crawl(settings, lines, tmp_path)
    progress = [
        r.getMessage() for r in caplog.records if r.name == "scrapy_walsh_research.extensions.progress"
    ]
    assert any(
        re.search(r"Progress: [1-4]/6 targets .*ETA at least [1-4] s \(busiest host slow.test", p)
        for p in progress
    ), progress
    assert progress[-1].startswith("Progress: 6/6 targets (100 %); outcomes: fetched 5, invalid 1")


@pytest.mark.parametrize(("project", "expected"), [(None, 1), (16, 16)])
def test_item_concurrency_is_one_unless_the_project_sets_it(project, expected):
    """One record per response: Scrapy's 100 item tasks per response are pure
    cost (1.3 ms of CPU per request, bench/cost_bench.py); a project's own
    CONCURRENT_ITEMS still wins."""
    from scrapy.utils.test import get_crawler

    from scrapy_walsh_research.spiders.targets import TargetsSpider

    settings = {} if project is None else {"CONCURRENT_ITEMS": project}
    crawler = get_crawler(TargetsSpider, settings_dict=settings)
    assert crawler.settings.getint("CONCURRENT_ITEMS") == expected
