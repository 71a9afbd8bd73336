"""R7 with sitemaps: a re-run does not request what a sitemap, checked on its
host in that run, says has not changed; the sitemap itself costs little,
passes every gate, and loses its trust when a target contradicts it.

Real crawls, several runs of one list on one state, against the loopback
origin; what the origin saw is counted. Hosts of one scenario crawl side
by side (each is paced on its own), so three runs cost seconds, not minutes.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_twisted
from scrapy.utils.defer import deferred_from_coro
from twisted.internet import defer, reactor

from scrapy_walsh_research.core.contract import USER_AGENT
from scrapy_walsh_research.core.timestamps import utc_iso
from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.state.redis import layout
from scrapy_walsh_research.state.redis.target_queue import enqueue
from tests.support.crawling import (
    BLOCKLIST_HOST,
    BLOCKLIST_PATH,
    base_settings,
    blocklist_doc,
    crawl,
    gaps,
    json_reply,
    sleep,
    write_list,
)
from tests.support.fleet import crawl_feed, redis_settings

#: before any run: what the sitemaps claim for pages that do not change
OLD = "2020-01-01T00:00:00+00:00"
SETTINGS = {"WALSH_SITEMAP_MIN_TARGETS": 3, "WALSH_SITEMAP_TTL": 0}


@dataclass
class Site:
    """A host whose pages carry ETags, and whose robots.txt declares a sitemap
    that claims a ``<lastmod>`` for each page."""

    server: Any
    host: str
    pages: int
    robots_extra: str = ""
    sitemap_path: str = "/sitemap.xml"
    sitemap_host: str | None = None
    versions: dict[str, int] = field(default_factory=dict)
    lastmods: dict[str, str] = field(default_factory=dict)
    broken: bool = False
    #: every <lastmod> is the moment the sitemap is served
    always_now: bool = False

    def __post_init__(self) -> None:
        sitemap_url = self.server.url(self.sitemap_host or self.host, self.sitemap_path)
        robots = f"User-agent: *\nAllow: /\n{self.robots_extra}Sitemap: {sitemap_url}\n"
        self.server.origin.route(self.host, "/robots.txt", Reply(200, robots))
        for path in self.paths:
            self.versions[path] = 1
            self.lastmods[path] = OLD
            self.server.origin.route(self.host, path, self._page(path))
        self.server.origin.route(self.sitemap_host or self.host, self.sitemap_path, self._sitemap)

    @property
    def paths(self) -> list[str]:
        return [f"/p{i}" for i in range(self.pages)]

    @property
    def urls(self) -> list[str]:
        return [self.server.url(self.host, p) for p in self.paths]

    def _page(self, path: str) -> Any:
        def answer(hit: Any) -> Reply:
            etag = f'"v{self.versions[path]}"'
            if hit.headers.get("if-none-match") == etag:
                return Reply(304, "")
            return Reply(200, f"page {path} {etag}", {"ETag": etag, "Content-Type": "text/plain"})

        return answer

    def _sitemap(self, hit: Any) -> Reply:
        entries = "".join(
            f"<url><loc>{self.server.url(self.host, p)}</loc>"
            f"<lastmod>{utc_iso() if self.always_now else self.lastmods[p]}</lastmod></url>"
            for p in self.paths
        )
        body = f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'
        if self.broken:  # every entry whole but the last: the document is cut short
            return Reply(200, body[:-30], {"Content-Type": "application/xml"})
        etag = '"' + hashlib.sha256(body.encode()).hexdigest()[:16] + '"'
        if hit.headers.get("if-none-match") == etag:
            return Reply(304, "")
        return Reply(200, body, {"ETag": etag, "Content-Type": "application/xml"})

    def change(self, path: str, *, claimed: bool = True) -> None:
        """The page changes; with *claimed*, its sitemap says so (lastmod now)."""
        self.versions[path] += 1
        if claimed:
            self.lastmods[path] = utc_iso()

    def hits(self, path: str | None = None) -> list[Any]:
        return self.server.origin.hits_for(self.host, path)

    def sitemap_hits(self) -> list[Any]:
        return self.server.origin.hits_for(self.sitemap_host or self.host, self.sitemap_path)

    def page_hits(self, since: int = 0) -> list[Any]:
        return [h for h in self.server.origin.hits[since:]
                if h.host == self.host and h.path in self.paths]  # fmt: skip


def outcomes(result: Any, site: Site) -> dict[str, str]:
    return {i["url"].rsplit("/", 1)[1]: i["outcome"] for i in result.items if i["url"] in site.urls}


async def rerun_counting_documents(
    server: Any, site: Site, tmp_path: Any
) -> tuple[Any, int, list[str]]:
    """Two runs of *site*'s list: the second's result, where its hits start,
    and the sitemap documents (``/sitemap*``, ``/sm-*``) it fetched."""
    settings = base_settings(server, tmp_path / "s", **SETTINGS)
    await crawl(settings, site.urls, tmp_path)
    mark = len(server.origin.hits)
    second = await crawl(settings, site.urls, tmp_path)
    hits = server.origin.hits[mark:]
    return second, mark, [h.path for h in hits if h.path.startswith(("/sitemap", "/sm-"))]


@pytest_twisted.ensureDeferred
async def test_a_rerun_skips_what_a_checked_sitemap_says_is_unchanged(server, tmp_path):
    state = tmp_path / "s"
    site = Site(server, "sm.test", 5)
    few = Site(server, "few.test", 2)  # fewer due targets than WALSH_SITEMAP_MIN_TARGETS
    urls = site.urls + few.urls
    settings = base_settings(server, state, **SETTINGS)

    first = await crawl(settings, urls, tmp_path)
    assert not site.sitemap_hits() and not few.sitemap_hits()  # no history: no sitemap
    assert all(i["outcome"] == "fetched" for i in first.items)

    site.change("/p4")
    mark = len(server.origin.hits)
    second = await crawl(settings, urls, tmp_path)
    assert len(site.sitemap_hits()) == 1
    sent = [h.path for h in site.page_hits(mark)]
    # one page the sitemap calls unchanged checks it (a conditional GET that
    # answers 304), the changed one is fetched, the other three are not sent
    assert sorted(sent) == ["/p0", "/p4"], sent
    assert outcomes(second, site) == {
        "p0": "not_modified", "p1": "not_modified", "p2": "not_modified",
        "p3": "not_modified", "p4": "fetched",
    }  # fmt: skip
    skipped = second.by_url()[site.urls[1]]
    assert skipped["rule"] == "R7" and skipped["status"] is None
    assert skipped["sitemap"]["url"] == server.url("sm.test", "/sitemap.xml")
    assert skipped["sitemap"]["lastmod"] == OLD
    assert second.stats["walsh/sitemaps/requests_saved"] == 3
    assert second.stats["walsh/sitemaps/claims_checked"] == 2  # the probe and the change
    # a host with few due targets: no sitemap, every page revalidated
    assert not few.sitemap_hits() and len(few.page_hits(mark)) == 2
    # the evidence report, from the audit log: the sitemap request, the claim
    # checked, and the three targets not requested
    report = subprocess.run(
        [sys.executable, "-m", "scrapy", "walsh-report", "-s", f"WALSH_STATE_DIR={state}",
         "--host", "sm.test", "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    facts = json.loads(report.stdout)["sitemap_facts"]
    assert facts == {"fetched": 1, "claims_checked": 1, "contradicted": 0, "requests_saved": 3}

    mark = len(server.origin.hits)
    third = await crawl(settings, urls, tmp_path)
    first_fetch, again = site.sitemap_hits()
    assert "if-none-match" not in first_fetch.headers
    assert again.headers.get("if-none-match")  # a conditional GET on the sitemap
    assert third.stats["walsh/sitemaps/not_modified"] == 1
    # the probe again, and nothing else: p4 changed before run 2, not since
    assert [h.path for h in site.page_hits(mark)] == ["/p0"]
    assert set(outcomes(third, site).values()) == {"not_modified"}
    # R8 stamped every skipped target as checked: a run inside the cadence sends nothing
    mark = len(server.origin.hits)
    inside = await crawl({**settings, "WALSH_RUN_INTERVAL": 3600}, site.urls, tmp_path)
    assert not site.page_hits(mark)
    assert {i["rule"] for i in inside.items} == {"R8"}


@pytest_twisted.ensureDeferred
async def test_a_sitemap_passes_every_gate_and_a_contradiction_or_bad_sitemap_is_dropped(
    server, tmp_path
):
    state = tmp_path / "s"
    paced = Site(server, "paced.test", 3, robots_extra="Crawl-delay: 2\n")
    hidden = Site(server, "hidden.test", 3, robots_extra="Disallow: /private/\n",
                  sitemap_path="/private/sitemap.xml")  # fmt: skip
    elsewhere = Site(server, "own.test", 3, sitemap_host="blocked.test")
    liar = Site(server, "liar.test", 4)
    bad = Site(server, "bad.test", 3)
    now = Site(server, "now.test", 3, always_now=True)
    sites = (paced, hidden, elsewhere, liar, bad, now)
    urls = [u for s in sites for u in s.urls]
    settings = base_settings(server, state, **SETTINGS)
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("blocked.test")))

    await crawl(settings, urls, tmp_path)
    liar.change("/p0", claimed=False)  # the sitemap still says 2020
    bad.broken = True
    mark = len(server.origin.hits)
    second = await crawl(settings, urls, tmp_path)

    # R4: the sitemap waits the host's Crawl-delay like any request to it
    assert len(paced.sitemap_hits()) == 1
    assert min(gaps([h for h in server.origin.hits[mark:] if h.host == "paced.test"])) >= 1.95
    # R2 and R3: a disallowed or blocked sitemap is not fetched; every page is sent
    assert not hidden.sitemap_hits() and not elsewhere.sitemap_hits()
    assert len(hidden.page_hits(mark)) == 3 and len(elsewhere.page_hits(mark)) == 3
    # a malformed sitemap is ignored: every page revalidated
    assert len(bad.sitemap_hits()) == 1 and len(bad.page_hits(mark)) == 3
    assert second.stats["walsh/sitemaps/malformed"] == 1
    # a contradiction: the probe answered 200 with a new ETag; every page sent
    assert len(liar.page_hits(mark)) == 4
    assert outcomes(second, liar)["p0"] == "fetched"
    assert second.stats["walsh/sitemaps/contradicted"] == 1
    assert second.stats["walsh/sitemaps/requests_saved"] == 2  # paced.test's two
    # a lastmod always "now": every page claimed changed, each answered 304
    assert len(now.sitemap_hits()) == 1 and len(now.page_hits(mark)) == 3
    assert second.stats["walsh/sitemaps/stale"] == 1

    mark = len(server.origin.hits)
    third = await crawl(settings, liar.urls + now.urls, tmp_path)
    assert len(liar.sitemap_hits()) == 1  # not fetched again: distrusted
    assert len(liar.page_hits(mark)) == 4
    assert len(now.sitemap_hits()) == 1  # nor the sitemap that says "changed" of everything
    assert len(now.page_hits(mark)) == 3
    assert third.stats["walsh/sitemaps/contradicted"] == 1  # the stored verdict, counted
    db = sqlite3.connect(state / "audit.sqlite3")
    audit = [json.loads(entry) for (entry,) in db.execute("SELECT entry FROM audit")]
    db.close()
    verdicts = {(e["host"], e["state"]) for e in audit if e["event"] == "sitemap"}
    assert {
        ("liar.test", "contradicted"),
        ("bad.test", "ignored"),
        ("now.test", "stale"),
    } <= verdicts


@pytest_twisted.ensureDeferred
async def test_a_fleet_fetches_a_sitemap_once(server, redis_server, tmp_path):
    """Two workers reading one Redis feed: each holds about one line per host
    at a time, and the last run's count of the host's answered targets says
    the sitemap is worth reading; one worker fetches it, the other adopts it."""
    site = Site(server, "fleet.test", 4)
    shared = redis_settings(redis_server, **{**SETTINGS, "WALSH_SITEMAP_TTL": 600})

    async def run(name: str, workers: int) -> list[Any]:
        path = write_list(tmp_path, site.urls)
        enqueue(redis_server.url, name, path, prefix=shared["WALSH_REDIS_PREFIX"])
        crawls = [
            deferred_from_coro(
                crawl_feed(base_settings(server, tmp_path / f"{name}{i}", **shared), name)
            )
            for i in range(workers)
        ]
        return await defer.gatherResults(crawls, consumeErrors=True)

    await run("first", 1)  # history for every page
    mark = len(server.origin.hits)
    workers = await run("again", 2)
    assert len(site.sitemap_hits()) == 1
    assert sum(w.stats.get("walsh/sitemaps/adopted", 0) for w in workers) == 1
    # each worker checks the sitemap once, then skips what it calls unchanged
    assert len(site.page_hits(mark)) <= 2
    saved = sum(w.stats.get("walsh/sitemaps/requests_saved", 0) for w in workers)
    assert saved >= 2 and saved + len(site.page_hits(mark)) == 4


@pytest_twisted.ensureDeferred
async def test_a_contradiction_found_by_another_worker_stops_this_workers_skips(
    server, redis_server, tmp_path
):
    """Found in review. In a fleet, this worker's probe checked out; another
    worker's probe, meanwhile, was contradicted and stored the verdict. One
    lie is enough: this worker revalidates the rest too, instead of skipping
    on the trust its own probe earned. (The other worker is played by the
    test, writing its verdict into Redis as the probe is answered.)"""
    site = Site(server, "told.test", 5)
    shared = redis_settings(redis_server, **SETTINGS)
    settings = base_settings(server, tmp_path / "s", **shared)
    await crawl(settings, site.urls, tmp_path)
    origin = server.url("told.test", "")
    trust_key = f"{shared['WALSH_REDIS_PREFIX']}:state:sitemap_trust:told.test"

    def meanwhile(page: Any) -> Any:
        def answer(hit: Any) -> Reply:
            verdict = {"until": time.time() + 3600, "why": "contradicted", "at": time.time(),
                       "probe": origin + "/elsewhere"}  # fmt: skip
            stored = layout.stamped(json.dumps(verdict), time.time())
            redis_server.client().hset(trust_key, layout.field(origin), stored)
            return page(hit)

        return answer

    for path in site.paths:
        server.origin.route("told.test", path, meanwhile(site._page(path)))
    mark = len(server.origin.hits)
    second = await crawl(settings, site.urls, tmp_path)
    assert len(site.sitemap_hits()) == 1
    assert sorted(h.path for h in site.page_hits(mark)) == site.paths
    assert "walsh/sitemaps/requests_saved" not in second.stats


# -- what a stored sitemap, a short list and a slow answer may claim --------------------


@pytest_twisted.ensureDeferred
async def test_an_old_reading_is_asked_again_and_a_missing_sitemap_is_not(server, tmp_path):
    """Found in review. A lastmod table read in an earlier run says nothing of
    what changed since: within WALSH_SITEMAP_TTL a page the site announced as
    changed was skipped on the old copy. Now an old reading is asked for
    again (a conditional GET), while a sitemap that is missing (404) is not
    asked for by every run within the TTL."""
    fresh = Site(server, "ttl.test", 5)
    gone = Site(server, "gone.test", 5)
    server.origin.route("gone.test", "/sitemap.xml", Reply(404, "no sitemap here"))
    settings = base_settings(server, tmp_path / "s", WALSH_SITEMAP_MIN_TARGETS=3)  # TTL 1 h
    urls = fresh.urls + gone.urls
    for _ in range(2):
        await crawl(settings, urls, tmp_path)
    assert len(fresh.sitemap_hits()) == 1
    fresh.change("/p2")  # the page changes, and the sitemap says so
    third = await crawl(settings, urls, tmp_path)
    asked = fresh.sitemap_hits()
    assert len(asked) == 2 and asked[-1].headers.get("if-none-match"), asked
    assert outcomes(third, fresh)["p2"] == "fetched"
    assert len(gone.sitemap_hits()) == 1  # met once, remembered for the TTL


@pytest_twisted.ensureDeferred
async def test_a_short_list_costs_no_sitemap_and_a_slow_answer_is_dated_when_sent(server, tmp_path):
    """Found in review. A re-run listing one target of a host fetched its
    sitemap (last run's count stood in for this run's); and a page that
    changed while its answer was on the way was later skipped, because the
    answer was dated when it arrived. Now only the list's own targets count
    (a fleet's feed aside), and an answer is dated when its request left."""
    one = Site(server, "one.test", 5)
    slow = Site(server, "slow.test", 5)
    page, first = slow._page("/p3"), {"yes": True}

    def slow_page(hit: Any) -> Reply:
        reply = page(hit)
        if first.pop("yes", False):  # served as it is now, changed 1.2 s later
            reactor.callLater(1.2, slow.change, "/p3")
            reply.delay = 3.5
        return reply

    server.origin.route("slow.test", "/p3", slow_page)
    settings = base_settings(server, tmp_path / "s", WALSH_SITEMAP_MIN_TARGETS=3,
                             WALSH_SITEMAP_TTL=0)  # fmt: skip
    await crawl(settings, one.urls + slow.urls, tmp_path)
    mark = len(server.origin.hits)
    second = await crawl(settings, one.urls[:1] + slow.urls, tmp_path)
    assert not one.sitemap_hits()
    assert [h.path for h in one.page_hits(mark)] == ["/p0"]  # its conditional GET alone
    assert outcomes(second, one) == {"p0": "not_modified"}
    assert len(slow.sitemap_hits()) == 1
    assert outcomes(second, slow)["p3"] == "fetched"


@pytest_twisted.ensureDeferred
async def test_an_origin_with_too_few_due_targets_says_once_why_its_sitemap_is_not_read(
    server, tmp_path, caplog
):
    """A re-run of two pages whose robots.txt declares a sitemap: the sitemap
    is not fetched (two due targets cannot repay it), and the log says so
    once, at INFO, naming the setting (it was only a stat)."""
    site = Site(server, "two.test", 2)
    settings = base_settings(server, tmp_path / "s", WALSH_SITEMAP_TTL=0)
    await crawl(settings, site.urls, tmp_path)
    with caplog.at_level(logging.INFO, logger="scrapy_walsh_research.gates.sitemaps"):
        second = await crawl(settings, site.urls, tmp_path)
    assert not site.sitemap_hits()
    assert second.stats["walsh/sitemaps/too_few_targets"] == 1
    said = [r for r in caplog.records if "not read in this run" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO
    assert server.url("two.test", "") in said[0].getMessage()
    assert "2 of its due targets" in said[0].getMessage()
    assert "WALSH_SITEMAP_MIN_TARGETS=10" in said[0].getMessage()


@pytest.mark.parametrize(
    ("answer", "tries"),
    [(Reply(404, "gone"), 1), (Reply(drop=True), 2)],  # a dropped connection: tried again once
    ids=["a 404", "a dropped connection"],
)
@pytest_twisted.ensureDeferred
async def test_a_probe_that_says_nothing_passes_the_check_to_the_next_target(
    server, tmp_path, answer, tries
):
    """A probe answered by a 404, or whose connection drops (retried, then
    given up), neither earns nor loses the sitemap's trust: at once, the
    next target the sitemap calls unchanged checks it instead (the other
    targets do not sit out the two-minute limit)."""
    site = Site(server, "probe.test", 5)
    settings = base_settings(server, tmp_path / "s", **SETTINGS, WALSH_RETRY_TIMES=1)
    await crawl(settings, site.urls, tmp_path)
    server.origin.route("probe.test", "/p0", answer)
    mark = len(server.origin.hits)
    second = await crawl(settings, site.urls, tmp_path)
    sent = [h.path for h in site.page_hits(mark)]
    assert sent[:tries] == ["/p0"] * tries and len(sent) == tries + 1, sent
    assert "/p0" not in sent[tries:], sent
    hits = site.page_hits(mark)
    assert hits[-1].t - hits[-2].t < 20  # not after the limit (120 s)
    assert outcomes(second, site) == {
        "p0": "failed", "p1": "not_modified", "p2": "not_modified",
        "p3": "not_modified", "p4": "not_modified",
    }  # fmt: skip
    assert second.stats["walsh/sitemaps/requests_saved"] == 3


@pytest_twisted.ensureDeferred
async def test_a_sitemap_index_and_a_gzipped_sitemap_are_read(server, tmp_path):
    """robots.txt names a sitemap index; it lists a gzipped sitemap (served
    as ``.xml.gz``) and a plain one, each with half the pages: both are read,
    each fetched once, and the re-run sends only the probe."""
    site = Site(server, "idx.test", 6, sitemap_path="/sitemap_index.xml")

    def urlset(paths: list[str]) -> str:
        entries = "".join(
            f"<url><loc>{server.url('idx.test', p)}</loc><lastmod>{site.lastmods[p]}</lastmod></url>"
            for p in paths
        )
        return f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'

    index = "".join(
        f"<sitemap><loc>{server.url('idx.test', p)}</loc></sitemap>"
        for p in ("/sm-a.xml.gz", "/sm-b.xml")
    )
    server.origin.route("idx.test", "/sitemap_index.xml", Reply(
        200, f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{index}</sitemapindex>',
        {"Content-Type": "application/xml"},
    ))  # fmt: skip
    server.origin.route("idx.test", "/sm-a.xml.gz", lambda hit: Reply(
        200, gzip.compress(urlset(site.paths[:3]).encode()), {"Content-Type": "application/gzip"}
    ))  # fmt: skip
    server.origin.route("idx.test", "/sm-b.xml", lambda hit: Reply(
        200, urlset(site.paths[3:]), {"Content-Type": "application/xml"}
    ))  # fmt: skip
    second, mark, fetched = await rerun_counting_documents(server, site, tmp_path)
    assert sorted(fetched) == ["/sitemap_index.xml", "/sm-a.xml.gz", "/sm-b.xml"], fetched
    assert len(site.page_hits(mark)) == 1  # the probe
    assert sorted(outcomes(second, site).values()) == ["not_modified"] * 6
    assert second.stats["walsh/sitemaps/requests_saved"] == 5


# -- what a sitemap costs the site, and what the crawl waits for ------------------------


@pytest_twisted.ensureDeferred
async def test_a_sitemap_request_is_sent_as_the_bot_and_its_503_holds_the_host(server, tmp_path):
    """R1 and R5 on the sitemap itself: it goes out with the exact
    User-Agent, and a 503 with ``Retry-After: 4`` holds its host like any
    answer does (the next request to it waits 4 s, not the 1 s floor). A
    sitemap that could not be read claims nothing: every page is sent."""
    site = Site(server, "busy.test", 4)
    settings = base_settings(server, tmp_path / "s", **SETTINGS)
    await crawl(settings, site.urls, tmp_path)
    server.origin.route("busy.test", "/sitemap.xml", Reply(503, "busy", {"Retry-After": "4"}))
    mark = len(server.origin.hits)
    second = await crawl(settings, site.urls, tmp_path)
    (asked,) = site.sitemap_hits()
    assert asked.user_agent == USER_AGENT
    after = [h for h in server.origin.hits[mark:] if h.host == "busy.test" and h.t > asked.t]
    assert after and after[0].t - asked.t >= 3.95, [h.t - asked.t for h in after]
    assert sorted(h.path for h in site.page_hits(mark)) == site.paths
    assert set(outcomes(second, site).values()) == {"not_modified"}  # each its own 304
    assert "walsh/sitemaps/requests_saved" not in second.stats


@pytest_twisted.ensureDeferred
async def test_a_sitemap_index_costs_at_most_one_document_per_two_due_targets(server, tmp_path):
    """An index naming eight sitemaps, on an origin with six due targets:
    three documents are fetched (the index and two of its sitemaps), not
    nine, so a sitemap never costs more requests than it can save."""
    site = Site(server, "big.test", 6, sitemap_path="/sitemap_index.xml")
    children = [f"/sm-{i}.xml" for i in range(8)]
    index = "".join(f"<sitemap><loc>{server.url('big.test', c)}</loc></sitemap>" for c in children)
    server.origin.route("big.test", "/sitemap_index.xml", Reply(
        200, f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{index}</sitemapindex>',
        {"Content-Type": "application/xml"},
    ))  # fmt: skip
    for i, child in enumerate(children):  # sm-0 holds p0..p2, sm-1 holds p3..p5
        paths = site.paths[3 * i : 3 * i + 3]
        entries = "".join(
            f"<url><loc>{server.url('big.test', p)}</loc><lastmod>{OLD}</lastmod></url>"
            for p in paths
        )
        server.origin.route("big.test", child, Reply(
            200, f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>',
            {"Content-Type": "application/xml"},
        ))  # fmt: skip
    second, mark, fetched = await rerun_counting_documents(server, site, tmp_path)
    assert sorted(fetched) == ["/sitemap_index.xml", "/sm-0.xml", "/sm-1.xml"], fetched
    assert len(site.page_hits(mark)) == 1  # the probe
    assert second.stats["walsh/sitemaps/requests_saved"] == 5


@pytest_twisted.ensureDeferred
async def test_a_sitemap_that_does_not_answer_in_time_is_not_waited_for(
    server, tmp_path, monkeypatch
):
    """A sitemap on another host that hangs: its origin's targets wait for
    it at most LOAD_LIMIT (120 s; 3 s here), then are revalidated as usual,
    and what the sitemap says when it finally answers skips nothing in that
    run. (A sitemap on the targets' own host holds them anyway: one request
    at a time to a host, R4.) Cut short by the gate, not failed by the
    site, it is asked for again by the next run, within WALSH_SITEMAP_TTL
    (found in review: the gate's own limit was stored as the sitemap's
    failure, for an hour and for the whole fleet)."""
    monkeypatch.setattr("scrapy_walsh_research.gates.sitemaps.LOAD_LIMIT", 3.0)
    site = Site(server, "slowmap.test", 4, sitemap_host="maps.test")
    server.origin.route("maps.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    settings = base_settings(server, tmp_path / "s", **{**SETTINGS, "WALSH_SITEMAP_TTL": 3600})
    await crawl(settings, site.urls, tmp_path)
    served = site._sitemap

    def late(hit: Any) -> Reply:
        reply = served(hit)
        reply.delay = 8.0
        return reply

    server.origin.route("maps.test", "/sitemap.xml", late)
    mark = len(server.origin.hits)
    second = await crawl(settings, site.urls, tmp_path)
    (asked,) = site.sitemap_hits()
    sent = site.page_hits(mark)
    assert sorted(h.path for h in sent) == site.paths
    assert sent[1].t - asked.t < 7.0, [h.t - asked.t for h in sent]  # before the answer (8 s)
    assert set(outcomes(second, site).values()) == {"not_modified"}  # each its own 304
    assert "walsh/sitemaps/requests_saved" not in second.stats
    server.origin.route("maps.test", "/sitemap.xml", served)  # answers at once again
    third = await crawl(settings, site.urls, tmp_path)
    assert len(site.sitemap_hits()) == 2
    assert third.stats["walsh/sitemaps/requests_saved"] == 3


@pytest_twisted.ensureDeferred
async def test_a_hostile_sitemap_is_ignored_and_a_messy_one_is_read(server, tmp_path):
    """Served at the origin, as real sites and attackers write them:

    * a gzip bomb (60 MiB of XML in 60 KiB): reading stops at sitemaps.org's
      50 MiB, the sitemap is ignored and every page revalidated;
    * billion laughs (entities in a DTD): refused unread, the same;
    * a messy sitemap (Google's 0.84 namespace, whitespace around values,
      ``&amp;`` in a query, a scheme and host in capitals, dates without a
      time): read, and matched to the list by canonical URL."""
    bomb = Site(server, "bomb.test", 3, sitemap_path="/sitemap.xml.gz")
    laughs = Site(server, "laughs.test", 3)
    messy = Site(server, "messy.test", 4)
    ns = "http://www.sitemaps.org/schemas/sitemap/0.9"

    def entries(site: Site) -> str:
        return "".join(f"<url><loc>{u}</loc><lastmod>{OLD}</lastmod></url>" for u in site.urls)

    padding = " " * (60 * 1024 * 1024)
    bombed = gzip.compress(f'<urlset xmlns="{ns}">{entries(bomb)}{padding}</urlset>'.encode())
    server.origin.route("bomb.test", "/sitemap.xml.gz", Reply(200, bombed))
    lol = "".join(f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 10))
    server.origin.route("laughs.test", "/sitemap.xml", Reply(200, (
        f'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY l0 "lol">{lol}]>'
        f'<urlset xmlns="{ns}">{entries(laughs)}<url><loc>&l9;</loc></url></urlset>'
    ), {"Content-Type": "application/xml"}))  # fmt: skip
    # messy.test's targets carry a query: /pN?a=1&b=N
    query = {p: f"{p}?a=1&b={p[2:]}" for p in messy.paths}
    for path, with_query in query.items():
        server.origin.route("messy.test", with_query, messy._page(path))
    urls = [messy.server.url("messy.test", q) for q in query.values()]
    written = ["2020-01-01", "2020-01-01T00:00Z", "2019-12-31T23:59:59.5-01:00", "2020-01"]
    messy_entries = "".join(
        f"\n  <url>\n    <loc>\n      {messy.server.url('MESSY.TEST', q).replace('http:', 'HTTP:')}"
        f"\n    </loc>\n    <lastmod> {when} </lastmod>\n  </url>".replace("&", "&amp;")
        for q, when in zip(query.values(), written, strict=True)
    )
    server.origin.route("messy.test", "/sitemap.xml", Reply(200, (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<urlset xmlns="http://www.google.com/schemas/sitemap/0.84">{messy_entries}\n</urlset>\n'
    ), {"Content-Type": "text/xml"}))  # fmt: skip
    urls += bomb.urls + laughs.urls
    settings = base_settings(server, tmp_path / "s", **SETTINGS)
    await crawl(settings, urls, tmp_path)
    mark = len(server.origin.hits)
    second = await crawl(settings, urls, tmp_path)
    assert len(bomb.sitemap_hits()) == 1 and len(bomb.page_hits(mark)) == 3
    assert len(laughs.sitemap_hits()) == 1 and len(laughs.page_hits(mark)) == 3
    assert second.stats["walsh/sitemaps/malformed"] == 2
    sent = [h.path for h in server.origin.hits[mark:] if h.host == "messy.test"]
    assert sorted(p for p in sent if p.startswith("/p")) == ["/p0?a=1&b=0"], sent  # the probe
    assert second.stats["walsh/sitemaps/requests_saved"] == 3
    assert all(i["outcome"] == "not_modified" for i in second.items)


# -- found in review: what a re-run may skip on a sitemap's word, and what it costs --


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


@pytest.mark.parametrize("answers", ["empty", "404"])
@pytest_twisted.ensureDeferred
async def test_many_declared_sitemaps_cost_at_most_one_document_per_two_due_targets(
    server, tmp_path, answers
):
    """robots.txt declares eight sitemaps (news sites declare dozens); the
    origin has four due targets: at most two documents are fetched, whether
    they are read or fail (a failed fetch is a request too: found in review,
    forty missing sitemaps were all asked for)."""
    extra = [f"/sm-{i}.xml" for i in range(7)]
    site = Site(
        server,
        "many.test",
        4,
        robots_extra="".join(f"Sitemap: {server.url('many.test', p)}\n" for p in extra),
    )
    empty = '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"></urlset>'
    for path in extra:
        reply = Reply(200, empty, {"Content-Type": "application/xml"})
        server.origin.route("many.test", path, reply if answers == "empty" else Reply(404, ""))
    _, _, fetched = await rerun_counting_documents(server, site, tmp_path)
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
    began = time.monotonic()
    second = await crawl(settings, site.urls, tmp_path)
    took = time.monotonic() - began
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

    site = Site(server, "spin.test", 4)
    settings = base_settings(server, tmp_path / "s", **SETTINGS, WALSH_POLICY_TTL=1)
    await crawl(settings, site.urls, tmp_path)
    sitemap = server.url("spin.test", "/sitemap.xml")
    server.origin.route(
        "spin.test",
        "/robots.txt",
        Reply(200, f"User-agent: *\nAllow: /\nCrawl-delay: 100\nSitemap: {sitemap}\n"),
    )
    await sleep(1.5)
    began = time.monotonic()
    second = await crawl(settings, site.urls, tmp_path)
    took = time.monotonic() - began
    assert {i["rule"] for i in second.items} == {"R4"}
    assert took < 60, (took, second.stats.get("walsh/pacing/requeued"))


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
    # counted as a sitemap not fetched, not as a target skipped
    assert second.stats["walsh/sitemaps/denied"] == 1
    assert "walsh/skipped/R4" not in second.stats
