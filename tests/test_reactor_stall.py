"""Issue 13 goal 3: no reactor callback of the bundle's runs past 50 ms.
The crawl-sized measurement is ``bench/stall_bench.py``; these pin the two
causes it found at start-up and mid-crawl."""

from __future__ import annotations

import gc
import itertools
from typing import Any

import pytest_twisted
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.test import get_crawler
from twisted.internet import reactor

from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.spiders.targets import START_BURST, TargetsSpider
from tests.conftest import base_settings, crawl, write_list


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
