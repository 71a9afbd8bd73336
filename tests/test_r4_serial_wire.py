"""R4 "requests MUST be serial per process, no concurrent connections",
with the engine taking up to three requests (the add-on's
CONCURRENT_REQUESTS=3) so that the next ones pass their gates while one is
on the wire: the wire-timed handler lets one request at a time ask for a
connection and send, the time a request waits for the wire is not counted
against its DOWNLOAD_TIMEOUT, a host never has two requests out of the
frontier, and a request that waited for the wire is checked again as it
leaves (and again once its audit entry is written, when that write waited
on Redis). Asserted on what the origin saw."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import defaultdict
from typing import Any
from urllib.parse import urlsplit

import pytest_twisted
from scrapy.utils.defer import deferred_from_coro

from scrapy_walsh_research.sandbox import Reply
from tests.support.crawling import base_settings, blocklist_doc, crawl, gaps
from tests.support.fleet import redis_settings

ROBOTS = "User-agent: *\nAllow: /\n"


def slow_pages(server, host: str, n: int, delay: float, robots: str = ROBOTS) -> list[str]:
    server.origin.route(host, "/robots.txt", Reply(200, robots))
    for i in range(n):
        server.origin.route(host, f"/p/{i}", Reply(200, f"{host} {i}", delay=delay))
    return [server.url(host, f"/p/{i}") for i in range(n)]


def captured_gates(monkeypatch, cls: type) -> list[Any]:
    """The crawl's gate of class *cls*, once Scrapy has built it."""
    gates: list[Any] = []
    built = cls.from_crawler.__func__  # type: ignore[attr-defined]

    def capture(klass, crawler):
        gates.append(built(klass, crawler))
        return gates[-1]

    monkeypatch.setattr(cls, "from_crawler", classmethod(capture))
    return gates


def captured_blocklist_gates(monkeypatch) -> list[Any]:
    from scrapy_walsh_research.gates.blocklist.middleware import BlocklistMiddleware

    return captured_gates(monkeypatch, BlocklistMiddleware)


def behind_a_slow_answer(server, change) -> str:
    """slow.test/x, answered in 3 s; 1.5 s into its answer *change* (a
    coroutine function) runs: what a request granted meanwhile waits behind."""
    from twisted.internet import reactor

    def slow_answer(hit):
        reactor.callLater(1.5, lambda: deferred_from_coro(change()))
        return Reply(200, "slow", delay=3.0)

    server.origin.route("slow.test", "/robots.txt", Reply(200, ROBOTS))
    server.origin.route("slow.test", "/x", slow_answer)
    return server.url("slow.test", "/x")


def sent_or_refused_as_it_left(server, res, urls, refused: tuple[str, str]) -> None:
    """Of one host's *urls*, each the origin got is fetched and each it did
    not is *refused* (outcome, rule); one was refused as it left, having
    waited for the wire behind the slow answer. Which of the host's pages
    that was is the engine's order across hosts, which a loaded machine
    changes (the slow answer may go first)."""
    records = {r["url"]: r for r in res.items}
    for url in urls:
        record = records[url]
        if server.origin.hits_for(urlsplit(url).hostname, urlsplit(url).path):
            assert record["outcome"] == "fetched", record
        else:
            assert (record["outcome"], record["rule"]) == refused, record
    assert res.stats.get("walsh/pacing/refused_as_it_left", 0) >= 1, [records[u] for u in urls]


async def blocking(gate, host: str) -> Any:
    """The operator's list naming *host*, parsed as *gate* parses a fetched one."""
    body = json.dumps(blocklist_doc(host)).encode()
    return await gate.builder.parse_off_reactor(
        body, url=gate.url, fetched_at=gate.held.store.time()
    )


@pytest_twisted.ensureDeferred
async def test_no_connection_is_opened_and_nothing_sent_while_a_request_is_in_flight(
    server, tmp_path
):
    """Slow answers (0.3 s) from several hosts, the engine taking three
    requests: at the origin, no two requests' spans, from their connection's
    opening (or their arrival on a kept-alive one) to their answer's end,
    overlap; a host's arrivals stay max(1 s, Crawl-delay) apart."""
    urls = []
    for i in range(4):
        robots = "User-agent: *\nCrawl-delay: 1.5\n" if i == 0 else ROBOTS
        urls += slow_pages(server, f"h{i}.test", 3, 0.3, robots)
    order = [urls[h * 3 + p] for p in range(3) for h in range(4)]  # hosts interleaved
    res = await crawl(base_settings(server, tmp_path / "s"), order, tmp_path)
    assert res.crawler.settings.getint("CONCURRENT_REQUESTS") == 3
    assert [i["outcome"] for i in res.items] == ["fetched"] * 12
    assert server.origin.overlapping() == []
    assert server.origin.max_inflight == 1
    for i in range(4):
        hits = server.origin.hits_for(f"h{i}.test")
        assert len(hits) == 5  # robots.txt, tdmrep.json, 3 pages
        assert min(gaps(hits)) >= 1.0
    paged = [h for h in server.origin.hits_for("h0.test") if h.path.startswith("/p/")]
    assert min(gaps(paged)) >= 1.5  # its Crawl-delay, read before its first page


@pytest_twisted.ensureDeferred
async def test_the_wait_for_the_wire_does_not_count_against_download_timeout(server, tmp_path):
    """Two hosts answer in 1.5 s, DOWNLOAD_TIMEOUT is 2.5 s: a request that
    waits for the other's answer (1.5 s) then takes 1.5 s itself is not
    timed out (3 s counted from the wait), and each page is sent once."""
    urls = slow_pages(server, "a.test", 1, 1.5) + slow_pages(server, "c.test", 1, 1.5)
    urls += slow_pages(server, "b.test", 1, 0.0)
    settings = base_settings(server, tmp_path / "s", DOWNLOAD_TIMEOUT=2.5, WALSH_RETRY_TIMES=0)
    res = await crawl(settings, urls, tmp_path)
    assert {i["url"]: i["outcome"] for i in res.items} == dict.fromkeys(urls, "fetched")
    sent: dict[str, int] = defaultdict(int)
    for hit in server.origin.hits:
        if hit.host in ("a.test", "b.test", "c.test") and hit.path.startswith("/p/"):
            sent[hit.host] += 1
    assert dict(sent) == {"a.test": 1, "b.test": 1, "c.test": 1}
    assert server.origin.overlapping() == []


@pytest_twisted.ensureDeferred
async def test_a_shared_clocks_lease_outlives_a_wait_for_the_wire(server, tmp_path, redis_server):
    """On a Redis clock a reservation is leased (1.5 s here) and renewed: a
    request granted while another host's answer takes 4 s waits for the wire
    longer than its lease, and is still sent once, on its own reservation
    (no GrantExpired, no retry), after that answer."""
    slow = slow_pages(server, "slow.test", 1, 4.0)
    # four: one is due during the 4 s answer, whichever host's chain leads
    fast = slow_pages(server, "fast.test", 4, 0.0)
    shared = redis_settings(redis_server, WALSH_REDIS_LEASE=1.5)
    res = await crawl(base_settings(server, tmp_path / "s", **shared), slow + fast, tmp_path)
    assert {i["url"]: i["outcome"] for i in res.items} == dict.fromkeys(slow + fast, "fetched")
    assert res.stats.get("walsh/retry/count", 0) == 0
    (answer,) = server.origin.hits_for("slow.test", "/p/0")
    waited = [h for h in server.origin.hits_for("fast.test") if h.t > answer.t]
    assert waited and all(h.t >= answer.finished for h in waited)
    assert [h.path for h in server.origin.hits_for("fast.test")].count("/p/1") == 1
    assert server.origin.overlapping() == []


@pytest_twisted.ensureDeferred
async def test_a_visit_time_window_that_closes_while_a_request_waits_for_the_wire_holds(
    server, tmp_path
):
    """vt.test's Visit-time window closes at the next minute boundary while
    its next page, granted, waits for the wire behind a slow answer from
    another host that ends after it: that page is not sent (checked again as
    it leaves, it goes back through its gates) and is skipped by R2."""
    now = time.time()
    closes = (int(now // 60) + 1) * 60
    if closes - now < 15:  # time for a loaded machine's start-up
        closes += 60
    visits = f"{(int(now // 60) - 1) % 1440 // 60:02d}{(int(now // 60) - 1) % 60:02d}-"
    visits += f"{int(closes // 60) % 1440 // 60:02d}{int(closes // 60) % 60:02d}"
    first, second = slow_pages(server, "vt.test", 2, 0.0, f"User-agent: *\nVisit-time: {visits}\n")
    server.origin.route("slow.test", "/robots.txt", Reply(200, ROBOTS))
    # answered 1.5 s after the window closed, whenever it arrived
    server.origin.route(
        "slow.test", "/x", lambda hit: Reply(200, "late", delay=closes + 1.5 - hit.wall)
    )
    slow = server.url("slow.test", "/x")
    settings = base_settings(server, tmp_path / "s", DOWNLOAD_TIMEOUT=90)
    res = await crawl(settings, [first, slow, second], tmp_path)
    records = {r["url"]: r for r in res.items}
    assert records[slow]["outcome"] == "fetched"
    (late,) = server.origin.hits_for("slow.test", "/x")
    assert late.wall < closes  # a vt.test page was due (1 s apart) while it was out
    assert [h.path for h in server.origin.hits_for("vt.test") if h.wall >= closes] == []
    sent_or_refused_as_it_left(server, res, [first, second], ("skipped", "R2"))


@pytest_twisted.ensureDeferred
async def test_a_host_the_blocklist_adds_while_its_request_waits_for_the_wire_gets_nothing(
    server, tmp_path, monkeypatch
):
    """late.test's next page, granted, waits for the wire behind a 3 s
    answer from slow.test; meanwhile the list in force changes to block
    late.test (as when a fleet worker adopts the list another worker
    fetched: no request of this process's wire is needed for that). The
    page is not sent (R3 checked again as it leaves) and is denied by R3."""
    gates = captured_blocklist_gates(monkeypatch)
    adopted_at: list[float] = []

    async def adopt_blocking_late() -> None:
        (gate,) = gates
        new, canonical = await blocking(gate, "late.test")
        await gate.held.adopt(new, persist=False, canonical=canonical)
        adopted_at.append(time.monotonic())

    late = slow_pages(server, "late.test", 2, 0.0)
    slow = behind_a_slow_answer(server, adopt_blocking_late)
    res = await crawl(base_settings(server, tmp_path / "s"), [late[0], slow, late[1]], tmp_path)
    records = {r["url"]: r for r in res.items}
    assert adopted_at
    assert records[slow]["outcome"] == "fetched"
    assert [h.path for h in server.origin.hits_for("late.test") if h.t >= adopted_at[0]] == []
    sent_or_refused_as_it_left(server, res, late, ("denied", "R3"))


@pytest_twisted.ensureDeferred
async def test_a_robots_txt_read_while_a_request_waits_for_the_wire_that_disallows_it_holds(
    server, tmp_path, monkeypatch
):
    """rb.test's next page, granted, waits for the wire behind a 3 s answer
    from slow.test; meanwhile the robots.txt in force for rb.test becomes
    one that disallows /p/ (as when a fleet worker reads the copy another
    worker refetched: no request of this process's wire is needed for
    that). The page is not sent (R2 checked again as it leaves) and is
    denied by R2."""
    from scrapy_walsh_research.gates.robots import RobotsEntry, RobotsTxtMiddleware, _parse

    gates = captured_gates(monkeypatch, RobotsTxtMiddleware)
    read_at: list[float] = []

    async def disallow_pages() -> None:
        (gate,) = gates
        policy, digest = await _parse("User-agent: *\nDisallow: /p/\n")
        origin = server.url("rb.test", "/").rstrip("/")
        old = gate._cache[origin]
        gate._cache[origin] = RobotsEntry(policy, old.expires, 200, sha256=digest)
        read_at.append(time.monotonic())

    pages = slow_pages(server, "rb.test", 2, 0.0)
    slow = behind_a_slow_answer(server, disallow_pages)
    res = await crawl(base_settings(server, tmp_path / "s"), [pages[0], slow, pages[1]], tmp_path)
    records = {r["url"]: r for r in res.items}
    assert read_at
    assert records[slow]["outcome"] == "fetched"
    assert [h.path for h in server.origin.hits_for("rb.test") if h.t >= read_at[0]] == []
    sent_or_refused_as_it_left(server, res, pages, ("denied", "R2"))


class HeldAuditWrite:
    """The Redis keeping the audit log stops answering (SIGSTOP) for
    *seconds* as *url*'s request entry is written (it has its connection),
    and *meanwhile* is called then; :meth:`resume` in a ``finally``."""

    def __init__(self, monkeypatch, redis_server, url: str, meanwhile, seconds: float = 2.0):
        from twisted.internet import reactor

        from scrapy_walsh_research.evidence.audit_redis import RedisAudit

        self.redis = redis_server
        self.resumed_at: list[float] = []
        append = RedisAudit.append

        def held_append(audit, entry):
            if entry.get("event") == "request" and entry.get("url") == url and not self.resumed_at:
                self.redis.proc.send_signal(signal.SIGSTOP)
                self.stopped_at = time.monotonic()
                reactor.callLater(seconds, self.resume)
                meanwhile()
            return append(audit, entry)

        monkeypatch.setattr(RedisAudit, "append", held_append)

    def resume(self) -> None:
        if not self.resumed_at:
            self.redis.proc.send_signal(signal.SIGCONT)
            self.resumed_at.append(time.monotonic())


@pytest_twisted.ensureDeferred
async def test_a_host_the_blocklist_adds_while_its_audit_entry_waits_on_redis_gets_nothing(
    server, tmp_path, monkeypatch, redis_server
):
    """With the audit log in Redis, late.test's second page is handed its
    connection and its audit entry waits on a Redis that does not answer
    (stopped for 2 s); meanwhile the list in force changes to block
    late.test (as when a fleet worker adopts the list another worker
    fetched). Once the write is through, the page is not sent (R3 checked
    again after the write, as at handover) and is denied by R3."""
    gates = captured_blocklist_gates(monkeypatch)
    late = slow_pages(server, "late.test", 2, 0.0)
    adopted_at: list[float] = []

    async def adopt_blocking_late() -> None:
        (gate,) = gates
        new, canonical = await blocking(gate, "late.test")
        # in force from the adoption's first step; the rest waits on Redis
        adopting = asyncio.ensure_future(gate.held.adopt(new, persist=False, canonical=canonical))
        while gate.held.domains.match("late.test") is None:
            await asyncio.sleep(0.01)
        adopted_at.append(time.monotonic())
        await adopting

    held = HeldAuditWrite(
        monkeypatch, redis_server, late[1], lambda: deferred_from_coro(adopt_blocking_late())
    )
    settings = base_settings(server, tmp_path / "s", **redis_settings(redis_server))
    try:
        res = await crawl(settings, late, tmp_path)
    finally:
        held.resume()
    records = {r["url"]: r for r in res.items}
    assert adopted_at and adopted_at[0] < held.resumed_at[0]  # in force while the write waited
    assert records[late[0]]["outcome"] == "fetched"
    assert server.origin.hits_for("late.test", "/p/1") == []
    assert [h.path for h in server.origin.hits_for("late.test") if h.t >= adopted_at[0]] == []
    assert (records[late[1]]["outcome"], records[late[1]]["rule"]) == ("denied", "R3")


@pytest_twisted.ensureDeferred
async def test_a_run_stopped_while_a_requests_audit_entry_waits_on_redis_does_not_send_it(
    server, tmp_path, monkeypatch, redis_server
):
    """With the audit log in Redis, st.test's second page is handed its
    connection and its audit entry waits on a Redis that does not answer
    (stopped for 2 s); meanwhile the run is stopped (as by Ctrl-C). Once the
    write is through, the page is not sent and its line is skipped: the run
    was stopped."""
    gates = captured_blocklist_gates(monkeypatch)
    pages = slow_pages(server, "st.test", 2, 0.0)

    stopping: list[Any] = []

    def stop() -> None:
        (gate,) = gates
        stopping.append(deferred_from_coro(gate.crawler.stop_async()))

    held = HeldAuditWrite(monkeypatch, redis_server, pages[1], stop)
    settings = base_settings(server, tmp_path / "s", **redis_settings(redis_server))
    try:
        res = await crawl(settings, pages, tmp_path)
    finally:
        held.resume()
    records = {r["url"]: r for r in res.items}
    assert held.resumed_at
    assert records[pages[0]]["outcome"] == "fetched"
    assert server.origin.hits_for("st.test", "/p/1") == []
    assert [h.path for h in server.origin.hits_for("st.test") if h.t >= held.stopped_at] == []
    assert (records[pages[1]]["outcome"], records[pages[1]]["rule"]) == ("skipped", None)
    assert "the run was stopped" in records[pages[1]]["reason"]


@pytest_twisted.ensureDeferred
async def test_an_https_request_and_an_http_request_are_never_in_flight_at_once(server, tmp_path):
    """Scrapy builds one download handler per scheme: the wire is serial
    across http and https too. Slow answers (1 s) from an https host and an
    http host, interleaved: at the origin no two requests' spans overlap."""
    server.start_tls()
    for host in ("tls.test", "plain.test"):
        server.origin.route(host, "/robots.txt", Reply(200, ROBOTS))
        for i in range(2):
            server.origin.route(host, f"/p/{i}", Reply(200, f"{host} {i}", delay=1.0))
    urls = []
    for i in range(2):
        urls += [server.tls_url("tls.test", f"/p/{i}"), server.url("plain.test", f"/p/{i}")]
    res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    assert {i["url"]: i["outcome"] for i in res.items} == dict.fromkeys(urls, "fetched")
    overlaps = [
        (
            a.host,
            a.path,
            round(a.opened, 3),
            round(a.finished, 3),
            b.host,
            b.path,
            round(b.opened, 3),
        )
        for a, b in server.origin.overlapping()
    ]
    assert overlaps == [], "\n".join(map(str, overlaps))
    assert server.origin.max_inflight == 1
