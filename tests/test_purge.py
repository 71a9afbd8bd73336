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
from tests.conftest import (
    BLOCKLIST_HOST,
    BLOCKLIST_PATH,
    base_settings,
    blocklist_doc,
    crawl,
    json_reply,
    sleep,
)
from tests.test_audit import entries

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
    await crawl(base_settings(server, state, WALSH_ROBOTS_TTL=1), [url], tmp_path)
    assert about(state, "shy.test")
    await sleep(1.2)  # the robots.txt copy has expired: fetched again
    server.origin.route(
        "shy.test", "/robots.txt", Reply(200, "User-agent: Walsh-Research\nDisallow: /\n")
    )
    result = await crawl(base_settings(server, state, WALSH_ROBOTS_TTL=1), [url], tmp_path / "2")
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
    assert "2 records of c.test were exported" in run.stdout
    reasons = {json.dumps(e) for e in entries(state) if e["event"] == "purge"}
    assert len(reasons) == 2 and all("walsh-purge" in r for r in reasons)
