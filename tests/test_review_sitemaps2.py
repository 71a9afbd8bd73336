"""Review of issue 32 (sitemaps, the cooperative half): origin tests for
what a re-run may skip on a sitemap's word."""

from __future__ import annotations

from typing import Any

import pytest_twisted

from scrapy_walsh_research.core.timestamps import utc_iso
from scrapy_walsh_research.sandbox import Reply
from tests.support.crawling import base_settings, crawl
from tests.test_r7_sitemaps import OLD, SETTINGS, Site, outcomes


@pytest_twisted.ensureDeferred
async def test_a_target_whose_last_answer_was_a_404_is_not_skipped(server, tmp_path):
    """Run 1: every page 200. Run 2 (its sitemap unusable: a 503): p1 answers
    404, the page is gone, but the sitemap still lists it with its old
    <lastmod> (as sitemaps do). Run 3 must not record p1 as not_modified on
    the run-1 copy: the site's last word on it was 404."""
    site = Site(server, "gone404.test", 5)
    settings = base_settings(server, tmp_path / "s", **SETTINGS)
    await crawl(settings, site.urls, tmp_path)
    served = site._sitemap
    server.origin.route("gone404.test", "/sitemap.xml", Reply(503, "busy"))
    server.origin.route("gone404.test", "/p1", Reply(404, "gone"))
    second = await crawl(settings, site.urls, tmp_path)
    assert outcomes(second, site)["p1"] == "failed"
    server.origin.route("gone404.test", "/sitemap.xml", served)
    mark = len(server.origin.hits)
    third = await crawl(settings, site.urls, tmp_path)
    assert "/p1" in [h.path for h in site.page_hits(mark)]
    assert outcomes(third, site)["p1"] != "not_modified"


@pytest_twisted.ensureDeferred
async def test_a_target_that_redirects_is_not_skipped_on_its_own_lastmod(server, tmp_path):
    """/p1 redirects to /new1. The sitemap lists both: /p1 still with its old
    <lastmod> (a stale entry), /new1 with the date it changed. The copy the
    bundle holds for /p1 is /new1's: the site said it changed."""
    site = Site(server, "moved.test", 5)
    version = {"n": 1}

    def new1(hit: Any) -> Reply:
        etag = f'"n{version["n"]}"'
        if hit.headers.get("if-none-match") == etag:
            return Reply(304, "")
        return Reply(200, f"new1 {etag}", {"ETag": etag, "Content-Type": "text/plain"})

    server.origin.route(
        "moved.test", "/p1", Reply(301, "", {"Location": server.url("moved.test", "/new1")})
    )
    server.origin.route("moved.test", "/new1", new1)
    served = site._sitemap
    new_lastmod = {"at": OLD}

    def sitemap(hit: Any) -> Reply:
        reply = served(hit)
        if reply.status != 200:
            return reply
        body = reply.encoded().decode()
        extra = (
            f"<url><loc>{server.url('moved.test', '/new1')}</loc>"
            f"<lastmod>{new_lastmod['at']}</lastmod></url></urlset>"
        )
        return Reply(200, body.replace("</urlset>", extra), {"Content-Type": "application/xml"})

    server.origin.route("moved.test", "/sitemap.xml", sitemap)
    settings = base_settings(server, tmp_path / "s", **SETTINGS)
    await crawl(settings, site.urls, tmp_path)
    version["n"] = 2
    new_lastmod["at"] = utc_iso()  # the page changed, and the sitemap says so
    mark = len(server.origin.hits)
    second = await crawl(settings, site.urls, tmp_path)
    sent = [h.path for h in server.origin.hits[mark:] if h.host == "moved.test"]
    assert "/new1" in sent, sent
    assert outcomes(second, site)["p1"] == "fetched"


@pytest_twisted.ensureDeferred
async def test_a_probe_that_redirects_earns_no_trust(server, tmp_path):
    """The probe (/p0, claimed unchanged) now answers 301 to another page
    that answers 304 to the copied If-None-Match: /p0 did not answer
    "unchanged" itself, so its sitemap is not trusted on that answer."""
    site = Site(server, "hop.test", 5)
    settings = base_settings(server, tmp_path / "s", **SETTINGS)
    await crawl(settings, site.urls, tmp_path)
    server.origin.route(
        "hop.test", "/p0", Reply(301, "", {"Location": server.url("hop.test", "/elsewhere")})
    )
    server.origin.route("hop.test", "/elsewhere", site._page("/p0"))  # the page moved
    mark = len(server.origin.hits)
    second = await crawl(settings, site.urls, tmp_path)
    sent = sorted(h.path for h in site.page_hits(mark))
    # not trusted on a hop's answer: another target checks it instead
    assert len(sent) == 2 and sent[0] == "/p0", sent
    assert second.stats["walsh/sitemaps/requests_saved"] == 3


@pytest_twisted.ensureDeferred
async def test_many_declared_sitemaps_cost_at_most_one_document_per_two_due_targets(
    server, tmp_path
):
    """robots.txt declares eight sitemaps (news sites declare dozens); the
    origin has four due targets: at most two documents are fetched."""
    extra = [f"/sm-{i}.xml" for i in range(7)]
    site = Site(
        server,
        "many.test",
        4,
        robots_extra="".join(f"Sitemap: {server.url('many.test', p)}\n" for p in extra),
    )
    empty = '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"></urlset>'
    for path in extra:
        server.origin.route(
            "many.test", path, Reply(200, empty, {"Content-Type": "application/xml"})
        )
    settings = base_settings(server, tmp_path / "s", **SETTINGS)
    await crawl(settings, site.urls, tmp_path)
    mark = len(server.origin.hits)
    await crawl(settings, site.urls, tmp_path)
    fetched = [h.path for h in server.origin.hits[mark:] if h.path.startswith(("/sitemap", "/sm-"))]
    assert len(fetched) <= 2, fetched


@pytest_twisted.ensureDeferred
async def test_a_sitemap_that_redirects_is_gated_at_every_hop(server, tmp_path):
    """R3 and R2 on a sitemap's redirect hop: to a blocked host, or to a path
    its robots.txt disallows, nothing is sent; every page is revalidated."""
    from tests.support.crawling import BLOCKLIST_HOST, BLOCKLIST_PATH, blocklist_doc, json_reply

    off = Site(server, "hop-off.test", 3)
    hidden = Site(server, "hop-hidden.test", 3, robots_extra="Disallow: /private/\n")
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("blocked2.test")))
    server.origin.route("blocked2.test", "/sitemap.xml", off._sitemap)
    server.origin.route("hop-hidden.test", "/private/sitemap.xml", hidden._sitemap)
    settings = base_settings(server, tmp_path / "s", **SETTINGS)
    urls = off.urls + hidden.urls
    await crawl(settings, urls, tmp_path)
    server.origin.route(
        "hop-off.test",
        "/sitemap.xml",
        Reply(301, "", {"Location": server.url("blocked2.test", "/sitemap.xml")}),
    )
    server.origin.route(
        "hop-hidden.test",
        "/sitemap.xml",
        Reply(302, "", {"Location": server.url("hop-hidden.test", "/private/sitemap.xml")}),
    )
    mark = len(server.origin.hits)
    second = await crawl(settings, urls, tmp_path)
    assert not server.origin.hits_for("blocked2.test", None)
    assert not server.origin.hits_for("hop-hidden.test", "/private/sitemap.xml")
    assert len(off.page_hits(mark)) == 3 and len(hidden.page_hits(mark)) == 3
    assert "walsh/sitemaps/requests_saved" not in second.stats


@pytest_twisted.ensureDeferred
async def test_a_sitemap_host_with_a_huge_crawl_delay_does_not_park_the_targets(
    server, tmp_path, monkeypatch
):
    """The sitemap is on another host whose robots.txt asks for 90 s between
    requests (allowed here: WALSH_MAX_CRAWL_DELAY 120). The origin's targets
    must not wait for it beyond LOAD_LIMIT (120 s; 5 s here): they were set
    aside until the sitemap host was ready (a Crawl-delay of a day: a day),
    and the limit was only checked when they came back."""
    import time as _time

    monkeypatch.setattr("scrapy_walsh_research.gates.sitemaps.LOAD_LIMIT", 5.0)
    site = Site(server, "far.test", 4, sitemap_host="slowmaps.test")
    server.origin.route(
        "slowmaps.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\nCrawl-delay: 90\n")
    )
    settings = base_settings(
        server, tmp_path / "s", **SETTINGS, CLOSESPIDER_TIMEOUT=60, WALSH_MAX_CRAWL_DELAY=120
    )
    await crawl(settings, site.urls, tmp_path)
    mark = len(server.origin.hits)
    began = _time.monotonic()
    second = await crawl(settings, site.urls, tmp_path)
    took = _time.monotonic() - began
    assert took < 30, took
    assert len(site.page_hits(mark)) == 4
    assert sorted(outcomes(second, site).values()) == ["not_modified"] * 4


@pytest_twisted.ensureDeferred
async def test_a_host_skipped_for_its_crawl_delay_is_not_spun_through_the_sitemaps_gate(
    server, tmp_path
):
    """Its robots.txt now asks for 100 s between requests, beyond
    WALSH_MAX_CRAWL_DELAY: the host is skipped (R4), at once. The sitemaps
    gate, before the pacing gate, must not hand its targets back to the
    frontier (which lets a target that will be denied go at once) for the
    two minutes of LOAD_LIMIT."""
    import time as _time

    site = Site(server, "spin.test", 4)
    settings = base_settings(server, tmp_path / "s", **SETTINGS, WALSH_ROBOTS_TTL=1)
    await crawl(settings, site.urls, tmp_path)
    sitemap = server.url("spin.test", "/sitemap.xml")
    server.origin.route(
        "spin.test",
        "/robots.txt",
        Reply(200, f"User-agent: *\nAllow: /\nCrawl-delay: 100\nSitemap: {sitemap}\n"),
    )
    await _sleep(1.5)
    began = _time.monotonic()
    second = await crawl(settings, site.urls, tmp_path)
    took = _time.monotonic() - began
    assert {i["rule"] for i in second.items} == {"R4"}
    assert took < 60, (took, second.stats.get("walsh/pacing/requeued"))


async def _sleep(seconds: float) -> None:
    from tests.support.crawling import sleep

    await sleep(seconds)


@pytest_twisted.ensureDeferred
async def test_a_sitemap_host_skipped_for_its_crawl_delay_receives_no_sitemap_request(
    server, tmp_path
):
    """A host whose Crawl-delay is beyond WALSH_MAX_CRAWL_DELAY is skipped:
    it receives nothing after its robots.txt. The pacing gate exempted every
    bundle request from that check, so the sitemap was sent once the host
    was ready (4 s here). It is ignored instead; the pages are revalidated."""
    site = Site(server, "near.test", 4, sitemap_host="skipmaps.test")
    server.origin.route(
        "skipmaps.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\nCrawl-delay: 4\n")
    )
    settings = base_settings(server, tmp_path / "s", **SETTINGS, WALSH_MAX_CRAWL_DELAY=2)
    await crawl(settings, site.urls, tmp_path)
    mark = len(server.origin.hits)
    second = await crawl(settings, site.urls, tmp_path)
    assert not site.sitemap_hits()
    assert len(site.page_hits(mark)) == 4
    assert sorted(outcomes(second, site).values()) == ["not_modified"] * 4
