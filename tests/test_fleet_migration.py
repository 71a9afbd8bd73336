"""``scrapy walsh-migrate``: a single crawl's state carried into the fleet,
so that moving from one process to a fleet does not start history from zero.

A real ``scrapy crawl targets -a list=...`` (no Redis) crawls the loopback
origin; the command carries its state directory into a real redis-server;
then fleet workers (real ``scrapy crawl targets -a redis_key=...``
processes, each with a new state dir of its own, so nothing reaches them but
through Redis) crawl the same targets, and the origin shows what they knew:
conditional requests with the validators the single crawl stored, no second
robots.txt, tdmrep.json or blocklist fetch, no request to a host still held
by its Retry-After, and targets not yet due skipped (R8).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest_twisted
from scrapy.utils.defer import deferred_from_coro

from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.state.namespaces import CADENCE, VALIDATORS
from scrapy_walsh_research.state.redis.connection import RedisConnection
from scrapy_walsh_research.state.redis.store import RedisStateStore
from tests.support.crawling import (
    BLOCKLIST_HOST,
    BLOCKLIST_PATH,
    TDMREP,
    blocklist_doc,
    json_reply,
    sleep,
)
from tests.support.fleet import redis_settings
from tests.support.processes import spawn_targets_crawl, spawn_worker
from tests.test_fleet_workers import push

EXAMPLE = Path(__file__).parent.parent / "example_project"
SCRAPY = str(Path(sys.executable).parent / "scrapy")
#: the single crawl gives up on a Retry-After beyond this, and so do the workers
RETRY_MAX = 10


def conditional(etag: str) -> Any:
    """A page with a validator that answers 304 to a request that sends it."""

    def reply(hit: Any) -> Reply:
        if hit.headers.get("if-none-match") == etag:
            return Reply(304, b"", {"ETag": etag})
        return Reply(200, "<p>page</p>", {"ETag": etag, "Content-Type": "text/html"})

    return reply


def migrate(shared: dict[str, Any], state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCRAPY, "walsh-migrate", "--from", str(state),
         "-s", f"WALSH_REDIS_URL={shared['WALSH_REDIS_URL']}",
         "-s", f"WALSH_REDIS_PREFIX={shared['WALSH_REDIS_PREFIX']}"],
        cwd=EXAMPLE, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def fleet_snapshot(redis_server: Any, shared: dict[str, Any]) -> dict[str, Any]:
    """Every key of the fleet but the host clocks, as Redis serializes it
    (whatever the layout): what a second migration must leave as it was."""
    import redis

    client = redis.Redis.from_url(redis_server.url)  # bytes: DUMP is binary
    try:
        prefix = shared["WALSH_REDIS_PREFIX"].encode()
        return {
            k: client.dump(k)
            for k in client.scan_iter(prefix + b":*")
            if not k.startswith(prefix + b":host:")
        }
    finally:
        client.close()


async def fleet_store(shared: dict[str, Any], call: Any) -> Any:
    conn = RedisConnection(shared["WALSH_REDIS_URL"], shared["WALSH_REDIS_PREFIX"])
    store = RedisStateStore(conn)
    try:
        return await deferred_from_coro(call(store))
    finally:
        await deferred_from_coro(store.close())


def fleet_records(tmp: Path, name: str) -> dict[str, dict[str, Any]]:
    lines = (tmp / f"{name}.jl").read_text().splitlines()
    return {json.loads(x)["url"]: json.loads(x) for x in lines if x.strip()}


@pytest_twisted.ensureDeferred
async def test_a_fleet_goes_on_from_a_migrated_single_crawl_state_dir(
    server, redis_server, tmp_path
):
    server.origin.route("cond.test", "/p", conditional('"v1"'))
    server.origin.route("due.test", "/p", Reply(200, "<p>due</p>", {"ETag": '"d1"'}))
    server.origin.route("due.test", "/q", Reply(200, "<p>due</p>", {"ETag": '"d2"'}))
    server.origin.route("held.test", "/p", Reply(503, "busy", {"Retry-After": "600"}))
    cond, due, due_q, held = (
        server.url("cond.test", "/p"), server.url("due.test", "/p"),
        server.url("due.test", "/q"), server.url("held.test", "/p"),
    )  # fmt: skip
    state = tmp_path / "single"
    (tmp_path / "urls.txt").write_text(f"{cond}\n{due}\n{due_q}\n{held}\n")
    single = spawn_targets_crawl(
        server, tmp_path / "urls.txt", state,
        FEEDS=json.dumps({str(tmp_path / "single.jl"): {"format": "jsonlines"}}),
        WALSH_RETRY_MAX_DELAY=RETRY_MAX,
    )  # fmt: skip
    await single.ended
    before = fleet_records(tmp_path, "single")
    outcomes = [before[u]["outcome"] for u in (cond, due, due_q)]
    assert outcomes == ["fetched"] * 3, single.err.decode()[-3000:]
    assert before[held]["outcome"] == "failed"  # Retry-After 600 s, beyond RETRY_MAX: gave up
    single_hits = len(server.origin.hits)

    shared = redis_settings(redis_server)
    # the fleet already fetched one target later than the single crawl did
    await fleet_store(shared, lambda s: s.put(CADENCE, due_q, 4_000_000_000.0))

    first = migrate(shared, state)
    assert first.returncode == 0, first.stderr[-3000:]
    # the fleet's newer cadence was not replaced by the older one
    kept = await fleet_store(shared, lambda s: s.get(CADENCE, due_q))
    assert kept == 4_000_000_000.0

    # run twice: nothing left to carry, the fleet's state as it was
    snapshot = fleet_snapshot(redis_server, shared)
    second = migrate(shared, state)
    assert second.returncode == 0, second.stderr[-3000:]
    carried = [int(n) for n in re.findall(r"(\d+) carried", second.stdout)]
    assert carried and not any(carried), second.stdout
    assert "the fleet's kept" in second.stdout  # the blocklist: carried the first time
    assert fleet_snapshot(redis_server, shared) == snapshot

    # the fleet, its targets due again: R7 validators and the origin's
    # documents carried, and the host still held by its Retry-After left alone
    push(redis_server, shared, [cond, held], tmp_path, key="due")
    worker = spawn_worker(
        server, "due", tmp_path / "w1", log=tmp_path / "w1.jl", **shared,
        WALSH_RUN_INTERVAL=0, WALSH_RETRY_MAX_DELAY=RETRY_MAX,
    )  # fmt: skip
    await worker.ended
    fleet_hits = server.origin.hits[single_hits:]
    got = fleet_records(tmp_path, "w1")
    assert got[cond]["outcome"] == "not_modified", worker.err.decode()[-3000:]
    cond_hits = [h for h in fleet_hits if h.host == "cond.test"]
    assert [(h.path, h.headers.get("if-none-match")) for h in cond_hits] == [("/p", '"v1"')]
    assert not [h for h in fleet_hits if h.path in ("/robots.txt", TDMREP)]
    assert not [h for h in fleet_hits if h.host == BLOCKLIST_HOST]
    assert (got[held]["outcome"], got[held]["rule"]) == ("skipped", "R5"), got[held]
    assert not [h for h in fleet_hits if h.host == "held.test"]

    # targets not yet due (WALSH_RUN_INTERVAL a day): skipped, no request
    push(redis_server, shared, [due], tmp_path, key="later")
    worker = spawn_worker(
        server, "later", tmp_path / "w2", log=tmp_path / "w2.jl", **shared,
        WALSH_RUN_INTERVAL=86400,
    )  # fmt: skip
    await worker.ended
    got = fleet_records(tmp_path, "w2")
    assert (got[due]["outcome"], got[due]["rule"]) == ("skipped", "R8"), worker.err.decode()[-3000:]
    assert not [h for h in server.origin.hits[single_hits:] if h.host == "due.test"]


@pytest_twisted.ensureDeferred
async def test_what_a_site_opted_out_of_in_the_fleet_is_not_carried_back(
    server, redis_server, tmp_path
):
    """The fleet learnt opt-outs the single crawl did not know: a robots.txt
    now disallowing the bot, and an operator's list now blocking a host. What
    the single crawl stored about those hosts must not come back with it."""
    pages = {host: server.url(host, "/p") for host in ("robots-out.test", "listed.test")}
    for host in pages:
        server.origin.route(host, "/p", Reply(200, "<p>page</p>", {"ETag": '"e"'}))
    state = tmp_path / "single"
    (tmp_path / "urls.txt").write_text("".join(f"{u}\n" for u in pages.values()))
    single = spawn_targets_crawl(server, tmp_path / "urls.txt", state)
    await single.ended
    # the sites opt out; a fleet worker meets both opt-outs before the migration
    server.origin.route(
        "robots-out.test", "/robots.txt", Reply(200, "User-agent: *\nDisallow: /\n")
    )
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("listed.test")))
    shared = redis_settings(redis_server)
    push(redis_server, shared, list(pages.values()), tmp_path, key="first")
    first = spawn_worker(server, "first", tmp_path / "w1", log=tmp_path / "w1.jl", **shared)
    await first.ended
    denied = {r["url"]: r["rule"] for r in fleet_records(tmp_path, "w1").values()}
    assert denied == {pages["robots-out.test"]: "R2", pages["listed.test"]: "R3"}, denied

    migrated = migrate(shared, state)
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    # the next worker to start puts the fleet's list in force, and purges again
    server.origin.route("other.test", "/p", Reply(200, "<p>other</p>"))
    push(redis_server, shared, [server.url("other.test", "/p")], tmp_path, key="next")
    await spawn_worker(server, "next", tmp_path / "w2", **shared).ended
    keys = list(pages.values())
    for namespace in (CADENCE, VALIDATORS):
        left = await fleet_store(shared, lambda s, ns=namespace: s.get_many(ns, keys))
        assert left == {}, (namespace, left)
    assert "1 of opted-out hosts left" in migrated.stdout, migrated.stdout


@pytest_twisted.ensureDeferred
async def test_a_state_dir_a_running_crawl_uses_is_not_migrated(server, redis_server, tmp_path):
    server.origin.route("slow.test", "/p", Reply(200, "<p>slow</p>", delay=20.0))
    (tmp_path / "urls.txt").write_text(server.url("slow.test", "/p") + "\n")
    state = tmp_path / "single"
    crawl = spawn_targets_crawl(server, tmp_path / "urls.txt", state)
    try:
        for _ in range(3000):  # 30 s
            if server.origin.hits_for("slow.test", "/p"):
                break
            await sleep(0.01)
        refused = migrate(redis_settings(redis_server), state)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert f"the state dir {state} is in use by a running crawl" in refused.stderr
        assert "Carried" not in refused.stdout
    finally:
        crawl.transport.signalProcess("KILL")
        await crawl.ended
