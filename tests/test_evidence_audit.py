"""The audit log: every request that reached the origin is in it (and
nothing else), written before the request left, with what was in force; every
decision about a target with its rule; durable through SIGKILL; bounded by
the retention; one log for a Redis fleet."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from scrapy.utils.defer import deferred_from_coro

from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.evidence.audit import read_all
from scrapy_walsh_research.evidence.audit_redis import RedisAudit
from scrapy_walsh_research.evidence.audit_sqlite import SQLiteAudit
from scrapy_walsh_research.identity.signing import Signer, generate_key, load_key
from scrapy_walsh_research.sandbox import Reply
from tests.support.crawling import (
    BLOCKLIST_HOST,
    BLOCKLIST_PATH,
    base_settings,
    blocklist_doc,
    crawl,
    json_reply,
    sleep,
    write_list,
)
from tests.support.fleet import redis_settings
from tests.support.processes import spawn_targets_crawl


def entries(state: Path) -> list[dict[str, Any]]:
    db = sqlite3.connect(str(state / "audit.sqlite3"))
    try:
        return [json.loads(row[0]) for row in db.execute("SELECT entry FROM audit ORDER BY seq")]
    finally:
        db.close()


def world(server: Any) -> list[str]:
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("no.test")))
    robots = "User-agent: *\nDisallow: /private\n"
    server.origin.route("a.test", "/robots.txt", Reply(200, robots))
    server.origin.route("a.test", "/ok", Reply(200, "ok"))
    server.origin.route(
        "a.test", "/old", Reply(301, "", {"Location": server.url("a.test", "/ok2")})
    )
    server.origin.route("a.test", "/ok2", Reply(200, "ok2"))
    answers = iter([Reply(503, "busy", {"Retry-After": "1"}), Reply(200, "ok")])
    server.origin.route("a.test", "/busy", lambda hit: next(answers))
    return [
        server.url("a.test", "/ok"), server.url("a.test", "/old"), server.url("a.test", "/busy"),
        server.url("a.test", "/private"), server.url("no.test", "/x"), "not a url",
    ]  # fmt: skip


@pytest_twisted.ensureDeferred
async def test_every_request_the_origin_saw_is_logged_and_nothing_else(server, tmp_path):
    key = tmp_path / "walsh.pem"
    generate_key(key)
    state = tmp_path / "s"
    settings = base_settings(server, state, WALSH_SIGNING_KEY=str(key))
    result = await crawl(settings, world(server), tmp_path)
    log = entries(state)
    sent = [e for e in log if e["event"] == "request"]
    seen = [(h.host, h.path) for h in server.origin.hits]
    logged = [(e["host"], e["url"].split(f":{server.port}", 1)[1]) for e in sent]
    assert sorted(logged) == sorted(seen)  # every request, and nothing else
    kinds = {e["kind"] for e in sent}
    assert {"robots", "blocklist", "schema", "target", "target hop", "target retry"} <= kinds
    # each was answered, with its status
    answered = {e["id"]: e for e in log if e["event"] == "response"}
    assert {e["id"] for e in sent} == set(answered)
    assert sorted(e["status"] for e in answered.values()).count(503) == 1
    # what was in force when it left
    target = next(e for e in sent if e["url"].endswith("/ok"))
    assert target["keyid"] == Signer(load_key(key)).keyid
    assert target["blocklist"]["updated"] == "2026-05-23T00:00:00Z"
    assert len(target["blocklist"]["sha256"]) == 64
    assert len(target["robots_sha256"]) == 64
    assert target["ts"].endswith("+00:00")
    # every decision about a target, with its rule
    decisions = {e["url"]: e for e in log if e["event"] == "decision"}
    assert len(decisions) == len(result.items) == 6
    assert decisions[server.url("a.test", "/private")]["rule"] == "R2"
    assert decisions[server.url("no.test", "/x")]["rule"] == "R3"
    assert decisions["not a url"]["outcome"] == "invalid"
    # a request is logged before it leaves
    arrivals = {(h.host, h.path): h.wall for h in server.origin.hits}
    for e in sent:
        assert e["t"] <= arrivals[(e["host"], e["url"].split(f":{server.port}", 1)[1])]


@pytest_twisted.ensureDeferred
async def test_the_log_survives_sigkill_with_every_request_sent(server, tmp_path):
    server.origin.route("k.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    for i in range(20):
        server.origin.route("k.test", f"/p/{i}", Reply(200, "x"))
    urls = write_list(tmp_path, [server.url("k.test", f"/p/{i}") for i in range(20)])
    state = tmp_path / "state"
    proc = spawn_targets_crawl(server, urls, state)
    while len(server.origin.hits_for("k.test")) < 4:
        await sleep(0.05)
    proc.transport.signalProcess("KILL")
    await proc.ended
    seen = sorted(h.path for h in server.origin.hits_for("k.test"))
    logged = sorted(
        e["url"].split(f":{server.port}", 1)[1]
        for e in entries(state)
        if e["event"] == "request" and e["host"] == "k.test"
    )
    assert logged == seen


@pytest_twisted.ensureDeferred
async def test_entries_older_than_the_retention_are_dropped_when_a_crawl_opens(tmp_path):
    from scrapy.utils.test import get_crawler

    from scrapy_walsh_research._runtime.context import CrawlContext

    old = SQLiteAudit(tmp_path / "audit.sqlite3")
    old.append({"t": time.time() - 100 * 86400, "host": "a.test", "event": "request"})
    old.append({"t": time.time() - 10, "host": "a.test", "event": "request"})
    await deferred_from_coro(old.close())
    crawler = get_crawler(settings_dict={"WALSH_STATE_DIR": str(tmp_path)})
    trail = CrawlContext.for_crawler(crawler).audit
    await deferred_from_coro(trail.opened())
    await deferred_from_coro(trail.store.close())
    kept = entries(tmp_path)
    assert [round(time.time() - e["t"]) for e in kept] == [10]


@pytest_twisted.ensureDeferred
async def test_a_fleet_writes_one_log_any_worker_can_read(server, redis_server, tmp_path):
    from tests.test_fleet_workers import ended, push, site, workers

    urls = [u for i in range(3) for u in site(server, f"r{i}.test", 3)]
    shared = redis_settings(redis_server)
    push(redis_server, shared, urls, tmp_path)
    await ended(*workers(server, shared, tmp_path, 2))
    from scrapy_walsh_research.state.redis.connection import RedisConnection

    conn = RedisConnection(redis_server.url, shared["WALSH_REDIS_PREFIX"])
    try:
        log = await deferred_from_coro(read_all(RedisAudit(conn, 86400)))
    finally:
        await deferred_from_coro(conn.close())
    sent = sorted(
        (e["host"], e["url"].split(f":{server.port}", 1)[1]) for e in log if e["event"] == "request"
    )
    assert sent == sorted((h.host, h.path) for h in server.origin.hits)
    assert len([e for e in log if e["event"] == "decision"]) == 9
    # the evidence report reads the fleet's log: every request r0.test saw, paced
    from tests.test_evidence_report import walsh_report

    settings = ["-s", f"WALSH_REDIS_URL={redis_server.url}"]
    settings += ["-s", f"WALSH_REDIS_PREFIX={shared['WALSH_REDIS_PREFIX']}"]
    report = walsh_report(
        tmp_path / "unused", *settings, "--host", "r0.test", "--json", cwd=tmp_path
    )
    data = json.loads(report.stdout)
    assert len(data["requests"]) == len(server.origin.hits_for("r0.test")) == 5  # + tdmrep.json
    assert data["under_interval"] == 0 and data["smallest_gap"] >= 1.0


def a_03_audit_log(path: Path, n: int) -> None:
    """audit.sqlite3 as 0.3 left it: (seq, t, host, entry), indexes
    (host, t) and (t), *n* entries of 5,000 hosts over the last 30 days."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE audit (seq INTEGER PRIMARY KEY, t REAL NOT NULL,"
               " host TEXT NOT NULL, entry TEXT NOT NULL)")  # fmt: skip
    start = time.time() - 30 * 86400
    db.execute(
        "WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < ?)"
        " INSERT INTO audit (t, host, entry)"
        " SELECT ? + i * 0.8, 'h' || (i % 5000) || '.example.org',"
        " json_object('t', ? + i * 0.8, 'ts', 'x', 'event', 'request', 'host',"
        " 'h' || (i % 5000) || '.example.org', 'url', 'http://h' || (i % 5000) ||"
        " '.example.org/' || i, 'id', printf('%016x', i), 'interval', 1.0) FROM c",
        (n - 1, start, start),
    )
    db.execute("CREATE INDEX audit_host_t ON audit (host, t)")
    db.execute("CREATE INDEX audit_t ON audit (t)")
    db.commit()
    db.close()


def test_two_processes_opening_a_large_03_audit_log_at_once_both_work(tmp_path):
    """A 0.3 audit.sqlite3 of 3 x 10^6 entries, opened by two processes at
    once (a second worker of the machine, an operator's walsh-report during
    the upgrade): both work, and both reports find the host's entries. The
    upgrade keys the rows in committed batches, and an opener waits for the
    other. (One transaction of ~7 s: the second died after sqlite3's 5 s
    busy timeout with "database is locked" and a traceback.)"""
    import subprocess
    import sys

    state = tmp_path / "s"
    a_03_audit_log(state / "audit.sqlite3", 3_000_000)
    cmd = [sys.executable, "-m", "scrapy", "walsh-report", "--host", "h1.example.org",
           "--json", "-s", f"WALSH_STATE_DIR={state}"]  # fmt: skip
    first = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)  # fmt: skip
    time.sleep(1.5)  # the first is upgrading
    second = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-2000:]
    assert second.returncode == 0 and "Traceback" not in second.stderr, second.stderr[-2000:]
    assert json.loads(out)["request_count"] == json.loads(second.stdout)["request_count"] == 600


@pytest.mark.parametrize("name", ["WALSH_AUDIT_RETENTION", "WALSH_AUDIT_REDIS_WINDOW"])
@pytest.mark.parametrize("value", [0, -1])
@pytest_twisted.ensureDeferred
async def test_an_audit_log_kept_no_time_is_refused_at_start_up(server, tmp_path, name, value):
    """The audit log is the evidence a site owner is shown: a retention (or,
    for a fleet, a Redis window) of no time is refused before any request,
    with or without Redis."""
    with pytest.raises(WalshConfigurationError, match=f"{name}=.*evidence a site owner"):
        await crawl(base_settings(server, tmp_path / "s", **{name: value}), ["http://x.test/"],
                    tmp_path)  # fmt: skip
    assert server.origin.hits == []
