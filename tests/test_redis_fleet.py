"""Many workers, one promise: with WALSH_REDIS_URL every MUST holds across
worker starts, kills, Redis restarts (empty, or from an older snapshot) and
clocks that disagree.

Every worker here is a real ``scrapy crawl targets -a redis_key=...``
process; they share a real redis-server on loopback and the sandbox origin,
which judges them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest_twisted

from scrapy_walsh_research.feed import enqueue
from scrapy_walsh_research.sandbox import Reply
from tests.conftest import (
    ProcessCrawl,
    gaps,
    redis_settings,
    spawn_worker,
)


def site(
    server: Any,
    host: str,
    pages: int,
    robots: str = "User-agent: *\nAllow: /\n",
    delay: float = 0.0,
) -> list[str]:
    server.origin.route(host, "/robots.txt", Reply(200, robots, delay=delay))
    for i in range(pages):
        server.origin.route(host, f"/p/{i}", Reply(200, f"{host} {i}"))
    return [server.url(host, f"/p/{i}") for i in range(pages)]


def push(
    redis: Any, shared: dict[str, Any], lines: list[str], tmp: Path, key: str = "targets"
) -> None:
    path = tmp / f"{key}-{len(lines)}.txt"
    path.write_text("\n".join(lines) + "\n")
    enqueue(redis.url, key, path, prefix=shared["WALSH_REDIS_PREFIX"])


def workers(
    server: Any, shared: dict[str, Any], tmp: Path, n: int, **settings: Any
) -> list[ProcessCrawl]:
    return [
        spawn_worker(server, "targets", tmp / f"w{i}", log=tmp / f"w{i}.jl", **shared, **settings)
        for i in range(n)
    ]


async def ended(*procs: ProcessCrawl) -> None:
    for proc in procs:
        await proc.ended


def records(tmp: Path, n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        path = tmp / f"w{i}.jl"
        if path.exists():
            out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


# -- R4 across the fleet ---------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_workers_starting_together_fetch_robots_once_and_keep_its_crawl_delay(
    server, redis_server, tmp_path
):
    # robots.txt answers slowly: every worker wants it while the first fetch is out
    urls = site(server, "cd.test", 6, "User-agent: *\nCrawl-delay: 2\n", delay=1.5)
    urls += site(server, "o.test", 6)
    shared = redis_settings(redis_server)
    push(redis_server, shared, urls, tmp_path)
    procs = workers(server, shared, tmp_path, 4)
    await ended(*procs)
    assert len(records(tmp_path, 4)) == 12, [p.err.decode()[-1500:] for p in procs]
    cd = server.origin.hits_for("cd.test")
    assert [h.path for h in cd].count("/robots.txt") == 1
    assert min(gaps(cd)) >= 2.0
    assert len(server.origin.hits_for("o.test", "/robots.txt")) == 1
