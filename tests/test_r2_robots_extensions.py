"""R2 beyond Allow and Disallow: what the 1996 robots.txt extension
proposal adds (Visit-time, Request-rate with a window, Comment) and ACAP
groups, read the way that protects the site where they and RFC 9309 differ.

Windows are computed from the test's clock (UTC), never fixed: one that
closed, one that wraps midnight and is open, one that opens at the next
minute boundary (``Visit-time`` is HHMM: up to a minute away)."""

from __future__ import annotations

import datetime
import json
import logging
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest_twisted
from scrapy.utils.defer import deferred_from_coro
from twisted.internet import defer

from scrapy_walsh_research.core.robots_policy import MAX_COMMENT_CHARS, MAX_COMMENTS, RobotsPolicy
from scrapy_walsh_research.core.visit_time import VisitWindow, next_opening, open_at
from scrapy_walsh_research.evidence.host_evidence import collect
from scrapy_walsh_research.evidence.pages import host_page
from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.state.redis.target_queue import enqueue
from tests.support.crawling import TDMREP, base_settings, crawl, gaps, write_list
from tests.support.fleet import crawl_feed, redis_settings

TOKEN = "Walsh-Research"
DATA = Path(__file__).parent / "data"


def hhmm(t: float) -> str:
    """The UTC time of day of *t* (seconds since the epoch) as HHMM."""
    return time.strftime("%H%M", time.gmtime(t))


def minute_of_day(t: float) -> int:
    return int(t // 60) % 1440


def window(start_minute: int, end_minute: int) -> str:
    s, e = start_minute % 1440, end_minute % 1440
    return f"{s // 60:02d}{s % 60:02d}-{e // 60:02d}{e % 60:02d}"


def closed_window(now: float) -> str:
    """A window that closed an hour ago (it opened two hours ago)."""
    m = minute_of_day(now)
    return window(m - 120, m - 60)


def open_wrapping_window(now: float) -> str:
    """A window that wraps midnight and holds *now*: from an hour before
    now to 01:00 in the afternoon and evening, from 23:00 to an hour after
    now in the morning."""
    m = minute_of_day(now)
    text = window(m - 60, 60) if m >= 12 * 60 else window(23 * 60, m + 60)
    start, end = (int(x[:2]) * 60 + int(x[2:]) for x in text.split("-"))
    assert start > end, text  # it wraps
    return text


def site(server: Any, host: str, robots: str, *paths: str) -> list[str]:
    server.origin.route(host, "/robots.txt", Reply(200, robots))
    for path in paths:
        server.origin.route(host, path, Reply(200, f"{host}{path}"))
    return [server.url(host, p) for p in paths]


def paths(server: Any, host: str) -> list[str]:
    return [h.path for h in server.origin.hits_for(host)]


def audit_entries(state: Path) -> list[dict[str, Any]]:
    db = sqlite3.connect(str(state / "audit.sqlite3"))
    try:
        return [json.loads(row[0]) for row in db.execute("SELECT entry FROM audit ORDER BY seq")]
    finally:
        db.close()


def robots_said_on(page: str) -> str:
    """The report's list of what robots.txt said to the operator."""
    assert '<ul id="robots-said">' in page
    return page.split('<ul id="robots-said">', 1)[1].split("</ul>", 1)[0]


def utc(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat()


# -- the lines, read ------------------------------------------------------------------


def test_a_window_that_wraps_midnight_holds_on_both_sides_of_it():
    w = VisitWindow.read("2200-0300")
    assert w is not None and str(w) == "2200-0300"
    day = 86400 * 20000  # a midnight, UTC
    assert open_at((w,), day + 23 * 3600)
    assert open_at((w,), day + 2 * 3600 + 59 * 60)
    assert not open_at((w,), day + 3 * 3600)
    assert not open_at((w,), day + 12 * 3600)
    assert next_opening((w,), day + 12 * 3600) == day + 22 * 3600


def test_the_next_opening_is_the_first_minute_inside_every_window():
    """Against a scan of every minute of the next day: one window, several
    (their intersection), a whole day, windows that never overlap, times
    inside a closed start minute."""
    rng = random.Random(9309)

    def scanned(windows: tuple[VisitWindow, ...], t: float) -> float | None:
        if open_at(windows, t):
            return t
        first = (int(t // 60) + 1) * 60
        return next(
            (float(first + m * 60) for m in range(24 * 60) if open_at(windows, first + m * 60)),
            None,
        )

    for _ in range(3000):
        windows = tuple(
            VisitWindow(rng.randrange(1440), rng.randrange(1440))
            for _ in range(rng.choice([1, 1, 2, 3]))
        )
        t = rng.uniform(1.7e9, 1.8e9)
        if rng.random() < 0.3:  # on a minute: a start minute itself, closed
            t = float(int(t // 60) * 60 + rng.choice([0, 30]))
        assert next_opening(windows, t) == scanned(windows, t), (windows, t)
    never = (VisitWindow(60, 120), VisitWindow(600, 660))
    assert next_opening(never, 1.75e9) is None


def test_a_malformed_visit_time_is_ignored_and_kept_to_be_named():
    policy = RobotsPolicy.parse("User-agent: *\nVisit-time: 25:00-99\nDisallow: /x\n", TOKEN)
    assert policy.visit_windows == ()
    assert policy.malformed_visit_times == ("25:00-99",)
    assert policy.allows("http://s.test/y") and not policy.allows("http://s.test/x")


def test_only_the_selected_groups_visit_time_and_comments_apply():
    text = (
        "User-agent: *\nVisit-time: 0100-0200\nComment: for everyone\nDisallow: /x\n\n"
        "User-agent: Walsh-Research\nVisit-time: 0400-0845 # only then\nComment: hello bot\n"
    )
    policy = RobotsPolicy.parse(text, TOKEN)
    assert [str(w) for w in policy.visit_windows] == ["0400-0845"]
    assert policy.comments == ("hello bot",)


def test_comments_relayed_are_bounded_in_number_and_length():
    text = "User-agent: *\n" + "".join(f"Comment: {i} {'x' * 1000}\n" for i in range(100))
    comments = RobotsPolicy.parse(text, TOKEN).comments
    assert len(comments) == MAX_COMMENTS and comments[0].startswith("0 x")
    assert all(len(c) == MAX_COMMENT_CHARS for c in comments)


def test_comments_relayed_carry_no_control_characters_to_the_operators_terminal():
    """A Comment is the site's text logged as is: terminal control sequences
    (ESC, BEL) must not reach the operator's terminal or the report."""
    text = "User-agent: *\nComment: hi \x1b[2J\x1b]0;owned\x07 there\x00\nVisit-time: 04\x1b00-08\n"
    policy = RobotsPolicy.parse(text, TOKEN)
    assert policy.comments and policy.malformed_visit_times
    for said in policy.comments + policy.malformed_visit_times:
        assert all(c.isprintable() for c in said), repr(said)
    assert policy.comments[0].startswith("hi ") and policy.comments[0].endswith(" there\ufffd")


def test_several_request_rate_lines_the_slowest_wins_and_a_windowed_rate_holds_at_all_times():
    text = "User-agent: *\nRequest-rate: 1/10 0600-0845\nRequest-rate: 1/5\nRequest-rate: 3/1m\n"
    # Protego keeps the last line (20 s per request here would be kept by
    # neither); the slowest, 1/10, holds whatever the time of day
    assert RobotsPolicy.parse(text, TOKEN).request_rate_interval == 20.0
    text = "User-agent: *\nRequest-rate: 1/10 0600-0845\nRequest-rate: 1/5\n"
    assert RobotsPolicy.parse(text, TOKEN).request_rate_interval == 10.0


ACAP = (
    "User-agent: *\nDisallow: /search/\n\n"
    "ACAP-crawler: *\nACAP-disallow-crawl: /private/\nACAP-allow-crawl: /private/open\n\n"
    "ACAP-crawler: OtherBot\nACAP-disallow-crawl: /\n"
)


def test_an_acap_group_adds_its_disallows_by_longest_match():
    policy = RobotsPolicy.parse(ACAP, TOKEN)
    assert policy.acap_group == "*"
    assert not policy.allows("http://s.test/private/doc")
    assert "ACAP" in policy.denial_reason("http://s.test/private/doc")
    assert policy.allows("http://s.test/private/open/doc")  # the longer allow wins
    assert policy.allows("http://s.test/news")  # OtherBot's group is not ours
    assert not policy.allows("http://s.test/search/x")
    assert "ACAP" not in policy.denial_reason("http://s.test/search/x")


def test_an_acap_group_naming_the_token_replaces_the_star_group():
    text = ACAP + "\nACAP-crawler: walsh-research\nACAP-disallow-crawl: /mine/\n"
    policy = RobotsPolicy.parse(text, TOKEN)
    assert policy.acap_group == "named"
    assert policy.allows("http://s.test/private/doc")
    assert not policy.allows("http://s.test/mine/x")


def test_an_acap_allow_never_opens_what_the_robots_group_disallows():
    text = "User-agent: *\nDisallow: /p\nACAP-crawler: *\nACAP-allow-crawl: /p/x\n"
    assert not RobotsPolicy.parse(text, TOKEN).allows("http://s.test/p/x")


def test_an_acap_group_applies_when_no_user_agent_group_is_selected():
    """ACAP is a record of its own: a file with no group for us (or none at
    all) still has its ACAP-crawler group applied."""
    for text in (
        "ACAP-crawler: *\nACAP-disallow-crawl: /private/\n",
        "User-agent: OtherBot\nDisallow: /\n\nACAP-crawler: *\nACAP-disallow-crawl: /private/\n",
    ):
        policy = RobotsPolicy.parse(text, TOKEN)
        assert not policy.allows("http://s.test/private/doc"), text
        assert "ACAP" in policy.denial_reason("http://s.test/private/doc")
        assert policy.allows("http://s.test/news")


def _vectors() -> list[dict[str, Any]]:
    return json.loads((DATA / "google_robots_vectors.json").read_text())["vectors"]  # type: ignore[no-any-return]


def test_the_extension_lines_change_no_path_decision_of_the_vectors():
    """Every vector file decides each URL as before with a Comment, a
    Visit-time, a Request-rate and another crawler's ACAP group added to
    every group (no file here had them: the decisions are those of
    tests/test_r2_robots.py)."""
    extra = (
        "Comment: a note\nVisit-time: 0000-2359\nRequest-rate: 1/5\n"
        "ACAP-crawler: OtherBot\nACAP-disallow-crawl: /\n"
    )
    checked = 0
    for v in _vectors():
        text, url, ua = v.get("robots_txt"), v.get("url"), v.get("user_agent") or TOKEN
        if not isinstance(text, str) or not isinstance(url, str):
            continue
        lines = text.splitlines()
        # after each user-agent run, before its rules: the group keeps them
        grown = "\n".join(
            line + ("\n" + extra if line.lower().startswith("user-agent") else "") for line in lines
        )
        before = RobotsPolicy.parse(text, ua).allows(url)
        assert RobotsPolicy.parse(grown, ua).allows(url) == before, v
        checked += 1
    assert checked > 50


# -- Visit-time at the origin --------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_outside_a_closed_window_only_robots_txt_reaches_the_host(server, tmp_path, caplog):
    now = time.time()
    w = closed_window(now)
    urls = site(server, "vt.test", f"User-agent: *\nVisit-time: {w}\n", "/a", "/b")
    with caplog.at_level(logging.INFO):
        res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    assert paths(server, "vt.test") == ["/robots.txt"]  # no tdmrep.json, no page
    for record in res.items:
        assert (record["outcome"], record["rule"]) == ("skipped", "R2"), record
        assert f"Visit-time {w} UTC" in record["reason"]
        assert "next opens at" in record["reason"] and "tried again next run" in record["reason"]
    assert "vt.test restricts visits to Visit-time" in caplog.text


@pytest_twisted.ensureDeferred
async def test_a_window_that_wraps_midnight_and_is_open_is_visited(server, tmp_path):
    w = open_wrapping_window(time.time())
    urls = site(server, "wrap.test", f"User-agent: *\nVisit-time: {w}\n", "/a")
    res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    assert [r["outcome"] for r in res.items] == ["fetched"], res.items
    assert paths(server, "wrap.test") == ["/robots.txt", TDMREP, "/a"]


@pytest_twisted.ensureDeferred
async def test_a_window_opening_beyond_the_bound_gives_its_records_at_once(server, tmp_path):
    now = time.time()
    w = window(minute_of_day(now) + 2, minute_of_day(now) + 4)
    urls = site(server, "soon.test", f"User-agent: *\nVisit-time: {w}\n", "/a")
    started = time.monotonic()
    res = await crawl(
        base_settings(server, tmp_path / "s", WALSH_VISIT_TIME_WAIT=30), urls, tmp_path
    )
    assert time.monotonic() - started < 30  # not waited for
    assert [(r["outcome"], r["rule"]) for r in res.items] == [("skipped", "R2")]
    assert "beyond WALSH_VISIT_TIME_WAIT (30 s)" in res.items[0]["reason"]
    assert paths(server, "soon.test") == ["/robots.txt"]


@pytest_twisted.ensureDeferred
async def test_a_window_opening_within_the_bound_is_waited_for_and_visited_inside_it(
    server, tmp_path
):
    """The window opens at the next minute boundary (the one after, when
    that is under 15 s away): nothing but robots.txt before it, the targets
    kept aside meanwhile while another host is served, then fetched inside
    it at the host's pace."""
    now = time.time()
    opens = (int(now // 60) + 1) * 60
    if opens - now < 15:  # time for a loaded machine's start-up and other.test
        opens += 60
    w = window(minute_of_day(opens), minute_of_day(opens) + 3)
    urls = site(server, "later.test", f"User-agent: *\nVisit-time: {w}\n", "/a", "/b")
    other = site(server, "other.test", "User-agent: *\nAllow: /\n", "/x")
    res = await crawl(
        base_settings(server, tmp_path / "s", WALSH_VISIT_TIME_WAIT=90), urls + other, tmp_path
    )
    assert [r["outcome"] for r in sorted(res.items, key=lambda r: r["line"])] == ["fetched"] * 3
    hits = server.origin.hits_for("later.test")
    assert [h.path for h in hits[:2]] == ["/robots.txt", TDMREP]
    assert sorted(h.path for h in hits[2:]) == ["/a", "/b"]
    assert hits[0].wall < opens  # robots.txt is how the window is learnt
    for h in hits[1:]:
        assert opens <= h.wall < opens + 180, (h.path, utc(h.wall), utc(opens))
    assert min(gaps(hits[1:])) >= 1.0
    # the other host did not wait for the window
    assert server.origin.hits_for("other.test", "/x")[0].wall < opens
    assert res.stats["walsh/visit_time/kept_aside"] >= 1


@pytest_twisted.ensureDeferred
async def test_a_malformed_visit_time_is_ignored_with_a_warning_naming_the_host(
    server, tmp_path, caplog
):
    urls = site(server, "bad.test", "User-agent: *\nVisit-time: 25:00-99\n", "/a")
    with caplog.at_level(logging.WARNING):
        res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    assert [r["outcome"] for r in res.items] == ["fetched"]
    warned = [r for r in caplog.records if "Visit-time" in r.getMessage()]
    assert warned and warned[0].levelno == logging.WARNING
    assert "bad.test" in warned[0].getMessage() and "25:00-99" in warned[0].getMessage()


@pytest_twisted.ensureDeferred
async def test_a_restarted_run_keeps_the_window_from_the_stored_robots_txt(server, tmp_path):
    """The stored copy is what a restart and every worker of a fleet adopt:
    parsed again, it keeps the window, and the host receives nothing. The
    first run's records are not stamped for R8: the next run tries again
    (a page fetched in the first run is inside its cadence)."""
    w = closed_window(time.time())
    urls = site(server, "kept.test", f"User-agent: *\nVisit-time: {w}\n", "/a")
    fetched = site(server, "fresh.test", "User-agent: *\nAllow: /\n", "/x")
    settings = base_settings(server, tmp_path / "s", WALSH_RUN_INTERVAL=86400)
    await crawl(settings, urls + fetched, tmp_path / "1")
    res = await crawl(settings, urls + fetched, tmp_path / "2")
    assert paths(server, "kept.test") == ["/robots.txt"]  # the first run's, only
    assert res.stats.get("walsh/robots/stored_copy", 0) >= 1
    by_url = res.by_url()
    assert (by_url[urls[0]]["outcome"], by_url[urls[0]]["rule"]) == ("skipped", "R2")
    assert "Visit-time" in by_url[urls[0]]["reason"]
    assert (by_url[fetched[0]]["outcome"], by_url[fetched[0]]["rule"]) == ("skipped", "R8")


@pytest_twisted.ensureDeferred
async def test_every_worker_of_a_fleet_keeps_the_window(server, redis_server, tmp_path):
    """Two workers on one Redis feed: one fetches robots.txt, both keep its
    window, and the host receives nothing else."""
    w = closed_window(time.time())
    urls = site(server, "fleet-vt.test", f"User-agent: *\nVisit-time: {w}\n", "/a", "/b", "/c")
    open_urls = site(server, "fleet-open.test", "User-agent: *\nAllow: /\n", "/x", "/y")
    shared = redis_settings(redis_server)
    path = write_list(tmp_path, urls + open_urls)
    enqueue(redis_server.url, "targets", path, prefix=shared["WALSH_REDIS_PREFIX"])
    workers = await defer.gatherResults(
        [
            deferred_from_coro(
                crawl_feed(base_settings(server, tmp_path / f"w{i}", **shared), "targets")
            )
            for i in range(2)
        ],
        consumeErrors=True,
    )
    assert paths(server, "fleet-vt.test") == ["/robots.txt"]
    records = {r["url"]: r for w_ in workers for r in w_.items}
    assert {u: (records[u]["outcome"], records[u]["rule"]) for u in urls} == dict.fromkeys(
        urls, ("skipped", "R2")
    )
    assert all(records[u]["outcome"] == "fetched" for u in open_urls)
    assert all(w_.items for w_ in workers)  # both took lines


@pytest_twisted.ensureDeferred
async def test_a_request_waiting_for_its_hosts_slot_does_not_leave_after_the_window_closed(
    server, redis_server, tmp_path
):
    """The window closes while a request that passed the robots.txt gate
    inside it waits for its host's slot (scrapy-redis's scheduler: the
    target's tdmrep.json waits in place for the Crawl-delay): it must not
    leave once the window has closed. Only robots.txt before the close,
    nothing after it."""
    from twisted.internet import reactor, task

    now = time.time()
    closes = (int(now // 60) + 1) * 60
    if closes - now < 13:
        closes += 60
    # start 12 s before the close: robots.txt (and the target's pass through
    # the gate) inside the window, even on a loaded machine; the Crawl-delay
    # of 20 s ends outside it
    await task.deferLater(reactor, max(0.0, closes - 12 - time.time()), lambda: None)
    w = window(minute_of_day(closes) - 30, minute_of_day(closes))
    robots = f"User-agent: *\nCrawl-delay: 20\nVisit-time: {w}\n"
    urls = site(server, "closing.test", robots, "/a")
    shared = redis_settings(
        redis_server, SCHEDULER="scrapy_redis.scheduler.Scheduler",
        DUPEFILTER_CLASS="scrapy_redis.dupefilter.RFPDupeFilter", SCHEDULER_PERSIST=True,
        REDIS_URL=redis_server.url,
    )  # fmt: skip
    shared["SCHEDULER_QUEUE_KEY"] = shared["WALSH_REDIS_PREFIX"] + ":requests"
    shared["SCHEDULER_DUPEFILTER_KEY"] = shared["WALSH_REDIS_PREFIX"] + ":dupefilter"
    enqueue(redis_server.url, "targets", write_list(tmp_path, urls),
            prefix=shared["WALSH_REDIS_PREFIX"])  # fmt: skip
    res = await deferred_from_coro(
        crawl_feed(base_settings(server, tmp_path / "s", **shared), "targets")
    )
    hits = server.origin.hits_for("closing.test")
    assert hits[0].path == "/robots.txt" and hits[0].wall < closes  # inside: the scenario held
    late = [(h.path, utc(h.wall)) for h in hits if h.wall >= closes]
    assert late == [], f"window closed at {utc(closes)}"
    assert [(r["outcome"], r["rule"]) for r in res.items] == [("skipped", "R2")], res.items


@pytest_twisted.ensureDeferred
async def test_a_run_stopped_while_targets_wait_for_a_window_gives_each_line_one_record(
    server, tmp_path
):
    """A real ``scrapy crawl`` stopped (SIGTERM) while a host's targets are
    kept aside for a window that opens later: each line gets exactly one
    record, and the host received nothing but robots.txt."""
    import signal

    from tests.support.crawling import sleep
    from tests.support.processes import spawn_targets_crawl

    now = time.time()
    opens = (int(now // 60) + 2) * 60  # 60 to 120 s away: waited for
    w = window(minute_of_day(opens), minute_of_day(opens) + 3)
    urls = site(server, "stopvt.test", f"User-agent: *\nVisit-time: {w}\n", "/a", "/b", "/c")
    other = site(server, "stopok.test", "User-agent: *\nAllow: /\n", "/x")
    out = tmp_path / "out.jsonl"
    proc = spawn_targets_crawl(
        server, write_list(tmp_path, urls + other), tmp_path / "state",
        FEEDS=json.dumps({str(out): {"format": "jsonlines"}}), WALSH_VISIT_TIME_WAIT=300,
    )  # fmt: skip
    for _ in range(600):
        if server.origin.hits_for("stopok.test", "/x") and paths(server, "stopvt.test"):
            break
        await sleep(0.05)
    await sleep(1.0)
    assert not proc.ended.called, proc.err.decode()[-3000:]
    proc.transport.signalProcess(signal.SIGTERM)
    await proc.ended
    assert time.time() < opens  # stopped before the window opened
    assert proc.code == 0, proc.err.decode()[-3000:]
    assert paths(server, "stopvt.test") == ["/robots.txt"]
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    assert sorted(r["line"] for r in records) == [1, 2, 3, 4], records
    for r in (r for r in records if r["url"] in urls):
        assert r["outcome"] == "skipped", r


# -- Request-rate, Comment, ACAP at the origin ------------------------------------------


@pytest_twisted.ensureDeferred
async def test_the_slowest_request_rate_paces_the_host_whatever_its_window(server, tmp_path):
    closed = closed_window(time.time())
    robots = f"User-agent: *\nRequest-rate: 1/3 {closed}\nRequest-rate: 1/1\n"
    urls = site(server, "rate.test", robots, "/a", "/b")
    await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    hits = server.origin.hits_for("rate.test")
    assert [h.path for h in hits] == ["/robots.txt", TDMREP, "/a", "/b"]
    assert min(gaps(hits)) >= 3.0, gaps(hits)


@pytest_twisted.ensureDeferred
async def test_a_request_rate_too_slow_for_a_float_skips_the_host_and_breaks_nothing(
    server, tmp_path
):
    """``Request-rate: 1/999…9`` (400 digits): one request in longer than a
    float holds. Read, not raised on: the host is skipped (R4) like any rate
    beyond WALSH_MAX_CRAWL_DELAY, and receives nothing but robots.txt."""
    robots = f"User-agent: *\nRequest-rate: 1/{'9' * 400}\n"
    interval = RobotsPolicy.parse(robots, TOKEN).request_rate_interval
    assert interval is not None and interval > 86400
    urls = site(server, "huge.test", robots, "/a")
    res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    assert paths(server, "huge.test") == ["/robots.txt"]
    assert [(r["outcome"], r["rule"]) for r in res.items] == [("skipped", "R4")], res.items


@pytest_twisted.ensureDeferred
async def test_a_request_rate_of_zero_documents_sends_the_host_nothing_but_robots_txt(
    server, tmp_path
):
    """Protego drops "0/1h" as malformed; the reading that protects the site
    keeps it: no document at all, as a rate too slow to wait for (R4)."""
    urls = site(server, "zero.test", "User-agent: *\nRequest-rate: 0/1h\n", "/a", "/b")
    res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    assert paths(server, "zero.test") == ["/robots.txt"]
    assert {(r["outcome"], r["rule"]) for r in res.items} == {("skipped", "R4")}, res.items
    assert "asks for no request at all" in res.items[0]["reason"]


@pytest_twisted.ensureDeferred
async def test_comment_lines_are_relayed_once_per_host_at_info(server, tmp_path, caplog):
    robots = "User-agent: *\nComment: crawl us at night, please\nDisallow: /x\n"
    urls = site(server, "talk.test", robots, "/a", "/b")
    with caplog.at_level(logging.INFO):
        await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    told = [r for r in caplog.records if "crawl us at night, please" in r.getMessage()]
    assert len(told) == 1 and told[0].levelno == logging.INFO
    assert "talk.test" in told[0].getMessage()
    entries = audit_entries(tmp_path / "s")
    said = [e for e in entries if e.get("event") == "robots_said"]
    assert said and said[0]["comments"] == ["crawl us at night, please"]
    # the host's report relays it to whoever reads it
    ev = collect(entries, "talk.test")
    assert [s["comments"] for s in ev.as_json()["robots_said"]] == [["crawl us at night, please"]]
    assert "crawl us at night, please" in robots_said_on(host_page(ev))


@pytest_twisted.ensureDeferred
async def test_the_hosts_report_says_it_restricts_visits(server, tmp_path):
    w = closed_window(time.time())
    urls = site(server, "vr.test", f"User-agent: *\nVisit-time: {w}\n", "/a")
    await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    page = host_page(collect(audit_entries(tmp_path / "s"), "vr.test"))
    said = robots_said_on(page)
    assert f"asks for visits only within Visit-time {w} UTC" in said


@pytest_twisted.ensureDeferred
async def test_an_acap_disallowed_page_is_not_fetched_and_its_record_names_acap(server, tmp_path):
    robots = "User-agent: *\nAllow: /\n\nACAP-crawler: *\nACAP-disallow-crawl: /private/\n"
    urls = site(server, "acap.test", robots, "/open", "/private/doc")
    res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    by_url = res.by_url()
    assert by_url[urls[0]]["outcome"] == "fetched"
    denied = by_url[urls[1]]
    assert (denied["outcome"], denied["rule"]) == ("denied", "R2")
    assert "ACAP-disallow-crawl" in denied["reason"]
    assert server.origin.hits_for("acap.test", "/private/doc") == []
