"""R7: conditional requests from stored validators, dedup by canonical URL, a
store that survives SIGKILL. R8: a re-run inside the cadence sends nothing."""

from __future__ import annotations

import signal
import sqlite3
import time
from typing import Any

import pytest
import pytest_twisted
import scrapy
from scrapy.utils.defer import deferred_from_coro
from twisted.internet import reactor, task

from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.sandbox.crawl import crawl_spider
from tests.support.crawling import BLOCKLIST_HOST, base_settings, crawl, write_list
from tests.support.processes import spawn_targets_crawl

ETAG = '"v1"'
MODIFIED = "Sat, 21 Nov 2026 00:00:00 GMT"


def conditional_page(server: Any, host: str, path: str = "/doc", delay: float = 0.0) -> str:
    def answer(hit: Any) -> Reply:
        if hit.headers.get("if-none-match") == ETAG:
            return Reply(304, "")
        headers = {"ETag": ETAG, "Last-Modified": MODIFIED, "Content-Type": "text/plain"}
        return Reply(200, "content", headers, delay=delay)

    server.origin.route(host, "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    server.origin.route(host, path, answer)
    return server.url(host, path)


@pytest_twisted.ensureDeferred
async def test_the_second_run_sends_stored_validators_and_reports_not_modified(server, tmp_path):
    state = tmp_path / "s"
    url = conditional_page(server, "cond.test")
    first = await crawl(base_settings(server, state), [url], tmp_path)
    second = await crawl(base_settings(server, state), [url], tmp_path)
    a, b = server.origin.hits_for("cond.test", "/doc")
    assert "if-none-match" not in a.headers
    assert (b.headers["if-none-match"], b.headers["if-modified-since"]) == (ETAG, MODIFIED)
    assert first.items[0]["outcome"] == "fetched" and first.items[0]["etag"] == ETAG
    assert (second.items[0]["outcome"], second.items[0]["status"]) == ("not_modified", 304)
    assert second.items[0]["sha256"] is not None and second.items[0]["content_length"] == 0


@pytest_twisted.ensureDeferred
async def test_duplicates_by_canonical_url_are_fetched_once(server, tmp_path):
    url = conditional_page(server, "dup.test", "/a")
    variants = [
        url,
        url + "/",
        url + "#part",
        url.replace("dup.test", "DUP.test"),
        url.replace("http://", "HTTP://"),
    ]
    res = await crawl(base_settings(server, tmp_path / "s"), variants, tmp_path)
    assert sorted(i["outcome"] for i in res.items) == ["duplicate"] * 4 + ["fetched"]
    assert len(server.origin.hits_for("dup.test", "/a")) == 1


@pytest_twisted.ensureDeferred
async def test_a_rerun_inside_the_cadence_sends_nothing_to_the_target_hosts(server, tmp_path):
    state = tmp_path / "s"
    urls = [conditional_page(server, "cad.test"), conditional_page(server, "cad2.test")]
    await crawl(base_settings(server, state, WALSH_RUN_INTERVAL=3600), urls, tmp_path)
    before = len(server.origin.hits)
    res = await crawl(base_settings(server, state, WALSH_RUN_INTERVAL=3600), urls, tmp_path)
    new_hits = server.origin.hits[before:]
    assert {h.host for h in new_hits} <= {BLOCKLIST_HOST}  # not even robots.txt
    assert [(i["outcome"], i["rule"]) for i in res.items] == [("skipped", "R8")] * 2
    assert (
        "WALSH_RUN_INTERVAL=0" in res.items[0]["reason"] and "due again" in res.items[0]["reason"]
    )
    # and with the cadence off, the run goes out (and gets its 304)
    third = await crawl(base_settings(server, state, WALSH_RUN_INTERVAL=0), urls, tmp_path)
    assert [i["outcome"] for i in third.items] == ["not_modified"] * 2


class OwnSpider(scrapy.Spider):
    """A project's own spider: no target list, no records of the bundle's."""

    name = "own"

    def __init__(self, url: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [url]

    def parse(self, response: Any) -> Any:
        yield {"url": response.url, "status": response.status}


@pytest_twisted.ensureDeferred
async def test_a_projects_own_spider_is_held_to_the_cadence_from_its_answers(server, tmp_path):
    # its fetch time is written when the answer comes (it has no records to
    # carry it): the next run inside the cadence sends the page nothing
    settings = base_settings(server, tmp_path / "s", WALSH_RUN_INTERVAL=3600)
    url = conditional_page(server, "own.test")
    items, _ = await deferred_from_coro(crawl_spider(OwnSpider, settings, url=url))
    assert items == [{"url": url, "status": 200}]
    _, again = await deferred_from_coro(crawl_spider(OwnSpider, settings, url=url))
    assert len(server.origin.hits_for("own.test", "/doc")) == 1
    assert again.stats.get_value("walsh/skipped/R8") == 1


@pytest.mark.parametrize("store", ["state dir", "redis"])
@pytest_twisted.ensureDeferred
async def test_an_r8_skip_names_the_time_its_targets_record_says_it_was_fetched(
    server, tmp_path, request, store
):
    """A record is committed after the target's answer: here after its
    host's llms.txt probe, which answers slowly. R8 stamped the commit, so
    the next run's skip said "fetched" seconds later than the record's
    ``fetched_at``; it names the record's time, alone or in a fleet."""
    url = conditional_page(server, "late.test")
    server.origin.route("late.test", "/doc", Reply(200, "<p>page</p>", {"Content-Type": "text/html"}))
    server.origin.route("late.test", "/llms.txt", Reply(404, "no", delay=1.5))
    settings = base_settings(server, tmp_path / "s", WALSH_RUN_INTERVAL=3600, WALSH_LLMS_PROBE=True)
    if store == "redis":
        from scrapy_walsh_research.state.redis.target_queue import enqueue
        from tests.support.fleet import crawl_feed, redis_settings

        settings.update(redis_settings(request.getfixturevalue("redis_server")))
        redis_url, prefix = settings["WALSH_REDIS_URL"], settings["WALSH_REDIS_PREFIX"]

        async def run(name: str) -> Any:
            enqueue(redis_url, name, write_list(tmp_path, [url]), prefix=prefix)
            return await deferred_from_coro(crawl_feed(settings, name))
    else:

        async def run(name: str) -> Any:
            return await crawl(settings, [url], tmp_path)

    first = await run("first")
    (fetched,) = first.items
    assert fetched["outcome"] == "fetched" and server.origin.hits_for("late.test", "/llms.txt")
    (skipped,) = (await run("second")).items
    assert skipped["rule"] == "R8", skipped
    assert skipped["reason"].startswith(f"fetched {fetched['fetched_at']},"), (
        skipped["reason"], fetched["fetched_at"])  # fmt: skip


@pytest_twisted.ensureDeferred
async def test_the_store_survives_sigkill_mid_crawl(server, tmp_path):
    state = tmp_path / "s"
    hosts = [f"k{i}.test" for i in range(8)]
    # answered in 0.5 s each: the targets' fetches are spaced by the wire
    urls = [conditional_page(server, h, delay=0.5) for h in hosts]
    proc = spawn_targets_crawl(server, write_list(tmp_path, urls), state)

    def fetched() -> list[Any]:
        return [h for h in server.origin.hits if h.path == "/doc"]

    for _ in range(600):  # until the 6th target arrives
        if len(fetched()) >= 6 or proc.ended.called:
            break
        await task.deferLater(reactor, 0.05, lambda: None)
    assert len(fetched()) >= 6, proc.err.decode()[-2000:]
    killed_at = time.monotonic()
    proc.transport.signalProcess(signal.SIGKILL)
    await proc.ended
    # fetches answered a while before the kill are complete (the engine
    # prepares the next request while an answer is processed, so the one
    # just answered may still be writing its validators when the kill comes)
    done = {h.host for h in fetched() if h.finished and h.finished < killed_at - 0.9}
    assert len(done) >= 3, [(h.host, killed_at - h.finished) for h in fetched()]

    db = sqlite3.connect(state / "state.sqlite3")
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    keys = {k for (k,) in db.execute("SELECT key FROM kv WHERE namespace = 'validators'")}
    db.close()
    assert {f"http://{h}:{server.port}/doc" for h in done} <= keys

    before = len(server.origin.hits)
    res = await crawl(base_settings(server, state), urls, tmp_path)
    rerun = {h.host: h for h in server.origin.hits[before:] if h.path == "/doc"}
    assert all(rerun[h].headers.get("if-none-match") == ETAG for h in done)
    outcomes = {i["url"]: i["outcome"] for i in res.items}
    assert all(outcomes[server.url(h, "/doc")] == "not_modified" for h in done)


@pytest_twisted.ensureDeferred
async def test_a_state_dir_forgets_validators_not_written_for_the_state_ttl(server, tmp_path):
    """What is stored per target is kept WALSH_STATE_TTL after it was last
    written: a crawl opening the state directory later asks without them."""
    state = tmp_path / "s"
    url = conditional_page(server, "old.test")
    await crawl(base_settings(server, state, WALSH_STATE_TTL=1), [url], tmp_path)
    await task.deferLater(reactor, 1.5, lambda: None)
    again = await crawl(base_settings(server, state, WALSH_STATE_TTL=1), [url], tmp_path)
    _, second = server.origin.hits_for("old.test", "/doc")
    assert "if-none-match" not in second.headers
    assert again.items[0]["outcome"] == "fetched"
    db = sqlite3.connect(str(state / "state.sqlite3"))
    try:
        kept = {ns for (ns,) in db.execute("SELECT DISTINCT namespace FROM kv")}
    finally:
        db.close()
    assert "validators" in kept  # written again by the second crawl
