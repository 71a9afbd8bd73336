"""R4: serial; at least max(1 s, Crawl-delay, Request-rate) between arrivals at a
host as the origin sees them; no wait before a host's first request; and the
single slot is not spent waiting on one host while another is ready."""

from __future__ import annotations

import time
from typing import Any

import pytest
import pytest_twisted

from scrapy_walsh_research.components import PACING_MW
from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.sandbox import Reply
from tests.support.crawling import TDMREP, base_settings, crawl, gaps


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
        assert len(hits) == 6  # robots.txt and tdmrep.json count too
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
    # two hosts, five requests each (robots.txt, tdmrep.json, three pages), 1 s
    # apart: about 4 s, not 9 (7: a loaded machine's lag adds up over the gaps)
    assert max(h.t for h in a + b) - a[0].t < 7.0


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
    # the second run reuses the stored robots.txt and tdmrep.json (WALSH_POLICY_TTL)
    assert [h.path for h in hits] == ["/robots.txt", TDMREP, "/p/0", "/p/0"]
    assert min(gaps(hits)) >= 1.0


@pytest_twisted.ensureDeferred
async def test_a_request_that_never_went_out_is_not_counted_as_paced_without_a_wire_time(
    server, tmp_path
):
    """``walsh/pacing/no_wire_time`` counts responses paced from the response
    (no wire stamp: another download handler). A host that refuses the
    connection received nothing, so its tries have no stamp either: they
    were counted there, as if the wire time of a request sent were missing."""
    from tests.support.redis_server import free_port

    urls = pages(server, "up.test", 1)
    down = f"http://down.test:{free_port()}/p"
    res = await crawl(base_settings(server, tmp_path / "s", WALSH_POLICY_WAIT=2),
                      [*urls, down], tmp_path)  # fmt: skip
    records = res.by_url()
    assert records[urls[0]]["outcome"] == "fetched"
    assert records[down]["outcome"] != "fetched"
    # down.test was tried (its robots.txt), and refused
    assert res.stats[
        "downloader/exception_type_count/scrapy.exceptions.DownloadConnectionRefusedError"
    ]
    assert res.stats.get("walsh/pacing/no_wire_time", 0) == 0


# -- below Scrapy: the transport ------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_a_connection_dropped_after_the_request_was_read_is_not_resent_at_once(
    server, tmp_path
):
    """Twisted's pool would re-send on a new connection within a millisecond;
    the failure must reach R5 instead, and the retry be paced."""
    calls = {"n": 0}

    def drop_first(hit: Any) -> Reply:
        calls["n"] += 1
        return Reply(200, "ok", drop=calls["n"] == 1)

    server.origin.route("drop.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    server.origin.route("drop.test", "/page", drop_first)
    url = server.url("drop.test", "/page")
    res = await crawl(base_settings(server, tmp_path / "s"), [url], tmp_path)
    hits = server.origin.hits_for("drop.test")
    assert [h.path for h in hits] == ["/robots.txt", TDMREP, "/page", "/page"]
    assert min(gaps(hits)) >= 1.0
    assert res.items[0]["outcome"] == "fetched"
    assert res.stats["walsh/retry/count"] == 1


# -- a host's interval: the strictest of its origins' ------------------------------------


def two_origins(server: Any, host: str, robots_a: str, robots_b: str | None) -> tuple[int, int]:
    """*host* on the main port (origin A) and a second port (origin B, no
    robots.txt when *robots_b* is None): one host, two origins."""
    port_b = server.listen_also()
    server.origin.route(host, "/robots.txt", lambda hit: Reply(
        200, robots_a if hit.headers["host"].endswith(f":{server.port}") else robots_b or ""
    ) if robots_b is not None or hit.headers["host"].endswith(f":{server.port}")
        else Reply(404, "none"))  # fmt: skip
    for i in range(3):
        server.origin.route(host, f"/p/{i}", Reply(200, "ok"))
    return server.port, port_b


@pytest_twisted.ensureDeferred
async def test_an_origin_without_robots_does_not_lower_the_hosts_crawl_delay(server, tmp_path):
    port_a, port_b = two_origins(server, "twin.test", "User-agent: *\nCrawl-delay: 3\n", None)
    urls = [
        server.url("twin.test", "/p/0", port=port_a),
        server.url("twin.test", "/p/1", port=port_b),
        server.url("twin.test", "/p/2", port=port_a),
    ]
    res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    assert [i["outcome"] for i in res.items] == ["fetched"] * 3
    hits = server.origin.hits_for("twin.test")
    assert len(hits) == 7  # two robots.txt, two tdmrep.json, three pages
    assert min(gaps(hits)) >= 3.0


@pytest_twisted.ensureDeferred
async def test_an_origin_without_robots_does_not_clear_a_skip(server, tmp_path):
    port_a, port_b = two_origins(server, "twin.test", "User-agent: *\nCrawl-delay: 3600\n", None)
    urls = [
        server.url("twin.test", "/p/0", port=port_a),
        server.url("twin.test", "/p/1", port=port_b),
    ]
    res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    assert [(i["outcome"], i["rule"]) for i in res.items] == [("skipped", "R4")] * 2
    # origin B's robots.txt is not even asked for: the host is skipped
    assert [h.path for h in server.origin.hits_for("twin.test")] == ["/robots.txt"]


@pytest.mark.parametrize("robots", ["Crawl-delay: 3600", "Request-rate: 1/1h"])
@pytest_twisted.ensureDeferred
async def test_a_huge_interval_on_one_origin_does_not_stall_the_crawl(server, tmp_path, robots):
    port_a, port_b = two_origins(server, "twin.test", f"User-agent: *\n{robots}\n", None)
    others = pages(server, "other.test", 3, latency=0)
    urls = [
        server.url("twin.test", "/p/0", port=port_a),
        server.url("twin.test", "/p/1", port=port_b),
        *others,
    ]
    started = time.monotonic()
    res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    assert time.monotonic() - started < 15
    assert [(i["outcome"], i["rule"]) for i in res.items[:2]] == [("skipped", "R4")] * 2
    assert "WALSH_MAX_CRAWL_DELAY" in res.items[0]["reason"]
    assert [i["outcome"] for i in res.items[2:]] == ["fetched"] * 3


@pytest_twisted.ensureDeferred
async def test_targets_a_gate_will_deny_do_not_wait_for_their_hosts_slots(server, tmp_path):
    """Pacing spaces what is sent: once robots.txt closes a host, its queued
    targets are denied from the cached rules at once, not one per interval."""
    heavy = pages(server, "heavy.test", 8, latency=0)
    # its Crawl-delay keeps closed.test's own slot shut for the whole crawl, so
    # its targets can only leave as denials that need no slot, however loaded
    # the machine (with a 1 s slot they could come due first under load)
    robots = "User-agent: *\nDisallow: /\nCrawl-delay: 30\n"
    closed = pages(server, "closed.test", 6, robots, latency=0)
    others = [u for i in range(20) for u in pages(server, f"open{i}.test", 1, latency=0)]
    res = await crawl(base_settings(server, tmp_path / "s"), heavy + others + closed, tmp_path)
    order = [i["url"] for i in res.items]
    assert [(i["outcome"], i["rule"]) for i in res.items if i["url"] in closed] == [
        ("denied", "R2")
    ] * 6
    assert [h.path for h in server.origin.hits_for("closed.test")] == ["/robots.txt"]
    # heavy.test's chain (a page a second) sets the crawl's length; closed.test's
    # five queued targets, one slot apart, would still be going at its 5th page
    last_closed = max(order.index(u) for u in closed)
    assert last_closed < order.index(heavy[3]), order
    assert res.stats.get("walsh/frontier/denied_without_wait", 0) >= 5


@pytest_twisted.ensureDeferred
async def test_a_closed_host_behind_more_hosts_than_are_asked_per_decision_drains_first(
    server, tmp_path
):
    """The frontier asks a few queue heads per decision, in rotation: a closed
    host placed after them is still reached, and drained at once."""
    busy = [pages(server, f"busy{i}.test", 4, latency=0) for i in range(4)]
    closed = pages(server, "closed.test", 6, "User-agent: *\nDisallow: /\n", latency=0)
    lines = [u for b in busy for u in b] + closed
    res = await crawl(base_settings(server, tmp_path / "s"), lines, tmp_path)
    order = [i["url"] for i in res.items]
    assert [(i["outcome"], i["rule"]) for i in res.items if i["url"] in closed] == [
        ("denied", "R2")
    ] * 6
    # the four busy hosts each take >= 3 s; closed.test's 6 denials need no slot
    last_closed = max(order.index(u) for u in closed)
    assert last_closed < min(order.index(b[2]) for b in busy), order


@pytest_twisted.ensureDeferred
async def test_robots_of_a_held_host_does_not_hold_the_download_slot(server, tmp_path):
    """While one origin of a host is held by a Retry-After, a target on its
    other origin goes back to the frontier instead of waiting for robots.txt
    with the only download slot; other hosts go on meanwhile."""
    port_a, port_b = two_origins(server, "held.test", "User-agent: *\nAllow: /\n", None)
    calls = {"n": 0}

    def busy_once(hit: Any) -> Reply:
        calls["n"] += 1
        return Reply(429, "wait", {"Retry-After": "6"}) if calls["n"] == 1 else Reply(200, "ok")

    server.origin.route("held.test", "/busy", busy_once)
    # enough of them that some are still queued when the hold comes, however
    # the engine orders the held host's documents
    others = pages(server, "other.test", 10, latency=0)
    urls = [
        server.url("held.test", "/busy", port=port_a),
        server.url("held.test", "/p/1", port=port_b),
        *others,
    ]
    res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    assert {i["outcome"] for i in res.items} == {"fetched"}
    held = server.origin.hits_for("held.test")
    first_busy = next(h.t for h in held if h.path == "/busy")
    after = [h.t for h in held if h.t > first_busy]
    assert min(after) - first_busy >= 6.0  # nothing to the host while held
    pages_out = [
        h for h in server.origin.hits_for("other.test") if h.path not in ("/robots.txt", TDMREP)
    ]
    assert sum(first_busy < h.t < first_busy + 6.0 for h in pages_out) >= 4


# -- pacing state survives a crash ------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_a_reservation_is_kept_when_the_crawler_is_killed_mid_request(server, tmp_path):
    """SIGKILL while a slow request is in flight, restart at once: the next
    request to that host still comes a Crawl-delay after the killed one."""
    from tests.support.crawling import sleep, write_list
    from tests.support.processes import spawn_targets_crawl

    state = tmp_path / "s"
    robots = "User-agent: *\nCrawl-delay: 5\n"
    server.origin.route("slow.test", "/robots.txt", Reply(200, robots))
    server.origin.route("slow.test", "/slow", Reply(200, "late", delay=30))
    server.origin.route("slow.test", "/next", Reply(200, "ok"))
    proc = spawn_targets_crawl(server, write_list(tmp_path, [server.url("slow.test", "/slow")]),
                               state)  # fmt: skip
    for _ in range(400):
        if server.origin.hits_for("slow.test", "/slow") or proc.ended.called:
            break
        await sleep(0.05)
    assert server.origin.hits_for("slow.test", "/slow"), proc.err.decode()[-2000:]
    proc.transport.signalProcess("KILL")
    await proc.ended
    await crawl(base_settings(server, state), [server.url("slow.test", "/next")], tmp_path)
    hits = server.origin.hits_for("slow.test")
    assert [h.path for h in hits] == ["/robots.txt", TDMREP, "/slow", "/next"]
    assert hits[3].t - hits[2].t >= 5.0


@pytest_twisted.ensureDeferred
async def test_a_restart_knows_the_crawl_delay_before_refetching_robots(server, tmp_path):
    """robots.txt's copy has expired by the restart: its re-fetch is itself
    a request to the host and keeps the Crawl-delay learned before."""
    state = tmp_path / "s"
    urls = pages(server, "cd.test", 1, "User-agent: *\nCrawl-delay: 4\n", latency=0)
    settings = base_settings(server, state, WALSH_POLICY_TTL=1)
    await crawl(settings, urls, tmp_path)
    await crawl(settings, urls, tmp_path)
    hits = server.origin.hits_for("cd.test")
    assert [h.path for h in hits] == ["/robots.txt", TDMREP, "/p/0"] * 2
    assert min(gaps(hits)) >= 4.0


@pytest_twisted.ensureDeferred
async def test_a_stored_reservation_covers_its_request_or_the_commit_is_written(tmp_path):
    """The reservation is stored with COMMIT_SLACK for its request to leave
    (no second write when it leaves in time); a request that leaves later
    still has its own time written: the stored next slot is never earlier
    than the last request plus the interval."""
    import time

    from scrapy_walsh_research.state.hostclock import PersistentHostClock
    from scrapy_walsh_research.state.sqlite import SQLiteStateStore

    store = SQLiteStateStore(tmp_path / "state.sqlite3")
    clock = PersistentHostClock(store)
    writes = []
    put = store.put

    async def counted(*args: Any) -> None:
        writes.append(args[1])
        await put(*args)

    store.put = counted  # type: ignore[method-assign]
    interval, slack = 1.0, PersistentHostClock.COMMIT_SLACK
    for host, late in (("soon.test", 0.01), ("late.test", slack + 0.5)):
        now = time.monotonic()
        assert await clock.reserve(host, now, interval) == 0
        await clock.commit(host, now + late, interval)
        stored = await store.get(PersistentHostClock.NAMESPACE, host)
        next_mono = clock._to_mono(stored["next"])
        assert next_mono >= now + late + interval - 0.01  # wall/monotonic mapping
        assert clock.ready_at(host, interval) == pytest.approx(now + late + interval)
    assert writes == ["soon.test", "late.test", "late.test"]
    await store.close()


@pytest_twisted.ensureDeferred
async def test_what_an_answer_writes_before_its_commit_still_covers_the_request(tmp_path):
    """A crash between an answer and its commit: the answer's write (load,
    distress) still allows COMMIT_SLACK for the request to have left, so a
    restart never lets the next request to the host go sooner than its
    interval after that request. (Before: the answer's write dropped the
    slack, and a request that left 0.5 s after its reservation was followed
    after a restart by one 0.5 s after it.)"""
    import time

    from scrapy_walsh_research.settings.adaptive import AdaptivePolicy
    from scrapy_walsh_research.state.hostclock import PersistentHostClock
    from scrapy_walsh_research.state.hostload import Answer
    from scrapy_walsh_research.state.sqlite import SQLiteStateStore

    store = SQLiteStateStore(tmp_path / "state.sqlite3")
    clock = PersistentHostClock(store)
    interval, slack = 3.0, PersistentHostClock.COMMIT_SLACK
    now = time.monotonic()
    assert await clock.reserve("d.test", now, interval) == 0
    await clock.note_answer("d.test", Answer(0.05, None, 0.5), AdaptivePolicy(), 1.0)
    await clock.hold("d.test", now)  # a hold written meanwhile keeps it too
    # the process dies here: the commit (the request left up to `slack` after
    # `now`) is never written
    restarted = PersistentHostClock(store)
    await restarted.warm("d.test")
    assert restarted.ready_at("d.test", interval) >= now + slack + interval - 0.01
    await store.close()
