"""Where the audit log lives, for months: a fleet's evidence in PostgreSQL
(``WALSH_AUDIT_URL``), never growing in Redis; without it, each host's
entries in Redis for a short window only. Every store is read by host and
time through an index, and a read that cannot finish is an error, not a
retry loop. Real worker processes, a real redis-server and a real
PostgreSQL; judged by what the origin saw."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from scrapy.utils.defer import deferred_from_coro

from scrapy_walsh_research.evidence.audit import read_all
from scrapy_walsh_research.evidence.audit_postgres import table_name
from scrapy_walsh_research.evidence.audit_sqlite import SQLiteAudit
from scrapy_walsh_research.evidence.host_evidence import ROWS, collect
from tests.support.crawling import sleep, write_list
from tests.support.fleet import redis_settings
from tests.support.processes import spawn_targets_crawl, spawn_worker
from tests.test_fleet_workers import ended, push, site, workers


def report(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``scrapy walsh-report`` as an operator runs it, in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "walsh-report", *args],
        cwd=cwd, capture_output=True, text=True, timeout=120, check=check,
    )  # fmt: skip


def pg_rows(postgres: Any, table: str) -> list[dict[str, Any]]:
    with postgres.client() as db:
        rows = db.execute(f'SELECT entry FROM "{table}" ORDER BY t, seq').fetchall()
    return [row[0] for row in rows]


def request_paths(log: list[dict[str, Any]], port: int) -> list[tuple[str, str]]:
    return sorted(
        (e["host"], e["url"].split(f":{port}", 1)[1]) for e in log if e["event"] == "request"
    )


# -- a fleet's audit log in PostgreSQL --------------------------------------------


@pytest_twisted.ensureDeferred
async def test_a_fleet_with_walsh_audit_url_keeps_its_log_in_postgresql_and_none_in_redis(
    server, redis_server, postgres_server, tmp_path
):
    urls = [u for i in range(3) for u in site(server, f"pg{i}.test", 3)]
    shared = redis_settings(redis_server, WALSH_AUDIT_URL=postgres_server.url)
    push(redis_server, shared, urls, tmp_path)
    await ended(*workers(server, shared, tmp_path, 2))
    table = table_name(shared["WALSH_REDIS_PREFIX"])
    log = pg_rows(postgres_server, table)
    # every request the origin saw has its entry, and no other request
    assert request_paths(log, server.port) == sorted((h.host, h.path) for h in server.origin.hits)
    assert len([e for e in log if e["event"] == "decision"]) == 9
    # Redis holds none of it: no stream, no index
    client = redis_server.client()
    try:
        assert list(client.scan_iter(f"{shared['WALSH_REDIS_PREFIX']}:audit*")) == []
    finally:
        client.close()
    # the report reads the fleet's log from PostgreSQL
    at = ["-s", f"WALSH_AUDIT_URL={postgres_server.url}",
          "-s", f"WALSH_REDIS_PREFIX={shared['WALSH_REDIS_PREFIX']}"]  # fmt: skip
    data = json.loads(report(*at, "--host", "pg0.test", "--json", cwd=tmp_path).stdout)
    assert data["request_count"] == len(server.origin.hits_for("pg0.test")) == 5
    assert data["under_interval"] == 0 and data["smallest_gap"] >= 1.0


@pytest_twisted.ensureDeferred
async def test_no_request_leaves_before_postgresql_has_its_entry(
    server, postgres_server, tmp_path
):
    """PostgreSQL down at the start: nothing reaches the network (not even
    the blocklist) until it is back; then every request has its entry."""
    from tests.support.postgres_server import PostgresServer

    own = PostgresServer().start()
    own.kill()
    try:
        urls = write_list(tmp_path, site(server, "down.test", 2))
        proc = spawn_targets_crawl(
            server, urls, tmp_path / "s", WALSH_AUDIT_URL=own.url, WALSH_REDIS_MAX_BACKOFF=1
        )
        await sleep(6)
        assert server.origin.hits == []
        own.start()
        await proc.ended
        assert b"PostgreSQL at" in proc.err and b"is unreachable" in proc.err
        log = pg_rows(own, "walsh_audit")
        assert request_paths(log, server.port) == sorted(
            (h.host, h.path) for h in server.origin.hits
        )
        assert {"/p/0", "/p/1", "/robots.txt"} <= {h.path for h in server.origin.hits}
    finally:
        own.remove()


@pytest_twisted.ensureDeferred
async def test_a_postgresql_that_refuses_the_bundle_stops_the_crawl_before_anything_is_sent(
    server, postgres_server, tmp_path
):
    urls = write_list(tmp_path, site(server, "refused.test", 1))
    wrong = postgres_server.url.rsplit("/", 1)[0] + "/no_such_database"
    proc = spawn_targets_crawl(server, urls, tmp_path / "s", WALSH_AUDIT_URL=wrong)
    await proc.ended
    assert server.origin.hits == []
    assert b"refuses the audit log" in proc.err and b"WALSH_AUDIT_URL" in proc.err
    assert b"walsh_audit_refused" in proc.err and b"Traceback" not in proc.err
    assert proc.code == 1


@pytest_twisted.ensureDeferred
async def test_postgresql_keeps_the_retention_dropping_whole_days(postgres_server):
    """Past WALSH_AUDIT_RETENTION: old days go with their partition, the
    rest of the oldest day row by row; what is within it stays."""
    from scrapy_walsh_research.evidence.audit_postgres import DAY, PostgresAudit

    audit = PostgresAudit(postgres_server.url, "retention_audit")
    now = time.time()
    ages = [40 * DAY, 31 * DAY, 29.5 * DAY, 1 * DAY, 60.0]
    for age in ages:
        await deferred_from_coro(
            audit.append({"t": now - age, "event": "request", "host": "r.test", "url": "u"})
        )
    with postgres_server.client() as db:
        before = {r[0] for r in db.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'retention_audit'::regclass").fetchall()}  # fmt: skip
    await deferred_from_coro(audit.prune(now - 30 * DAY))
    kept = await deferred_from_coro(read_all(audit, "r.test"))
    await deferred_from_coro(audit.close())
    assert sorted(round((now - e["t"]) / DAY, 1) for e in kept) == [0.0, 1.0, 29.5]
    with postgres_server.client() as db:
        after = {r[0] for r in db.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'retention_audit'::regclass").fetchall()}  # fmt: skip
    old_day = f"retention_audit_d{int((now - 40 * DAY) // DAY)}"
    assert old_day in before and old_day not in after


# -- one host's entries, through the index ----------------------------------------

HOSTS = ["example.org", "www.example.org", "a.b.example.org", "badexample.org",
         "example.org-x.test", "org", "other.test"]  # fmt: skip


def synthetic(n_other: int) -> list[dict[str, Any]]:
    """Entries of every host in HOSTS (3 each), among *n_other* of other hosts."""
    out = [
        {"t": 1000.0 + i, "event": "request", "host": h, "url": f"http://{h}/{i}", "id": f"{h}{i}"}
        for i, h in enumerate(HOSTS * 3)
    ]
    out += [
        {"t": 2000.0 + i, "event": "request", "host": f"h{i % 500}.test",
         "url": f"http://h{i % 500}.test/{i}", "id": f"o{i}"}
        for i in range(n_other)
    ]  # fmt: skip
    return out


@pytest_twisted.ensureDeferred
async def test_one_hosts_entries_are_read_through_the_sqlite_index_with_its_subdomains(tmp_path):
    audit = SQLiteAudit(tmp_path / "audit.sqlite3")
    for e in synthetic(5000):
        audit.append(e)
    plan = audit.query_plan("example.org")
    assert "USING INDEX audit_rhost_t (rhost=?" in plan and "SCAN audit" not in plan, plan
    got = await deferred_from_coro(read_all(audit, "example.org"))
    assert sorted({e["host"] for e in got}) == ["a.b.example.org", "example.org", "www.example.org"]
    assert len(got) == 9
    exact = [e async for e in audit.entries("example.org", subdomains=False)]
    assert {e["host"] for e in exact} == {"example.org"}
    await deferred_from_coro(audit.close())


@pytest_twisted.ensureDeferred
async def test_one_hosts_entries_are_read_through_the_postgresql_index(postgres_server):
    from scrapy_walsh_research.evidence.audit_postgres import PostgresAudit

    audit = PostgresAudit(postgres_server.url, "index_audit")
    for e in synthetic(5000):
        await deferred_from_coro(audit.append(e))
    with postgres_server.client() as db:
        db.execute("ANALYZE index_audit")
    plan = await deferred_from_coro(audit.query_plan("example.org"))
    # the day holding the entries is read through the index (an empty day
    # may be scanned: it has no rows)
    day = f"index_audit_d{(1000 // 86400)}"
    assert "Index Scan on " + day in plan and "Seq Scan on " + day not in plan, plan
    got = await deferred_from_coro(read_all(audit, "example.org"))
    assert sorted({e["host"] for e in got}) == ["a.b.example.org", "example.org", "www.example.org"]
    assert [e["t"] for e in got] == sorted(e["t"] for e in got)
    await deferred_from_coro(audit.close())


def test_a_hosts_page_keeps_the_latest_rows_and_counts_them_all():
    """A host with more requests than a page can list: every request counts,
    every one under the interval is kept, only the latest rows are listed."""
    n = ROWS + 2500
    log = [
        {"t": float(i), "ts": f"t{i}", "event": "request", "host": "big.test", "id": str(i),
         "url": f"http://big.test/{i}", "interval": 1.0}
        for i in range(n)
    ]  # fmt: skip
    log.insert(10, {**log[10], "t": 9.5, "id": "early"})  # 0.5 s after the previous one
    ev = collect(log, "big.test")
    assert ev.request_count == n + 1 and len(ev.requests) == ROWS
    assert ev.requests[-1].t == n - 1
    assert [r.t for r in ev.under] == [9.5, 10.0]
    assert ev.as_json()["under_interval"] == 2


def test_an_entry_written_twice_is_one_request():
    """A write retried after its acknowledgement was lost stores the entry
    twice: the report counts one request, and no gap of 0 s."""
    e = {"t": 5.0, "ts": "t", "event": "request", "host": "h.test", "id": "1",
         "url": "http://h.test/", "interval": 1.0}  # fmt: skip
    ev = collect([e, dict(e)], "h.test")
    assert ev.request_count == 1 and ev.under == []


# -- without WALSH_AUDIT_URL: Redis keeps a window ------------------------------


@pytest_twisted.ensureDeferred
async def test_without_walsh_audit_url_a_fleet_keeps_each_hosts_entries_in_redis_for_the_window(
    server, redis_server, tmp_path
):
    urls = [u for i in range(2) for u in site(server, f"win{i}.test", 2)]
    shared = redis_settings(redis_server, WALSH_AUDIT_REDIS_WINDOW=3600)
    prefix = shared["WALSH_REDIS_PREFIX"]
    client = redis_server.client()
    try:
        # entries a day old in win0.test's stream: past the window (trimmed a
        # node of about 100 entries at a time, as Redis trims streams cheaply)
        old_ms = int((time.time() - 86400) * 1000)
        for i in range(350):
            client.xadd(f"{prefix}:audit:h:win0.test", {"e": json.dumps(
                {"t": old_ms / 1000 + i, "event": "request", "host": "win0.test", "url": "old"}
            )}, id=f"{old_ms + i}-0")  # fmt: skip
        push(redis_server, shared, urls, tmp_path)
        procs = workers(server, shared, tmp_path, 2)
        await ended(*procs)
        assert client.type(f"{prefix}:audit") == "none"  # no single stream for every host
        stream = f"{prefix}:audit:h:win0.test"
        kept = [json.loads(f["e"]) for _, f in client.xrange(stream)]
        assert len([e for e in kept if e["url"] == "old"]) <= 100  # trimmed to the window
        assert {e["event"] for e in kept} >= {"request", "response", "decision"}
        assert 0 < client.ttl(stream) <= 3600 + 86400
        assert {"test.win0", "test.win1"} <= set(client.zrange(f"{prefix}:audit:hosts", 0, -1))
    finally:
        client.close()
    assert b"kept in Redis for" in procs[0].err and b"WALSH_AUDIT_URL" in procs[0].err
    at = ["-s", f"WALSH_REDIS_URL={redis_server.url}", "-s", f"WALSH_REDIS_PREFIX={prefix}"]
    data = json.loads(report(*at, "--host", "win1.test", "--json", cwd=tmp_path).stdout)
    assert data["request_count"] == len(server.origin.hits_for("win1.test")) == 4


def test_the_log_a_fleet_wrote_before_the_upgrade_is_still_read(redis_server, tmp_path):
    """0.3 kept every host's entries in one stream, ``<prefix>:audit``: it is
    read (never written) until the retention empties it."""
    shared = redis_settings(redis_server)
    prefix = shared["WALSH_REDIS_PREFIX"]
    client = redis_server.client()
    try:
        now = time.time()
        for i, host in enumerate(["old.test", "www.old.test", "other.test"]):
            client.xadd(f"{prefix}:audit", {"e": json.dumps({
                "t": now - 60 + i, "ts": "x", "event": "request", "host": host,
                "url": f"http://{host}/", "id": str(i), "interval": 1.0})})  # fmt: skip
    finally:
        client.close()
    at = ["-s", f"WALSH_REDIS_URL={redis_server.url}", "-s", f"WALSH_REDIS_PREFIX={prefix}"]
    data = json.loads(report(*at, "--host", "old.test", "--json", cwd=tmp_path).stdout)
    assert sorted(r["host"] for r in data["requests"]) == ["old.test", "www.old.test"]


# -- a read that cannot finish ------------------------------------------------------


@pytest.mark.parametrize("store", ["redis", "postgres"])
def test_a_report_whose_store_does_not_answer_fails_with_a_clear_message(store, tmp_path):
    """A Redis or PostgreSQL that accepts the connection and never answers
    (stopped with SIGSTOP): the report says so and exits 1, within seconds,
    instead of retrying forever."""
    if store == "redis":
        from tests.support.redis_server import RedisServer

        srv: Any = RedisServer(tmp_path / "r", persist=False).start()
        pid = srv.proc.pid
        at = ["-s", f"WALSH_REDIS_URL={srv.url}"]
    else:
        from tests.support.postgres_server import PostgresServer

        srv = PostgresServer().start()
        pid = int((srv.data / "postmaster.pid").read_text().split()[0])
        at = ["-s", f"WALSH_AUDIT_URL={srv.url}", "-s", f"WALSH_STATE_DIR={tmp_path / 's'}"]
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        done = report(*at, "--host", "a.test", "--json", cwd=tmp_path, check=False)
        took = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
        if store == "redis":
            srv.kill()
        else:
            srv.remove()
    assert done.returncode == 1, done.stderr
    assert "could not be read" in done.stderr and "Traceback" not in done.stderr
    assert took < 60


# -- the Redis window: many subdomains, and the hosts' index --------------------------


def stream_entry(host: str, t: float, i: int) -> str:
    return json.dumps({
        "t": t, "ts": f"{t:.3f}", "event": "request", "host": host, "id": f"{host}-{i}",
        "url": f"http://{host}/some/path/{i}?q=1", "kind": "target", "method": "GET",
        "user_agent": "Mozilla/5.0 (compatible; Walsh-Research/1.0; +https://wal.sh/bot/)",
        "interval": 1.0, "interval_set_by": "floor", "robots_sha256": "ab" * 32,
        "blocklist": {"sha256": "cd" * 32, "updated": "2026-11-01T00:00:00Z"}, "keyid": None,
    }, sort_keys=True)  # fmt: skip


def fill_stream(client: Any, prefix: str, host: str, n: int, start: float) -> None:
    key = ".".join(reversed(host.split(".")))
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(f"{prefix}:audit:h:{host}", {"e": stream_entry(host, start + i * 1.5, i)})
        if i % 5000 == 4999:
            pipe.execute()
    pipe.zadd(f"{prefix}:audit:hosts", {key: 0})
    pipe.execute()


def peak_rss_mb(args: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run *args*; its own peak RSS (wait4), as bench/report_bench.py measures it."""
    log = cwd / f"stderr-{time.time_ns()}.txt"
    with open(log, "wb") as stderr:
        proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=stderr)
        _, status, usage = os.wait4(proc.pid, 0)
    err = log.read_text()
    done = subprocess.CompletedProcess(args, os.waitstatus_to_exitcode(status), "", err)
    return usage.ru_maxrss / 1024, done


def test_a_domains_report_over_many_subdomain_streams_holds_bounded_memory(redis_server, tmp_path):
    """A domain whose entries are spread over 300 subdomains' streams is
    read in about the memory of one host's: each stream is read a page small
    enough that the merge holds about one page in all (each read its first
    1,000 entries at once: 376 MB against 141 MB)."""
    shared = redis_settings(redis_server)
    prefix = shared["WALSH_REDIS_PREFIX"]
    client = redis_server.client()
    start = time.time() - 6 * 86400
    try:
        fill_stream(client, prefix, "one.test", 300_000, start)
        for i in range(300):
            fill_stream(client, prefix, f"s{i}.many.test", 1000, start + i * 0.001)
    finally:
        client.close()
    at = ["-s", f"WALSH_REDIS_URL={redis_server.url}", "-s", f"WALSH_REDIS_PREFIX={prefix}"]
    base = [sys.executable, "-m", "scrapy", "walsh-report", *at, "--json", "--host"]
    one, done_one = peak_rss_mb([*base, "one.test"], tmp_path)
    many, done_many = peak_rss_mb([*base, "many.test"], tmp_path)
    assert done_one.returncode == 0 and done_many.returncode == 0, done_many.stderr[-2000:]
    assert many < 1.5 * one, f"{many:.0f} MB for many.test vs {one:.0f} MB for one.test"


@pytest_twisted.ensureDeferred
async def test_a_hosts_fresh_stream_stays_in_the_hosts_index_through_another_workers_prune(
    redis_server, tmp_path
):
    """A worker's first entry for a host whose stream had expired, landing
    while another worker's retention pass forgets expired hosts, keeps the
    host in the hosts' index: the check and the removal are one script. (Two
    round trips: the host vanished from the all-hosts and the domain report.)"""
    from scrapy_walsh_research.evidence.audit_redis import RedisAudit
    from scrapy_walsh_research.state.redis.connection import RedisConnection

    prefix = redis_settings(redis_server)["WALSH_REDIS_PREFIX"]
    pruner = RedisAudit(RedisConnection(redis_server.url, prefix), 3600)
    worker = RedisAudit(RedisConnection(redis_server.url, prefix), 3600)
    now = time.time()

    async def run() -> tuple[list[str], list[str]]:
        # late.example.test had a stream once; it expired (idle past the window)
        await worker.append({"t": now - 10, "event": "request", "host": "late.example.test",
                             "url": "http://late.example.test/", "id": "0"})  # fmt: skip
        await worker.conn.client.delete(f"{prefix}:audit:h:late.example.test")
        client = pruner.conn.client
        register = client.register_script

        def racing(script: str) -> Any:
            real = register(script)

            async def run_after_the_other_worker(**kwargs: Any) -> Any:
                # the other worker's first entry for the host since lands
                # after prune read the index, before it forgets a host
                await worker.append({"t": time.time(), "ts": "x", "event": "request",
                                     "host": "late.example.test",
                                     "url": "http://late.example.test/1", "id": "1",
                                     "interval": 1.0})  # fmt: skip
                return await real(**kwargs)

            return run_after_the_other_worker

        client.register_script = racing  # type: ignore[method-assign]
        await pruner.prune(now - 86400)
        client.register_script = register  # type: ignore[method-assign]
        hosts = await pruner.hosts()
        under = [e["id"] async for e in pruner.entries("example.test")]
        await pruner.conn.close()
        await worker.conn.close()
        return hosts, under

    hosts, under = await deferred_from_coro(run())
    assert "late.example.test" in hosts
    assert "1" in under


# -- a fleet whose clocks differ ------------------------------------------------------

SLOW_CLOCK = """
import time
_real = time.time
time.time = lambda: _real() - 0.7
"""


@pytest_twisted.ensureDeferred
async def test_a_fleet_whose_clocks_differ_shows_no_gap_under_the_interval_the_origin_never_saw(
    server, redis_server, postgres_server, tmp_path
):
    """Two workers whose machines' clocks differ by 0.7 s keep the
    interval at the origin, and the report shows no gap under it: an entry
    is stamped with the fleet's clock (Redis's, which pacing keeps), the
    machine's own in ``t_local``. (Each machine's clock: four gaps of 0.36 s
    that the origin never saw.)"""
    slow = tmp_path / "slow-clock"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(SLOW_CLOCK)
    urls = site(server, "skew.test", 10)
    shared = redis_settings(redis_server, WALSH_AUDIT_URL=postgres_server.url)
    push(redis_server, shared, urls, tmp_path)
    procs = [
        spawn_worker(server, "targets", tmp_path / "w0", **shared),
        spawn_worker(server, "targets", tmp_path / "w1", extra_path=slow, **shared),
    ]
    await ended(*procs)
    hits = server.origin.hits_for("skew.test")
    seen = [b.t - a.t for a, b in itertools.pairwise(hits)]
    assert min(seen) >= 0.99, seen  # the fleet kept the interval, as the origin saw it
    done = subprocess.run(
        [sys.executable, "-m", "scrapy", "walsh-report", "--host", "skew.test", "--json",
         "-s", f"WALSH_AUDIT_URL={postgres_server.url}",
         "-s", f"WALSH_REDIS_PREFIX={shared['WALSH_REDIS_PREFIX']}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    data = json.loads(done.stdout)
    assert data["request_count"] == len(hits)
    shown = sorted(round(r["gap"], 3) for r in data["requests"] if r["gap"] is not None)
    assert data["under_interval"] == 0, f"report's gaps {shown}; origin's {sorted(seen)}"
