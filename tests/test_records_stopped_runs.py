"""A run stopped gracefully (the first Ctrl-C, SIGTERM) still gives every
list line exactly one record: the lines not yet fetched (waiting for a
policy document, for their host's turn, or not yet read from the list) are
``skipped`` with a reason that says the run was stopped, and the next run
takes them again. A real ``scrapy crawl targets`` child process, signalled
while lines wait, against the loopback origin; in the Redis fleet, a real
worker on a real redis-server."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import pytest_twisted

from scrapy_walsh_research.sandbox import Reply, SandboxServer
from scrapy_walsh_research.state.redis.target_queue import enqueue
from tests.support.crawling import (
    BLOCKLIST_HOST,
    BLOCKLIST_PATH,
    TDMREP,
    blocklist_doc,
    sleep,
    write_list,
)
from tests.support.fleet import redis_settings
from tests.support.processes import ProcessCrawl, spawn_targets_crawl, spawn_worker

ROBOTS = Reply(200, "User-agent: *\nAllow: /\n")


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def one_record_per_line(records: list[dict[str, Any]], declared: int) -> dict[int, Any]:
    """Each declared line's record, checked to be exactly one."""
    counts = Counter(r["line"] for r in records)
    assert sorted(counts) == list(range(1, declared + 1)), sorted(counts)
    assert set(counts.values()) == {1}, counts
    return {r["line"]: r for r in records}


async def stop_when(proc: ProcessCrawl, ready: Any, sig: int, seconds: float = 60) -> float:
    """Send *sig* once *ready()* holds (the crawl must still run then); when
    it was sent (``time.monotonic()``, the origin's clock)."""
    for _ in range(int(seconds / 0.05)):
        if ready() or proc.ended.called:
            break
        await sleep(0.05)
    assert not proc.ended.called and ready(), proc.err.decode()[-3000:]
    signalled = time.monotonic()
    proc.transport.signalProcess(sig)
    await proc.ended
    return signalled


def lines_for(server: SandboxServer) -> list[str]:
    """A list whose lines wait in each way a stop can find them."""
    o = server.origin
    # robots.txt answers 503: its lines wait (WALSH_POLICY_WAIT) for the next try
    o.route("down.test", "/robots.txt", Reply(503, "down"))
    for path in ("/a", "/b"):
        o.route("down.test", path, Reply(200, "page", {"Content-Type": "text/plain"}))
    # one request a second (R4): the later pages wait for their host's turn
    o.route("paced.test", "/robots.txt", ROBOTS)
    for i in range(8):
        o.route("paced.test", f"/p{i}", Reply(200, "page", {"Content-Type": "text/plain"}))
    return [
        server.url("down.test", "/a"),
        server.url("paced.test", "/p0"),
        "not a url",
        server.url("down.test", "/b"),
        server.url("paced.test", "/p1"),
        server.url("paced.test", "/p0#again"),  # a duplicate of line 2
        *(server.url("paced.test", f"/p{i}") for i in range(2, 8)),
    ]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["Ctrl-C", "SIGTERM"])
@pytest.mark.parametrize("lookahead", [10000, 2], ids=["all-read", "list-not-yet-read"])
@pytest_twisted.ensureDeferred
async def test_a_stopped_run_gives_each_waiting_line_a_skipped_record_and_the_next_run_takes_it(
    server, tmp_path, sig, lookahead
):
    lines = lines_for(server)
    out = tmp_path / "out.jsonl"
    state = tmp_path / "state"
    proc = spawn_targets_crawl(
        server, write_list(tmp_path, lines), state,
        FEEDS=json.dumps({str(out): {"format": "jsonlines"}}),
        WALSH_LIST_LOOKAHEAD=lookahead, WALSH_RUN_INTERVAL=3600, WALSH_POLICY_RETRY_DELAY=2,
    )  # fmt: skip
    pages = lambda: server.origin.hits_for("paced.test", None)  # noqa: E731
    down = lambda: server.origin.hits_for("down.test", "/robots.txt")  # noqa: E731
    signalled = await stop_when(proc, lambda: len(pages()) >= 4 and down(), sig)
    err = proc.err.decode()
    assert proc.code == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    # nothing more was sent (a request may have been leaving as the signal came)
    assert [h.uri for h in server.origin.hits if h.t > signalled + 1.0] == []
    sent = {h.path for h in pages()}
    records = one_record_per_line(read_records(out), len(lines))
    assert records[3]["outcome"] == "invalid" and records[6]["outcome"] == "duplicate"
    skipped = {n for n, r in records.items() if r["outcome"] == "skipped"}
    assert {1, 4} <= skipped  # down.test's lines waited for its robots.txt
    assert len(skipped) >= 3, records  # and paced.test's later pages for their turn
    for n in skipped:
        assert records[n]["rule"] is None
        assert "the run was stopped (Ctrl-C or SIGTERM)" in records[n]["reason"]
        assert "tried again next run" in records[n]["reason"]
    # what went out was fetched; nothing recorded as skipped was sent
    fetched = {urlsplit(r["url"]).path for r in records.values() if r["outcome"] == "fetched"}
    assert fetched == sent - {"/robots.txt", TDMREP}
    assert all(urlsplit(records[n]["url"]).path not in sent for n in skipped)
    assert f"{len(skipped)} list line(s) not fetched got a 'skipped' record each" in err

    # the next run (its robots.txt back, inside WALSH_RUN_INTERVAL) takes the skipped lines
    # again, and only them: the fetched ones are not due (R8)
    server.origin.route("down.test", "/robots.txt", ROBOTS)
    out2 = tmp_path / "out2.jsonl"
    again = spawn_targets_crawl(
        server, write_list(tmp_path, lines), state,
        FEEDS=json.dumps({str(out2): {"format": "jsonlines"}}), WALSH_RUN_INTERVAL=3600,
    )  # fmt: skip
    await again.ended
    assert again.code == 0, again.err.decode()[-3000:]
    second = one_record_per_line(read_records(out2), len(lines))
    for n, r in records.items():
        if r["outcome"] == "skipped":
            assert second[n]["outcome"] == "fetched", (n, second[n])
        elif r["outcome"] == "fetched":
            assert (second[n]["outcome"], second[n]["rule"]) == ("skipped", "R8"), second[n]


@pytest_twisted.ensureDeferred
async def test_a_target_whose_robots_txt_is_on_the_wire_when_stopped_is_not_sent_after_it(
    server, tmp_path
):
    """The stop comes while the target's robots.txt is being fetched (a slow
    host): the answer is awaited, as Scrapy lets a request on the wire finish,
    but the target it allows is not sent after the stop: it is ``skipped``."""
    server.origin.route("slow.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n",
                                                          delay=4.0))  # fmt: skip
    server.origin.route("slow.test", "/x", Reply(200, "page", {"Content-Type": "text/plain"}))
    lines = [server.url("slow.test", "/x")]
    out = tmp_path / "out.jsonl"
    proc = spawn_targets_crawl(server, write_list(tmp_path, lines), tmp_path / "state",
                               FEEDS=json.dumps({str(out): {"format": "jsonlines"}}))  # fmt: skip
    robots = lambda: server.origin.hits_for("slow.test", "/robots.txt")  # noqa: E731
    await stop_when(proc, robots, signal.SIGINT)
    assert proc.code == 0, proc.err.decode()[-3000:]
    assert [h.path for h in server.origin.hits_for("slow.test")] == ["/robots.txt"]
    (record,) = one_record_per_line(read_records(out), 1).values()
    assert (record["outcome"], record["rule"]) == ("skipped", None), record
    assert "the run was stopped" in record["reason"]


@pytest_twisted.ensureDeferred
async def test_a_run_stopped_while_the_blocklist_is_fetched_sends_nothing_to_its_targets(
    server, tmp_path
):
    """The stop comes while the operator's blocklist, which every target
    waits for at start-up, is on the wire: once it answers, no target and no
    robots.txt for one goes out; each line is ``skipped``."""
    doc = json.dumps(blocklist_doc())
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH,
                        Reply(200, doc, {"Content-Type": "application/json"}, delay=4.0))  # fmt: skip
    lines = [server.url(f"h{i}.test", "/x") for i in range(3)]
    out = tmp_path / "out.jsonl"
    proc = spawn_targets_crawl(server, write_list(tmp_path, lines), tmp_path / "state",
                               FEEDS=json.dumps({str(out): {"format": "jsonlines"}}))  # fmt: skip
    await stop_when(proc, lambda: server.origin.hits_for(BLOCKLIST_HOST, BLOCKLIST_PATH),
                    signal.SIGINT)  # fmt: skip
    assert proc.code == 0, proc.err.decode()[-3000:]
    assert {h.host for h in server.origin.hits} == {BLOCKLIST_HOST}
    records = one_record_per_line(read_records(out), 3)
    assert {(r["outcome"], r["rule"]) for r in records.values()} == {("skipped", None)}


@pytest_twisted.ensureDeferred
async def test_a_redirect_answered_after_the_stop_is_not_followed(server, tmp_path):
    """The target is on the wire when the run is stopped and answers with a
    redirect: the hop is not sent, and the line's record says why."""
    server.origin.route("hop.test", "/robots.txt", ROBOTS)
    server.origin.route("hop.test", "/x", Reply(301, "", {"Location": "/y"}, delay=4.0))
    server.origin.route("hop.test", "/y", Reply(200, "page", {"Content-Type": "text/plain"}))
    lines = [server.url("hop.test", "/x")]
    out = tmp_path / "out.jsonl"
    proc = spawn_targets_crawl(server, write_list(tmp_path, lines), tmp_path / "state",
                               FEEDS=json.dumps({str(out): {"format": "jsonlines"}}))  # fmt: skip
    await stop_when(proc, lambda: server.origin.hits_for("hop.test", "/x"), signal.SIGINT)
    assert proc.code == 0, proc.err.decode()[-3000:]
    assert server.origin.hits_for("hop.test", "/y") == []
    (record,) = one_record_per_line(read_records(out), 1).values()
    assert (record["outcome"], record["rule"]) == ("skipped", None), record
    assert "the run was stopped" in record["reason"]


def fed_records(redis_server: Any, prefix: str) -> list[dict[str, Any]]:
    """The fleet's durable records of the feed ``targets`` (one per line finished)."""
    r = redis_server.client()
    try:
        return [json.loads(v) for name in r.scan_iter(f"{prefix}:targets:records:*")
                for v in r.hgetall(name).values()]  # fmt: skip
    finally:
        r.close()


@pytest_twisted.ensureDeferred
async def test_a_stopped_fleet_worker_gives_its_waiting_lines_back_to_the_queue_at_once(
    server, redis_server, tmp_path
):
    """In the Redis fleet a line's record is written once, by whichever worker
    fetches it: a worker stopped gracefully records nothing for the lines it
    holds unsent, and puts them back at the head of the queue as it exits
    (not after its heartbeat lapses), for the fleet or its next run."""
    lines = [line for line in lines_for(server) if "://" in line and "#" not in line]
    (tmp_path / "urls.txt").write_text("\n".join(lines) + "\n")
    shared = redis_settings(redis_server, WALSH_RUN_INTERVAL=3600, WALSH_POLICY_RETRY_DELAY=2)
    prefix = shared["WALSH_REDIS_PREFIX"]
    enqueue(redis_server.url, "targets", tmp_path / "urls.txt", prefix=prefix)
    worker = spawn_worker(server, "targets", tmp_path / "a", log=tmp_path / "a.jl", **shared)
    pages = lambda: server.origin.hits_for("paced.test", None)  # noqa: E731
    down = lambda: server.origin.hits_for("down.test", "/robots.txt")  # noqa: E731
    await stop_when(worker, lambda: len(pages()) >= 4 and down(), signal.SIGTERM)
    err = worker.err.decode()
    assert worker.code == 0 and "Traceback" not in err, err[-3000:]
    done = fed_records(redis_server, prefix)
    assert len({r["line"] for r in done}) == len(done) < len(lines)
    assert all(r["outcome"] == "fetched" for r in done), done  # no 'skipped' for a fed line
    r = redis_server.client()
    try:
        held = list(r.scan_iter(f"{prefix}:targets:inflight:*"))
        queued = [json.loads(item)["line"] for item in r.lrange(f"{prefix}:targets", 0, -1)]
    finally:
        r.close()
    assert held == [], err[-3000:]  # nothing left in the stopped worker's hands ...
    # ... every line without a record is in the queue, down.test's first
    assert sorted(queued) == sorted(set(range(1, len(lines) + 1)) - {r["line"] for r in done})
    assert queued[:2] == [1, 3], queued
    assert "went back to the head of the queue" in err

    server.origin.route("down.test", "/robots.txt", ROBOTS)
    again = spawn_worker(server, "targets", tmp_path / "b", log=tmp_path / "b.jl", **shared)
    await again.ended
    assert again.code == 0, again.err.decode()[-3000:]
    every = fed_records(redis_server, prefix)
    assert sorted(r["line"] for r in every) == list(range(1, len(lines) + 1))
    assert {r["outcome"] for r in every} == {"fetched"}


@pytest_twisted.ensureDeferred
async def test_requests_waiting_for_the_wire_when_stopped_are_not_sent(server, tmp_path):
    """The engine takes the next requests while one is on the wire: the stop
    comes while a slow page is answered and two other hosts' pages, due,
    wait for the wire. The slow answer is awaited; the waiting pages are not
    sent after it, and each line has one record."""
    o = server.origin
    for host in ("b.test", "c.test"):
        o.route(host, "/robots.txt", ROBOTS)
        for path in ("/1", "/2"):
            o.route(host, path, Reply(200, "page", {"Content-Type": "text/plain"}))
    o.route("a.test", "/robots.txt", ROBOTS)
    o.route("a.test", "/x", Reply(200, "slow", {"Content-Type": "text/plain"}, delay=4.0))
    lines = [server.url("b.test", "/1"), server.url("c.test", "/1"), server.url("a.test", "/x"),
             server.url("b.test", "/2"), server.url("c.test", "/2")]  # fmt: skip
    out = tmp_path / "out.jsonl"
    proc = spawn_targets_crawl(server, write_list(tmp_path, lines), tmp_path / "state",
                               FEEDS=json.dumps({str(out): {"format": "jsonlines"}}))  # fmt: skip
    slow = lambda: o.hits_for("a.test", "/x")  # noqa: E731
    # b.test's and c.test's second pages are due 1 s after their first
    await stop_when(proc, lambda: slow() and time.monotonic() - slow()[0].t > 2.0, signal.SIGINT)
    assert proc.code == 0, proc.err.decode()[-3000:]
    answered = slow()[0].finished
    assert answered > 0
    assert [h.uri for h in o.hits if h.t > answered] == []  # nothing sent after the stop
    records = one_record_per_line(read_records(out), len(lines))
    # which of b.test's and c.test's pages went before the slow one is the
    # engine's order across hosts (a loaded machine changes it): what the
    # origin got is fetched, what it did not is the stop's
    sent = {n for n, url in enumerate(lines, 1) if o.hits_for(urlsplit(url).hostname, urlsplit(url).path)}
    assert 3 in sent and len(sent) < len(lines), sent  # some were waiting at the stop
    for n, record in records.items():
        if n in sent:
            assert record["outcome"] == "fetched", record
        else:
            assert (record["outcome"], record["rule"]) == ("skipped", None), record
            assert "the run was stopped" in record["reason"]
