"""Redis's memory is bounded: nothing a fleet stores there grows for as long
as it runs. What is stored per target URL or origin is kept per host and
forgotten ``WALSH_STATE_TTL`` after it was last written (whatever is still
in use is written again meanwhile); a host crawled all the time with new
URLs keeps a bounded hash; a host's record index keeps what the records
keep; and a fleet upgraded from the layout before keeps its cadence and
validators.

Real crawls (in this process, or real ``scrapy crawl targets`` workers) on
a real ``redis-server``, judged at the origin and by what Redis holds.
"""

from __future__ import annotations

import json
from typing import Any

import pytest_twisted
from scrapy.utils.defer import deferred_from_coro

from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.state.redis import layout
from tests.support.crawling import base_settings, crawl, crawl_task, sleep
from tests.support.fleet import crawl_feed, redis_settings, stored_state
from tests.test_fleet_workers import push

ETAG = '"v1"'


def conditional(server: Any, host: str, path: str = "/doc") -> str:
    """A page that never changes: a 304 to its ETag, else a 200 with it."""

    def answer(hit: Any) -> Reply:
        if hit.headers.get("if-none-match") == ETAG:
            return Reply(304, "")
        return Reply(200, "content", {"ETag": ETAG, "Content-Type": "text/plain"})

    server.origin.route(host, "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    server.origin.route(host, path, answer)
    return server.url(host, path)


def rss(entries: list[str]) -> str:
    items = "".join(f"<item><guid>{e}</guid><title>{e}</title></item>" for e in entries)
    return f'<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>{items}</channel></rss>'


def feed(server: Any, host: str, entries: Any, path: str = "/rss") -> str:
    """A feed whose entries are ``entries()`` at each request."""
    server.origin.route(host, "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    server.origin.route(
        host, path, lambda hit: Reply(200, rss(entries()), {"Content-Type": "application/rss+xml"})
    )
    return server.url(host, path)


def keys_about(redis_server: Any, prefix: str, host: str) -> set[str]:
    """The namespaces holding a per-host hash about *host*."""
    r = redis_server.client()
    try:
        return {k.split(":")[-2] for k in r.scan_iter(f"{prefix}:state:*:{host}")}
    finally:
        r.close()


@pytest_twisted.ensureDeferred
async def test_what_is_stored_about_a_host_goes_once_unwritten_for_the_state_ttl(
    server, redis_server, tmp_path
):
    """Validators, cadence and past answers of a host nobody writes about
    any more leave Redis after WALSH_STATE_TTL; robots.txt, the last good
    copy for 30 days, stays; the next run asks again without validators."""
    url = conditional(server, "idle.test")
    shared = redis_settings(redis_server, WALSH_STATE_TTL=2)
    prefix = shared["WALSH_REDIS_PREFIX"]
    settings = base_settings(server, tmp_path / "s", **shared)
    await crawl(settings, [url], tmp_path)
    assert {"validators", "cadence", "target_answered", "robots"} <= keys_about(
        redis_server, prefix, "idle.test"
    )
    await sleep(4.0)  # past the TTL (whole seconds, one more for the expiry)
    assert keys_about(redis_server, prefix, "idle.test") == {"robots", "tdmrep"}
    again = await crawl(settings, [url], tmp_path / "2")
    _, second = server.origin.hits_for("idle.test", "/doc")
    assert "if-none-match" not in second.headers  # the validators were forgotten
    assert again.items[0]["outcome"] == "fetched"


def stamped(redis_server: Any, prefix: str, namespace: str, key: str) -> tuple[int, str]:
    """(when *key* was last written, in whole seconds; its value as JSON)."""
    host = layout.bucket_host(key)
    r = redis_server.client()
    try:
        raw = r.hget(f"{prefix}:state:{namespace}:{host}", layout.field(key))
    finally:
        r.close()
    at, value = layout.unstamped(raw)
    assert at is not None
    return int(at), value


@pytest_twisted.ensureDeferred
async def test_a_page_answering_304_has_its_validators_written_again(
    server, redis_server, tmp_path
):
    """A 304 writes the target's validators again, so a page that never
    changes keeps them past WALSH_STATE_TTL (they go only WALSH_STATE_TTL
    after the last answer), however long ago its last 200 was."""
    url = conditional(server, "same.test")
    shared = redis_settings(redis_server)
    prefix = shared["WALSH_REDIS_PREFIX"]
    settings = base_settings(server, tmp_path / "s", **shared)
    await crawl(settings, [url], tmp_path)  # 200: validators stored
    first = stamped(redis_server, prefix, "validators", url)
    await sleep(1.5)  # stamps are whole seconds
    again = await crawl(settings, [url], tmp_path / "2")
    assert [h.headers.get("if-none-match") for h in server.origin.hits_for("same.test")
            if h.path == "/doc"] == [None, ETAG]  # fmt: skip
    assert again.items[0]["outcome"] == "not_modified"
    second = stamped(redis_server, prefix, "validators", url)
    assert second[0] > first[0] and second[1] == first[1]


@pytest_twisted.ensureDeferred
async def test_a_feed_entry_still_listed_is_written_again_with_its_first_sighting(
    server, redis_server, tmp_path
):
    """Every entry a feed still lists is written again, its first sighting
    kept: it is not forgotten (nor reported new again) WALSH_STATE_TTL after
    it was first seen while the feed lists it."""
    url = feed(server, "news.test", lambda: ["a"])
    shared = redis_settings(redis_server)
    prefix = shared["WALSH_REDIS_PREFIX"]
    settings = base_settings(server, tmp_path / "s", **shared)
    first = await crawl(settings, [url], tmp_path)
    seen = first.items[0]["entries"][0]["first_seen"]
    before = stamped(redis_server, prefix, "seen", f"{url}\ta")
    await sleep(1.5)
    again = await crawl(settings, [url], tmp_path / "2")
    assert [(e["new"], e["first_seen"]) for e in again.items[0]["entries"]] == [(False, seen)]
    after = stamped(redis_server, prefix, "seen", f"{url}\ta")
    assert after[0] > before[0] and json.loads(after[1]) == seen == json.loads(before[1])


@pytest_twisted.ensureDeferred
async def test_a_host_crawled_all_the_time_with_new_urls_keeps_a_bounded_hash(
    server, redis_server, tmp_path
):
    """One host's sixteen feeds, each listing forty entries of its own, read
    one a second (R4): the host's hash of first-seen entries is written all
    the time, so it never expires as a whole; the entries written
    WALSH_STATE_TTL ago or more go by compaction, a few at each write, and
    the hash holds about the last TTL's entries (two or three feeds'), at
    most about half again that: never every entry seen."""
    per_feed, feeds = 40, 16
    urls = [
        feed(server, "busy.test", lambda n=n: [f"f{n}-{i}" for i in range(per_feed)], f"/rss/{n}")
        for n in range(feeds)
    ]
    shared = redis_settings(redis_server, WALSH_STATE_TTL=2)
    settings = base_settings(server, tmp_path / "s", **shared)
    name = f"{shared['WALSH_REDIS_PREFIX']}:state:seen:busy.test"
    sizes = []
    r = redis_server.client()
    try:
        running = deferred_from_coro(crawl_task(settings, urls, tmp_path))
        while not running.called:
            sizes.append(r.hlen(name))
            await sleep(0.1)
        res = await running
        sizes.append(r.hlen(name))
        assert r.ttl(name) > 0
    finally:
        r.close()
    assert sorted(i["outcome"] for i in res.items) == ["fetched"] * feeds
    assert all(e["new"] for i in res.items for e in i["entries"])
    assert max(sizes) <= 8 * per_feed < feeds * per_feed, sizes
    latest = stored_state(redis_server, shared["WALSH_REDIS_PREFIX"], "seen")
    last = max(res.items, key=lambda i: i["line"])
    assert {f"{last['url']}\tf{feeds - 1}-{i}" for i in range(per_feed)} <= set(latest)


@pytest_twisted.ensureDeferred
async def test_a_hosts_record_index_names_only_records_that_are_kept(
    server, redis_server, tmp_path
):
    """The index a purge reads a host's records by (``records:host:<host>``)
    loses a member once its record is gone (WALSH_RECORDS_TTL after its
    batch's last record), although the host is written to all the time and
    the index never expires; members of a batch still kept stay."""
    shared = redis_settings(redis_server, WALSH_RECORDS_TTL=2)
    prefix = shared["WALSH_REDIS_PREFIX"]
    push(redis_server, shared, [conditional(server, "often.test", "/first")], tmp_path)
    later = [conditional(server, "often.test", f"/p{i}") for i in range(6)]
    push(redis_server, shared, later, tmp_path)  # another batch
    res = await deferred_from_coro(
        crawl_feed(base_settings(server, tmp_path / "s", **shared), "targets")
    )
    assert len(res.items) == 7
    r = redis_server.client()
    try:
        members = [json.loads(m) for m in r.zrange(f"{prefix}:records:host:often.test", 0, -1)]
        for records, _claims, line in members:
            assert r.hexists(records, str(line)), (records, members)
        # the first batch's record went two seconds after it was written;
        # the second batch's stay while its records do
        (kept,) = r.scan_iter(f"{prefix}:targets:records:*")
        assert {m[0] for m in members} == {kept} and len(members) >= 2, members
    finally:
        r.close()


@pytest_twisted.ensureDeferred
async def test_a_fleet_upgraded_from_one_hash_per_namespace_keeps_cadence_and_validators(
    server, redis_server, tmp_path
):
    """Before this layout each namespace was one hash, ``<prefix>:state:<ns>``,
    field the key, value its JSON (written here as that version wrote it).
    A target fetched before the upgrade is still skipped by R8 after it (no
    request reaches the origin), one with validators is asked conditionally,
    and what the old hashes held moves into the hosts' hashes."""
    fetched = conditional(server, "old.test", "/fetched")
    known = conditional(server, "old.test", "/known")
    shared = redis_settings(redis_server, WALSH_RUN_INTERVAL=3600)
    prefix = shared["WALSH_REDIS_PREFIX"]
    r = redis_server.client()
    ten_minutes_ago = r.time()[0] - 600
    r.hset(f"{prefix}:state:cadence", fetched, json.dumps(float(ten_minutes_ago)))
    r.hset(f"{prefix}:state:validators", known, json.dumps({"etag": ETAG, "last_modified": None}))
    r.close()
    push(redis_server, shared, [fetched, known], tmp_path)
    res = await deferred_from_coro(
        crawl_feed(base_settings(server, tmp_path / "s", **shared), "targets")
    )
    outcomes = {i["url"]: (i["outcome"], i["rule"]) for i in res.items}
    assert outcomes[fetched] == ("skipped", "R8"), res.items
    assert server.origin.hits_for("old.test", "/fetched") == []  # judged at the origin
    (hit,) = server.origin.hits_for("old.test", "/known")
    assert hit.headers.get("if-none-match") == ETAG
    assert outcomes[known][0] == "not_modified"
    r = redis_server.client()
    try:
        assert not r.exists(f"{prefix}:state:cadence", f"{prefix}:state:validators")
    finally:
        r.close()
    cadence = stored_state(redis_server, prefix, "cadence")
    assert float(cadence[fetched]) == ten_minutes_ago
    assert set(stored_state(redis_server, prefix, "validators")) == {known}
