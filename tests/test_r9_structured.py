"""R9: negotiate markdown, then feeds; read feeds, markdown and llms.txt for
metadata with real parsers; never parse HTML; never request what is found."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest_twisted

from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.spiders.structured import HTML_NOTE
from tests.support.crawling import TDMREP, base_settings, crawl

MARKDOWN = """# Docs home

Intro with a [guide](/guide) and an [external link](https://elsewhere.test/x).

## Section two

- [API](api.md)
"""
RSS = """<?xml version="1.0"?><rss version="2.0"><channel><title>News</title><link>http://feeds.test/</link>
<item><guid>a</guid><title>First</title><link>http://feeds.test/a</link><pubDate>Sat, 21 Nov 2026 10:00:00 GMT</pubDate><description>BODY TEXT</description></item>
<item><guid>b</guid><title>Second</title><link>http://feeds.test/b</link></item>
</channel></rss>"""
ATOM = """<?xml version="1.0" encoding="utf-8"?><feed xmlns="http://www.w3.org/2005/Atom"><title>Atom news</title>
<entry><id>urn:x:1</id><title>One</title><link href="http://feeds.test/one"/><updated>2026-11-20T00:00:00Z</updated><content>BODY TEXT</content></entry>
</feed>"""
JSON_FEED = {
    "version": "https://jsonfeed.org/version/1.1",
    "title": "JSON news",
    "items": [
        {
            "id": "j1",
            "title": "Jay",
            "url": "/j1",
            "date_published": "2026-11-19T00:00:00Z",
            "content_text": "BODY TEXT",
        }
    ],
}
LLMS = "# Site\n\n> A summary\n\n## Docs\n\n- [Start](https://site.test/start): how to begin\n"


def host(server: Any, name: str, robots: str = "User-agent: *\nAllow: /\n") -> None:
    server.origin.route(name, "/robots.txt", Reply(200, robots))


def record_for(res: Any, url: str) -> dict[str, Any]:
    (rec,) = [i for i in res.items if i["url"] == url]
    return rec


@pytest_twisted.ensureDeferred
async def test_every_target_request_offers_markdown_first(server, tmp_path):
    host(server, "neg.test")
    server.origin.route("neg.test", "/", Reply(200, "x", {"Content-Type": "text/plain"}))
    await crawl(base_settings(server, tmp_path / "s"), [server.url("neg.test")], tmp_path)
    (hit,) = server.origin.hits_for("neg.test", "/")
    assert hit.headers["accept"].startswith("text/markdown, application/feed+json;q=0.9")


@pytest_twisted.ensureDeferred
async def test_markdown_gives_headings_and_links_and_no_body_and_links_are_not_requested(
    server, tmp_path
):
    host(server, "md.test")
    server.origin.route(
        "md.test", "/docs", Reply(200, MARKDOWN, {"Content-Type": "text/markdown; charset=utf-8"})
    )
    url = server.url("md.test", "/docs")
    res = await crawl(base_settings(server, tmp_path / "s"), [url], tmp_path)
    rec = record_for(res, url)
    assert rec["structured"] == "markdown"
    assert [(h["level"], h["text"]) for h in rec["headings"]] == [
        (1, "Docs home"),
        (2, "Section two"),
    ]
    assert [(link["text"], link["url"]) for link in rec["links"]] == [
        ("guide", server.url("md.test", "/guide")),
        ("external link", "https://elsewhere.test/x"),
        ("API", server.url("md.test", "/api.md")),
    ]
    assert "Intro with" not in json.dumps(rec)
    assert [h.path for h in server.origin.hits_for("md.test")] == ["/robots.txt", TDMREP, "/docs"]


@pytest_twisted.ensureDeferred
async def test_feeds_give_per_entry_metadata_and_no_body(server, tmp_path):
    host(server, "feeds.test")
    server.origin.route(
        "feeds.test", "/rss", Reply(200, RSS, {"Content-Type": "application/rss+xml"})
    )
    server.origin.route(
        "feeds.test", "/atom", Reply(200, ATOM, {"Content-Type": "application/xml"})
    )
    server.origin.route(
        "feeds.test",
        "/json",
        Reply(200, json.dumps(JSON_FEED), {"Content-Type": "application/feed+json"}),
    )
    urls = [server.url("feeds.test", p) for p in ("/rss", "/atom", "/json")]
    res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    rss, atom, jf = (record_for(res, u) for u in urls)
    assert [(e["id"], e["title"], e["link"]) for e in rss["entries"]] == [
        ("a", "First", "http://feeds.test/a"),
        ("b", "Second", "http://feeds.test/b"),
    ]
    assert rss["entries"][0]["published"] == "Sat, 21 Nov 2026 10:00:00 GMT"
    assert rss["feed"]["title"] == "News"
    assert [(e["id"], e["link"], e["updated"]) for e in atom["entries"]] == [
        ("urn:x:1", "http://feeds.test/one", "2026-11-20T00:00:00Z")
    ]
    assert [(e["id"], e["link"], e["published"]) for e in jf["entries"]] == [
        ("j1", server.url("feeds.test", "/j1"), "2026-11-19T00:00:00Z")
    ]
    assert all(r["structured"] == "feed" for r in (rss, atom, jf))
    assert "BODY TEXT" not in json.dumps(res.items)
    assert {h.path for h in server.origin.hits_for("feeds.test")} == {
        "/robots.txt",
        TDMREP,
        "/rss",
        "/atom",
        "/json",
    }


@pytest_twisted.ensureDeferred
async def test_repeated_runs_accumulate_first_seen_items_only(server, tmp_path):
    state = tmp_path / "s"
    host(server, "news.test")
    url = server.url("news.test", "/rss")
    server.origin.route(
        "news.test", "/rss", Reply(200, RSS, {"Content-Type": "application/rss+xml"})
    )
    first = await crawl(base_settings(server, state), [url], tmp_path)
    seen_a = first.items[0]["entries"][0]["first_seen"]
    third = RSS.replace("</channel>", "<item><guid>c</guid><title>Third</title></item></channel>")
    server.origin.route(
        "news.test", "/rss", Reply(200, third, {"Content-Type": "application/rss+xml"})
    )
    again = await crawl(base_settings(server, state), [url], tmp_path)
    assert [(e["id"], e["new"]) for e in again.items[0]["entries"]] == [
        ("a", False),
        ("b", False),
        ("c", True),
    ]
    assert again.items[0]["entries"][0]["first_seen"] == seen_a
    fourth = third.replace(
        "</channel>", "<item><guid>d</guid><title>Fourth</title></item></channel>"
    )
    server.origin.route(
        "news.test", "/rss", Reply(200, fourth, {"Content-Type": "application/rss+xml"})
    )
    only_new = await crawl(base_settings(server, state, WALSH_ONLY_NEW=True), [url], tmp_path)
    assert [e["id"] for e in only_new.items[0]["entries"]] == ["d"]


@pytest_twisted.ensureDeferred
async def test_html_is_not_parsed_and_llms_txt_is_probed_through_the_gates(server, tmp_path):
    host(server, "html.test")
    server.origin.route(
        "html.test",
        "/",
        Reply(200, "<html><a href='/x'>x</a></html>", {"Content-Type": "text/html"}),
    )
    server.origin.route(
        "html.test", "/about", Reply(200, "<html>about</html>", {"Content-Type": "text/html"})
    )
    server.origin.route("html.test", "/llms.txt", Reply(200, LLMS, {"Content-Type": "text/plain"}))
    urls = [server.url("html.test"), server.url("html.test", "/about")]
    res = await crawl(base_settings(server, tmp_path / "s", WALSH_LLMS_PROBE=True), urls, tmp_path)
    home, about = (record_for(res, u) for u in urls)
    assert home["structured"] is None and home["note"] == HTML_NOTE
    assert home["llms_txt"]["status"] == 200
    assert [link["url"] for link in home["llms_txt"]["links"]] == ["https://site.test/start"]
    assert "probed once per host" in about["llms_txt"]["note"]
    assert len(res.items) == 2
    paths = [h.path for h in server.origin.hits_for("html.test")]
    assert paths.count("/llms.txt") == 1 and "/x" not in paths and "/start" not in paths
    (probe,) = server.origin.hits_for("html.test", "/llms.txt")
    assert probe.headers["accept"].startswith("text/markdown")


@pytest_twisted.ensureDeferred
async def test_the_llms_probe_obeys_robots_txt_and_can_be_turned_off(server, tmp_path):
    host(server, "closed.test", "User-agent: *\nDisallow: /llms.txt\n")
    host(server, "off.test")
    for name in ("closed.test", "off.test"):
        server.origin.route(name, "/", Reply(200, "<html></html>", {"Content-Type": "text/html"}))
        server.origin.route(name, "/llms.txt", Reply(200, LLMS, {"Content-Type": "text/plain"}))
    closed = await crawl(
        base_settings(server, tmp_path / "s", WALSH_LLMS_PROBE=True),
        [server.url("closed.test")],
        tmp_path,
    )
    assert closed.items[0]["llms_txt"]["rule"] == "R2"
    off = await crawl(
        base_settings(server, tmp_path / "s2", WALSH_LLMS_PROBE=False),
        [server.url("off.test")],
        tmp_path,
    )
    assert "llms_txt" not in off.items[0]
    assert server.origin.hits_for("closed.test", "/llms.txt") == []
    assert server.origin.hits_for("off.test", "/llms.txt") == []


@pytest_twisted.ensureDeferred
async def test_reading_markdown_does_not_flood_the_log_at_scrapys_default_debug_level(
    server, tmp_path, caplog
):
    """markdown-it logs every block rule it tries at DEBUG (1,455 of 1,593
    lines for one 15 KB page): the bundle that brings it in quiets it."""
    page = "\n\n".join(f"## Part {i}\n\nSee [item {i}](/item/{i}) and *more*." for i in range(300))
    server.origin.route(
        "md.test", "/big", Reply(200, page, {"Content-Type": "text/markdown; charset=utf-8"})
    )
    settings = base_settings(server, tmp_path / "s", LOG_LEVEL="DEBUG")
    with caplog.at_level(logging.DEBUG):
        res = await crawl(settings, [server.url("md.test", "/big")], tmp_path)
    (rec,) = res.items
    assert rec["structured"] == "markdown" and len(rec["headings"]) == 300
    assert len(page) > 15_000
    assert [r for r in caplog.records if r.name.startswith("markdown_it")] == []
