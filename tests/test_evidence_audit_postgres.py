"""The fleet's audit log in PostgreSQL (``WALSH_AUDIT_URL``) when things go
wrong: an acknowledgement lost, a crash right after one, a report that holds
the table, a server that stops answering mid-read, a purge that cannot be
audited, a table that is not there, a fleet prefix too long for PostgreSQL's
names, a site's text ``jsonb`` refuses. Real PostgreSQL, real crawls; each
test failed before its fix."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from scrapy.utils.defer import deferred_from_coro

from scrapy_walsh_research.sandbox import Reply
from tests.support.crawling import write_list
from tests.support.pg_proxy import PgProxy
from tests.support.processes import spawn_targets_crawl


def pg_rows(postgres: Any, table: str) -> list[dict[str, Any]]:
    with postgres.client() as db:
        rows = db.execute(f'SELECT entry FROM "{table}" ORDER BY t, seq').fetchall()
    return [row[0] for row in rows]


def report(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "walsh-report", *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


# -- an entry PostgreSQL cannot store as it is --------------------------------------------


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
@pytest_twisted.ensureDeferred
async def test_a_site_text_with_a_nul_character_still_gets_its_decision_and_record(
    store, server, postgres_server, tmp_path
):
    """A site's text that JSON allows and ``jsonb`` refuses (NUL in a
    tdmrep.json policy) still gets its decision and its line's record: the
    entry is stored with U+FFFD in its place. (It was a DataError, not
    retried: the decision and the record were lost.)"""
    host = "nul.test"
    server.origin.route(host, "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    server.origin.route(host, "/.well-known/tdmrep.json", Reply(200, json.dumps([
        {"location": "/reserved/", "tdm-reservation": 1,
         "tdm-policy": "https://nul.test/policy\u0000.json"},
    ]), {"Content-Type": "application/json"}))  # fmt: skip
    server.origin.route(host, "/reserved/a", Reply(200, "x"))
    server.origin.route(host, "/open", Reply(200, "y"))
    urls = write_list(tmp_path, [server.url(host, "/reserved/a"), server.url(host, "/open")])
    out = tmp_path / "records.jl"
    prefix = f"nul{time.time_ns()}"
    at = {"WALSH_AUDIT_URL": postgres_server.url} if store == "postgres" else {}
    proc = spawn_targets_crawl(
        server, urls, tmp_path / "s", WALSH_REDIS_PREFIX=prefix,
        FEEDS=json.dumps({str(out): {"format": "jsonlines"}}), **at,
    )  # fmt: skip
    await proc.ended
    records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    if store == "postgres":
        log = pg_rows(postgres_server, f"{prefix}_audit")
    else:
        import sqlite3

        db = sqlite3.connect(tmp_path / "s" / "audit.sqlite3")
        log = [json.loads(r[0]) for r in db.execute("SELECT entry FROM audit ORDER BY t, seq")]
        db.close()
    decisions = [e for e in log if e["event"] == "decision"]
    # every list line has exactly one record, and its decision is in the audit log
    assert len(records) == 2, proc.err.decode()[-3000:]
    assert len(decisions) == 2, proc.err.decode()[-3000:]


# -- a write retried after its acknowledgement was lost ---------------------------


@pytest_twisted.ensureDeferred
async def test_a_decision_whose_write_is_retried_after_a_lost_acknowledgement_counts_once(
    postgres_server,
):
    """An INSERT the server committed whose acknowledgement never came is
    written again on the retry: the report counts that decision once, by
    its ``eid``. (It counted two denied targets where one was denied.)"""
    from scrapy_walsh_research.evidence.audit_postgres import PostgresAudit
    from scrapy_walsh_research.evidence.host_evidence import collect_stream

    proxy = PgProxy(postgres_server.port)
    table = f"ack{time.time_ns()}_audit"

    async def run() -> Any:
        writer = PostgresAudit(proxy.url(), table, max_backoff=0.5)
        now = time.time()
        first = {"t": now, "ts": "a", "event": "request", "host": "d.test",
                 "url": "http://d.test/robots.txt", "id": "r1", "kind": "robots"}  # fmt: skip
        await writer.append(first)
        proxy.lose_ack()
        # as the audit trail writes every entry: with its own id
        await writer.append({"t": now + 1, "ts": "b", "event": "decision", "host": "d.test",
                             "eid": "0123456789abcdef",
                             "url": "http://d.test/x", "line": 1, "outcome": "denied",
                             "rule": "R2", "reason": "robots.txt disallows /x"})  # fmt: skip
        await writer.close()
        reader = PostgresAudit(postgres_server.url, table)
        return await collect_stream(reader.entries("d.test"), "d.test")

    try:
        ev = await deferred_from_coro(run())
    finally:
        proxy.close()
    assert proxy.acks_lost == 1
    assert ev.request_count == 1
    assert ev.decision_count == 1 and ev.denied_count == 1, ev.not_fetched_by_outcome()


# -- a report's read ends ---------------------------------------------

#: the report's own promise: READ_TIMEOUT_S (60 s) per read, then one line and exit 1
PROMISED_S = 60 + 30


async def _fill(url: str, table: str, hosts: list[str]) -> None:
    from scrapy_walsh_research.evidence.audit_postgres import PostgresAudit

    audit = PostgresAudit(url, table)
    now = time.time()
    for i, host in enumerate(hosts):
        e = {"t": now + i, "ts": "x", "event": "request", "host": host,
             "url": f"http://{host}/", "id": f"{host}{i}", "interval": 1.0}  # fmt: skip
        await audit.append(e)
    await audit.close()


@pytest_twisted.ensureDeferred
async def test_the_all_hosts_report_ends_when_postgresql_holds_the_table_locked(
    postgres_server, tmp_path
):
    """The table locked by another session: the all-hosts report's read of
    its hosts ends at the statement timeout with one line and exit 1 (it
    waited for ever: only the per-host read had a timeout)."""
    prefix = f"lock{time.time_ns()}"
    await deferred_from_coro(_fill(postgres_server.url, f"{prefix}_audit", ["a.test", "b.test"]))
    import psycopg

    locker = psycopg.connect(postgres_server.url)
    locker.execute(f'LOCK TABLE "{prefix}_audit" IN ACCESS EXCLUSIVE MODE')
    try:
        started = time.monotonic()
        try:
            done = report("--out", str(tmp_path / "all.html"),
                          "-s", f"WALSH_AUDIT_URL={postgres_server.url}",
                          "-s", f"WALSH_REDIS_PREFIX={prefix}", cwd=tmp_path,
                          timeout=PROMISED_S)  # fmt: skip
        except subprocess.TimeoutExpired:
            pytest.fail(f"walsh-report still waiting after {time.monotonic() - started:.0f} s")
    finally:
        locker.rollback()
        locker.close()
    assert done.returncode == 1 and "could not be read" in done.stderr, done.stderr


@pytest_twisted.ensureDeferred
async def test_a_hosts_report_ends_when_postgresql_stops_answering_mid_read(
    postgres_server, tmp_path
):
    """PostgreSQL accepted the connection and the query, then nothing more
    arrives (a network partition: no RST). The server's statement_timeout
    cannot end that wait; the report's own deadline does: one line and exit 1."""
    prefix = f"part{time.time_ns()}"
    await deferred_from_coro(_fill(postgres_server.url, f"{prefix}_audit", ["a.test"] * 5))
    proxy = PgProxy(postgres_server.port)
    proxy.go_silent_on(b"DECLARE")
    try:
        started = time.monotonic()
        try:
            done = report("--host", "a.test", "--json",
                          "-s", f"WALSH_AUDIT_URL={proxy.url()}",
                          "-s", f"WALSH_REDIS_PREFIX={prefix}", cwd=tmp_path,
                          timeout=PROMISED_S)  # fmt: skip
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"walsh-report still waiting after {time.monotonic() - started:.0f} s "
                f"(partitioned: {proxy.silenced.is_set()})"
            )
    finally:
        proxy.close()
    assert done.returncode == 1 and "could not be read" in done.stderr, done.stderr


# -- a report's read does not stop the fleet --------------------------------------------


@pytest_twisted.ensureDeferred
async def test_a_report_reading_a_host_does_not_stop_the_fleets_audit_writes(postgres_server):
    """A report reading a large host while a worker needs a new day's
    partition (a DDL lock on the table): other workers' entries are still
    written. The report's query materialises and lets go of the table, and
    the DDL waits at most LOCK_TIMEOUT_S. (Every INSERT queued behind the
    DDL, itself behind the report's long read: the fleet sent nothing.)"""
    from scrapy_walsh_research.evidence.audit_postgres import DAY, PostgresAudit

    table = f"stall{time.time_ns()}_audit"

    async def run() -> tuple[bool, bool]:
        now = time.time()
        worker = PostgresAudit(postgres_server.url, table)
        for i in range(2500):  # more than one page of the report's cursor
            await worker.append({"t": now - 100 + i * 0.01, "event": "request",
                                 "host": "big.test", "url": "u", "id": str(i)})  # fmt: skip
        read = PostgresAudit(postgres_server.url, table).entries("big.test")
        await anext(read)  # the report is reading
        # another worker's first entry of the next UTC day makes its partition
        next_day = PostgresAudit(postgres_server.url, table)
        making = asyncio.ensure_future(
            next_day.append({"t": now + 2 * DAY, "event": "request", "host": "c.test", "url": "u"})
        )
        await asyncio.sleep(0.5)
        try:
            await asyncio.wait_for(
                worker.append({"t": time.time(), "event": "request", "host": "b.test",
                               "url": "u", "id": "x"}), 5)  # fmt: skip
            written = True
        except asyncio.TimeoutError:
            written = False
        await read.aclose()
        await making
        for audit in (worker, next_day):
            await audit.close()
        return written, making.done()

    written, _ = await deferred_from_coro(run())
    assert written, "a worker's audit write waited > 5 s behind a report's read"


# -- walsh-purge with WALSH_AUDIT_URL ---------------------------------------------


def _state_with(state: Path, url: str) -> None:
    """A state dir holding validators for *url* (what walsh-purge deletes),
    written by a child process (the test's own loop is Twisted's)."""
    script = f"""
import asyncio
from scrapy.crawler import Crawler
from scrapy.settings import Settings
from scrapy_walsh_research.evidence.purge import NAMESPACES
from scrapy_walsh_research.spiders.targets import TargetsSpider
from scrapy_walsh_research.state import state_for

async def put():
    store = state_for(Crawler(TargetsSpider, Settings({{"WALSH_STATE_DIR": {str(state)!r}}})))
    await store.put(NAMESPACES[0], {url!r}, {{"etag": '"1"'}})
    await store.close()

asyncio.run(put())
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


def _purge(
    state: Path, audit_url: str, cwd: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "walsh-purge", "example.org",
         "-s", f"WALSH_STATE_DIR={state}", "-s", f"WALSH_AUDIT_URL={audit_url}",
         "-s", "WALSH_REDIS_MAX_BACKOFF=1"],
        cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def test_walsh_purge_with_postgresql_unreachable_ends_with_one_line(tmp_path):
    """PostgreSQL unreachable and nothing stored about the host: walsh-purge
    ends with one line and a non-zero exit, no traceback."""
    from tests.support.redis_server import free_port

    state = tmp_path / "s"
    _state_with(state, "http://other.test/x")
    dead = f"postgresql://walsh@127.0.0.1:{free_port()}/walsh"
    done = _purge(state, dead, tmp_path, timeout=60)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-1500:]


def test_walsh_purge_with_postgresql_unreachable_neither_hangs_nor_deletes_without_its_entry(
    tmp_path,
):
    """PostgreSQL unreachable and something stored about the host:
    walsh-purge deletes nothing the audit log could not show, and ends
    (it deleted the state, then waited for ever to write the purge's entry)."""
    from tests.support.redis_server import free_port

    state = tmp_path / "s"
    _state_with(state, "http://example.org/x")
    dead = f"postgresql://walsh@127.0.0.1:{free_port()}/walsh"
    try:
        done = _purge(state, dead, tmp_path, timeout=60)
    except subprocess.TimeoutExpired:
        import sqlite3

        db = sqlite3.connect(state / "state.sqlite3")
        left = db.execute("SELECT count(*) FROM kv").fetchone()[0]
        db.close()
        pytest.fail(f"walsh-purge still waiting after 60 s; stored entries left: {left}")
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-1500:]


# -- a report on a table that is not there ----------------------------------------


@pytest_twisted.ensureDeferred
async def test_a_report_on_a_fleet_whose_audit_table_is_not_there_says_so(
    postgres_server, tmp_path
):
    """The table is named after ``WALSH_REDIS_PREFIX``: a report run
    without the fleet's prefix finds no table, and says so, naming the
    table and the setting (it said "0 requests" and exited 0)."""
    prefix = f"fleet{time.time_ns()}"
    await deferred_from_coro(_fill(postgres_server.url, f"{prefix}_audit", ["a.test"] * 3))
    forgotten = f"forgotten{time.time_ns()}"  # not the fleet's prefix
    done = report("--host", "a.test", "--json", "-s", f"WALSH_AUDIT_URL={postgres_server.url}",
                  "-s", f"WALSH_REDIS_PREFIX={forgotten}", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1 and f"{forgotten}_audit" in done.stderr, done.stdout[:300]
    assert "WALSH_REDIS_PREFIX" in done.stderr and "Traceback" not in done.stderr


# -- a long WALSH_REDIS_PREFIX ------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_a_long_fleet_prefix_keeps_every_days_partition_and_its_entries(postgres_server):
    """A fleet prefix too long for PostgreSQL's 63-byte names: every day
    keeps a partition of its own, and a worker's retention pass drops
    nothing within the retention. (Every day's partition got the same cut
    name: a new day's entries had none, and a start dropped today's.)"""
    from scrapy_walsh_research.evidence.audit import read_all
    from scrapy_walsh_research.evidence.audit_postgres import DAY, PostgresAudit, table_name

    prefix = f"walsh-research-production-crawler-fleet-eu-west1-{time.time_ns() % 1000:03d}"
    table = table_name(prefix)
    assert len(table) <= 63  # the table's own name fits

    async def run() -> tuple[str | None, int]:
        now = time.time()
        worker = PostgresAudit(postgres_server.url, table)
        await worker.append({"t": now, "event": "request", "host": "x.test", "url": "u", "id": "1"})
        problem = None
        try:  # an entry of the day after tomorrow (a new UTC day, or a clock ahead)
            await worker.append({"t": now + 2 * DAY, "event": "request", "host": "x.test",
                                 "url": "u", "id": "2"})  # fmt: skip
        except Exception as exc:
            problem = type(exc).__name__
        await worker.close()
        another = PostgresAudit(postgres_server.url, table)
        await another.prune(now - 90 * DAY)  # the next worker's start
        kept = len(await read_all(another, "x.test"))
        await another.close()
        return problem, kept

    problem, kept = await deferred_from_coro(run())
    assert problem is None, f"an entry of a new day could not be written: {problem}"
    assert kept == 2, f"{kept} of 2 entries within the retention survived a worker's start"


# -- "committed" means flushed, whatever the server's default ----------------------------------------


@pytest_twisted.ensureDeferred
async def test_an_entry_acknowledged_before_its_request_left_survives_a_postgresql_crash(tmp_path):
    """A request leaves once PostgreSQL acknowledged its entry: with
    synchronous_commit=off on the server (as the test cluster runs, and as
    operators set it for write latency), the bundle's session still asks
    for it on, so a crash right after loses no acknowledged entry."""
    from scrapy_walsh_research.evidence.audit_postgres import PostgresAudit
    from tests.support.postgres_server import PostgresServer

    own = PostgresServer().start()
    table = "crash_audit"

    async def write() -> int:
        audit = PostgresAudit(own.url, table)
        n = 300
        for i in range(n):
            await audit.append({"t": time.time(), "event": "request", "host": "c.test",
                                "url": f"http://c.test/{i}", "id": str(i)})  # fmt: skip
        return n

    try:
        acknowledged = await deferred_from_coro(write())
        own.kill()  # SIGKILL, right after the last acknowledgement
        own.start()
        with own.client() as db:
            stored = db.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
    finally:
        own.remove()
    assert stored == acknowledged, f"{acknowledged - stored} acknowledged entries lost"
