"""Every cache that grows with hosts or targets is bounded, and an
eviction never weakens politeness (the origin still sees >= the interval per
host, robots.txt is still obeyed and not refetched within its TTL)."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from scrapy import signals
from scrapy.utils.defer import deferred_from_coro

from scrapy_walsh_research._runtime.context import CrawlContext
from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.gates.cadence import CadenceMiddleware
from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.scheduling._engine import scheduler_of
from scrapy_walsh_research.scheduling.pacer import Pacer
from scrapy_walsh_research.spiders.targets import TargetsSpider
from tests.support.crawling import base_settings, crawl, gaps

ROBOTS = "User-agent: *\nDisallow: /private\n"


def site(server: Any, host: str, n: int, robots: str = ROBOTS) -> list[str]:
    server.origin.route(host, "/robots.txt", Reply(200, robots))
    server.origin.route(host, "/private", Reply(200, "secret"))
    for i in range(n):
        server.origin.route(host, f"/p/{i}", Reply(200, f"{host} {i}"))
    return [server.url(host, f"/p/{i}") for i in range(n)]


def interleaved(per_host: list[list[str]]) -> list[str]:
    return [u for row in zip(*per_host, strict=True) for u in row]


def assert_polite(server: Any, hosts: list[str], interval: float = 1.0) -> None:
    for host in hosts:
        hits = server.origin.hits_for(host)
        assert min(gaps(hits)) >= interval, host
        assert len(server.origin.hits_for(host, "/robots.txt")) == 1, host
        assert server.origin.hits_for(host, "/private") == [], host
    assert server.origin.max_inflight == 1


@pytest_twisted.ensureDeferred
async def test_the_robots_cache_keeps_its_bound_and_evicted_rules_still_apply(server, tmp_path):
    hosts = [f"r{i}.test" for i in range(6)]
    # each host's private page comes after every other host's first page:
    # by then its robots.txt answer has been evicted (bound 2, six hosts)
    lines = interleaved([site(server, h, 2) for h in hosts])
    lines += [server.url(h, "/private") for h in hosts]
    settings = base_settings(server, tmp_path / "s", WALSH_POLICY_CACHE_SIZE=2)
    res = await crawl(settings, lines, tmp_path)
    outcomes = [(i["outcome"], i["rule"]) for i in res.items]
    assert outcomes.count(("fetched", None)) == 12
    assert outcomes.count(("denied", "R2")) == 6
    assert res.stats["walsh/robots/cache_max"] == 2
    assert res.stats["walsh/robots/cache_evicted"] >= 4
    # read back from the state store, not fetched again from the host
    assert res.stats["walsh/robots/stored_copy"] >= 6
    assert_polite(server, hosts)


@pytest_twisted.ensureDeferred
async def test_an_evicted_host_clock_still_keeps_the_hosts_crawl_delay(server, tmp_path):
    slow = "User-agent: *\nCrawl-delay: 2\nDisallow: /private\n"
    hosts = [f"c{i}.test" for i in range(5)]
    per_host = [site(server, h, 3, slow if i == 0 else ROBOTS) for i, h in enumerate(hosts)]
    # host by host (a lookahead of one line), so earlier hosts settle, and
    # the slow host comes back at the end, long after its clock was evicted
    lines = per_host[0][:2] + [u for urls in per_host[1:] for u in urls[:2]] + per_host[0][2:]
    settings = base_settings(
        server, tmp_path / "s", WALSH_HOST_CLOCK_CACHE_SIZE=2, WALSH_LIST_LOOKAHEAD=1
    )
    res = await crawl(settings, lines, tmp_path)
    assert [i["outcome"] for i in res.items] == ["fetched"] * 11
    assert res.stats["walsh/hostclock/cache_evicted"] >= 3
    assert res.stats["walsh/hostclock/cache_max"] <= 3
    assert CrawlContext.for_crawler(res.crawler).service(Pacer).clock.cached_hosts() <= 3
    assert min(gaps(server.origin.hits_for("c0.test"))) >= 2.0
    assert_polite(server, hosts)


@pytest_twisted.ensureDeferred
async def test_the_cadence_cache_keeps_its_bound_and_a_second_run_still_skips(server, tmp_path):
    hosts = [f"k{i}.test" for i in range(3)]
    lines = interleaved([site(server, h, 2) for h in hosts])
    state = tmp_path / "s"
    settings = base_settings(server, state, WALSH_RUN_INTERVAL=86400, WALSH_CADENCE_CACHE_SIZE=2)
    first = await crawl(settings, lines, tmp_path / "one")
    assert [i["outcome"] for i in first.items] == ["fetched"] * 6
    sent = len(server.origin.hits)
    again = await crawl(settings, lines, tmp_path / "two")
    assert [(i["outcome"], i["rule"]) for i in again.items] == [("skipped", "R8")] * 6
    assert len(server.origin.hits) == sent  # not one request in the second run
    cadence = CrawlContext.for_crawler(again.crawler).cadence
    assert isinstance(cadence, CadenceMiddleware) and len(cadence._last) <= 2
    assert again.stats["walsh/cadence/cache_evicted"] > 0


@pytest_twisted.ensureDeferred
async def test_a_list_is_read_only_as_far_as_the_lookahead(server, tmp_path):
    hosts = [f"l{i}.test" for i in range(4)]
    lines = interleaved([site(server, h, 3) for h in hosts])
    queued: list[int] = []

    class Watching(TargetsSpider):
        @classmethod
        def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> Any:
            spider = super().from_crawler(crawler, *args, **kwargs)

            def scheduled(**_: Any) -> None:
                scheduler = scheduler_of(crawler)
                queued.append(len(scheduler) if scheduler is not None else 0)

            crawler.signals.connect(scheduled, signal=signals.request_scheduled, weak=False)
            return spider

    settings = base_settings(server, tmp_path / "s", WALSH_LIST_LOOKAHEAD=3)
    res = await crawl(settings, lines, tmp_path, spidercls=Watching)
    assert [i["outcome"] for i in res.items] == ["fetched"] * 12
    # at the signal the new request is not queued yet; the engine holds up to
    # three requests (CONCURRENT_REQUESTS=3), and each may come back (handed
    # back by the pacing gate, its host not ready) to join the lookahead's lines
    assert max(queued) <= 3 + 2
    assert_polite(server, hosts)


@pytest.mark.parametrize(
    "name",
    [
        "WALSH_POLICY_CACHE_SIZE",
        "WALSH_ROBOTS_CACHE_SIZE",  # its 0.3.0 name, refused by that name
        "WALSH_HOST_CLOCK_CACHE_SIZE",
        "WALSH_CADENCE_CACHE_SIZE",
        "WALSH_LIST_LOOKAHEAD",
    ],
)
@pytest.mark.parametrize("value", [0, -1, "many"])
@pytest_twisted.ensureDeferred
async def test_a_bound_below_one_is_refused_at_start_up(server, tmp_path, name, value):
    with pytest.raises(WalshConfigurationError, match=name):
        await crawl(base_settings(server, tmp_path / "s", **{name: value}), ["http://x.test/"],
                    tmp_path)  # fmt: skip
    assert server.origin.hits == []


@pytest_twisted.ensureDeferred
async def test_a_shared_clock_forgets_settled_hosts_and_redis_still_spaces_them(
    server, redis_server, tmp_path
):
    from scrapy_walsh_research.state.redis.target_queue import enqueue
    from tests.support.fleet import crawl_feed, redis_settings

    hosts = [f"x{i}.test" for i in range(5)]
    per_host = [site(server, h, 2) for h in hosts]
    # host by host, each host's last page again at the end, after its view
    # was forgotten (a host is settled 2 s after its last request here)
    lines = [u for urls in per_host for u in urls[:1]] + [urls[1] for urls in per_host]
    shared = redis_settings(redis_server, WALSH_HOST_CLOCK_CACHE_SIZE=2, WALSH_MAX_CRAWL_DELAY=2)
    path = tmp_path / "feed.txt"
    path.write_text("\n".join(lines) + "\n")
    enqueue(redis_server.url, "targets", path, prefix=shared["WALSH_REDIS_PREFIX"])
    settings = base_settings(server, tmp_path / "s", **shared)
    res = await deferred_from_coro(crawl_feed(settings, "targets"))
    assert sorted(i["outcome"] for i in res.items) == ["fetched"] * 10
    assert res.stats.get("walsh/redis/host_views_forgotten", 0) > 0
    assert_polite(server, hosts)


async def test_an_evicted_host_counts_a_stricter_interval_from_when_its_request_left(tmp_path):
    """Found by review: with the commit write skipped (the stored reservation
    covers it), the store kept "last" at the reservation time; a host evicted
    (or a crawl restarted) and then given a longer Crawl-delay counted it
    from the reservation, 0.4 s before the request had left."""
    import asyncio
    import time

    from scrapy_walsh_research.state.hostclock import PersistentHostClock
    from scrapy_walsh_research.state.sqlite import SQLiteStateStore

    async def scenario() -> tuple[float, float]:
        clock = PersistentHostClock(SQLiteStateStore(tmp_path / "s.sqlite3"), cache_size=1)
        assert await clock.reserve("a.test", time.monotonic(), 1.01) == 0
        await asyncio.sleep(0.4)  # a slow connect: the bytes leave 0.4 s after the reservation
        left = time.monotonic()
        await clock.commit("a.test", left, 1.01)
        await asyncio.sleep(1.1)  # a.test settles; b.test pushes it out of the cache
        await clock.reserve("b.test", time.monotonic(), 1.01)
        assert clock.evicted == 1
        await clock.note_interval("a.test", "http://a.test", 5.0, time.time() + 3600)
        return clock.ready_at("a.test", 5.01), left

    ready, left = await deferred_from_coro(scenario())
    assert ready - left >= 5.01
