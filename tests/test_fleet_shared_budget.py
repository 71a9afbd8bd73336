"""Many workers, one politeness budget: WALSH_REDIS_URL puts per-host clocks,
holds, robots copies, the adopted blocklist, validators and cadence in Redis.

Each "worker" here is a separate Scrapy crawler with its own engine,
scheduler and state owners, as a separate process would have; they share
only a real redis-server on loopback, and the origin judges them.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from scrapy.settings import Settings
from scrapy.utils.defer import deferred_from_coro
from twisted.internet import defer

from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.settings.check import problems
from scrapy_walsh_research.state.redis.connection import RedisConnection
from scrapy_walsh_research.state.redis.hostclock import RedisHostClock
from scrapy_walsh_research.state.redis.target_queue import enqueue
from tests.support.crawling import (
    BLOCKLIST_HOST,
    BLOCKLIST_PATH,
    TDMREP,
    base_settings,
    blocklist_doc,
    crawl,
    crawl_task,
    gaps,
    json_reply,
    sleep,
)
from tests.support.fleet import crawl_feed, redis_settings, stored_state
from tests.support.redis_server import RedisServer


def serve(server: Any, host: str, n: int, **headers: str) -> list[str]:
    server.origin.route(host, "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    for i in range(n):
        server.origin.route(host, f"/p/{i}", Reply(200, f"page {i}", dict(headers)))
    return [server.url(host, f"/p/{i}") for i in range(n)]


def push(
    redis_server: Any, settings: dict[str, Any], key: str, lines: list[str], tmp: Path
) -> None:
    path = tmp / f"{key}.txt"
    path.write_text("\n".join(lines) + "\n")
    enqueue(redis_server.url, key, path, prefix=settings["WALSH_REDIS_PREFIX"])


async def together(*coros: Any) -> list[Any]:
    return await defer.gatherResults([deferred_from_coro(c) for c in coros], consumeErrors=True)


# -- the shared per-host budget ------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_two_workers_sharing_redis_keep_one_second_between_requests_to_a_host(
    server, redis_server, tmp_path
):
    urls = serve(server, "a.test", 6) + serve(server, "b.test", 6)
    shared = redis_settings(redis_server)
    w1 = base_settings(server, tmp_path / "w1", **shared)
    w2 = base_settings(server, tmp_path / "w2", **shared)
    push(redis_server, shared, "targets", urls, tmp_path)
    r1, r2 = await together(crawl_feed(w1, "targets"), crawl_feed(w2, "targets"))
    records = r1.items + r2.items
    assert sorted(r["line"] for r in records) == list(range(1, 13))
    assert {r["outcome"] for r in records} == {"fetched"}
    assert r1.items and r2.items  # both workers did work
    for host in ("a.test", "b.test"):
        assert min(gaps(server.origin.hits_for(host))) >= 1.0
    assert server.origin.max_inflight <= 2  # each worker stays serial


@pytest_twisted.ensureDeferred
async def test_without_redis_two_workers_do_hit_a_host_twice_within_a_second(server, tmp_path):
    """The control: per-process pacing alone lets two workers double the rate."""
    urls = serve(server, "a.test", 8)
    await together(
        crawl_task(base_settings(server, tmp_path / "w1"), urls[:4], tmp_path / "1"),
        crawl_task(base_settings(server, tmp_path / "w2"), urls[4:], tmp_path / "2"),
    )
    assert min(gaps(server.origin.hits_for("a.test"))) < 0.5


@pytest_twisted.ensureDeferred
async def test_without_redis_a_second_crawl_on_the_same_state_dir_is_refused(server, tmp_path):
    """Found by review: two crawls sharing WALSH_STATE_DIR without Redis each
    paced only their own requests (the origin saw gaps of 2-9 ms). The
    second now stops at start-up, saying why, and sends nothing."""
    from scrapy_walsh_research.errors import WalshConfigurationError

    urls = serve(server, "a.test", 8)
    settings = base_settings(server, tmp_path / "shared")
    first = deferred_from_coro(crawl_task(settings, urls[:4], tmp_path / "1"))
    while not server.origin.hits_for("a.test"):
        await sleep(0.05)
    with pytest.raises(WalshConfigurationError, match=r"WALSH_STATE_DIR.*WALSH_REDIS_URL"):
        await deferred_from_coro(crawl_task(settings, urls[4:], tmp_path / "2"))
    await first
    assert min(gaps(server.origin.hits_for("a.test"))) >= 1.0
    assert {h.path for h in server.origin.hits_for("a.test")} == {"/robots.txt", TDMREP} | {
        f"/p/{i}" for i in range(4)
    }
    # once the first has stopped, the state dir is free again
    await deferred_from_coro(crawl_task(settings, urls[4:], tmp_path / "3"))
    assert len(server.origin.hits_for("a.test", "/p/7")) == 1


@pytest_twisted.ensureDeferred
async def test_a_reservation_is_atomic_across_clients(redis_server):
    """Forty concurrent reservations from two clients: exactly one wins."""
    prefix = redis_settings(redis_server)["WALSH_REDIS_PREFIX"]
    conns = [RedisConnection(redis_server.url, prefix) for _ in range(2)]
    clocks = [RedisHostClock(c, lease=30.0, pause_on_loss=30.0) for c in conns]

    async def race() -> list[float]:
        return await asyncio.gather(*(clocks[i % 2].reserve("h.test", 0.0, 1.0) for i in range(40)))

    waits = await deferred_from_coro(race())
    assert sum(1 for w in waits if w == 0.0) == 1
    assert all(0.0 < w <= 1.0 + clocks[0].margin for w in waits if w != 0.0)
    for c in conns:
        await deferred_from_coro(c.close())


@pytest_twisted.ensureDeferred
async def test_a_retry_after_hold_binds_every_worker(server, redis_server, tmp_path):
    """A 429 answered to one worker holds the host for the other as well."""
    serve(server, "busy.test", 0)
    calls = {"n": 0}

    def reply(request: Any) -> Reply:
        calls["n"] += 1
        if calls["n"] == 1:
            return Reply(429, "slow down", {"Retry-After": "3"})
        return Reply(200, "ok")

    server.origin.route("busy.test", "/x", reply)
    server.origin.route("busy.test", "/y", Reply(200, "ok"))
    shared = redis_settings(redis_server)
    push(redis_server, shared, "k1", [server.url("busy.test", "/x")], tmp_path)
    push(redis_server, shared, "k2", [server.url("busy.test", "/y")], tmp_path)
    w1 = base_settings(server, tmp_path / "w1", **shared)
    w2 = base_settings(server, tmp_path / "w2", **shared)
    first = crawl_feed(w1, "k1")

    async def later() -> Any:
        # start once the 429 has been answered
        while calls["n"] == 0:
            await asyncio.sleep(0.05)
        return await crawl_feed(w2, "k2")

    await together(first, later())
    hits = server.origin.hits_for("busy.test")
    t429 = next(h.t for h in hits if h.path == "/x")
    assert all(h.t - t429 >= 3.0 for h in hits if h.t > t429)


# -- shared stores ----------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_validators_cadence_robots_and_blocklist_are_shared_between_workers(
    server, redis_server, tmp_path
):
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("blocked.test")))
    doc = serve(server, "etag.test", 1, ETag='"v1"')[0]
    blocked = server.url("blocked.test", "/page")
    shared = redis_settings(redis_server)
    w1 = base_settings(server, tmp_path / "w1", **shared)
    await crawl(w1, [doc, blocked], tmp_path)
    # the blocklist is down for the second worker, which has never seen it
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, Reply(503, "down"))
    w2 = base_settings(server, tmp_path / "w2", **shared)
    res = await crawl(w2, [doc, blocked], tmp_path)
    hits = server.origin.hits_for("etag.test")
    assert [h.path for h in hits] == ["/robots.txt", TDMREP, "/p/0", "/p/0"]  # each once
    assert hits[-1].headers.get("if-none-match") == '"v1"'  # worker 1's validator
    assert res.by_url()[blocked]["rule"] == "R3"  # worker 1's adopted list, retained
    assert server.origin.hits_for("blocked.test") == []
    # R8: a third worker with the project cadence skips what worker 1 fetched
    w3 = base_settings(server, tmp_path / "w3", WALSH_RUN_INTERVAL=3600, **shared)
    res3 = await crawl(w3, [doc], tmp_path)
    assert res3.items[0]["outcome"] == "skipped" and res3.items[0]["rule"] == "R8"
    assert len(server.origin.hits_for("etag.test", "/p/0")) == 2
    # of it all, only the worker's own copy of the blocklist is kept locally
    import sqlite3

    db = sqlite3.connect(tmp_path / "w1" / "state.sqlite3")
    assert {ns for (ns,) in db.execute("SELECT DISTINCT namespace FROM kv")} == {"blocklist"}
    db.close()


@pytest_twisted.ensureDeferred
async def test_a_line_fed_through_redis_is_fetched_by_exactly_one_worker(
    server, redis_server, tmp_path
):
    urls = serve(server, "f.test", 3) + serve(server, "g.test", 3)
    lines = [*urls, "# a comment", "not a url", urls[0] + "#frag", ""]
    shared = redis_settings(redis_server)
    push(redis_server, shared, "feed", lines, tmp_path)
    w1 = base_settings(server, tmp_path / "w1", **shared)
    w2 = base_settings(server, tmp_path / "w2", **shared)
    r1, r2 = await together(crawl_feed(w1, "feed"), crawl_feed(w2, "feed"))
    records = {r["line"]: r for r in r1.items + r2.items}
    assert sorted(records) == [1, 2, 3, 4, 5, 6, 8, 9]
    assert records[8]["outcome"] == "invalid"
    assert records[9]["outcome"] == "duplicate"
    assert records[9]["reason"] == "same canonical URL as line 1"
    fetched = [h.path for h in server.origin.hits if h.path.startswith("/p/")]
    assert len(fetched) == 6 and len(set(fetched)) == 3  # each page once per host


@pytest_twisted.ensureDeferred
async def test_a_list_enqueued_again_is_fetched_again_not_recorded_as_duplicates(
    server, redis_server, tmp_path
):
    """Dedup holds within one enqueued list; tomorrow's run of the same list
    is a new list (R8 cadence decides what is due, here 0)."""
    urls = serve(server, "again.test", 2)
    shared = redis_settings(redis_server)
    worker = base_settings(server, tmp_path / "w", **shared)
    push(redis_server, shared, "daily", urls, tmp_path)
    first = await deferred_from_coro(crawl_feed(worker, "daily"))
    push(redis_server, shared, "daily", urls, tmp_path)
    second = await deferred_from_coro(crawl_feed(worker, "daily"))
    assert [r["outcome"] for r in first.items + second.items] == ["fetched"] * 4
    assert len([h for h in server.origin.hits_for("again.test") if h.path.startswith("/p/")]) == 4


# -- scrapy-redis ------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_workers_on_scrapy_redis_scheduler_and_dupefilter_keep_the_budget(
    server, redis_server, tmp_path
):
    urls = serve(server, "q.test", 5) + serve(server, "r.test", 5)
    shared = redis_settings(
        redis_server,
        SCHEDULER="scrapy_redis.scheduler.Scheduler",
        DUPEFILTER_CLASS="scrapy_redis.dupefilter.RFPDupeFilter",
        SCHEDULER_PERSIST=True,
        REDIS_URL=redis_server.url,
    )
    shared["SCHEDULER_QUEUE_KEY"] = shared["WALSH_REDIS_PREFIX"] + ":requests"
    shared["SCHEDULER_DUPEFILTER_KEY"] = shared["WALSH_REDIS_PREFIX"] + ":dupefilter"
    push(redis_server, shared, "targets", urls, tmp_path)
    w1 = base_settings(server, tmp_path / "w1", **shared)
    w2 = base_settings(server, tmp_path / "w2", **shared)
    r1, r2 = await together(crawl_feed(w1, "targets"), crawl_feed(w2, "targets"))
    records = r1.items + r2.items
    assert sorted(r["line"] for r in records) == list(range(1, 11))
    assert {r["outcome"] for r in records} == {"fetched"}
    for host in ("q.test", "r.test"):
        assert min(gaps(server.origin.hits_for(host))) >= 1.0
    assert server.origin.max_inflight <= 2
    assert r1.stats.get("scheduler/enqueued/redis") or r2.stats.get("scheduler/enqueued/redis")


def test_scrapy_redis_without_a_persistent_queue_is_refused():
    settings = Settings(
        {
            "WALSH_REDIS_URL": "redis://127.0.0.1:1/0",
            "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
            "SCHEDULER_PERSIST": False,
        }
    )
    assert any("SCHEDULER_PERSIST=True" in p for p in problems(settings))


def test_redis_state_without_the_asyncio_reactor_is_refused():
    settings = Settings(
        {
            "WALSH_REDIS_URL": "redis://127.0.0.1:1/0",
            "TWISTED_REACTOR": "twisted.internet.epollreactor.EPollReactor",
        }
    )
    assert any("TWISTED_REACTOR" in p for p in problems(settings))


# -- failing closed ---------------------------------------------------------------


async def _until(predicate: Any, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.02)


@pytest_twisted.ensureDeferred
async def test_killing_redis_mid_crawl_sends_nothing_until_it_returns_and_loses_nothing(
    server, tmp_path
):
    own = RedisServer(tmp_path / "redis").start()
    try:
        urls = serve(server, "k.test", 5, ETag='"e"')
        # a Redis seconds old may have lost a fleet's history: the crawl
        # starts WALSH_MAX_CRAWL_DELAY (at least a lease renewal period) late
        settings = base_settings(
            server,
            tmp_path / "w",
            **redis_settings(own, WALSH_REDIS_MAX_BACKOFF=0.5, WALSH_MAX_CRAWL_DELAY=2),
        )
        outage: dict[str, float] = {}

        async def saboteur() -> None:
            loop = asyncio.get_running_loop()
            await _until(lambda: len(server.origin.hits_for("k.test", None)) >= 3)
            own.kill()
            outage["down"] = loop.time()
            await asyncio.sleep(3.0)
            outage["up"] = loop.time()
            own.start()

        res, _ = await together(crawl_task(settings, urls, tmp_path), saboteur())
        assert sorted(r["outcome"] for r in res.items) == ["fetched"] * 5
        during = [h for h in server.origin.hits if outage["down"] < h.t < outage["up"]]
        assert during == []  # no request without a reservation
        assert min(gaps(server.origin.hits_for("k.test"))) >= 1.0
        assert res.stats["walsh/redis/outages"] >= 1
        # every target's validator and cadence entry is in Redis after the restart
        prefix = settings["WALSH_REDIS_PREFIX"]
        assert len(stored_state(own, prefix, "validators")) == 5
        assert len(stored_state(own, prefix, "cadence")) == 5
    finally:
        own.kill()


@pytest_twisted.ensureDeferred
async def test_redis_losing_its_data_pauses_every_host(server, tmp_path):
    """A Redis restarted empty no longer knows when hosts were last contacted:
    every worker waits WALSH_MAX_CRAWL_DELAY before the next request."""
    own = RedisServer(tmp_path / "redis", persist=False).start()
    try:
        urls = serve(server, "l.test", 3) + serve(server, "m.test", 3)
        settings = base_settings(
            server, tmp_path / "w", **redis_settings(own, WALSH_MAX_CRAWL_DELAY=4)
        )
        lost: dict[str, float] = {}

        async def flush() -> None:
            await _until(lambda: len([h for h in server.origin.hits if "/p/" in h.path]) >= 2)
            r = own.client()
            r.flushall()
            r.close()
            lost["t"] = asyncio.get_running_loop().time()

        res, _ = await together(crawl_task(settings, urls, tmp_path), flush())
        assert sorted(r["outcome"] for r in res.items) == ["fetched"] * 6
        after = [h.t for h in server.origin.hits if h.t > lost["t"]]
        assert after and min(after) - lost["t"] >= 3.5
        assert res.stats["walsh/redis/state_lost"] >= 1
    finally:
        own.kill()


@pytest_twisted.ensureDeferred
async def test_workers_starting_together_fetch_the_blocklist_once(server, redis_server, tmp_path):
    urls = serve(server, "s.test", 2) + serve(server, "t.test", 2)
    shared = redis_settings(redis_server)
    push(redis_server, shared, "targets", urls, tmp_path)
    workers = [base_settings(server, tmp_path / f"w{i}", **shared) for i in range(3)]
    results = await together(*(crawl_feed(w, "targets") for w in workers))
    assert len(server.origin.hits_for(BLOCKLIST_HOST, BLOCKLIST_PATH)) == 1
    assert sum(r.stats.get("walsh/blocklist/adopted_from_worker", 0) for r in results) >= 1


async def test_a_canonical_claim_and_its_expiry_are_one_step(redis_server):
    """A batch's canonical-URL claims are kept a week, not forever: a worker
    killed, or its connection lost, right after the claim reached Redis must
    not leave the claims without their expiry (the retry finds the claim its
    own and would set nothing more)."""
    import redis.asyncio as aioredis
    from redis.exceptions import ConnectionError as RedisConnectionError

    from scrapy_walsh_research.settings.defaults import WALSH_RECORDS_TTL
    from scrapy_walsh_research.state.redis.target_queue import RedisFeed

    prefix = redis_settings(redis_server)["WALSH_REDIS_PREFIX"]
    conn = RedisConnection(redis_server.url, prefix)
    answered = []

    class LosesTheFirstAnswer(aioredis.Redis):  # the command runs, its answer is lost
        async def execute_command(self, *args: Any, **options: Any) -> Any:
            result = await super().execute_command(*args, **options)
            answered.append(args[0])
            if len(answered) == 1:
                raise RedisConnectionError("connection lost after the command ran")
            return result

    conn.client.__class__ = LosesTheFirstAnswer
    feed = RedisFeed(conn, "targets")
    try:
        assert await deferred_from_coro(feed.claim("b1", "http://a.test/", 7)) is None
        ttl = await deferred_from_coro(conn.client.ttl(conn.key("targets", "canonical", "b1")))
        assert 0 < ttl <= WALSH_RECORDS_TTL, (ttl, answered)
        assert await deferred_from_coro(feed.claim("b1", "http://a.test/", 9)) == 7
    finally:
        await deferred_from_coro(conn.close())


# -- what a host's answers say, shared (the adaptive half of R4/R5) ------------------


@pytest_twisted.ensureDeferred
async def test_one_workers_distress_signal_slows_every_worker(server, redis_server, tmp_path):
    """A 503 answered to one worker raises the host's interval for the other,
    which never saw it: all its requests keep the distress interval."""
    serve(server, "strained.test", 0)
    server.origin.route("strained.test", "/x", Reply(503, "busy"))
    for path in ("/y", "/z"):
        server.origin.route("strained.test", path, Reply(200, "ok"))
    shared = redis_settings(redis_server, WALSH_RETRY_TIMES=0)
    push(redis_server, shared, "k1", [server.url("strained.test", "/x")], tmp_path)
    push(redis_server, shared, "k2", [server.url("strained.test", p) for p in ("/y", "/z")],
         tmp_path)  # fmt: skip
    w1 = base_settings(server, tmp_path / "w1", **shared)
    w2 = base_settings(server, tmp_path / "w2", **shared)

    async def later() -> Any:
        while not server.origin.hits_for("strained.test", "/x"):
            await asyncio.sleep(0.05)
        return await crawl_feed(w2, "k2")

    _, second = await together(crawl_feed(w1, "k1"), later())
    assert [r["outcome"] for r in second.items] == ["fetched"] * 2
    g = gaps(server.origin.hits_for("strained.test"))  # robots, /x (503), /y, /z
    assert g[-2] >= 3.0 and g[-1] >= 3.0, g


@pytest_twisted.ensureDeferred
async def test_a_host_one_worker_gave_up_is_skipped_by_every_worker(
    server, redis_server, tmp_path, without_preflight
):
    """The give-up is in the host's Redis record: a worker that never contacted
    the host skips its targets (R5, naming the signals) and sends nothing."""
    serve(server, "down.test", 0)
    server.origin.route("down.test", "/x", Reply(500, "oops"))
    for path in ("/y", "/z"):
        server.origin.route("down.test", path, Reply(200, "ok"))
    shared = redis_settings(redis_server, WALSH_ADAPTIVE_MAX_DELAY=3)
    await crawl(base_settings(server, tmp_path / "w1", **shared),
                [server.url("down.test", "/x")], tmp_path)  # fmt: skip
    before = len(server.origin.hits_for("down.test"))
    res = await crawl(base_settings(server, tmp_path / "w2", **shared),
                      [server.url("down.test", p) for p in ("/y", "/z")], tmp_path)  # fmt: skip
    assert [(r["outcome"], r["rule"]) for r in res.items] == [("skipped", "R5")] * 2
    assert "HTTP 500 x2" in res.items[0]["reason"]
    assert len(server.origin.hits_for("down.test")) == before


@pytest_twisted.ensureDeferred
async def test_the_redis_clock_applies_the_adaptive_rule_step_for_step(redis_server):
    """The ANSWER script and HostLoad.observe fold the same answers into the
    same load, distress, streak, signals and give-up (one rule, two runtimes)."""
    import random

    from scrapy_walsh_research.settings.adaptive import AdaptivePolicy
    from scrapy_walsh_research.state.hostload import Answer, HostLoad

    policy = AdaptivePolicy(factor=6, max_delay=30, backoff=3, recovery=2, give_up=100)
    conn = RedisConnection(redis_server.url, redis_settings(redis_server)["WALSH_REDIS_PREFIX"])
    clock = RedisHostClock(conn, lease=30.0, pause_on_loss=30.0)
    model = HostLoad()
    rng = random.Random(21)

    async def run() -> list[tuple[str, str]]:
        events = []
        for _ in range(200):
            signal = rng.choice([*[None] * 8, "HTTP 503", "timeout"])
            rt = None if signal == "timeout" else rng.choice([0.05, 0.2, 0.2, 0.5, 1.5, 6.0])
            answer = Answer(rt, signal, rng.random())
            expected = model.observe(answer, policy, 1.0, time.monotonic())
            got = await clock.note_answer("eq.test", answer, policy, 1.0)
            events.append((expected, got))
            view = clock.host_load("eq.test")
            for name in ("average", "last", "distress"):
                assert getattr(view, name) == pytest.approx(
                    getattr(model, name), rel=1e-4, abs=1e-5
                )
            assert (view.streak, view.signals) == (model.streak, model.signals)
            assert (view.gave_up_until > 0) == (model.gave_up_until > 0)
        await conn.close()
        return events

    events = await deferred_from_coro(run())
    assert all(expected == got for expected, got in events), events
    kinds = {e for e, _ in events}
    assert {"raised", "eased", "recovered", "gave_up", "streak", "load"} <= kinds, kinds
