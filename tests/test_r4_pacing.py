"""R4: serial; at least max(1 s, Crawl-delay, Request-rate) between arrivals at a
host as the origin sees them; no wait before a host's first request; and the
single slot is not spent waiting on one host while another is ready."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted

from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.preflight import PACING_MW
from scrapy_walsh_research.sandbox import Reply
from tests.conftest import base_settings, crawl, gaps


def pages(
    server: Any, host: str, n: int, robots: str = "User-agent: *\nAllow: /\n", latency: float = 0.05
) -> list[str]:
    server.origin.route(host, "/robots.txt", Reply(200, robots, delay=latency))
    for i in range(n):
        server.origin.route(host, f"/p/{i}", Reply(200, f"{host} {i}", delay=latency))
    return [server.url(host, f"/p/{i}") for i in range(n)]


@pytest_twisted.ensureDeferred
async def test_arrivals_at_a_host_are_at_least_one_second_apart_and_serial(server, tmp_path):
    urls = pages(server, "a.test", 4) + pages(server, "b.test", 4)
    res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    assert [i["outcome"] for i in res.items] == ["fetched"] * 8
    for host in ("a.test", "b.test"):
        hits = server.origin.hits_for(host)
        assert len(hits) == 5  # robots.txt counts too
        assert min(gaps(hits)) >= 1.0
    assert server.origin.max_inflight == 1
    # the pacing clock ran from when each request went onto its connection
    assert res.stats.get("walsh/pacing/no_wire_time", 0) == 0


@pytest_twisted.ensureDeferred
async def test_the_first_request_to_a_new_host_is_not_delayed_and_hosts_interleave(
    server, tmp_path
):
    urls = pages(server, "a.test", 3) + pages(server, "b.test", 3)
    await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    a, b = server.origin.hits_for("a.test"), server.origin.hits_for("b.test")
    # b.test is first contacted while a.test waits out its second, not after a.test is done
    assert b[0].t - a[0].t < 0.5
    assert b[0].t < a[1].t
    # two hosts, four requests each, 1 s apart: about 3 s, not 7
    assert max(h.t for h in a + b) - a[0].t < 4.0


@pytest_twisted.ensureDeferred
async def test_crawl_delay_2_gives_at_least_2_seconds(server, tmp_path):
    urls = pages(server, "cd.test", 2, "User-agent: *\nCrawl-delay: 2\n")
    await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    assert min(gaps(server.origin.hits_for("cd.test"))) >= 2.0


@pytest_twisted.ensureDeferred
async def test_the_named_groups_crawl_delay_is_the_one_used(server, tmp_path):
    robots = "User-agent: *\nCrawl-delay: 6\n\nUser-agent: Walsh-Research\nCrawl-delay: 2\n"
    urls = pages(server, "named.test", 2, robots)
    await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    g = gaps(server.origin.hits_for("named.test"))
    assert min(g) >= 2.0 and max(g) < 4.0


@pytest_twisted.ensureDeferred
async def test_request_rate_sets_the_interval(server, tmp_path):
    urls = pages(server, "rr.test", 1, "User-agent: *\nRequest-rate: 1/3s\n")
    await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    assert min(gaps(server.origin.hits_for("rr.test"))) >= 3.0


@pytest_twisted.ensureDeferred
async def test_a_crawl_delay_above_the_maximum_skips_the_host(server, tmp_path):
    urls = pages(server, "slow.test", 2, "User-agent: *\nCrawl-delay: 100\n")
    res = await crawl(
        base_settings(server, tmp_path / "s", WALSH_MAX_CRAWL_DELAY=30), urls, tmp_path
    )
    assert [(i["outcome"], i["rule"]) for i in res.items] == [("skipped", "R4")] * 2
    assert "WALSH_MAX_CRAWL_DELAY" in res.items[0]["reason"]
    assert [h.path for h in server.origin.hits_for("slow.test")] == ["/robots.txt"]


@pytest_twisted.ensureDeferred
async def test_without_the_pacing_gate_the_origin_is_hit_faster_than_once_a_second(
    server, tmp_path, without_preflight
):
    urls = pages(server, "fast.test", 3)
    settings = base_settings(server, tmp_path / "s", DOWNLOADER_MIDDLEWARES={PACING_MW: None})
    await crawl(settings, urls, tmp_path)
    assert min(gaps(server.origin.hits_for("fast.test"))) < 0.5


@pytest.mark.parametrize("value", [0.5, 0])
@pytest_twisted.ensureDeferred
async def test_a_minimum_delay_below_one_second_is_refused(server, tmp_path, value):
    with pytest.raises(WalshConfigurationError, match="WALSH_MIN_DELAY"):
        await crawl(
            base_settings(server, tmp_path / "s", WALSH_MIN_DELAY=value),
            ["http://x.test/"],
            tmp_path,
        )
    assert server.origin.hits == []


@pytest_twisted.ensureDeferred
async def test_a_restarted_crawl_keeps_a_hosts_spacing(server, tmp_path):
    state = tmp_path / "s"
    urls = pages(server, "again.test", 1)
    await crawl(base_settings(server, state), urls, tmp_path)
    await crawl(base_settings(server, state), urls, tmp_path)  # at once, in a "new process"
    hits = server.origin.hits_for("again.test")
    # the second run reuses the stored robots.txt (fresh for WALSH_ROBOTS_TTL)
    assert [h.path for h in hits] == ["/robots.txt", "/p/0", "/p/0"]
    assert min(gaps(hits)) >= 1.0
