"""R7 for the documents read before their targets (R2 robots.txt, PREF
tdmrep.json; sitemaps in test_r7_sitemaps): once a stored copy's freshness
(``WALSH_POLICY_TTL``) has run out, the refetch is conditional on it, and a
304 keeps it in force as stored (RFC 9309 §2.4 caching). A 304 with nothing
to keep is not an answer: never "allow all" from an empty body."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest_twisted

from scrapy_walsh_research.sandbox import Hit, Reply
from tests.support.crawling import TDMREP, base_settings, crawl, sleep
from tests.support.fleet import redis_settings

HOST = "cond.test"
ROBOTS = "User-agent: *\nDisallow: /private\n"
ROBOTS_ETAG, ROBOTS_MODIFIED = '"r1"', "Sat, 01 Nov 2025 10:00:00 GMT"
TDM_ETAG = '"t1"'  # tdmrep.json gives an ETag only
TDM = json.dumps([{"location": "/", "tdm-reservation": 0}])
CONDITIONAL = ("if-none-match", "if-modified-since")


def validating(body: str, headers: dict[str, str], *, match: str) -> Any:
    """A route that answers 304 to a request whose If-None-Match is *match*,
    else 200 with *body* and *headers* (its validators)."""

    def answer(hit: Hit) -> Reply:
        if hit.headers.get("if-none-match") == match:
            return Reply(304, "", headers)
        return Reply(200, body, headers)

    return answer


def route(server: Any, robots: Any, tdm: Any) -> list[str]:
    server.origin.route(HOST, "/robots.txt", robots)
    server.origin.route(HOST, TDMREP, tdm)
    for path in ("/open", "/private"):
        server.origin.route(HOST, path, Reply(200, f"{HOST}{path}"))
    return [server.url(HOST, "/open"), server.url(HOST, "/private")]


def age_documents(state: Path, seconds: float) -> None:
    """Make every stored robots.txt and tdmrep.json answer *seconds* older."""
    db = sqlite3.connect(state / "state.sqlite3")
    with db:
        db.execute(
            "UPDATE kv SET value = json_set(value, '$.fetched_at',"
            " json_extract(value, '$.fetched_at') - ?) WHERE namespace IN ('robots', 'robots_4xx', 'tdmrep')",
            (seconds,),
        )
    db.close()


def sent(server: Any, path: str) -> list[dict[str, str]]:
    """The conditional headers of each request for *path*, as the origin saw them."""
    return [
        {k: v for k, v in h.headers.items() if k in CONDITIONAL}
        for h in server.origin.hits_for(HOST, path)
    ]


def results(res: Any) -> list[tuple[str, str | None]]:
    return [(i["outcome"], i["rule"]) for i in sorted(res.items, key=lambda i: i["line"])]


@pytest_twisted.ensureDeferred
async def test_a_stale_robots_txt_and_tdmrep_json_are_refetched_conditionally_and_a_304_keeps_them(
    server, tmp_path
):
    """The first fetch sends no validators; the refetch past the TTL sends
    those the site gave (both for robots.txt, the ETag only for tdmrep.json);
    the 304 keeps the stored Disallow in force (``/private`` is not
    requested) and renews its freshness: a run right after fetches neither."""
    robots = validating(ROBOTS, {"ETag": ROBOTS_ETAG, "Last-Modified": ROBOTS_MODIFIED},
                        match=ROBOTS_ETAG)  # fmt: skip
    tdm = validating(TDM, {"ETag": TDM_ETAG, "Content-Type": "application/json"}, match=TDM_ETAG)
    urls = route(server, robots, tdm)
    state = tmp_path / "s"
    first = await crawl(base_settings(server, state), urls, tmp_path / "1")
    assert results(first) == [("fetched", None), ("denied", "R2")]
    assert sent(server, "/robots.txt") == [{}] and sent(server, TDMREP) == [{}]

    age_documents(state, 86400 + 1)  # past WALSH_POLICY_TTL (24 h)
    second = await crawl(base_settings(server, state), urls, tmp_path / "2")
    assert sent(server, "/robots.txt") == [
        {},
        {"if-none-match": ROBOTS_ETAG, "if-modified-since": ROBOTS_MODIFIED},
    ]
    assert sent(server, TDMREP) == [{}, {"if-none-match": TDM_ETAG}]
    assert results(second) == [("fetched", None), ("denied", "R2")]
    assert "/private" not in [h.path for h in server.origin.hits_for(HOST)]
    assert second.stats["walsh/documents/not_modified"] == 2
    assert second.stats["walsh/robots/not_modified"] == 1
    assert second.stats["walsh/preferences/not_modified"] == 1

    third = await crawl(base_settings(server, state), urls, tmp_path / "3")
    assert results(third) == [("fetched", None), ("denied", "R2")]
    assert len(server.origin.hits_for(HOST, "/robots.txt")) == 2  # fresh from the 304
    assert len(server.origin.hits_for(HOST, TDMREP)) == 2


@pytest_twisted.ensureDeferred
async def test_with_redis_another_worker_refetches_conditionally_on_the_fleets_stored_copy(
    server, redis_server, tmp_path
):
    """The copy one worker stored in Redis is what another worker's refetch,
    once ``WALSH_POLICY_TTL`` has run out, is conditional on; the 304 keeps
    its Disallow in force for that worker too."""
    robots = validating(ROBOTS, {"ETag": ROBOTS_ETAG}, match=ROBOTS_ETAG)
    tdm = validating(TDM, {"ETag": TDM_ETAG}, match=TDM_ETAG)
    urls = route(server, robots, tdm)
    shared = redis_settings(redis_server, WALSH_POLICY_TTL=3)
    first = await crawl(base_settings(server, tmp_path / "w1", **shared), urls, tmp_path / "1")
    assert results(first) == [("fetched", None), ("denied", "R2")]
    before = len(server.origin.hits_for(HOST, "/robots.txt"))
    await sleep(3.5)  # the fleet's copies are stale now
    second = await crawl(base_settings(server, tmp_path / "w2", **shared), urls, tmp_path / "2")
    assert results(second) == [("fetched", None), ("denied", "R2")]
    robots_sent, tdm_sent = sent(server, "/robots.txt"), sent(server, TDMREP)
    assert robots_sent[0] == {} and tdm_sent[0] == {}
    assert len(robots_sent) > before
    assert all(h == {"if-none-match": ROBOTS_ETAG} for h in robots_sent[1:]), robots_sent
    assert all(h == {"if-none-match": TDM_ETAG} for h in tdm_sent[1:]), tdm_sent
    assert second.stats["walsh/robots/not_modified"] >= 1
    assert "/private" not in [h.path for h in server.origin.hits_for(HOST)]


@pytest_twisted.ensureDeferred
async def test_a_200_to_a_conditional_refetch_replaces_the_copy_and_its_validators(
    server, tmp_path
):
    """The site changed its robots.txt: the new rules hold, and the next
    refetch is conditional on the new copy's validators; a 304 that gives a
    new one replaces it."""
    versions = iter([
        Reply(200, ROBOTS, {"ETag": '"v1"'}),
        Reply(200, "User-agent: *\nDisallow: /open\n", {"ETag": '"v2"'}),
        Reply(304, "", {"ETag": '"v3"'}),
        Reply(304, "", {}),
    ])  # fmt: skip
    urls = route(server, lambda hit: next(versions), Reply(404, ""))
    state = tmp_path / "s"
    await crawl(base_settings(server, state), urls, tmp_path / "1")
    age_documents(state, 86400 + 1)
    second = await crawl(base_settings(server, state), urls, tmp_path / "2")
    assert results(second) == [("denied", "R2"), ("fetched", None)]
    age_documents(state, 86400 + 1)
    third = await crawl(base_settings(server, state), urls, tmp_path / "3")
    assert results(third) == [("denied", "R2"), ("fetched", None)]  # v2 kept by the 304
    age_documents(state, 86400 + 1)
    await crawl(base_settings(server, state), urls, tmp_path / "4")
    assert sent(server, "/robots.txt") == [
        {},
        {"if-none-match": '"v1"'},
        {"if-none-match": '"v2"'},
        {"if-none-match": '"v3"'},  # the validator the 304 gave (RFC 9111 §4.3.4)
    ]


@pytest_twisted.ensureDeferred
async def test_a_later_answer_without_a_body_leaves_nothing_to_be_conditional_on(server, tmp_path):
    """robots.txt went from a 200 to a 404: the refetch after the 404 sends
    no validators (the copy they belong to is no longer the answer in force)."""
    versions = iter([Reply(200, ROBOTS, {"ETag": '"v1"'}), Reply(404, ""), Reply(200, ROBOTS)])
    urls = route(server, lambda hit: next(versions), Reply(404, ""))
    state = tmp_path / "s"
    for run in ("1", "2", "3"):
        await crawl(base_settings(server, state), urls, tmp_path / run)
        age_documents(state, 86400 + 1)
    assert sent(server, "/robots.txt") == [{}, {"if-none-match": '"v1"'}, {}]


@pytest_twisted.ensureDeferred
async def test_a_304_with_no_stored_copy_to_keep_is_no_answer_and_never_allow_all(server, tmp_path):
    """The stored copy is gone by the time the site answers the refetch 304
    (here: deleted as the request arrives), and the tries after it carry no
    validators, which the site answers 304 too: robots.txt is unknown, as
    after a 5xx (RFC 9309 §2.3.1.4): nothing but robots.txt reaches the
    host, and at the wait's bound its targets are ``skipped``, never fetched
    as if an empty robots.txt allowed everything."""
    state = tmp_path / "s"

    def robots(hit: Hit) -> Reply:
        if not server.origin.hits_for(HOST, "/robots.txt")[:-1]:  # the first fetch
            return Reply(200, ROBOTS, {"ETag": ROBOTS_ETAG})
        db = sqlite3.connect(state / "state.sqlite3")
        with db:
            db.execute("DELETE FROM kv WHERE namespace = 'robots'")
        db.close()
        return Reply(304, "", {"ETag": ROBOTS_ETAG})

    urls = route(server, robots, Reply(404, ""))
    await crawl(base_settings(server, state), urls, tmp_path / "1")
    age_documents(state, 86400 + 1)
    settings = base_settings(server, state, WALSH_POLICY_WAIT=8, WALSH_POLICY_RETRY_DELAY=3)
    res = await crawl(settings, urls, tmp_path / "2")
    assert results(res) == [("skipped", "R2"), ("skipped", "R2")]
    paths = [h.path for h in server.origin.hits_for(HOST)]
    assert "/open" in paths[:3] and paths.count("/open") == 1  # the first run's only
    assert paths[3:] == ["/robots.txt"] * (len(paths) - 3) and len(paths) >= 5
    conditional = sent(server, "/robots.txt")
    assert conditional[1] == {"if-none-match": ROBOTS_ETAG}
    assert all(h == {} for h in conditional[2:])  # nothing left to be conditional on
    assert res.stats["walsh/documents/not_modified_unusable"] == len(conditional) - 1
    assert "walsh/documents/not_modified" not in res.stats
    record = res.items[0]
    assert "answered 304 Not Modified" in record["reason"], record["reason"]
    assert record["unknown"]["last_answer"] == (
        "answered 304 Not Modified to a request that was not conditional (nothing to keep)"
    ), record
