"""``scrapy crawl targets`` works in any project with the one ADDONS line, as a
new user tries it: ``scrapy startproject``, one line in settings.py, crawl."""

from __future__ import annotations

import json
import re

import pytest_twisted

from scrapy_walsh_research import USER_AGENT
from scrapy_walsh_research.sandbox import Reply
from tests.support.crawling import TDMREP
from tests.support.processes import _spawn, new_project


@pytest_twisted.ensureDeferred
async def test_a_new_project_with_the_addon_line_crawls_targets(server, tmp_path):
    project = new_project(tmp_path)
    server.origin.route("shop.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    server.origin.route("shop.test", "/item", Reply(200, "an item"))
    urls = project / "urls.txt"
    urls.write_text(server.url("shop.test", "/item") + "\n")
    out = project / "out.jl"
    proc = _spawn(
        server, f"list={urls}", tmp_path / "state",
        {"FEEDS": json.dumps({str(out): {"format": "jsonlines"}})}, project=project,
    )  # fmt: skip
    await proc.ended
    assert b"Spider not found" not in proc.err, proc.err.decode()[-2000:]
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["outcome"] == "fetched"
    paths = [h.path for h in server.origin.hits_for("shop.test")]
    assert paths == ["/robots.txt", TDMREP, "/item"]
    assert {h.user_agent for h in server.origin.hits} == {USER_AGENT}


@pytest_twisted.ensureDeferred
async def test_a_new_users_first_crawl_logs_what_happened_in_plain_words(server, tmp_path):
    """Scrapy's default log (DEBUG) of a first crawl in a fresh project: a
    denial's record is logged from its request, not as "Scraped from R2: ...";
    a retry is the bundle's R5 line, not Scrapy's own retry line (its
    RetryMiddleware is off); the settings dump does not show the
    ``ROBOTSTXT_OBEY = True`` of startproject's settings.py (Scrapy's robots.txt
    middleware is off, the R2 gate obeys robots.txt); a line without a scheme
    in an http list is told to add http://."""
    project = new_project(tmp_path)
    assert "ROBOTSTXT_OBEY = True" in (project / "shop" / "settings.py").read_text()
    server.origin.route("shop.test", "/robots.txt", Reply(200, "User-agent: *\nDisallow: /private\n"))
    server.origin.route("shop.test", "/item", Reply(200, "an item"))
    answers = iter([Reply(503, "busy", {"Retry-After": "1"})])
    server.origin.route("shop.test", "/busy", lambda hit: next(answers, Reply(200, "ok")))
    item, private, busy = (server.url("shop.test", p) for p in ("/item", "/private", "/busy"))
    urls = project / "urls.txt"
    bare = item.replace("http://", "").replace("/item", "/bare")
    urls.write_text(f"{item}\n{private}\n{busy}\n{bare}\n")
    out = project / "out.jl"
    proc = _spawn(
        server, f"list={urls}", tmp_path / "state",
        {"FEEDS": json.dumps({str(out): {"format": "jsonlines"}}), "LOG_LEVEL": "DEBUG"},
        project=project,
    )  # fmt: skip
    await proc.ended
    log = proc.err.decode()
    records = {r["line"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert [records[n]["outcome"] for n in (1, 2, 3, 4)] == ["fetched", "denied", "fetched", "invalid"]
    assert "Scraped from R2" not in log
    assert f"Scraped from <GET {private}> (denied by R2)" in log, log[-3000:]
    assert len(server.origin.hits_for("shop.test", "/busy")) == 2  # retried, once
    assert "[scrapy.downloadermiddlewares.retry]" not in log
    assert "R5: HTTP 503" in log
    dump = re.search(r"Overridden settings:\n(\{.*?\})\n\d{4}-", log, re.S)
    assert dump and "BOT_NAME" in dump.group(1), log[:3000]
    assert "ROBOTSTXT_OBEY" not in dump.group(1), dump.group(1)
    assert f"no scheme (write http://{bare}, as the list's other lines do)" in records[4]["reason"]
