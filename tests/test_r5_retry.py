"""R5: on 429/503 back off with exponential backoff and jitter, honour Retry-After,
give up after a bound; the wait holds the host back while other hosts go on."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from typing import Any

import pytest
import pytest_twisted
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_walsh_research.components import RETRY_MW
from scrapy_walsh_research.core.retry_after import MAX_RETRY_AFTER
from scrapy_walsh_research.gates.retry import parse_retry_after
from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.scheduling import backoff as r5_backoff
from tests.support.crawling import TDMREP, base_settings, crawl

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("2", 2.0),
        (" 120 ", 120.0),
        ("0", 0.0),
        ("-5", None),  # not delta-seconds
        ("1.5", None),  # not delta-seconds
        ("soon", None),
        ("", None),
        (None, None),
        ("Sat, 21 Nov 2026 12:00:30 GMT", 30.0),  # IMF-fixdate
        ("Saturday, 21-Nov-26 12:00:30 GMT", 30.0),  # obsolete RFC 850 form, still accepted
        ("Sat Nov 21 12:00:30 2026", 30.0),  # asctime form, still accepted
        ("Sat, 21 Nov 2026 11:00:00 GMT", 0.0),  # in the past: now
    ],
)
def test_retry_after_is_delta_seconds_or_an_http_date(value, seconds):
    got = parse_retry_after(value, now=NOW)
    assert got == seconds or (got is not None and seconds is not None and abs(got - seconds) < 1e-6)


def once_then_ok(status: int, headers: dict[str, str] | Any) -> Any:
    calls = {"n": 0}

    def handler(hit: Any) -> Reply:
        calls["n"] += 1
        if calls["n"] == 1:
            h = headers() if callable(headers) else headers
            return Reply(status, "slow down", h)
        return Reply(200, "ok")

    return handler


def target(server: Any, host: str, path: str, handler: Any) -> str:
    server.origin.route(host, "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    server.origin.route(host, path, handler)
    return server.url(host, path)


@pytest_twisted.ensureDeferred
async def test_429_with_retry_after_2_is_retried_no_sooner(server, tmp_path):
    url = target(server, "ra.test", "/x", once_then_ok(429, {"Retry-After": "2"}))
    res = await crawl(base_settings(server, tmp_path / "s"), [url], tmp_path)
    first, retry = server.origin.hits_for("ra.test", "/x")
    assert retry.t - first.t >= 2.0
    assert (res.items[0]["outcome"], res.items[0]["status"]) == ("fetched", 200)


@pytest_twisted.ensureDeferred
async def test_429_with_an_http_date_is_retried_no_sooner_than_that_date(server, tmp_path):
    when: dict[str, float] = {}

    def headers() -> dict[str, str]:
        date = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=3)
        when["epoch"] = date.timestamp()
        return {"Retry-After": format_datetime(date, usegmt=True)}

    url = target(server, "date.test", "/x", once_then_ok(429, headers))
    res = await crawl(base_settings(server, tmp_path / "s"), [url], tmp_path)
    first, retry = server.origin.hits_for("date.test", "/x")
    assert retry.wall >= when["epoch"]
    assert retry.t - first.t >= 2.0
    assert res.items[0]["outcome"] == "fetched"


@pytest_twisted.ensureDeferred
async def test_a_persistent_503_stops_after_the_bound(server, tmp_path):
    url = target(server, "down.test", "/x", Reply(503, "down"))
    settings = base_settings(
        server, tmp_path / "s", WALSH_RETRY_TIMES=2, WALSH_RETRY_BASE_DELAY=0.5
    )
    res = await crawl(settings, [url], tmp_path)
    hits = server.origin.hits_for("down.test", "/x")
    assert len(hits) == 3  # the request and two retries
    record = res.items[0]
    assert (record["outcome"], record["status"]) == ("failed", 503)
    assert "after 2 retries" in record["reason"]
    assert res.stats["walsh/retry/gave_up"] == 1


@pytest_twisted.ensureDeferred
async def test_a_huge_retry_after_gives_up_at_once(server, tmp_path):
    url = target(
        server, "huge.test", "/x", Reply(429, "come back tomorrow", {"Retry-After": "86400"})
    )
    started = time.monotonic()
    res = await crawl(
        base_settings(server, tmp_path / "s", WALSH_RETRY_MAX_DELAY=600), [url], tmp_path
    )
    assert time.monotonic() - started < 10
    assert len(server.origin.hits_for("huge.test", "/x")) == 1
    record = res.items[0]
    assert (record["outcome"], record["status"]) == ("failed", 429)
    assert "Retry-After 86400 s" in record["reason"]


@pytest_twisted.ensureDeferred
async def test_while_one_host_backs_off_another_hosts_requests_go_out(server, tmp_path):
    held = target(server, "held.test", "/x", once_then_ok(429, {"Retry-After": "4"}))
    # five: some are due while held.test is held, whichever host's chain leads
    others = [target(server, "free.test", f"/{i}", Reply(200, "ok")) for i in range(5)]
    res = await crawl(base_settings(server, tmp_path / "s"), [held, *others], tmp_path)
    first, retry = server.origin.hits_for("held.test", "/x")
    assert retry.t - first.t >= 4.0
    free = [h for h in server.origin.hits_for("free.test") if h.path not in ("/robots.txt", TDMREP)]
    assert len(free) == 5
    # free.test keeps receiving its pages (1 s apart) while held.test is held
    assert sum(first.t < h.t < retry.t for h in free) >= 2
    assert {i["outcome"] for i in res.items} == {"fetched"}


@pytest_twisted.ensureDeferred
async def test_a_slow_answers_retry_after_holds_a_request_prepared_while_it_was_out(
    server, tmp_path
):
    """The engine prepares the next request while one is on the wire: a
    request to the same host, due by its interval while the first's answer
    is slow to come, must not leave before that answer's Retry-After."""
    slow = target(server, "slow.test", "/a", Reply(429, "later", {"Retry-After": "4"}, delay=1.5))
    server.origin.route("slow.test", "/b", Reply(200, "ok"))
    res = await crawl(
        base_settings(server, tmp_path / "s", WALSH_RETRY_TIMES=0),
        [slow, server.url("slow.test", "/b")],
        tmp_path,
    )
    (a,) = server.origin.hits_for("slow.test", "/a")
    (b,) = server.origin.hits_for("slow.test", "/b")
    assert b.t - a.t >= 1.5 + 4.0
    assert server.origin.max_inflight == 1
    assert {i["outcome"] for i in res.items} == {"failed", "fetched"}


@pytest_twisted.ensureDeferred
async def test_transient_errors_are_retried_with_backoff(server, tmp_path):
    url = target(server, "flaky.test", "/x", once_then_ok(502, {}))
    res = await crawl(base_settings(server, tmp_path / "s"), [url], tmp_path)
    assert len(server.origin.hits_for("flaky.test", "/x")) == 2
    assert res.items[0]["outcome"] == "fetched"


@pytest_twisted.ensureDeferred
async def test_a_retry_passes_the_gates_again(server, tmp_path):
    # robots.txt changes while the request waits to be retried: the retry is denied
    calls = {"n": 0}

    def robots(hit: Any) -> Reply:
        calls["n"] += 1
        return Reply(
            200, "User-agent: *\nAllow: /\n" if calls["n"] == 1 else "User-agent: *\nDisallow: /\n"
        )

    server.origin.route("gate.test", "/robots.txt", robots)
    server.origin.route("gate.test", "/x", Reply(503, "busy", {"Retry-After": "5"}))
    settings = base_settings(server, tmp_path / "s", WALSH_POLICY_TTL=4)
    res = await crawl(settings, [server.url("gate.test", "/x")], tmp_path)
    assert (res.items[0]["outcome"], res.items[0]["rule"]) == ("denied", "R2")
    assert len(server.origin.hits_for("gate.test", "/x")) == 1


@pytest_twisted.ensureDeferred
async def test_retry_after_binds_the_host_whichever_middleware_retries(
    server, tmp_path, without_preflight
):
    """Scrapy's own RetryMiddleware retries a 429 at once; the host hold is the
    pacing gate's, so the retry still waits the 3 s the site asked for."""
    url = target(server, "nr.test", "/x", once_then_ok(429, {"Retry-After": "3"}))
    settings = base_settings(
        server,
        tmp_path / "s",
        DOWNLOADER_MIDDLEWARES={
            RETRY_MW: None,
            "scrapy.downloadermiddlewares.retry.RetryMiddleware": 550,
        },
    )
    await crawl(settings, [url], tmp_path)
    first, retry = server.origin.hits_for("nr.test", "/x")
    assert retry.t - first.t >= 3.0


@pytest_twisted.ensureDeferred
async def test_backoff_has_full_jitter_and_grows_exponentially(tmp_path):
    """Without Retry-After, retry n waits uniform(0, base * 2**n): spread, not a fixed step.
    (The R5 gate decides the hold once per answer; the pacing gate puts it on the host.)"""
    from scrapy.http import Response
    from scrapy.utils.test import get_crawler

    from scrapy_walsh_research.gates.retry import RetryMiddleware
    from scrapy_walsh_research.spiders.targets import TargetsSpider

    crawler = get_crawler(
        TargetsSpider,
        {
            "WALSH_RETRY_BASE_DELAY": 1.0,
            "WALSH_RETRY_TIMES": 10,
            "WALSH_STATE_DIR": str(tmp_path),
            "DOWNLOADER_MIDDLEWARES": {RETRY_MW: 550},  # the R5 gate in the chain: it retries
        },
    )
    (tmp_path / "urls.txt").write_text("http://j.test/x\n")
    crawler.spider = TargetsSpider.from_crawler(crawler, list=str(tmp_path / "urls.txt"))
    mw = RetryMiddleware(crawler)
    holds: list[float] = []
    import scrapy

    for attempt in (0, 2):
        for _ in range(40):
            request = scrapy.Request("http://j.test/x", meta={"retry_times": attempt})
            answer = Response(request.url, status=503, request=request)
            hold = mw.backoff.after(request, response=answer)
            assert mw._retry(request, "HTTP 503", hold) is not None
            assert hold.seconds is not None and hold.by == "backoff"
            holds.append(hold.seconds)
    first, third = holds[:40], holds[40:]
    assert all(0 <= d <= 1.0 + 0.01 for d in first) and all(0 <= d <= 4.0 + 0.01 for d in third)
    assert max(third) - min(third) > 1.0  # jitter spreads the waits
    assert sum(third) / 40 > sum(first) / 40  # and they grow with the attempt


@pytest.mark.parametrize("in_chain", [True, False])
def test_a_backoff_is_planned_only_while_the_r5_gate_is_in_the_chain(tmp_path, in_chain):
    """Whether R5 retries is read from the chain Scrapy builds, before any
    gate is built: the pacing gate (built after the retry gate, or without
    it) asks the same decision either way."""
    import scrapy
    from scrapy.http import Response
    from scrapy.utils.test import get_crawler

    from scrapy_walsh_research._runtime.context import CrawlContext
    from scrapy_walsh_research.scheduling.backoff import Backoff

    crawler = get_crawler(
        settings_dict={
            "WALSH_STATE_DIR": str(tmp_path),
            "DOWNLOADER_MIDDLEWARES": {RETRY_MW: 550 if in_chain else None},
        }
    )
    request = scrapy.Request("http://p.test/x")
    hold = (
        CrawlContext.for_crawler(crawler)
        .service(Backoff)
        .after(request, response=Response(request.url, status=503, request=request))
    )
    assert (hold.backoff is not None) is in_chain
    assert hold.retry_after is None


@pytest_twisted.ensureDeferred
async def test_a_backoff_holds_the_host_for_the_step_drawn(server, tmp_path, monkeypatch):
    """A 503 without Retry-After holds its host for the drawn backoff step, at
    the origin: the retry and the host's next target wait it out. (The step is
    drawn at its top, 6 s, so the wait is longer than the 1 s interval.)"""
    monkeypatch.setattr(r5_backoff.random, "uniform", lambda low, high: high)
    url = target(server, "bo.test", "/x", once_then_ok(503, {}))
    other = target(server, "bo.test", "/y", Reply(200, "ok"))
    settings = base_settings(server, tmp_path / "s", WALSH_RETRY_BASE_DELAY=6.0)
    res = await crawl(settings, [url, other], tmp_path)
    first = server.origin.hits_for("bo.test", "/x")[0]
    after = [h for h in server.origin.hits_for("bo.test") if h.t > first.t]
    assert after and min(h.t for h in after) - first.t >= 6.0 - 0.05, [h.t - first.t for h in after]
    assert sorted(i["outcome"] for i in res.items) == ["fetched", "fetched"]


# -- Retry-After is a promise to the site ---------------------------------------------


@pytest_twisted.ensureDeferred
async def test_a_given_up_retry_after_still_holds_the_host_and_skips_its_targets(server, tmp_path):
    huge = target(server, "gone.test", "/huge", Reply(429, "tomorrow", {"Retry-After": "86400"}))
    later = [target(server, "gone.test", f"/p/{i}", Reply(200, "ok")) for i in range(2)]
    res = await crawl(base_settings(server, tmp_path / "s"), [huge, *later], tmp_path)
    by_url = {i["url"]: i for i in res.items}
    assert (by_url[huge]["outcome"], by_url[huge]["status"]) == ("failed", 429)
    for url in later:
        assert (by_url[url]["outcome"], by_url[url]["rule"]) == ("skipped", "R5")
        assert "Retry-After" in by_url[url]["reason"]
    assert [h.path for h in server.origin.hits_for("gone.test")] == ["/robots.txt", TDMREP, "/huge"]


@pytest_twisted.ensureDeferred
async def test_a_retry_after_hold_survives_a_restart(server, tmp_path):
    state = tmp_path / "s"
    huge = target(server, "gone.test", "/huge", Reply(503, "maintenance", {"Retry-After": "7200"}))
    await crawl(base_settings(server, state), [huge], tmp_path)
    before = len(server.origin.hits)
    later = target(server, "gone.test", "/later", Reply(200, "ok"))
    res = await crawl(base_settings(server, state), [later], tmp_path)
    assert (res.items[0]["outcome"], res.items[0]["rule"]) == ("skipped", "R5")
    assert [h for h in server.origin.hits[before:] if h.host == "gone.test"] == []


@pytest_twisted.ensureDeferred
async def test_a_retry_after_on_robots_txt_holds_the_host(server, tmp_path):
    """robots.txt is never retried by R5, yet its Retry-After binds the host,
    also for the next run: the next robots.txt attempt waits for it."""
    state = tmp_path / "s"
    server.origin.route("rb.test", "/robots.txt", once_then_ok(503, {"Retry-After": "4"}))
    server.origin.route("rb.test", "/a", Reply(200, "ok"))
    # the failed fetch's own backoff (1 s) is shorter than the site's Retry-After
    # (the first run does not wait for robots.txt: WALSH_POLICY_WAIT=0)
    settings = base_settings(server, state, WALSH_POLICY_RETRY_DELAY=1)
    first = await crawl({**settings, "WALSH_POLICY_WAIT": 0}, [server.url("rb.test", "/a")],
                        tmp_path)  # fmt: skip
    second = await crawl(settings, [server.url("rb.test", "/a")], tmp_path)
    robots = server.origin.hits_for("rb.test", "/robots.txt")
    assert len(robots) == 2 and robots[1].t - robots[0].t >= 4.0
    assert (first.items[0]["outcome"], first.items[0]["rule"]) == ("skipped", "R2")
    assert second.items[0]["outcome"] == "fetched"


@pytest_twisted.ensureDeferred
async def test_a_429_that_is_not_retried_still_holds_the_host(server, tmp_path):
    """The blocklist fetch is never retried (dont_retry); its 429's
    Retry-After still binds the operator's host."""
    from tests.support.crawling import BLOCKLIST_HOST, BLOCKLIST_PATH

    server.origin.route(
        BLOCKLIST_HOST, BLOCKLIST_PATH, Reply(429, "slow down", {"Retry-After": "4"})
    )
    server.origin.route(BLOCKLIST_HOST, "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    server.origin.route(BLOCKLIST_HOST, "/page", Reply(200, "ok"))
    # (no wait for a first list: the crawl goes on without one at once, spec §5.2)
    settings = base_settings(server, tmp_path / "s", WALSH_POLICY_WAIT=0)
    await crawl(settings, [server.url(BLOCKLIST_HOST, "/page")], tmp_path)
    hits = server.origin.hits_for(BLOCKLIST_HOST)
    listed = [h.path for h in hits]
    assert listed.index("/robots.txt") == listed.index(BLOCKLIST_PATH) + 1
    after = hits[listed.index(BLOCKLIST_PATH) + 1]
    assert after.t - hits[listed.index(BLOCKLIST_PATH)].t >= 4.0


ABSURD = [
    "Fri, 31 Dec 99999 23:59:59 GMT",
    "Mon, 01 Jan 0000 00:00:00 GMT",
    "99999999999999999999999999999999",
    "Sun, 06 Nov 1994 08:49:37 +9999",
    "\x00\xff",
    "1e9",
]


@pytest.mark.parametrize("value", ABSURD)
def test_no_retry_after_value_raises(value):
    got = parse_retry_after(value.encode("latin-1"))
    assert got is None or 0 <= got <= MAX_RETRY_AFTER


@pytest_twisted.ensureDeferred
async def test_an_absurd_retry_after_does_not_break_the_crawl(server, tmp_path):
    urls = []
    for i, value in enumerate(ABSURD):
        urls.append(target(server, f"ab{i}.test", "/x", once_then_ok(429, {"Retry-After": value})))
    res = await crawl(base_settings(server, tmp_path / "s"), urls, tmp_path)
    assert len(res.items) == len(urls)  # one record each, no traceback lost a line
    huge = res.by_url()[urls[2]]
    assert (huge["outcome"], huge["status"]) == ("failed", 429)  # a Retry-After of "forever"


# -- property-based: any Retry-After a server sends --------------------------------


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=60), st.binary(max_size=60)))
def test_parse_retry_after_never_raises(value):
    got = parse_retry_after(value, now=NOW)
    assert got is None or 0 <= got <= MAX_RETRY_AFTER


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=10**30), st.sampled_from(["", " ", "  "]))
def test_delta_seconds_agree_with_the_number(n, pad):
    assert parse_retry_after(f"{pad}{n}{pad}", now=NOW) == min(float(n), MAX_RETRY_AFTER)


@settings(max_examples=300, deadline=None)
@given(st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(9999, 12, 31)))
def test_an_http_date_gives_the_seconds_until_it(when):
    when = when.replace(microsecond=0, tzinfo=timezone.utc)
    expected = min(max(0.0, (when - NOW).total_seconds()), MAX_RETRY_AFTER)
    assert parse_retry_after(format_datetime(when, usegmt=True), now=NOW) == expected
