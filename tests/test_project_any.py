"""``scrapy crawl targets`` works in any project with the one ADDONS line, as a
new user tries it: ``scrapy startproject``, one line in settings.py, crawl."""

from __future__ import annotations

import json

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
