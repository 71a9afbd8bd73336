"""No reactor callback of the bundle's runs past 50 ms.
The crawl-sized measurement is ``bench/stall_bench.py``; these pin the two
causes it found at start-up and mid-crawl."""

from __future__ import annotations

import gc
import itertools
from typing import Any

import pytest_twisted
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.test import get_crawler
from twisted.internet import defer, reactor

from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.spiders.targets import START_BURST, TargetsSpider
from tests.support.crawling import base_settings, crawl, crawl_task, write_list


@pytest_twisted.ensureDeferred
async def test_start_hands_the_reactor_back_every_few_lines(tmp_path):
    """Scrapy's engine reads start() without pausing while its one download
    slot is busy, so start() itself must let the reactor run: before, the
    first 10^4 lines went out in one callback (0.1-0.37 s, stall_bench)."""
    lines = [f"http://h{i % 7}.test/p/{i}" for i in range(10 * START_BURST)]
    lines[5:5] = ["not a url", lines[0]]  # records (invalid, duplicate) count too
    path = write_list(tmp_path, lines)
    crawler = get_crawler(TargetsSpider, settings_dict={"WALSH_STATE_DIR": str(tmp_path / "s")})
    spider = TargetsSpider.from_crawler(crawler, list=str(path))
    out: list[Any] = []
    seen_by_turn: list[int] = []
    done = False

    def turn() -> None:
        seen_by_turn.append(len(out))
        if not done:
            reactor.callLater(0, turn)

    async def read() -> None:
        async for x in spider.start():
            out.append(x)

    reactor.callLater(0, turn)
    await deferred_from_coro(read())
    done = True
    assert len(out) == len(lines)
    bursts = [b - a for a, b in itertools.pairwise(seen_by_turn)]
    bursts.append(len(out) - seen_by_turn[-1])
    assert max(bursts) <= START_BURST, bursts


@pytest_twisted.ensureDeferred
async def test_the_start_up_heap_is_frozen_for_the_crawl_and_handed_back(server, tmp_path):
    """A full collector pass over the ~90,000 start-up objects took 64 ms on
    the reactor; frozen at engine start, passes walk only the crawl's own
    objects. Unfrozen when the engine stops, for a process's next crawl."""
    server.origin.route("g.test", "/robots.txt", Reply(200, "User-agent: *\n"))
    server.origin.route("g.test", "/p", Reply(200, "ok"))
    frozen_during: list[int] = []

    class Watching(TargetsSpider):
        def parse_target(self, response: Any) -> Any:
            frozen_during.append(gc.get_freeze_count())
            return super().parse_target(response)

    res = await crawl(base_settings(server, tmp_path / "s"), [server.url("g.test", "/p")],
                      tmp_path, spidercls=Watching)  # fmt: skip
    assert [i["outcome"] for i in res.items] == ["fetched"]
    assert res.stats["walsh/gc/frozen"] > 1000
    assert frozen_during and frozen_during[0] > 1000
    assert gc.get_freeze_count() == 0


@pytest_twisted.ensureDeferred
async def test_the_heap_freeze_can_be_turned_off(server, tmp_path):
    server.origin.route("g.test", "/robots.txt", Reply(200, "User-agent: *\n"))
    server.origin.route("g.test", "/p", Reply(200, "ok"))
    settings = base_settings(server, tmp_path / "s", WALSH_GC_FREEZE=False)
    res = await crawl(settings, [server.url("g.test", "/p")], tmp_path)
    assert [i["outcome"] for i in res.items] == ["fetched"]
    assert "walsh/gc/frozen" not in res.stats


@pytest_twisted.ensureDeferred
async def test_a_crawl_keeps_a_freeze_the_host_process_made(server, tmp_path):
    """A process that froze its own heap (the documented pre-fork pattern:
    gc.freeze() before os.fork()) runs a crawl: engine_stopped's bare
    gc.unfreeze() throws the application's permanent generation back to the
    collector, which then walks (and dirties, copy-on-write) all of it."""
    server.origin.route("g.test", "/robots.txt", Reply(200, "User-agent: *\n"))
    server.origin.route("g.test", "/p", Reply(200, "ok"))
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        assert before > 1000
        res = await crawl(
            base_settings(server, tmp_path / "s"), [server.url("g.test", "/p")], tmp_path
        )
        assert [i["outcome"] for i in res.items] == ["fetched"]
        assert gc.get_freeze_count() >= before, "the crawl unfroze the process's own heap"
    finally:
        gc.unfreeze()


@pytest_twisted.ensureDeferred
async def test_one_crawler_stopping_does_not_unfreeze_another_still_running(server, tmp_path):
    """Two crawlers in one process (CrawlerProcess with two spiders, a fleet
    test): the short one's engine_stopped calls gc.unfreeze() while the long
    one is mid-crawl, so the long one's later full passes walk its whole
    start-up heap again -- the 64 ms stall heap.py exists to remove."""
    server.origin.route("short.test", "/robots.txt", Reply(200, "User-agent: *\n"))
    server.origin.route("short.test", "/p", Reply(200, "ok"))
    for i in range(4):
        server.origin.route("long.test", f"/p/{i}", Reply(200, "ok"))
    server.origin.route("long.test", "/robots.txt", Reply(200, "User-agent: *\n"))
    frozen_in_long: list[int] = []

    class Watching(TargetsSpider):
        def parse_target(self, response: Any) -> Any:
            frozen_in_long.append(gc.get_freeze_count())
            return super().parse_target(response)

    long_urls = [server.url("long.test", f"/p/{i}") for i in range(4)]
    short = deferred_from_coro(
        crawl_task(
            base_settings(server, tmp_path / "s1"), [server.url("short.test", "/p")], tmp_path / "1"
        )
    )
    long = deferred_from_coro(
        crawl_task(base_settings(server, tmp_path / "s2"), long_urls, tmp_path / "2", Watching)
    )
    _, long_res = await defer.gatherResults([short, long], consumeErrors=True)
    assert [i["outcome"] for i in long_res.items] == ["fetched"] * 4
    # long.test's pages are >= 1 s apart: the short crawl ended after the first
    assert len(frozen_in_long) == 4
    assert all(n > 1000 for n in frozen_in_long), frozen_in_long


@pytest_twisted.ensureDeferred
async def test_a_stopped_run_records_its_unread_lines_a_few_per_reactor_turn(tmp_path):
    """A run stopped early records every list line start() had not handed
    out (spiders/stopping.py): for a long list that is most of it, so the
    records are made a few lines per turn of the reactor, not in one."""
    from scrapy_walsh_research.spiders.stopping import LINES_PER_TURN

    lines = [f"http://h{i % 7}.test/p/{i}" for i in range(10 * LINES_PER_TURN)]
    path = write_list(tmp_path, lines)
    crawler = get_crawler(TargetsSpider, settings_dict={"WALSH_STATE_DIR": str(tmp_path / "s")})
    spider = TargetsSpider.from_crawler(crawler, list=str(path))
    crawler.spider = spider
    crawler.stats.open_spider()
    out: list[Any] = []
    seen_by_turn = [0]  # none before the stop
    done = False

    async def emit(record: dict[str, Any]) -> None:
        out.append(record)

    spider.stop.run.emit = emit  # type: ignore[method-assign]  # no engine here
    spider.stop.run.reason = "shutdown"
    spider.stop.handed_out = LINES_PER_TURN  # start() handed out the first few

    def turn() -> None:
        seen_by_turn.append(len(out))
        if not done:
            reactor.callLater(0, turn)

    reactor.callLater(0, turn)
    await deferred_from_coro(spider.stop.unread("shutdown"))
    done = True
    assert [r["line"] for r in out] == list(range(LINES_PER_TURN + 1, len(lines) + 1))
    assert {r["outcome"] for r in out} == {"skipped"}
    bursts = [b - a for a, b in itertools.pairwise(seen_by_turn)]
    bursts.append(len(out) - seen_by_turn[-1])
    assert max(bursts) <= LINES_PER_TURN, bursts
