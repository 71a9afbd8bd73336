"""Purge on opt-out: once a host opts out (a blocklist entry covering it is
adopted, or its robots.txt disallows us for /), what was stored about it is
deleted at once, with an audit entry naming the cause; ``scrapy walsh-purge``
does the same on demand, apex and subdomains as R3 matches."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest_twisted

from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.state.namespaces import PER_TARGET
from tests.support.crawling import (
    BLOCKLIST_HOST,
    BLOCKLIST_PATH,
    base_settings,
    blocklist_doc,
    crawl,
    json_reply,
    sleep,
)
from tests.test_evidence_audit import entries

HEADERS = {"ETag": '"v1"', "Content-Type": "application/rss+xml"}
RSS = (
    '<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>'
    "<item><title>a</title><link>https://x.example/a</link></item></channel></rss>"
)


def stored(state: Path) -> dict[str, list[str]]:
    db = sqlite3.connect(str(state / "state.sqlite3"))
    try:
        out: dict[str, list[str]] = {}
        for ns, key in db.execute("SELECT namespace, key FROM kv"):
            out.setdefault(ns, []).append(key)
        return out
    finally:
        db.close()


def about(state: Path, host: str) -> list[str]:
    return [
        f"{ns}:{k}" for ns, keys in stored(state).items() if ns in ("validators", "seen", "cadence")
        for k in keys if f"//{host}:" in k.split("\t")[0]
    ]  # fmt: skip


def site(server: Any, host: str, robots: str = "User-agent: *\nAllow: /\n") -> str:
    server.origin.route(host, "/robots.txt", Reply(200, robots))
    server.origin.route(host, "/feed.xml", Reply(200, RSS, HEADERS))
    return server.url(host, "/feed.xml")


@pytest_twisted.ensureDeferred
async def test_adopting_a_blocklist_entry_purges_what_was_stored_about_the_host(server, tmp_path):
    state = tmp_path / "s"
    urls = [site(server, "gone.test"), site(server, "www.gone.test"),
            site(server, "stay.test")]  # fmt: skip
    await crawl(base_settings(server, state), urls, tmp_path)
    assert about(state, "gone.test") and about(state, "www.gone.test")
    # the operator adds gone.test; the next run adopts it
    doc = blocklist_doc("gone.test", refresh="PT1M")
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(doc))
    settings = base_settings(server, state, WALSH_BLOCKLIST_MIN_REFRESH=1)
    state_db = sqlite3.connect(str(state / "state.sqlite3"))  # the stored list is due now
    state_db.execute("UPDATE kv SET value = json_set(value, '$.fetched_at', 0) "
                     "WHERE namespace = 'blocklist' AND key != 'purged_for'")  # fmt: skip
    state_db.commit()
    state_db.close()
    await crawl(settings, [server.url("stay.test", "/feed.xml")], tmp_path / "2")
    assert about(state, "gone.test") == [] and about(state, "www.gone.test") == []
    assert about(state, "stay.test")  # not blocked: kept
    purges = [e for e in entries(state) if e["event"] == "purge"]
    assert {e["host"] for e in purges} == {"gone.test", "www.gone.test"}
    assert all("blocklist entry 'gone.test' adopted" in e["reason"] for e in purges)


@pytest_twisted.ensureDeferred
async def test_robots_disallowing_us_for_the_root_purges_the_host(server, tmp_path):
    state = tmp_path / "s"
    url = site(server, "shy.test")
    await crawl(base_settings(server, state, WALSH_POLICY_TTL=1), [url], tmp_path)
    assert about(state, "shy.test")
    await sleep(1.2)  # the robots.txt copy has expired: fetched again
    server.origin.route(
        "shy.test", "/robots.txt", Reply(200, "User-agent: Walsh-Research\nDisallow: /\n")
    )
    result = await crawl(base_settings(server, state, WALSH_POLICY_TTL=1), [url], tmp_path / "2")
    assert result.items[0]["rule"] == "R2"
    assert about(state, "shy.test") == []
    (purge,) = [e for e in entries(state) if e["event"] == "purge"]
    assert "robots.txt disallows Walsh-Research for /" in purge["reason"]


@pytest_twisted.ensureDeferred
async def test_walsh_purge_deletes_a_host_and_its_subdomains_and_names_exported_records(
    server, tmp_path
):
    state = tmp_path / "s"
    urls = [site(server, "c.test"), site(server, "www.c.test"), site(server, "xc.test")]
    await crawl(base_settings(server, state), urls, tmp_path)
    scrapy = str(Path(sys.executable).parent / "scrapy")
    run = subprocess.run(
        [scrapy, "walsh-purge", "c.test", "-s", f"WALSH_STATE_DIR={state}"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert about(state, "c.test") == [] and about(state, "www.c.test") == []
    assert about(state, "xc.test")  # only a lookalike: kept
    assert "2 host(s) under c.test" in run.stdout
    # in words, not a dict: what was deleted for each host
    assert "{" not in run.stdout, run.stdout
    lines = dict(line.strip().split(": ", 1) for line in run.stdout.splitlines()[1:3])
    assert set(lines) == {"c.test", "www.c.test"}
    assert "validators (ETag, Last-Modified): 1" in lines["c.test"], run.stdout
    assert "last fetch times (R8): 1" in lines["c.test"], run.stdout
    assert "2 records of c.test were exported" in run.stdout
    reasons = {json.dumps(e) for e in entries(state) if e["event"] == "purge"}
    assert len(reasons) == 2 and all("walsh-purge" in r for r in reasons)


@pytest_twisted.ensureDeferred
async def test_a_local_entry_purges_even_when_swapped_for_another_or_no_list_is_adopted(
    server, tmp_path
):
    """Found by review: the once-per-list marker counted the local entries
    (one swapped for another looked the same), and a run that never adopted
    a list never purged for its local entries."""
    state = tmp_path / "state"
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc()))
    gone, also = site(server, "gone.test"), site(server, "also.test")
    await crawl(base_settings(server, state, WALSH_BLOCKLIST_EXTRA=["other.test"]),
                [gone, also], tmp_path)  # fmt: skip
    assert about(state, "gone.test") and about(state, "also.test")
    # one local entry swapped for another: same count, a new opt-out
    await crawl(base_settings(server, state, WALSH_BLOCKLIST_EXTRA=["gone.test"]),
                [gone], tmp_path / "2")  # fmt: skip
    assert about(state, "gone.test") == [] and about(state, "also.test")
    # a list never adopted (its URL down from the start): the local entry still purges
    fresh = tmp_path / "fresh"
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, Reply(500, "down"))
    # (the list is waited for, then the crawl goes on without it: spec §5.2)
    await crawl(base_settings(server, fresh, WALSH_POLICY_WAIT=3), [also], tmp_path / "3")
    assert about(fresh, "also.test")
    res = await crawl(base_settings(server, fresh, WALSH_BLOCKLIST_EXTRA=["also.test"],
                                    WALSH_POLICY_WAIT=3), [also], tmp_path / "4")  # fmt: skip
    assert res.items[0]["outcome"] == "denied"
    assert about(fresh, "also.test") == []
    purges = [e for e in entries(fresh) if e["event"] == "purge"]
    assert [(e["host"], "WALSH_BLOCKLIST_EXTRA" in e["reason"]) for e in purges] == [
        ("also.test", True)
    ]


def hashes_about(redis_server: Any, shared: dict[str, Any], host: str) -> set[str]:
    """The namespaces holding a hash about *host* in the fleet's Redis."""
    r = redis_server.client()
    try:
        names = r.scan_iter(f"{shared['WALSH_REDIS_PREFIX']}:state:*:{host}")
        return {name.split(":")[-2] for name in names}
    finally:
        r.close()


def scrapy_command(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scrapy", *args], cwd=cwd, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


@pytest_twisted.ensureDeferred
async def test_the_commands_read_a_host_as_the_crawl_stored_it(server, tmp_path):
    """Found by review: an IDN spelled in Unicode or upper case found nothing
    (0 requests reported, 0 entries purged, exit 0)."""
    state = tmp_path / "state"
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc()))
    url = site(server, "xn--bcher-kva.test")
    await crawl(base_settings(server, state), [url.replace("xn--bcher-kva", "bücher")], tmp_path)
    assert about(state, "xn--bcher-kva.test")
    at = ["-s", f"WALSH_STATE_DIR={state}"]
    report = scrapy_command("walsh-report", *at, "--host", "Bücher.test", "--json", cwd=tmp_path)
    assert len(json.loads(report.stdout)["requests"]) == 3  # robots.txt, tdmrep.json, the feed
    purged = scrapy_command("walsh-purge", *at, "BÜCHER.test.", cwd=tmp_path)
    assert purged.returncode == 0, purged.stderr
    assert about(state, "xn--bcher-kva.test") == []
    # a name IDNA 2003 and UTS #46 spell differently: the crawl contacted
    # fass.test for faß.test; the purge covers every spelling, as R3 does
    fass = site(server, "fass.test")
    await crawl(base_settings(server, state), [fass.replace("fass", "faß")], tmp_path)
    assert about(state, "fass.test")
    purged = scrapy_command("walsh-purge", *at, "faß.test", cwd=tmp_path)
    assert purged.returncode == 0, purged.stderr
    assert about(state, "fass.test") == [], purged.stdout


def test_the_commands_refuse_what_they_cannot_do_saying_why(tmp_path):
    """A wrong state dir, a host that is not one, an unwritable --out, a
    retention that would delete the evidence: a clear error, nothing created."""
    missing = ["-s", f"WALSH_STATE_DIR={tmp_path / 'typo'}"]
    done = scrapy_command("walsh-purge", *missing, "example.org", cwd=tmp_path)
    assert done.returncode != 0 and "no state at" in done.stderr
    assert not (tmp_path / "typo" / "state.sqlite3").exists()
    for bad in ("", ".", "h.test:80", "%", "com", "http://h.test/"):
        done = scrapy_command("walsh-purge", *missing, bad, cwd=tmp_path)
        assert done.returncode != 0 and "takes one host name" in done.stderr, (bad, done.stderr)
        done = scrapy_command("walsh-report", *missing, "--host", bad, cwd=tmp_path)
        assert done.returncode != 0 and "takes one host name" in done.stderr, (bad, done.stderr)
    state = tmp_path / "state"
    state.mkdir()
    from scrapy_walsh_research.evidence.audit_sqlite import SQLiteAudit

    log = SQLiteAudit(state / "audit.sqlite3")
    log.append({"t": 1.0, "ts": "x", "event": "request", "host": "h.test", "url": "http://h.test/"})
    log.db.close()
    at = ["-s", f"WALSH_STATE_DIR={state}"]
    done = scrapy_command("walsh-report", *at, "--out", str(tmp_path / "no/such/dir/r.html"),
                          "--host", "h.test", cwd=tmp_path)  # fmt: skip
    assert done.returncode != 0 and "cannot write" in done.stderr
    assert "Traceback" not in done.stderr
    done = scrapy_command("walsh-report", *at, "-s", "WALSH_AUDIT_RETENTION=0", "--host",
                          "h.test", "--json", cwd=tmp_path)  # fmt: skip
    assert done.returncode != 0 and "WALSH_AUDIT_RETENTION" in done.stderr
    # reading the log never prunes it (an entry from 1970 is still there)
    done = scrapy_command("walsh-report", *at, "--host", "h.test", "--json", cwd=tmp_path)
    assert len(json.loads(done.stdout)["requests"]) == 1


@pytest_twisted.ensureDeferred
async def test_walsh_purge_in_a_fleet_strips_the_stored_records_and_claims_of_the_host(
    server, redis_server, tmp_path
):
    """With Redis, each line's record is stored in the fleet (walsh-records
    prints them): a purge leaves the line its one record, saying it was
    purged and why, and none of what the host served."""
    from tests.support.fleet import redis_settings
    from tests.test_fleet_workers import durable_records, ended, push, walsh_records, workers

    urls = [site(server, "gone.test"), site(server, "www.gone.test"), site(server, "kept.test")]
    shared = redis_settings(redis_server)
    push(redis_server, shared, urls, tmp_path)
    await ended(*workers(server, shared, tmp_path, 1))
    before = {r["line"]: r for r in durable_records(redis_server, shared)}
    assert all(r["etag"] == '"v1"' and r["sha256"] for r in before.values())
    assert hashes_about(redis_server, shared, "gone.test") >= {"validators", "cadence"}
    fleet = ["-s", f"WALSH_REDIS_URL={redis_server.url}",
             "-s", f"WALSH_REDIS_PREFIX={shared['WALSH_REDIS_PREFIX']}"]  # fmt: skip
    done = scrapy_command("walsh-purge", *fleet, "gone.test", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    after = {r["line"]: r for r in walsh_records(redis_server, shared)}
    assert sorted(after) == [1, 2, 3]  # every line keeps its one record
    for line in (1, 2):
        assert after[line]["purged"]["cause"] == "scrapy walsh-purge (on demand)"
        assert {k: after[line][k] for k in ("line", "url", "outcome")} == {
            k: before[line][k] for k in ("line", "url", "outcome")
        }
        assert not {"etag", "sha256", "status", "content_length", "structured"} & set(after[line])
    assert after[3] == before[3]  # kept.test is no subdomain of gone.test
    r = redis_server.client()
    claims = [k for name in r.scan_iter(f"{shared['WALSH_REDIS_PREFIX']}:targets:canonical:*")
              for k in r.hkeys(name)]  # fmt: skip
    r.close()
    assert claims == [urls[2]]
    assert "records" in done.stdout and "2 host(s) under gone.test" in done.stdout
    # what was stored per target of the host is gone: its hashes were deleted
    for name in ("gone.test", "www.gone.test"):
        assert hashes_about(redis_server, shared, name) & set(PER_TARGET) == set(), name
    assert hashes_about(redis_server, shared, "kept.test") >= {"validators", "cadence"}
    # kept.test opts out by robots.txt: the next worker to read it purges its record
    server.origin.route("kept.test", "/robots.txt", Reply(200, "User-agent: *\nDisallow: /\n"))
    await sleep(1.2)  # the shared robots.txt copy (TTL 1 s) has expired
    push(redis_server, shared, [urls[2]], tmp_path)
    await ended(*workers(server, shared, tmp_path, 1, WALSH_POLICY_TTL=1))
    kept = [r for r in walsh_records(redis_server, shared) if r["url"] == urls[2]]
    assert sorted(r["outcome"] for r in kept) == ["denied", "fetched"]
    (first,) = [r for r in kept if r["outcome"] == "fetched"]
    assert "robots.txt disallows Walsh-Research for /" in first["purged"]["cause"]
    assert "etag" not in first


async def test_a_record_finished_while_a_purge_runs_is_left_for_the_next_purge(redis_server):
    """Found by review: the purge read a host's record index, scrubbed those
    records and deleted the whole index; a record another worker finished in
    between kept the host's data and fell out of the index for good."""
    from scrapy.utils.defer import deferred_from_coro

    from scrapy_walsh_research.state.redis import target_queue as feed
    from scrapy_walsh_research.state.redis.connection import RedisConnection
    from tests.support.fleet import redis_settings

    conn = RedisConnection(redis_server.url, redis_settings(redis_server)["WALSH_REDIS_PREFIX"])
    fed = feed.RedisFeed(conn, "targets")

    def record(line: int) -> dict[str, Any]:
        url = f"https://x.test/{line}"
        return {"line": line, "url": url, "canonical_url": url, "outcome": "fetched",
                "title": "what x.test served"}  # fmt: skip

    async def scenario() -> list[dict[str, Any]]:
        await feed.finish(conn, fed.ticket("1", "b1"), record(1), "", "")
        read = conn.client.zrange

        async def zrange(name: str, *args: Any) -> Any:
            members = await read(name, *args)
            await feed.finish(conn, fed.ticket("2", "b1"), record(2), "", "")  # meanwhile
            return members

        conn.client.zrange = zrange  # type: ignore[method-assign]
        try:
            await feed.purge_records(
                conn, lambda h: h == "x.test", lambda h: "opt-out", "t", "x.test"
            )
        finally:
            conn.client.zrange = read  # type: ignore[method-assign]
        await feed.purge_records(conn, lambda h: h == "x.test", lambda h: "opt-out", "t", "x.test")
        stored = await conn.client.hgetall(conn.key("targets", "records", "b1"))
        await conn.close()
        return [json.loads(v) for _, v in sorted(stored.items())]

    stored = await deferred_from_coro(scenario())
    assert [r["line"] for r in stored] == [1, 2]
    assert all("purged" in r and "title" not in r for r in stored), stored
