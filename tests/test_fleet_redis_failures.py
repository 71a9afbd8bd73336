"""Many workers, one promise, when Redis itself fails: no worker
sends a request its fleet's history forbids, also when it cannot see that
history (Redis came back empty or from an older snapshot, or its clock
stepped), and a worker with no blocklist of its own never fails open while
the fleet's list may have been lost.

Every worker is a real ``scrapy crawl targets -a redis_key=...`` process;
they share a real redis-server on loopback, killed, wiped, restored from an
older RDB file, or with its wall clock stepped while it runs; the sandbox
origin judges them. Intervals are short and WALSH_MAX_CRAWL_DELAY (how long
lost history makes every host wait) is set just above them, to keep the
waits honest and lean.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import pytest_twisted
from scrapy.utils.defer import deferred_from_coro
from twisted.internet.defer import ensureDeferred

from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.state.redis.connection import RedisConnection, young_redis_s
from scrapy_walsh_research.state.redis.guard_scripts import FLEET
from scrapy_walsh_research.state.redis.hostclock import RedisHostClock
from scrapy_walsh_research.state.redis.journal import FleetJournal
from tests.support.crawling import (
    BLOCKLIST_HOST,
    BLOCKLIST_PATH,
    blocklist_doc,
    gaps,
    json_reply,
    sleep,
)
from tests.support.fleet import redis_settings
from tests.support.processes import spawn_worker
from tests.support.redis_server import RedisServer
from tests.support.tcp_proxy import TcpProxy
from tests.test_fleet_workers import durable_records, ended, push, site, workers

if TYPE_CHECKING:
    from collections.abc import Callable


def own_redis(tmp: Path, persist: bool | str = True, **kwargs: Any) -> RedisServer:
    return RedisServer(tmp / "redis", persist=persist, **kwargs).start()


def pages(server: Any, host: str) -> list[str]:
    return [h.path for h in server.origin.hits_for(host) if h.path.startswith("/p/")]


async def until(predicate: Any, timeout: float = 60.0) -> None:
    waited = 0.0
    while not predicate():
        assert waited < timeout, "timed out"
        await sleep(0.05)
        waited += 0.05


def slot_free(client: Any, shared: dict[str, Any], host: str) -> Callable[[], bool]:
    """Whether no worker holds *host*'s slot: a request that held it has
    been committed (its time stored, on the clock Redis had then). The
    origin seeing the request does not say that it has."""
    key = f"{shared['WALSH_REDIS_PREFIX']}:host:{host}"
    return lambda: not client.hexists(key, "owner")


# -- case 1: Redis restarted empty, a worker that never ran joins ------------------


@pytest_twisted.ensureDeferred
async def test_a_worker_that_never_ran_waits_after_redis_came_back_empty(server, tmp_path):
    """The fleet's last request to a Crawl-delay-10 host is in a Redis that
    then restarts empty (its volume lost, no AOF any more). A worker that
    never ran, with its own state dir, sees no trace of the fleet: only
    Redis's restart says its history is gone, and every host waits
    WALSH_MAX_CRAWL_DELAY from it. (Before: robots.txt went out ~4 s after
    the fleet's page.)"""
    redis = own_redis(tmp_path)  # AOF: the first run pays no restart wait
    try:
        urls = site(server, "cd.test", 2, "User-agent: *\nCrawl-delay: 10\n")
        shared = redis_settings(redis, WALSH_MAX_CRAWL_DELAY=12)
        push(redis, shared, urls[:1], tmp_path)
        first = spawn_worker(server, "targets", tmp_path / "a", **shared)
        await first.ended
        assert pages(server, "cd.test") == ["/p/0"], first.err.decode()[-2000:]
        redis.lose_volume()
        redis.start()  # empty, and no persistence that could vouch for it
        push(redis, shared, urls[1:], tmp_path)
        new = spawn_worker(server, "targets", tmp_path / "new", log=tmp_path / "n.jl", **shared)
        await new.ended
        hits = server.origin.hits_for("cd.test")
        assert [h.path for h in hits][-3:] == [
            "/robots.txt",
            "/.well-known/tdmrep.json",
            "/p/1",
        ], new.err.decode()[-2000:]
        assert min(gaps(hits)) >= 10.0, [round(g, 2) for g in gaps(hits)]
        assert "history in Redis" in new.err.decode()
    finally:
        redis.kill()


@pytest.mark.parametrize("replicated", [False, True], ids=["alone", "with a replica"])
@pytest_twisted.ensureDeferred
async def test_a_redis_restarted_with_its_aof_intact_costs_no_wait(server, tmp_path, replicated):
    """AOF with appendfsync always keeps every acknowledged write: a restart
    that comes back whole is not lost history, and the next request goes
    out at once (the fleet's own spacing still holds), also while a replica
    follows it (a restart is no failover). A new fleet on a Redis that has
    been up a while pays nothing either."""
    redis = own_redis(tmp_path).age(young_redis_s(20))
    replica = RedisServer(tmp_path / "replica", replicaof=redis).start() if replicated else None
    try:
        urls = site(server, "a.test", 1) + site(server, "b.test", 1)
        shared = redis_settings(redis, WALSH_MAX_CRAWL_DELAY=20)
        push(redis, shared, urls[:1], tmp_path)
        first = spawn_worker(server, "targets", tmp_path / "a", **shared)
        await first.ended
        assert "history in Redis" not in first.err.decode(), first.err.decode()[-2000:]
        if replica is not None:
            replica.synced()
        redis.kill()
        redis.start()  # from its AOF: everything is there
        push(redis, shared, urls[1:], tmp_path)
        started = server.origin.hits[-1].t
        worker = spawn_worker(server, "targets", tmp_path / "new", **shared)
        await worker.ended
        b = server.origin.hits_for("b.test")
        assert pages(server, "b.test") == ["/p/0"], worker.err.decode()[-2000:]
        assert b[0].t - started < 15.0, "waited as if history were lost"
        assert "history in Redis" not in worker.err.decode()
    finally:
        redis.kill()
        if replica is not None:
            replica.kill()


@pytest_twisted.ensureDeferred
async def test_appendfsync_changed_at_runtime_makes_the_next_restart_lost_history(tmp_path):
    """Redis runs AOF with appendfsync always from its redis.conf; an
    operator sets ``CONFIG SET appendfsync everysec`` while the fleet runs,
    and Redis then crashes and starts again from its redis.conf (always).
    The writes acknowledged meanwhile may be lost (about a second of them),
    so the restart is lost history: it is judged by the persistence in
    force on the run that crashed (each worker reads it again at its
    heartbeat), not by the config the new run started with. (Before: a
    worker that read the new run's config took the restart for a lossless
    one, and a host whose last request the crash lost was free at once.)"""
    redis = own_redis(tmp_path)
    old = guarded_worker(redis.url)
    redis.age(old.conn.guard.young)
    new = guarded_worker(redis.url)
    try:
        assert await reserve_and_send(old, "seen.test") == 0.0
        admin = redis.client()
        admin.config_set("appendfsync", "everysec")
        admin.close()
        await deferred_from_coro(old.conn.announce())  # its heartbeat
        redis.kill()
        redis.start()  # with its redis.conf again: appendfsync always
        assert await reserve_and_send(new, "other.test") > 0.0
    finally:
        for clock in (old, new):
            await deferred_from_coro(clock.conn.close())
        redis.kill()


async def fleet_then_fresh_volume(
    server: Any, redis: RedisServer, tmp_path: Path, shared: dict[str, Any], lines: list[str]
) -> None:
    """Three workers crawl *lines*; once cd.test's page is out, Redis is
    killed and comes back 3 s later on a fresh volume, configured as before
    (AOF, appendfsync always) but empty, as a container restarted without its
    volume does. The fleet's workers find the queue gone and end."""
    push(redis, shared, lines, tmp_path)
    fleet = workers(server, shared, tmp_path, 3)
    await until(lambda: pages(server, "cd.test") == ["/p/0"])
    redis.fresh_volume()
    await sleep(3.0)
    redis.start()
    await ended(*fleet)


@pytest_twisted.ensureDeferred
async def test_a_redis_back_empty_on_a_fresh_volume_is_lost_history_whatever_its_aof(
    server, tmp_path
):
    """Redis runs AOF with appendfsync always before and after its restart,
    but its data directory is gone: the restart lost the fleet's history,
    whatever the config says. A worker that never ran joins as Redis comes
    back and must keep cd.test's Crawl-delay (10 s) from the fleet's last
    request there. (Before: its robots.txt went out 5.4 s after the fleet's
    page.)"""
    redis = own_redis(tmp_path)
    try:
        urls = site(server, "cd.test", 2, "User-agent: *\nCrawl-delay: 10\n")
        shared = redis_settings(redis, WALSH_MAX_CRAWL_DELAY=12)
        await fleet_then_fresh_volume(
            server, redis, tmp_path, shared, [urls[0], *site(server, "o.test", 3)]
        )
        push(redis, shared, urls[1:], tmp_path)
        new = spawn_worker(server, "targets", tmp_path / "new", **shared)
        await new.ended
        hits = server.origin.hits_for("cd.test")
        assert [h.path for h in hits][-3:] == [
            "/robots.txt",
            "/.well-known/tdmrep.json",
            "/p/1",
        ], new.err.decode()[-2000:]
        assert min(gaps(hits)) >= 10.0, [round(g, 2) for g in gaps(hits)]
    finally:
        redis.kill()


@pytest_twisted.ensureDeferred
async def test_an_opt_out_holds_after_redis_came_back_empty_on_a_fresh_volume_with_aof(
    server, tmp_path
):
    """The same loss, with optout.test on the list the fleet adopted and the
    blocklist URL answering 503 after the restart: the new worker must not
    contact it (R3), whatever the persistence config says. (Before: optout.test got
    robots.txt, tdmrep.json and a page, recorded as fetched.)"""
    redis = own_redis(tmp_path)
    try:
        server.origin.route(
            BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("optout.test"))
        )
        site(server, "optout.test", 1)
        urls = site(server, "cd.test", 1, "User-agent: *\nCrawl-delay: 10\n")
        shared = redis_settings(redis, WALSH_MAX_CRAWL_DELAY=12)
        await fleet_then_fresh_volume(
            server, redis, tmp_path, shared, [urls[0], *site(server, "o.test", 3)]
        )
        server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, Reply(503, "down"))
        push(redis, shared, [server.url("optout.test", "/p/0")], tmp_path)
        # the list is unknown until a worker that held it publishes it again
        # (then: denied by its entry) or the wait ends (briefly here: skipped)
        new = spawn_worker(server, "targets", tmp_path / "new", log=tmp_path / "n.jl",
                           **shared, WALSH_POLICY_WAIT=3)  # fmt: skip
        await new.ended
        got = [json.loads(x) for x in (tmp_path / "n.jl").read_text().splitlines()]
        assert [(r["outcome"], r["rule"]) for r in got] in (
            [("skipped", "R3")], [("denied", "R3")]
        ), new.err.decode()[-2000:]
        if got[0]["outcome"] == "denied":
            assert "blocked by operator blocklist entry 'optout.test'" in got[0]["reason"]
        assert server.origin.hits_for("optout.test") == []
    finally:
        redis.kill()


@pytest_twisted.ensureDeferred
async def test_a_flushall_is_seen_at_the_heartbeat_of_a_worker_that_ran_before(tmp_path):
    """FLUSHALL on a Redis that has been up a while, and a new worker writes
    the fleet's record again before anyone else calls: it cannot tell this
    from a new fleet's Redis (docs/redis.rst). A worker that ran before sees
    at its next heartbeat that the record it saw was made again by someone
    else, and every host waits, also for a worker that joins after. (Before:
    the heartbeat saw the run id it expected, and the host the old worker
    had just contacted was free at once.)"""
    redis = own_redis(tmp_path)

    def worker() -> RedisHostClock:
        conn = RedisConnection(redis.url, "flush", max_backoff=0.25)
        return RedisHostClock(conn, lease=6.0, pause_on_loss=8.0)

    def reserve(clock: RedisHostClock, host: str) -> Any:
        return deferred_from_coro(clock.reserve(host, 0.0, 5.0))

    old = worker()
    redis.age(old.conn.guard.young)
    others: list[RedisHostClock] = []
    try:
        assert await reserve(old, "seen.test") == 0.0
        await deferred_from_coro(old.commit("seen.test", time.monotonic(), 5.0))
        await deferred_from_coro(old.conn.guard.check())  # its heartbeat
        flusher = redis.client()
        flusher.flushall()
        flusher.close()
        others.append(worker())
        await reserve(others[0], "other.test")  # writes the fleet's record again
        await deferred_from_coro(old.conn.guard.check())  # its next heartbeat
        others.append(worker())
        assert await reserve(others[1], "seen.test") > 5.0
    finally:
        for clock in [old, *others]:
            await deferred_from_coro(clock.conn.close())
        redis.kill()


# -- case 1b: Redis failed over to a replica ----------------------------------------


def primary_and_replica(
    tmp: Path, config: list[str] | None = None
) -> tuple[RedisServer, RedisServer, TcpProxy]:
    """A primary (with *config*) and its replica, both AOF with appendfsync
    always, and the one endpoint the workers use (a managed Redis's
    address), on the primary."""
    primary = own_redis(tmp, config=config or [])
    replica = RedisServer(tmp / "replica", replicaof=primary).start().synced()
    return primary, replica, TcpProxy(primary.port).start()


def fail_over(primary: RedisServer, replica: RedisServer, endpoint: TcpProxy) -> None:
    """The primary dies; the replica is promoted with what it had applied,
    and the endpoint now reaches it (as Sentinel or a managed service does)."""
    primary.kill()
    replica.promote()
    endpoint.point_at(replica.port)


def lines_recorded(redis: RedisServer, shared: dict[str, Any]) -> list[list[int]]:
    """The lines that have a record, batch by batch (one record per line, and
    a batch of n lines has lines 1 to n)."""
    client = redis.client()
    try:
        pattern = f"{shared['WALSH_REDIS_PREFIX']}:targets:records:*"
        return sorted(sorted(map(int, client.hkeys(k))) for k in client.scan_iter(pattern))
    finally:
        client.close()


def failover_settings(redis: RedisServer, endpoint: TcpProxy) -> dict[str, Any]:
    """The fleet's settings, on the endpoint; a primary older than the time a
    fleet that meets it for the first time counts it as young."""
    shared = redis_settings(redis, WALSH_REDIS_URL=endpoint.url, WALSH_MAX_CRAWL_DELAY=12,
                            WALSH_REDIS_MAX_BACKOFF=0.5)  # fmt: skip
    redis.age(young_redis_s(12, 0.5))
    return shared


@pytest_twisted.ensureDeferred
async def test_a_failover_to_a_replica_that_lags_keeps_a_crawl_delay_for_a_worker_that_joins(
    server, tmp_path
):
    """The fleet's Redis fails over to a replica that had not applied the
    last writes (Sentinel's or a managed service's failover: ``REPLICAOF NO
    ONE``, one endpoint switched to it). The fleet crawled cd.test
    (Crawl-delay 10), and worker A came back to it a while later: A's
    request, its record and its line taken were acknowledged by the primary
    only. B, which never ran, joins at once on another machine: it must keep
    cd.test's Crawl-delay from A's request, and every line keeps one record.
    (Before: with AOF always on both, and the fleet's run record replicated,
    the new Redis's run id read as a lossless restart, and B's request went
    out ~4 s after A's.)"""
    primary, replica, endpoint = primary_and_replica(tmp_path)
    try:
        cd = site(server, "cd.test", 3, "User-agent: *\nCrawl-delay: 10\n")
        shared = failover_settings(primary, endpoint)
        # the fleet's history, replicated: cd.test's robots.txt and a page
        push(primary, shared, cd[:1], tmp_path)
        first = spawn_worker(server, "targets", tmp_path / "a0", **shared)
        await first.ended
        assert pages(server, "cd.test") == ["/p/0"], first.err.decode()[-2000:]
        push(primary, shared, cd[1:2], tmp_path)
        replica.synced()
        # the replica stops applying the stream: from here on, only the
        # primary has what the fleet writes
        replica.lag(120_000)
        # A comes back to cd.test longer than WALSH_MAX_CRAWL_DELAY after the
        # fleet's page: nothing the replica holds about cd.test binds B then
        # (a worker that joins doubts the clock for at most that long)
        await sleep(max(0.0, server.origin.hits_for("cd.test")[-1].t + 20.0 - time.monotonic()))
        a = spawn_worker(server, "targets", tmp_path / "a", **shared)
        await a.ended
        assert pages(server, "cd.test") == ["/p/0", "/p/1"], a.err.decode()[-2000:]
        assert replica.behind() > 0
        fail_over(primary, replica, endpoint)
        push(replica, shared, cd[2:], tmp_path)
        b = spawn_worker(server, "targets", tmp_path / "b", **shared)
        await b.ended
        err = b.err.decode()[-3000:]
        hits = server.origin.hits_for("cd.test")
        # A's line came back with the replica (its record was lost): B fetches it again
        assert pages(server, "cd.test") == ["/p/0", "/p/1", "/p/1", "/p/2"], err
        assert min(gaps(hits)) >= 10.0, ([(h.path, round(h.t, 2)) for h in hits], err)
        assert "failed over to a replica" in b.err.decode()
        assert lines_recorded(replica, shared) == [[1], [1], [1]], err
    finally:
        endpoint.stop()
        primary.kill()
        replica.kill()


@pytest_twisted.ensureDeferred
async def test_an_opt_out_adopted_just_before_a_failover_to_a_lagging_replica_holds(
    server, tmp_path
):
    """The operator publishes its first list (blocking optout.test) and
    worker A adopts it, acknowledged by the primary only; Redis then fails
    over to the replica, and the operator's URL fails. B, which never ran and
    holds no list, cannot tell a first-ever failure from a list the fleet
    adopted and lost: it must not contact optout.test (R3), and every line
    keeps one record. (Before: B took the failure for a first-ever one and
    crawled optout.test.)"""
    primary, replica, endpoint = primary_and_replica(tmp_path)
    try:
        site(server, "optout.test", 1)
        o = site(server, "o.test", 2)
        shared = failover_settings(primary, endpoint)
        # the fleet ran before, the operator publishing no list then (a
        # first-ever failure: no list)
        server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, Reply(404, "none yet"))
        push(primary, shared, o[:1], tmp_path)
        await spawn_worker(server, "targets", tmp_path / "a0", **shared).ended
        push(primary, shared, o[1:], tmp_path)
        replica.synced()
        replica.lag(120_000)
        server.origin.route(
            BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("optout.test"))
        )
        a = spawn_worker(server, "targets", tmp_path / "a", **shared)
        await a.ended
        assert "Blocklist adopted" in a.err.decode(), a.err.decode()[-2000:]
        assert replica.behind() > 0
        fail_over(primary, replica, endpoint)
        server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, Reply(404, "gone"))
        push(replica, shared, [server.url("optout.test", "/p/0")], tmp_path)
        # the list stays unknown: its targets wait (briefly here), then are skipped
        b = spawn_worker(server, "targets", tmp_path / "b", log=tmp_path / "b.jl", **shared,
                         WALSH_POLICY_WAIT=3)  # fmt: skip
        await b.ended
        err = b.err.decode()[-3000:]
        assert server.origin.hits_for("optout.test") == [], err
        got = [json.loads(x) for x in (tmp_path / "b.jl").read_text().splitlines()]
        assert {(r["outcome"], r["rule"]) for r in got} <= {("skipped", "R3"), ("denied", "R3")}
        assert lines_recorded(replica, shared) == [[1], [1], [1]], err
    finally:
        endpoint.stop()
        primary.kill()
        replica.kill()


@pytest_twisted.ensureDeferred
async def test_a_failover_to_a_replica_in_sync_costs_the_wait_of_lost_history(server, tmp_path):
    """Nothing in a promoted replica says whether it had applied every
    write the old primary acknowledged (replication is asynchronous): a
    failover to a replica that was in sync costs what any loss costs, as
    docs/redis.rst says. Every host waits WALSH_MAX_CRAWL_DELAY (12 s here)
    from when a worker first sees it, and every line keeps one record."""
    primary, replica, endpoint = primary_and_replica(tmp_path)
    try:
        o = site(server, "o.test", 2)
        shared = failover_settings(primary, endpoint)
        push(primary, shared, o[:1], tmp_path)
        first = spawn_worker(server, "targets", tmp_path / "a", **shared)
        await first.ended
        push(primary, shared, o[1:], tmp_path)
        replica.synced()
        fail_over(primary, replica, endpoint)
        failed_at = time.monotonic()
        b = spawn_worker(server, "targets", tmp_path / "b", **shared)
        await b.ended
        err = b.err.decode()
        assert pages(server, "o.test") == ["/p/0", "/p/1"], err[-3000:]
        assert server.origin.hits_for("o.test")[-1].t - failed_at >= 12.0
        assert "failed over to a replica" in err
        assert lines_recorded(replica, shared) == [[1], [1]], err[-3000:]
    finally:
        endpoint.stop()
        primary.kill()
        replica.kill()


def guarded_worker(url: str) -> RedisHostClock:
    """A worker's host clock (its guard included), in this process: a
    Crawl-delay-5 host waits 5 s, lost history 8 s."""
    conn = RedisConnection(url, "failover", max_backoff=0.25)
    return RedisHostClock(conn, lease=6.0, pause_on_loss=8.0)


def journaled_worker(url: str, machine: Path) -> RedisHostClock:
    """:func:`guarded_worker` with the fleet journal of its machine's
    ``WALSH_STATE_DIR``, as a crawl has it."""
    machine.mkdir(parents=True, exist_ok=True)
    conn = RedisConnection(url, "failover", max_backoff=0.25)
    conn.journal = FleetJournal(machine / "redis-fleet.json")
    return RedisHostClock(conn, lease=6.0, pause_on_loss=8.0, journal=conn.journal)


async def stop(*clocks: RedisHostClock) -> None:
    """The workers end, as a crawl does: their journals written."""
    for clock in clocks:
        await deferred_from_coro(clock.close())
        await deferred_from_coro(clock.conn.close())


async def reserve_and_send(clock: RedisHostClock, host: str) -> float:
    """Reserve *host* (interval 5 s); if granted, its request goes out now."""
    wait = await deferred_from_coro(clock.reserve(host, 0.0, 5.0))
    if wait == 0.0:
        await deferred_from_coro(clock.commit(host, time.monotonic(), 5.0))
    return float(wait)


async def lose_a_request_in_a_replica_lag(tmp_path: Path) -> tuple[RedisServer, RedisServer]:
    """A worker's request to lost.test is acknowledged by the primary only
    (its earlier one to seen.test reached the replica); the primary dies and
    the replica is promoted. No worker calls it yet."""
    primary, replica, endpoint = primary_and_replica(tmp_path)
    endpoint.stop()
    old = guarded_worker(primary.url)
    try:
        primary.age(old.conn.guard.young)
        assert await reserve_and_send(old, "seen.test") == 0.0
        replica.synced()
        replica.lag(60_000)
        assert await reserve_and_send(old, "lost.test") == 0.0
        assert replica.behind() > 0
    finally:
        await deferred_from_coro(old.conn.close())
    primary.kill()
    replica.promote()
    return primary, replica


@pytest_twisted.ensureDeferred
async def test_a_lagging_replica_promoted_then_restarted_is_still_lost_history(tmp_path):
    """The promoted replica restarts (from its own AOF, as a primary)
    before any worker called it: its run id is new again, and nothing in
    INFO shows it was ever a replica. A worker that never ran must still not
    take lost.test's slot, whose last request only the dead primary had."""
    primary, replica = await lose_a_request_in_a_replica_lag(tmp_path)
    new = guarded_worker(replica.url)
    try:
        replica.kill()
        replica.start()
        assert await reserve_and_send(new, "lost.test") > 5.0
    finally:
        await deferred_from_coro(new.conn.close())
        primary.kill()
        replica.kill()


@pytest_twisted.ensureDeferred
async def test_two_failovers_in_a_row_are_lost_history(tmp_path):
    """After the first failover (no worker called the new primary), a second
    replica syncs from it in full and is promoted in turn: a full sync
    copies every key, this Redis's own stamp too. A worker that never ran,
    on the third Redis, must still not take lost.test's slot."""
    primary, first = await lose_a_request_in_a_replica_lag(tmp_path)
    second = RedisServer(tmp_path / "second", replicaof=first).start().synced()
    new = guarded_worker(second.url)
    try:
        first.kill()
        second.promote()
        assert await reserve_and_send(new, "lost.test") > 5.0
    finally:
        await deferred_from_coro(new.conn.close())
        for redis in (primary, first, second):
            redis.kill()


#: the guard's Lua as a Redis whose scripts cannot call ``redis.set_repl``
#: (3.2 without lua-replicate-commands) runs it, on Redis 7: a local
#: ``redis`` whose ``set_repl`` fails as that server's does (Redis 7's own
#: table is read-only)
WITHOUT_SET_REPL = (
    "local redis = setmetatable({set_repl = function() error('unsupported') end},"
    " {__index = redis})\n"
)


def test_without_set_repl_every_restart_is_a_failover_and_nothing_else_is(tmp_path):
    """A Redis whose scripts cannot write to the AOF alone keeps no stamp
    of its own: docs/redis.rst says every restart of it counts as a
    failover (lost history), even with AOF always. Between restarts, the
    guard (here the heartbeat's script, as a worker calls it) sees no loss.
    (Before: the missing own stamp differed from the fleet's stamp at every
    call, so every heartbeat, reservation and line taken marked the history
    lost again and moved every host's wait on: nothing was ever sent.)"""
    redis = own_redis(tmp_path)  # AOF always: a restart alone costs nothing
    conn = RedisConnection(redis.url, "norepl")
    guard = conn.guard
    guard.lossless = True  # as a worker reads this Redis's persistence
    client = redis.client()
    heartbeat = client.register_script(WITHOUT_SET_REPL + FLEET)

    def beat() -> str:
        keys = [*guard.keys(), conn.key("clockq")]
        verdict, _, guard.seen, _, _ = heartbeat(keys=keys, args=[*guard.args(), "", ""])
        return str(verdict)

    try:
        # the first call meets a Redis only seconds old: lost history (young)
        assert [beat() for _ in range(4)][1:] == ["", "", ""], "a loss with no restart"
        client.close()
        redis.kill()
        redis.start()  # its AOF intact
        client = redis.client()
        heartbeat = client.register_script(WITHOUT_SET_REPL + FLEET)
        assert [beat() for _ in range(3)] == ["restarted", "", ""]
    finally:
        client.close()
        redis.kill()


@pytest_twisted.ensureDeferred
async def test_one_failover_is_one_loss_each_machine_publishes_again_once(tmp_path):
    """One failover to a lagging replica, two machines that ran before it;
    machine 2's worker reserved once more on the old primary than the
    replica applied, so its journal names a generation the new primary
    never reached. Each machine's first worker after the failover publishes
    again once, and every host waits WALSH_MAX_CRAWL_DELAY from when the
    first worker saw the failover: one loss, one mark. (Before: machine 1's
    worker marked the loss, then machine 2's journal check found the
    generation rolled back and marked it again: machine 1 published again a
    second time, every host's wait moved on, and machine 2 was told Redis
    "went back in time (restored from an older snapshot)... Run Redis with
    appendonly yes", with AOF always on both.)"""
    primary, replica, endpoint = primary_and_replica(tmp_path)
    published = {"m1": 0, "m2": 0}

    def counting(clock: RedisHostClock, machine: str) -> RedisHostClock:
        async def publish_again() -> None:
            published[machine] += 1

        clock.conn.guard.on_history_lost(publish_again)
        return clock

    try:
        primary.age(young_redis_s(8.0, 0.25))
        a1 = journaled_worker(endpoint.url, tmp_path / "m1")
        a2 = journaled_worker(endpoint.url, tmp_path / "m2")
        assert await reserve_and_send(a1, "a.test") == 0.0
        assert await reserve_and_send(a2, "b.test") == 0.0
        replica.synced()
        replica.lag(60_000)
        assert await reserve_and_send(a2, "c.test") == 0.0  # the primary's only
        await stop(a1, a2)
        fail_over(primary, replica, endpoint)
        client = replica.client()
        b1 = counting(journaled_worker(endpoint.url, tmp_path / "m1"), "m1")
        assert await reserve_and_send(b1, "x.test") > 0.0  # the failover is seen
        await sleep(0.3)  # publishing again runs in the background
        mark, quarantine = client.get("failover:lost"), client.get("failover:quarantine")
        assert published == {"m1": 1, "m2": 0}
        await sleep(1.0)
        b2 = counting(journaled_worker(endpoint.url, tmp_path / "m2"), "m2")
        assert await reserve_and_send(b2, "y.test") > 0.0
        await deferred_from_coro(b1.conn.guard.check())  # machine 1's next heartbeat
        await sleep(0.3)
        after = client.get("failover:lost"), client.get("failover:quarantine")
        client.close()
        await stop(b1, b2)
        assert (after, published) == ((mark, quarantine), {"m1": 1, "m2": 1})
    finally:
        endpoint.stop()
        primary.kill()
        replica.kill()


@pytest_twisted.ensureDeferred
async def test_live_workers_that_each_see_one_loss_mark_it_once(tmp_path):
    """Two live workers saw the fleet's records; Redis comes back empty.
    The first heartbeat finds no records and marks the loss (making the
    fleet's record again); the second finds a record made by someone else
    since it looked, the same loss: the mark and every host's wait stay as
    the first worker set them. (Before: each live worker marked the loss
    anew, moving every host's wait on, and every machine published again
    once per worker.)"""
    redis = own_redis(tmp_path)
    workers = [guarded_worker(redis.url) for _ in range(2)]
    redis.age(workers[0].conn.guard.young)
    try:
        for i, worker in enumerate(workers):
            assert await reserve_and_send(worker, f"h{i}.test") == 0.0
        redis.lose_volume()
        redis.start()
        client = redis.client()
        await deferred_from_coro(workers[0].conn.guard.check())  # its heartbeat
        mark = client.get("failover:lost"), client.get("failover:quarantine")
        await sleep(0.5)
        await deferred_from_coro(workers[1].conn.guard.check())
        assert (client.get("failover:lost"), client.get("failover:quarantine")) == mark
        client.close()
    finally:
        await stop(*workers)
        redis.kill()


async def stop_all(
    workers: list[RedisHostClock], endpoint: TcpProxy, *servers: RedisServer
) -> None:
    """The workers end (:func:`stop`), then the endpoint and the servers."""
    await stop(*workers)
    endpoint.stop()
    for redis in servers:
        redis.kill()


async def crawl_on_the_new_primary_then_fail_back(
    primary: RedisServer, replica: RedisServer, endpoint: TcpProxy, before: RedisHostClock,
    after: RedisHostClock,
) -> None:  # fmt: skip
    """*before* sends a request through the primary; the replica is promoted
    while the primary is cut off (not dead: it loses its replica), and the
    endpoint switched to it; *after* sees the failover, waits it out and
    sends cd.test's request through the new primary. Then the endpoint
    reaches the old primary again, before it was made a replica of the new
    one (a health check that routes to whichever answers ``role:master``, a
    DNS record put back): what the fleet wrote on the new primary is not
    there."""
    primary.age(young_redis_s(8.0, 0.25))
    assert await reserve_and_send(before, "seen.test") == 0.0
    replica.synced()
    replica.promote()
    endpoint.point_at(replica.port)
    wait = await reserve_and_send(after, "cd.test")
    assert wait > 0.0  # the failover is seen
    await sleep(wait + 0.1)
    assert await reserve_and_send(after, "cd.test") == 0.0
    endpoint.point_at(primary.port)


@pytest.mark.parametrize("seen_by", ["a live worker's heartbeat", "a new worker of its machine"])
@pytest_twisted.ensureDeferred
async def test_an_endpoint_that_fails_back_to_the_old_primary_is_lost_history(
    tmp_path, seen_by
):
    """After a failover the fleet crawls on the new primary, then the
    endpoint fails back to the old one, cut off meanwhile
    (:func:`crawl_on_the_new_primary_then_fail_back`). A worker that got an
    answer from the new primary sees it, at its next heartbeat, or a worker
    of its machine at its first call (the machine's journal): every host
    waits, also for a worker that never ran. (Before: the old primary's own
    stamp was its latest, and its run id the one in its record: no loss,
    and a worker that never ran took cd.test's slot right after the
    request made through the new primary.)"""
    primary, replica, endpoint = primary_and_replica(tmp_path)
    a = guarded_worker(endpoint.url)
    b = journaled_worker(endpoint.url, tmp_path / "machine")
    workers = [a, b]
    try:
        await crawl_on_the_new_primary_then_fail_back(primary, replica, endpoint, a, b)
        if seen_by == "a live worker's heartbeat":
            await deferred_from_coro(b.conn.guard.check())
        else:
            await stop(b)
            workers.append(journaled_worker(endpoint.url, tmp_path / "machine"))
            await deferred_from_coro(workers[-1].conn.guard.check())
        workers.append(guarded_worker(endpoint.url))  # never ran
        assert await reserve_and_send(workers[-1], "cd.test") > 0.0
    finally:
        await stop_all(workers, endpoint, primary, replica)


@pytest_twisted.ensureDeferred
async def test_a_primary_that_needs_a_replica_to_write_cannot_serve_the_fleet_again_after_a_failover(
    tmp_path,
):
    """docs/redis.rst's remedy for a fail-back that no worker which called
    the new primary sees: the primary runs with ``min-replicas-to-write 1``.
    After a failover the fleet crawls on the new primary, then the endpoint
    fails back to the old one (:func:`crawl_on_the_new_primary_then_fail_back`),
    and only a worker that never ran calls it. The old primary, without its
    replica, takes no write (``NOREPLICAS``, waited out): no slot is taken
    on its older history; once the endpoint reaches the new primary again,
    cd.test keeps its Crawl-delay. (Without that line, the worker took
    cd.test's slot at once, right after the request made through the new
    primary: nothing in the old primary says it missed it.)"""
    primary, replica, endpoint = primary_and_replica(
        tmp_path, config=["--min-replicas-to-write", "1", "--min-replicas-max-lag", "10"]
    )
    workers = [guarded_worker(endpoint.url), guarded_worker(endpoint.url)]
    try:
        await crawl_on_the_new_primary_then_fail_back(primary, replica, endpoint, *workers)
        workers.append(guarded_worker(endpoint.url))  # never ran
        reserving = ensureDeferred(reserve_and_send(workers[2], "cd.test"))
        await sleep(2.0)
        assert not reserving.called, "the old primary served a worker that never ran"
        endpoint.point_at(replica.port)
        assert await reserving > 0.0
    finally:
        await stop_all(workers, endpoint, primary, replica)


# -- case 1c: the endpoint reaches a Redis that takes no writes for now ------------


@pytest_twisted.ensureDeferred
async def test_a_worker_whose_endpoint_still_reaches_the_demoted_primary_waits_for_the_new_one(
    server, tmp_path
):
    """A failover as Sentinel or a managed service runs it: the replica is
    promoted and the old primary made its replica (``REPLICAOF``), while the
    fleet's endpoint still reaches the old one for a few seconds (a DNS TTL,
    a health check not yet flipped), which answers every write ``READONLY``.
    The worker waits, as for a Redis that does not answer, and crawls every
    line once the endpoint reaches the new primary. (Before: READONLY was
    not among the errors a call waits out: the worker's start-up failed,
    the crawl ended at once, "start_error", with exit code 0, its lines
    untouched; a crawling worker's heartbeat stopped for good.)"""
    primary, replica, endpoint = primary_and_replica(tmp_path)
    try:
        shared = failover_settings(primary, endpoint)
        push(primary, shared, site(server, "o.test", 2), tmp_path)
        replica.synced()
        replica.promote()
        demoted = primary.client()
        demoted.execute_command("REPLICAOF", "127.0.0.1", str(replica.port))
        demoted.close()
        worker = spawn_worker(server, "targets", tmp_path / "w", **shared)
        await sleep(4.0)
        endpoint.point_at(replica.port)  # the endpoint reaches the new primary
        await worker.ended
        err = worker.err.decode()
        assert sorted(pages(server, "o.test")) == ["/p/0", "/p/1"], err[-3000:]
        assert "takes no writes for now (You can't write against a read only replica" in err
        assert worker.code == 0 and "Traceback" not in err, err[-3000:]
    finally:
        endpoint.stop()
        primary.kill()
        replica.kill()


@pytest_twisted.ensureDeferred
async def test_a_primary_short_of_its_min_replicas_is_waited_for(tmp_path):
    """With ``min-replicas-to-write`` (docs/redis.rst recommends it, so
    that a primary cut off from its replicas stops taking the fleet's
    writes), Redis answers a write ``NOREPLICAS`` while it has too few
    replicas: a worker waits, sending nothing, and goes on once a replica
    is back. (Before: the reservation failed with that error at once.)"""
    primary = own_redis(tmp_path, config=["--min-replicas-to-write", "1",
                                          "--min-replicas-max-lag", "10"])  # fmt: skip
    worker = guarded_worker(primary.url)
    replica = RedisServer(tmp_path / "replica", replicaof=primary)
    try:
        reserving = deferred_from_coro(worker.reserve("a.test", 0.0, 5.0))
        await sleep(2.0)
        assert not reserving.called, "the reservation did not wait for a replica"
        replica.start().synced()
        assert isinstance(await reserving, float)
    finally:
        await deferred_from_coro(worker.conn.close())
        primary.kill()
        replica.kill()


# -- case 2: the same, with an opt-out ----------------------------------------------


async def list_adopted_then_lost(
    server: Any, redis: RedisServer, tmp_path: Path, pages: int
) -> dict[str, Any]:
    """A fleet adopted a list blocking blocked.test (*pages* pages), then its
    Redis came back empty: the settings its workers share."""
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("blocked.test")))
    site(server, "blocked.test", pages)
    shared = redis_settings(redis, WALSH_MAX_CRAWL_DELAY=3)
    push(redis, shared, site(server, "fine.test", 1), tmp_path)
    await spawn_worker(server, "targets", tmp_path / "a", **shared).ended
    redis.lose_volume()
    redis.start()
    return shared


@pytest_twisted.ensureDeferred
async def test_a_worker_with_no_list_does_not_fail_open_after_redis_lost_the_fleets(
    server, tmp_path
):
    """The fleet adopted a list blocking blocked.test; Redis comes back empty
    and the blocklist URL answers 503. A worker on another machine (its own
    state dir, no list) cannot tell this from a first-ever failure: it must
    not fail open. (Before: blocked.test got robots.txt and a page.)"""
    redis = own_redis(tmp_path)
    try:
        shared = await list_adopted_then_lost(server, redis, tmp_path, pages=1)
        server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, Reply(503, "down"))
        push(redis, shared, [server.url("blocked.test", "/p/0")], tmp_path)
        # the list stays unknown: its targets wait (briefly here), then are skipped
        new = spawn_worker(server, "targets", tmp_path / "new", log=tmp_path / "n.jl",
                           **shared, WALSH_POLICY_WAIT=3)  # fmt: skip
        await new.ended
        got = [json.loads(x) for x in (tmp_path / "n.jl").read_text().splitlines()]
        assert [(r["outcome"], r["rule"]) for r in got] == [("skipped", "R3")], new.err.decode()[
            -2000:
        ]
        assert "history in Redis is incomplete" in got[0]["reason"]
        assert server.origin.hits_for("blocked.test") == []
    finally:
        redis.kill()


@pytest_twisted.ensureDeferred
async def test_a_worker_that_waited_on_anothers_failed_fetch_does_not_fail_open_either(
    server, tmp_path
):
    """The same loss, with two new workers starting together: one fetches
    the list (slowly, and it fails) while the other waits for it. The one
    that waited learns of the failure from the fleet's record of it, and must
    deny every host just as the one that fetched does. (Before: it took the
    failure for a first-ever one and crawled blocked.test with no list.)"""
    redis = own_redis(tmp_path)
    try:
        shared = await list_adopted_then_lost(server, redis, tmp_path, pages=4)
        # slow enough that the second worker is still waiting when it fails
        server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, Reply(503, "down", delay=4.0))
        push(redis, shared, [server.url("blocked.test", f"/p/{i}") for i in range(4)], tmp_path)
        workers = [
            spawn_worker(
                server, "targets", tmp_path / n, log=tmp_path / f"{n}.jl", **shared,
                WALSH_POLICY_WAIT=3,
            )
            for n in ("b", "c")
        ]
        for worker in workers:
            await worker.ended
        errs = [w.err.decode() for w in workers]
        got = [
            json.loads(x)
            for n in ("b", "c")
            if (tmp_path / f"{n}.jl").exists()
            for x in (tmp_path / f"{n}.jl").read_text().splitlines()
        ]
        assert server.origin.hits_for("blocked.test") == [], errs[0][-2000:] + errs[1][-2000:]
        assert sorted((r["outcome"], r["rule"]) for r in got) == [("skipped", "R3")] * 4
        assert "another worker failed" in errs[0] + errs[1], "neither worker waited"
        for err in errs:
            assert "history in Redis is incomplete" in err, err[-2000:]
    finally:
        redis.kill()


@pytest_twisted.ensureDeferred
async def test_a_worker_holding_the_list_publishes_it_again_for_one_that_has_none(server, tmp_path):
    """While a worker that holds the adopted list is running, Redis comes
    back empty and the blocklist URL fails: that worker publishes its copy
    again, and a new worker adopts it rather than deny everything."""
    redis = own_redis(tmp_path)
    try:
        server.origin.route(
            BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("blocked.test"))
        )
        site(server, "blocked.test", 1)
        # enough pages that the holder is still crawling when the new worker ends
        slow = [server.url("slow.test", f"/p/{i}") for i in range(30)]
        site(server, "slow.test", 30)
        shared = redis_settings(redis, WALSH_MAX_CRAWL_DELAY=3, WALSH_REDIS_MAX_BACKOFF=0.5)
        push(redis, shared, slow, tmp_path, key="long")
        holder = spawn_worker(server, "long", tmp_path / "a", **shared)
        await until(lambda: len(pages(server, "slow.test")) >= 2)
        redis.lose_volume()
        server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, Reply(503, "down"))
        redis.start()
        push(redis, shared, [server.url("blocked.test", "/p/0")], tmp_path)
        new = spawn_worker(server, "targets", tmp_path / "new", log=tmp_path / "n.jl", **shared)
        await new.ended
        if holder.transport.pid is not None:  # a loaded machine may let it finish
            holder.transport.signalProcess("TERM")
        await holder.ended
        got = [json.loads(x) for x in (tmp_path / "n.jl").read_text().splitlines()]
        assert [(r["outcome"], r["rule"]) for r in got] == [("denied", "R3")], new.err.decode()[
            -2000:
        ]
        assert "blocked by operator blocklist entry 'blocked.test'" in got[0]["reason"]
        assert server.origin.hits_for("blocked.test") == []
        assert "published this worker's again" in holder.err.decode()
    finally:
        redis.kill()


# -- case 2b: a Redis that will not show the fleet a restart -----------------------

#: setups that keep the guard from reading INFO inside its scripts: redis-server
#: arguments, and the ACL rules of the user the workers log in as (None: default)
REFUSING = {
    "INFO renamed away": (["--rename-command", "INFO", ""], None),
    "ACL user denied INFO": ([], "+@all -info"),
    "ACL user denied @dangerous": ([], "+@all -@dangerous"),
    "ACL user denied scripts": ([], "+@all -@scripting"),
}


@pytest.mark.parametrize("setup", list(REFUSING))
@pytest_twisted.ensureDeferred
async def test_a_redis_that_refuses_the_guard_info_stops_the_crawl_before_any_request(
    server, tmp_path, setup
):
    """Managed Redis services restrict INFO, or what scripts may run. Without
    INFO the guard cannot see a restart; it must not guess there was none:
    the worker sends nothing, says what to allow, and stops (without showing
    the ACL user's password), exiting 1 as a crawl refused at start-up does."""
    config, rules = REFUSING[setup]
    redis = own_redis(tmp_path, config=config)
    try:
        url = redis.url
        if rules is not None:
            admin = redis.client()
            admin.execute_command(
                "ACL", "SETUSER", "walsh", "on", ">s3cret", "~*", "&*", *rules.split()
            )
            admin.close()
            url = f"redis://walsh:s3cret@127.0.0.1:{redis.port}/0"
        shared = redis_settings(redis, WALSH_REDIS_URL=url)
        push(redis, shared, site(server, "a.test", 1), tmp_path)
        worker = spawn_worker(server, "targets", tmp_path / "w", **shared)
        await worker.ended
        err = worker.err.decode()
        assert server.origin.hits == [], err[-2000:]
        assert "cannot run the fleet's guard" in err, err[-2000:]
        assert "ACL SETUSER <user> +info" in err
        assert "'finish_reason': 'walsh_redis_guard_refused'" in err
        assert "s3cret" not in err
        # a service manager or a shell script sees the refusal too
        assert worker.code == 1, err[-2000:]
        assert "Traceback" not in err, err[-3000:]
    finally:
        redis.kill()


# -- case 2c: a Redis started plainly (RDB snapshots, Debian's default) ------------


def plain_redis(tmp: Path) -> tuple[RedisServer, dict[str, Any]]:
    """``redis-server`` started with no configuration (RDB snapshots on its
    save schedule, no AOF), up longer than a fleet that meets it for the
    first time counts as young; and the fleet's settings."""
    redis = RedisServer(tmp / "redis", persist="plain").start()
    # the audit log kept in Redis as long as its retention: no warning of
    # its own (WALSH_AUDIT_REDIS_WINDOW), so a WARNING counted is the guard's
    shared = redis_settings(
        redis, WALSH_MAX_CRAWL_DELAY=12, WALSH_REDIS_MAX_BACKOFF=0.5,
        WALSH_AUDIT_REDIS_WINDOW=7776000,
    )  # fmt: skip
    redis.age(young_redis_s(12, 0.5))
    return redis, shared


#: a line of a worker's log: it starts with its time, in whole seconds
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ")


def logged_at(line: str) -> float:
    """The wall time a worker's log *line* was written (its second's start)."""
    return datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S").timestamp()


#: what the persistence message tells the operator to put in redis.conf
CONF_LINES = "appendonly yes / appendfsync always / maxmemory-policy noeviction"


@pytest_twisted.ensureDeferred
async def test_a_plainly_started_redis_gets_one_persistence_message_and_no_loss_alarm(
    server, tmp_path
):
    """A new fleet on a ``redis-server`` started plainly, up a while: each
    worker says once what the persistence costs and which redis.conf lines
    to use, and raises no alarm of lost history, waits for nothing, and
    publishes nothing again, also at its next start. (Before: every worker
    warned that the fleet's history was incomplete, and every later start
    said "Published again N records".)"""
    redis, shared = plain_redis(tmp_path)
    try:
        for i in range(2):  # two starts on one machine
            push(redis, shared, site(server, f"o{i}.test", 1), tmp_path)
            worker = spawn_worker(server, "targets", tmp_path / "machine", **shared)
            await worker.ended
            err = worker.err.decode()
            assert pages(server, f"o{i}.test") == ["/p/0"], err[-3000:]
            # no wait (12 s), timed from the worker's first log line rather
            # than its spawn, which a loaded machine's start-up lengthens
            began = logged_at(next(x for x in err.splitlines() if LOG_LINE.match(x)))
            assert server.origin.hits_for(f"o{i}.test")[-1].wall - began < 12.0, "waited"
            assert err.count("Redis persistence at") == 1, err[-3000:]
            assert "RDB snapshots only" in err and CONF_LINES in err
            assert "history in Redis" not in err, err[-3000:]
            assert "Published again" not in err and "Blocklist: Redis lost" not in err
            assert "'log_count/WARNING': 1," in err, err[-3000:]
    finally:
        redis.kill()


@pytest_twisted.ensureDeferred
async def test_a_plainly_started_redis_never_lets_a_first_blocklist_failure_fail_open(
    server, tmp_path
):
    """Nothing in a Redis without AOF always vouches that it did not come
    back from a snapshot older than an earlier fleet's records, blocklist
    included. A worker with no list of its own, whose first fetch fails,
    must not fail open on a fleet's Redis it cannot vouch for, even though
    it raises no alarm (R3)."""
    redis, shared = plain_redis(tmp_path)
    try:
        site(server, "optout.test", 1)
        server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, Reply(404, "gone"))
        push(redis, shared, [server.url("optout.test", "/p/0")], tmp_path)
        worker = spawn_worker(server, "targets", tmp_path / "w", log=tmp_path / "w.jl",
                              **shared, WALSH_POLICY_WAIT=3)  # fmt: skip
        await worker.ended
        got = [json.loads(x) for x in (tmp_path / "w.jl").read_text().splitlines()]
        assert [(r["outcome"], r["rule"]) for r in got] == [("skipped", "R3")], (
            worker.err.decode()[-3000:]
        )
        assert "history in Redis is incomplete" in got[0]["reason"]
        assert server.origin.hits_for("optout.test") == []
    finally:
        redis.kill()


@pytest_twisted.ensureDeferred
async def test_a_real_loss_of_a_plainly_started_redis_warns_and_is_published_again_once(
    server, tmp_path
):
    """A Redis started plainly, which the fleet used, loses data: killed and
    started again (without AOF, from its last snapshot if any). The next worker of the machine
    warns, waits WALSH_MAX_CRAWL_DELAY from Redis's start and publishes again
    the records the machine holds; the one after it does neither. A second
    loss is published again once more. (Before: every start published again
    and said so.)"""
    redis, shared = plain_redis(tmp_path)
    machine = tmp_path / "machine"

    async def start(i: int) -> str:
        push(redis, shared, site(server, f"o{i}.test", 1), tmp_path)
        worker = spawn_worker(server, "targets", machine, **shared)
        await worker.ended
        assert pages(server, f"o{i}.test") == ["/p/0"], worker.err.decode()[-3000:]
        return worker.err.decode()

    def lose() -> float:
        redis.kill()
        restarted = time.monotonic()
        redis.start()
        return restarted

    try:
        await start(0)
        for loss in range(2):
            restarted = lose()
            err = await start(1 + 2 * loss)
            assert "history in Redis" in err and "Published again" in err, err[-3000:]
            assert server.origin.hits_for(f"o{1 + 2 * loss}.test")[-1].t - restarted >= 12.0
            err = await start(2 + 2 * loss)
            assert "Published again" not in err, err[-3000:]
            assert "'log_count/WARNING': 1," in err, err[-3000:]  # the persistence message
    finally:
        redis.kill()


@pytest_twisted.ensureDeferred
async def test_the_first_worker_after_a_loss_warns_publishes_again_and_waits_once(
    server, tmp_path
):
    """A Redis started plainly, which the fleet used, is killed and started
    again empty (no snapshot was due). The machine's next worker sees the
    loss at its first guarded call (a Redis seconds old without the fleet's
    records), and again at its first reservation (its journal's epoch is
    gone): one loss, so one warning, one publication, and one wait of
    WALSH_MAX_CRAWL_DELAY from when it first saw it. (Before: the
    reservation's journal check marked the loss a second time: two
    warnings, "Published again" twice, and the wait counted again from the
    second mark.)"""
    redis, shared = plain_redis(tmp_path)
    machine = tmp_path / "machine"
    try:
        push(redis, shared, site(server, "o0.test", 1), tmp_path)
        await spawn_worker(server, "targets", machine, **shared).ended
        redis.kill()
        redis.start()  # no snapshot was due yet: empty
        push(redis, shared, site(server, "o1.test", 1), tmp_path)
        spawned = time.monotonic()
        worker = spawn_worker(server, "targets", machine, **shared)
        await worker.ended
        err = worker.err.decode()
        assert pages(server, "o1.test") == ["/p/0"], err[-3000:]
        warned = [x for x in err.splitlines() if "history in Redis" in x and "WARNING" in x]
        assert len(warned) == 1, "\n".join(warned)
        assert err.count("Published again") == 1 and "Published again 1 records" in err
        # WALSH_MAX_CRAWL_DELAY (12 s) from when it saw the loss (the
        # warning's log time, whole seconds): once, not counted again from a
        # second mark (24 s); timed from the warning rather than the spawn,
        # which a loaded machine's start-up lengthens
        seen = logged_at(warned[0])
        assert server.origin.hits_for("o1.test")[-1].wall - seen < 12.0 + 1.0 + 3.0
        assert server.origin.hits_for("o1.test")[-1].t - spawned >= 12.0
    finally:
        redis.kill()


# -- case 3: Redis rolled back to an older snapshot ---------------------------------


@pytest_twisted.ensureDeferred
async def test_after_a_rollback_no_host_is_contacted_early_and_no_recorded_line_again(
    server, tmp_path
):
    """The fleet crawls a list enqueued before Redis's last snapshot; Redis
    is then restored from that snapshot: the queue holds every line again,
    and no record, robots.txt copy or host clock. A worker of the machine
    that ran the fleet comes back with its copy of the records, and a new one
    joins. Nothing
    reaches the Crawl-delay-10 host within 10 s of the fleet's last request,
    and no page is fetched twice. (Before: robots.txt ~4 s after the page,
    and every page again.)"""
    redis = own_redis(tmp_path, persist="rdb")
    try:
        urls = site(server, "cd.test", 1, "User-agent: *\nCrawl-delay: 10\n")
        urls += [u for i in range(3) for u in site(server, f"f{i}.test", 2)]
        shared = redis_settings(redis, WALSH_MAX_CRAWL_DELAY=12)
        push(redis, shared, urls, tmp_path)
        redis.snapshot("before")
        # two workers on one machine (one state dir, as `scrapy walsh-workers 2`)
        machine = tmp_path / "machine"
        procs = [spawn_worker(server, "targets", machine, **shared) for _ in (0, 1)]
        for proc in procs:
            await proc.ended
        assert len(durable_records(redis, shared)) == len(urls), procs[0].err.decode()[-2000:]
        redis.kill()
        redis.restore("before")
        redis.start()
        again = spawn_worker(server, "targets", machine, **shared)
        new = spawn_worker(server, "targets", tmp_path / "new", **shared)
        await again.ended
        await new.ended
        err = again.err.decode()[-2000:] + new.err.decode()[-2000:]
        for host in ["cd.test", *(f"f{i}.test" for i in range(3))]:
            got = pages(server, host)
            assert sorted(got) == sorted(set(got)), (host, got, err)
        assert min(gaps(server.origin.hits_for("cd.test"))) >= 10.0, err
        lines = sorted(r["line"] for r in durable_records(redis, shared))
        assert lines == list(range(1, len(urls) + 1)), err
    finally:
        redis.kill()


@pytest_twisted.ensureDeferred
async def test_a_worker_killed_while_publishing_again_leaves_it_to_the_next_worker_of_its_machine(
    server, tmp_path
):
    """Redis comes back from an older snapshot: the line is back in its
    queue, without its record. The first worker of the machine to see the
    loss is killed (SIGKILL: the OOM killer, a deploy) while it publishes
    again the machine's records, a week of them, which takes a while. The
    machine's next worker publishes them again, and the line that has its
    record on this machine is not fetched again. (Before: the machine's
    journal noted the loss published as soon as the killed worker saw it,
    before anything was published; the next worker said "as this machine's
    workers saw before", published nothing, and the line was fetched again.)"""
    redis = own_redis(tmp_path, persist="rdb")
    shared = redis_settings(redis, WALSH_MAX_CRAWL_DELAY=8, WALSH_REDIS_MAX_BACKOFF=0.5)
    redis.age(young_redis_s(8, 0.5))
    machine = tmp_path / "machine"
    try:
        push(redis, shared, site(server, "o.test", 1), tmp_path)
        redis.snapshot("before")
        first = spawn_worker(server, "targets", machine, **shared)
        await first.ended
        assert pages(server, "o.test") == ["/p/0"], first.err.decode()[-2000:]
        # the rest of the week's records this machine keeps (other batches)
        prefix = shared["WALSH_REDIS_PREFIX"]
        with (machine / "feed-records-earlier.jl").open("w") as copies:
            for line in range(1, 20_001):
                record = {"line": line, "outcome": "fetched",
                          "url": f"http://e{line % 500}.test/p/{line}"}  # fmt: skip
                ticket = {"inflight": f"{prefix}:targets:inflight:gone", "raw": f"x{line}",
                          "records": f"{prefix}:targets:records:earlier"}  # fmt: skip
                copies.write(json.dumps({"record": record, "ticket": ticket}) + "\n")
        redis.kill()
        redis.restore("before")
        redis.start()
        killed = spawn_worker(server, "targets", machine, **shared)
        await until(lambda: b"this worker publishes again what it holds" in killed.err)
        assert not killed.ended.called, killed.err.decode()[-3000:]
        killed.transport.signalProcess("KILL")
        await killed.ended
        after = spawn_worker(server, "targets", machine, **shared)
        await after.ended
        err = after.err.decode()
        assert "Published again 20001 records" in err, err[-3000:]
        assert pages(server, "o.test") == ["/p/0"], err[-3000:]
    finally:
        redis.kill()


# -- case 4: Redis's wall clock steps --------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_a_forward_step_of_redis_clock_does_not_shorten_a_crawl_delay(server, tmp_path):
    """Worker A has just stored the time of its request to a Crawl-delay-6
    host when Redis's wall clock steps 5 s forward (an NTP correction on the
    Redis host): every stored time now looks 5 s older than it is. A checks
    Redis's TIME against its monotonic clock on its next answer and records
    the step; worker B, which joins once the fleet's clock is checked past
    the step and wants the same host, waits it out. (Before: B's request
    arrived ~2 s after A's.)"""
    redis = own_redis(tmp_path, steppable_clock=True)
    watcher = redis.client()
    try:
        sd = site(server, "sd.test", 2, "User-agent: *\nCrawl-delay: 6\n")
        shared = redis_settings(redis, WALSH_MAX_CRAWL_DELAY=7)
        # o.test keeps A answering after the step: sd.test's page only goes
        # out after robots.txt and tdmrep.json, 6 s apart each
        push(redis, shared, [sd[0], *site(server, "o.test", 18)], tmp_path, key="a")
        push(redis, shared, sd[1:], tmp_path, key="b")
        a = spawn_worker(server, "a", tmp_path / "a", **shared)
        await until(lambda: len(pages(server, "sd.test")) >= 1)
        # step once A stored the request's time, on the old clock (a step
        # before that would prove nothing)
        await until(slot_free(watcher, shared, "sd.test"))
        redis.step_clock(5.0)
        stepped = time.monotonic()
        # B joins once the fleet's clock is checked past the step: B then
        # trusts it, and only the step A recorded keeps B waiting (a B that
        # joined earlier would wait on its own doubt about the gap)
        sec, usec = watcher.time()
        fleet_clock = f"{shared['WALSH_REDIS_PREFIX']}:clock"
        await until(lambda: float(watcher.get(fleet_clock) or 0) >= sec + usec / 1e6)
        b = spawn_worker(server, "b", tmp_path / "b", **shared)
        await a.ended
        await b.ended
        err = [p.err.decode()[-1500:] for p in (a, b)]
        assert len(pages(server, "sd.test")) == 2, err
        assert min(gaps(server.origin.hits_for("sd.test"))) >= 6.0, err
        # A was there after the step: o.test's pages go out one at a time,
        # each reserved in Redis after the one before it went out
        after = [h for h in server.origin.hits_for("o.test") if h.t > stepped]
        assert len(after) >= 2, [h.path for h in after]
        # A saw the step, and its bounds (its round trips hide the exact
        # figure: the lower one read 4.99 on a loaded machine) hold the 5 s
        seen = re.findall(r"jumped forward by (\d+\.\d+) to (\d+\.\d+) s", a.err.decode())
        assert seen, err
        assert all(float(least) <= 5.0 <= float(most) for least, most in seen), seen
    finally:
        watcher.close()
        redis.kill()


@pytest_twisted.ensureDeferred
async def test_a_worker_that_joins_after_a_clock_step_no_one_saw_does_not_trust_it(
    server, tmp_path
):
    """The same step, but the worker that saw the old clock has exited: no
    one is left to notice it. The worker that joins cannot tell the step from
    idle time since the fleet last checked the clock, so it judges the
    records written before it joined as if all of that time were a step."""
    redis = own_redis(tmp_path, steppable_clock=True)
    try:
        sd = site(server, "sd.test", 2, "User-agent: *\nCrawl-delay: 6\n")
        shared = redis_settings(redis, WALSH_MAX_CRAWL_DELAY=7)
        push(redis, shared, sd[:1], tmp_path, key="a")
        push(redis, shared, sd[1:], tmp_path, key="b")
        a = spawn_worker(server, "a", tmp_path / "a", **shared)
        await a.ended
        redis.step_clock(5.0)
        b = spawn_worker(server, "b", tmp_path / "b", **shared)
        await b.ended
        assert len(pages(server, "sd.test")) == 2, b.err.decode()[-2000:]
        assert min(gaps(server.origin.hits_for("sd.test"))) >= 6.0, b.err.decode()[-2000:]
    finally:
        redis.kill()


@pytest_twisted.ensureDeferred
async def test_a_restart_from_a_snapshot_keeps_a_crawl_delay_when_redis_clock_then_steps(tmp_path):
    """Redis's host reboots: redis-server starts from its last snapshot,
    taken before the fleet's last request to cd.test (Crawl-delay 5),
    before NTP has set the host's clock, which then steps forward an hour
    (chrony's makestep at boot). Redis counts its uptime on its wall clock:
    an hour. A worker that never ran must keep cd.test's Crawl-delay: the
    wait after a restart without AOF always runs WALSH_MAX_CRAWL_DELAY from
    when a worker first sees the restart, not from Redis's start as its
    uptime reckons it. (Before: the wait had ended an hour before, and the
    worker took cd.test's slot at once.)"""
    redis = own_redis(tmp_path, persist="rdb", steppable_clock=True)
    old = guarded_worker(redis.url)
    redis.age(old.conn.guard.young)
    new = guarded_worker(redis.url)
    try:
        assert await reserve_and_send(old, "first.test") == 0.0  # the fleet's records
        redis.snapshot("before")
        assert await reserve_and_send(old, "cd.test") == 0.0
        redis.kill()
        redis.restore("before")
        redis.start()
        redis.step_clock(3600.0)
        assert await reserve_and_send(new, "cd.test") > 0.0
    finally:
        for clock in (old, new):
            await deferred_from_coro(clock.conn.close())
        redis.kill()


@pytest_twisted.ensureDeferred
async def test_a_backward_step_of_redis_clock_costs_at_most_an_interval(server, tmp_path):
    """A step back makes stored times look later: politeness holds, and the
    wait it adds is capped at one interval, not the step (here 60 s)."""
    redis = own_redis(tmp_path, steppable_clock=True)
    watcher = redis.client()
    try:
        urls = site(server, "sb.test", 3, "User-agent: *\nCrawl-delay: 2\n")
        # a 6 s lease is renewed every 2 s: the wait after a loss stays 3 s
        shared = redis_settings(redis, WALSH_MAX_CRAWL_DELAY=3, WALSH_REDIS_LEASE=6)
        push(redis, shared, urls, tmp_path)
        worker = spawn_worker(server, "targets", tmp_path / "w", **shared)
        await until(lambda: len(pages(server, "sb.test")) >= 1)
        # once the first page's time is stored, on the clock before the step
        await until(slot_free(watcher, shared, "sb.test"))
        redis.step_clock(-60.0)
        await worker.ended
        hits = server.origin.hits_for("sb.test")
        assert len(pages(server, "sb.test")) == 3, worker.err.decode()[-2000:]
        assert min(gaps(hits)) >= 2.0
        assert max(gaps(hits)) < 2.0 + 3.0 + 2.0, [round(g, 2) for g in gaps(hits)]
    finally:
        watcher.close()
        redis.kill()


@pytest_twisted.ensureDeferred
async def test_a_lease_redis_lost_while_its_request_is_out_is_put_back(server, tmp_path):
    """Worker A's request to slow.test is out (answered after 14 s) when Redis
    restarts empty: A's lease is gone with it. A's renewal puts it back, so
    worker B, whose line is for the same host, sends nothing there until A's
    response has come (the fleet never has two requests out to one host).
    The wait after the loss (WALSH_MAX_CRAWL_DELAY, 2 s here) is stretched
    to a renewal period (30 s / 3) and a second: before, B's request went out
    ~5 s into A's."""
    redis = own_redis(tmp_path)
    try:
        server.origin.route("slow.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
        server.origin.route("slow.test", "/p/0", Reply(200, "late", delay=14.0))
        server.origin.route("slow.test", "/p/1", Reply(200, "ok"))
        # a 14 s answer slows the host to the adaptive cap: the lowest allowed
        shared = redis_settings(
            redis, WALSH_MAX_CRAWL_DELAY=2, WALSH_REDIS_MAX_BACKOFF=0.25, WALSH_REDIS_LEASE=30,
            WALSH_ADAPTIVE_MAX_DELAY=30,
        )  # fmt: skip
        push(redis, shared, [server.url("slow.test", "/p/0")], tmp_path, key="a")
        a = spawn_worker(server, "a", tmp_path / "a", **shared)
        await until(lambda: pages(server, "slow.test") == ["/p/0"])
        redis.lose_volume()
        redis.start()
        push(redis, shared, [server.url("slow.test", "/p/1")], tmp_path, key="b")
        b = spawn_worker(server, "b", tmp_path / "b", **shared)
        await a.ended
        await b.ended
        hits = {h.path: h.t for h in server.origin.hits_for("slow.test")}
        assert "/p/1" in hits, b.err.decode()[-2000:]
        assert hits["/p/1"] - hits["/p/0"] >= 14.0, (a.err.decode()[-1500:], b.err.decode()[-1500:])
    finally:
        redis.kill()
