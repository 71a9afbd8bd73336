"""What the add-on does to a project's own spiders, as a new user meets it:
an existing project (a quotesbot-like spider that follows author and
next-page links) gets the ADDONS line. Every spider becomes list-driven
(R6): it fetches its start pages only, and says so once, at WARNING, with
how many requests it yielded that were not followed; its own items are
exported as before."""

from __future__ import annotations

import json

import pytest_twisted

from scrapy_walsh_research.sandbox import Reply
from tests.support.crawling import TDMREP
from tests.support.processes import _spawn, new_project

#: quotesbot's spider (scrapy/quotesbot, toscrape-css), pointed at the sandbox
QUOTES_SPIDER = """\
import scrapy


class ToScrapeCSSSpider(scrapy.Spider):
    name = "toscrape-css"
    start_urls = [{start!r}]

    def parse(self, response):
        for quote in response.css("div.quote"):
            yield {{
                "text": quote.css("span.text::text").get(),
                "author": quote.css("small.author::text").get(),
            }}
            yield response.follow(quote.css("a.about::attr(href)").get(), self.parse_author)
        next_page = response.css("li.next > a::attr(href)").get()
        if next_page is not None:
            yield response.follow(next_page, self.parse)

    def parse_author(self, response):
        yield {{"name": response.css("h3::text").get()}}
"""


def quote(text: str, author: str) -> str:
    return (
        f'<div class="quote"><span class="text">{text}</span>'
        f'<small class="author">{author}</small> <a class="about" href="/author/{author}/">'
        "about</a></div>"
    )


def quotes_site(server) -> str:
    o = server.origin
    o.route("quotes.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    html = {"Content-Type": "text/html"}
    page = quote("One", "ada") + quote("Two", "bob") + quote("Three", "ada")
    o.route("quotes.test", "/", Reply(200, page + '<li class="next"><a href="/page/2/">'
                                      "Next</a></li>", html))  # fmt: skip
    o.route("quotes.test", "/page/2/", Reply(200, quote("Four", "cy"), html))
    for author in ("ada", "bob", "cy"):
        o.route("quotes.test", f"/author/{author}/", Reply(200, f"<h3>{author}</h3>", html))
    return server.url("quotes.test", "/")


@pytest_twisted.ensureDeferred
async def test_a_link_following_spider_fetches_its_start_page_and_says_once_what_it_did_not_follow(
    server, tmp_path
):
    project = new_project(tmp_path, "quotesbot")
    spider = QUOTES_SPIDER.format(start=quotes_site(server))
    (project / "quotesbot" / "spiders" / "toscrape_css.py").write_text(spider)
    out = tmp_path / "quotes.jl"
    proc = _spawn(server, "", tmp_path / "state", {"FEEDS": json.dumps({str(out): {"format": "jsonlines"}})},
                  project=project, command=("crawl", "toscrape-css"))  # fmt: skip
    await proc.ended
    err = proc.err.decode()
    assert proc.code == 0, err[-3000:]
    # the start page only: no author page, no next page
    assert [h.path for h in server.origin.hits_for("quotes.test")] == ["/robots.txt", TDMREP, "/"]
    items = [json.loads(line) for line in out.read_text().splitlines()]
    assert [i["text"] for i in items] == ["One", "Two", "Three"]  # its own items, as before
    # said once, at WARNING, in words, with the count: 3 author links and a next page
    warnings = [line for line in err.splitlines() if "WARNING" in line and "R6" in line]
    assert len(warnings) == 1, err[-3000:]
    assert "'toscrape-css' yielded 4 request(s)" in warnings[0]
    assert "follows no link" in warnings[0] and "start requests" in warnings[0]
    assert "'walsh/scope/followup_dropped': 4" in err
    # not one line per dropped link (one example at DEBUG at most)
    assert err.count("R6: dropped a request") <= 1, err[-3000:]
