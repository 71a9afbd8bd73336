"""The evidence report (``scrapy walsh-report``): built from the audit log of
a real crawl, it shows the site owner what the origin saw — every request,
its User-Agent and keyid, every denial and why, the robots.txt and blocklist
in force, and the gaps against the interval that applied — in one static page
that a real browser (headless Chromium) renders from disk."""

from __future__ import annotations

import html
import json
import math
import re
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

from scrapy_walsh_research.evidence.host_evidence import ROWS, collect
from scrapy_walsh_research.evidence.pages import host_page
from scrapy_walsh_research.gates.useragent import USER_AGENT
from scrapy_walsh_research.identity.signing import Signer, generate_key, load_key
from scrapy_walsh_research.sandbox import Reply
from tests.support.crawling import (
    BLOCKLIST_HOST,
    BLOCKLIST_PATH,
    base_settings,
    blocklist_doc,
    crawl,
    gaps,
    json_reply,
)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def walsh_report(state: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command as an operator runs it, in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "walsh-report", "-s", f"WALSH_STATE_DIR={state}", *args],
        cwd=cwd, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip


def render(page: Path, shot: Path) -> str:
    """The DOM Chromium builds from *page* (opened from disk, network off),
    and a screenshot of it."""
    assert CHROMIUM is not None, "chromium is not installed: bash scripts/install-chromium.sh"
    flags = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--no-first-run", "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
    ]  # fmt: skip
    uri = page.resolve().as_uri()
    dom = subprocess.run(
        [*flags, "--dump-dom", uri], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    subprocess.run(
        [*flags, f"--screenshot={shot}", "--window-size=1280,2000", uri],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    return dom


def text_of(dom: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}"[^>]*>(.*?)</(?:dd|span|td|p)>', dom, re.S)
    assert found, f"#{element_id} is not in the rendered page"
    return re.sub(r"<[^>]+>", "", found.group(1)).strip()


def world(server: Any) -> list[str]:
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc("no.test")))
    server.origin.route(
        "r.test", "/robots.txt", Reply(200, "User-agent: *\nCrawl-delay: 1.5\nDisallow: /private\n")
    )
    for path in ("/a", "/b"):
        server.origin.route("r.test", path, Reply(200, "ok"))
    answers = iter([Reply(429, "slow down", {"Retry-After": "3"}), Reply(200, "ok")])
    server.origin.route("r.test", "/busy", lambda hit: next(answers))
    return [
        server.url("r.test", "/a"), server.url("r.test", "/busy"), server.url("r.test", "/b"),
        server.url("r.test", "/private"), server.url("no.test", "/x"),
    ]  # fmt: skip


@pytest_twisted.ensureDeferred
async def test_the_report_shows_in_a_browser_what_the_origin_saw(server, tmp_path):
    key = tmp_path / "walsh.pem"
    generate_key(key)
    state = tmp_path / "state"
    await crawl(base_settings(server, state, WALSH_SIGNING_KEY=str(key)), world(server), tmp_path)
    seen = server.origin.hits_for("r.test")
    assert len(seen) == 6  # robots.txt, tdmrep.json, /a, /busy (429), /busy again, /b

    out = tmp_path / "report.html"
    printed = walsh_report(state, "--host", "r.test", "--out", str(out), cwd=tmp_path).stdout
    assert "6 requests to r.test" in printed
    dom = render(out, tmp_path / "report.png")
    assert (tmp_path / "report.png").stat().st_size > 10_000

    # what the origin saw, as the rendered page shows it
    assert text_of(dom, "request-count") == str(len(seen))
    smallest = float(text_of(dom, "smallest-gap").split(" s")[0])
    assert abs(smallest - min(gaps(seen))) < 0.05, (smallest, gaps(seen))
    assert smallest >= 1.5  # the Crawl-delay held ...
    assert text_of(dom, "under-count") == "0"
    rows = re.findall(r'<tr class="request[^"]*">(.*?)</tr>', dom, re.S)
    assert len(rows) == 6
    # one User-Agent and one key for every request: said once
    assert text_of(dom, "user-agent") == f"{USER_AGENT} (every request)"
    keyid = Signer(load_key(key)).keyid
    assert text_of(dom, "keyid") == f"every request, key id {keyid}"
    # ... and the interval after the 429 is its Retry-After, not the Crawl-delay
    # (the answer's own cell: a time of day like 15:16:04.429 holds "429" too)
    after_429 = rows[next(i for i, r in enumerate(rows) if "<td>429</td>" in r) + 1]
    cells = re.findall(r'<td class="n">([^<]*)</td>', after_429)
    gap, interval = (float(c.split(" s")[0]) for c in cells)
    assert interval >= 2.9 and gap >= interval - 0.001, cells
    # the denial, with its reason; the robots.txt version in force
    (denial,) = re.findall(r'<tr class="denied">(.*?)</tr>', dom, re.S)
    assert "/private" in denial and ">R2<" in denial and "robots.txt" in denial
    robots = server.origin.hits_for("r.test", "/robots.txt")
    assert len(robots) == 1 and re.search(r"<td class=\"mono\">[0-9a-f]{64}</td>", dom)
    # self-contained: nothing to fetch
    html = out.read_text()
    assert not re.search(r'(src|href)="?https?:', html) and "<script" not in html


@pytest_twisted.ensureDeferred
async def test_the_report_names_the_blocklist_entry_that_denied_a_host(server, tmp_path):
    state = tmp_path / "state"
    await crawl(base_settings(server, state), world(server), tmp_path)
    data = json.loads(walsh_report(state, "--host", "no.test", "--json", cwd=tmp_path).stdout)
    assert data["requests"] == []  # not one request reached no.test ...
    assert [d["rule"] for d in data["not_fetched"]] == ["R3"]  # ... and why
    assert data["blocklist_entries"] == ["no.test"]


@pytest_twisted.ensureDeferred
async def test_the_summary_links_every_host_to_its_page(server, tmp_path):
    state = tmp_path / "state"
    await crawl(base_settings(server, state), world(server), tmp_path)
    out = tmp_path / "all.html"
    walsh_report(state, "--out", str(out), cwd=tmp_path)
    dom = render(out, tmp_path / "all.png")
    links = re.findall(r'<a href="([^"]+)">([^<]+)</a>', dom)
    assert {host for _, host in links} >= {"r.test", "no.test", BLOCKLIST_HOST}
    for href, host in links:
        page = (out.parent / href).read_text()
        assert f'<span id="host">{host}</span>' in page
    r_test = next(r for r in re.findall(r"<tr[^>]*>(.*?)</tr>", dom, re.S) if ">r.test<" in r)
    # requests, targets denied, skipped or failed
    assert re.findall(r'<td class="n">([^<]*)</td>', r_test)[:3] == ["6", "1", "0"]


@pytest_twisted.ensureDeferred
async def test_the_report_counts_denials_apart_from_404s_and_r8_skips(server, tmp_path):
    """A 404 and a target not due (R8) are not denials: the report names
    what each count counts."""
    server.origin.route("c.test", "/robots.txt", Reply(200, "User-agent: *\nDisallow: /private\n"))
    server.origin.route("c.test", "/a", Reply(200, "ok"))
    server.origin.route("c.test", "/gone", Reply(404, "no"))
    state = tmp_path / "state"
    first = [server.url("c.test", p) for p in ("/a", "/gone", "/private")]
    settings = base_settings(server, state, WALSH_RUN_INTERVAL=86400)
    await crawl(settings, first, tmp_path / "1")
    await crawl(settings, first[:1], tmp_path / "2")  # /a is not due again: skipped, R8
    printed = walsh_report(state, "--host", "c.test", "--out", "c.html", cwd=tmp_path).stdout
    assert "targets not fetched: 1 denied, 2 skipped or failed" in printed
    data = json.loads(walsh_report(state, "--host", "c.test", "--json", cwd=tmp_path).stdout)
    assert data["not_fetched_by_outcome"] == {"denied (R2)": 1, "failed": 1, "skipped (R8)": 1}
    page = (tmp_path / "c.html").read_text()
    assert text_of(page, "denied-count") == "1"
    assert text_of(page, "not-fetched-count") == (
        "denied, your robots.txt (R2): 1; failed: 1; skipped, not too often (R8): 1")
    walsh_report(state, "--out", "all.html", cwd=tmp_path)
    summary = (tmp_path / "all.html").read_text()
    assert '<th class="n">targets denied</th><th class="n">skipped or failed</th>' in summary
    row = next(r for r in re.findall(r"<tr[^>]*>(.*?)</tr>", summary, re.S) if ">c.test<" in r)
    assert re.findall(r'<td class="n">([^<]*)</td>', row)[:3] == ["4", "1", "2"]


def entry(event: str, t: float, **fields: Any) -> dict[str, Any]:
    return {"event": event, "t": t, "ts": f"t+{t}", "host": "h.test", **fields}


def test_a_request_inside_a_retry_after_hold_is_marked_under_the_interval():
    """The marking can fail: 1.2 s after a 429 with Retry-After 5 is under
    the interval that applied, though over the 1 s floor."""
    log = [
        entry("request", 100.0, id="1", url="http://h.test/a", interval=1.0),
        entry("response", 100.1, id="1", status=429, hold=5.0, hold_until=105.1),
        entry("request", 101.2, id="2", url="http://h.test/a", interval=1.0),
        entry("request", 106.3, id="3", url="http://h.test/b", interval=1.0),
        entry("request", 107.4, id="4", url="http://h.test/c", interval=1.0),
    ]
    ev = collect(log, "h.test")
    assert [r.under for r in ev.requests] == [False, True, False, False]
    assert ev.requests[1].required == pytest.approx(5.1)
    assert ev.requests[2].required == pytest.approx(3.9)  # the hold ran till 105.1
    assert ev.requests[3].required == pytest.approx(1.0)  # it was over


def test_a_gap_under_the_crawl_delay_is_marked():
    log = [
        entry("request", 10.0, id="1", url="http://h.test/robots.txt", interval=1.0),
        entry("request", 11.0, id="2", url="http://h.test/a", interval=4.0),
    ]
    assert [r.under for r in collect(log, "h.test").requests] == [False, True]


def test_what_a_hostile_server_put_in_the_log_is_shown_as_text_never_run(tmp_path):
    evil = '<img src=x onerror="document.title=1"><script>document.title=2</script>'
    log = [
        entry("request", 1.0, id="1", url=f"http://h.test/{evil}", user_agent=evil, interval=1.0),
        entry("response", 1.1, id="1", error=evil),
        entry("decision", 2.0, url="http://h.test/x", outcome="failed", rule="R5", reason=evil),
    ]
    out = tmp_path / "h.html"
    out.write_text(host_page(collect(log, "h.test")))
    dom = render(out, tmp_path / "h.png")
    assert "<img" not in dom and "<script" not in dom
    assert "Walsh-Research evidence: h.test" in dom  # the title was not rewritten
    assert "onerror" in dom  # shown, as text


def test_without_an_audit_log_the_command_says_where_it_looked(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "scrapy", "walsh-report", "-s", f"WALSH_STATE_DIR={tmp_path / 'x'}",
         "--host", "a.test"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "no audit log at" in done.stderr and "WALSH_STATE_DIR" in done.stderr
    assert not (tmp_path / "x" / "audit.sqlite3").exists()  # nothing created in passing


def test_a_gap_across_the_since_cut_is_still_measured():
    """Found by review: --since between two requests 0.3 s apart listed the
    second with no gap, and reported nothing under the interval."""
    log = [
        entry("request", 100.0, id="1", url="http://h.test/a", interval=1.0),
        entry("request", 100.3, id="2", url="http://h.test/b", interval=1.0),
    ]
    ev = collect(log, "h.test", since=100.1)
    assert [r.path for r in ev.requests] == ["/b"]
    assert ev.requests[0].gap == pytest.approx(0.3) and len(ev.under) == 1


def logged_requests(host: str, n: int, step: float, start: float = 0.0) -> list[dict[str, Any]]:
    return [
        {"t": start + i * step, "ts": f"T{i:07d}", "event": "request", "host": host,
         "id": f"{host}-{i}", "url": f"http://{host}/{i}", "interval": 1.0, "kind": "target"}
        for i in range(n)
    ]  # fmt: skip


def test_a_request_under_the_interval_is_listed_however_old():
    """A request under the interval older than the latest ROWS requests is
    listed in the report all the same (HTML and JSON): the breaches have a
    table of their own. (Only counted: it hid among rows not listed.)"""
    log = logged_requests("big.test", ROWS + 500, 1.5)
    log.insert(10, {**log[10], "t": log[9]["t"] + 0.2, "ts": "UNDER-0.2s", "id": "early"})
    ev = collect(log, "big.test")
    assert len(ev.under) == 1
    page = host_page(ev)
    data = json.dumps(ev.as_json())
    assert "UNDER-0.2s" in data, "the breach is not in the JSON report"
    assert "UNDER-0.2s" in page, "the breach is not in the HTML report"


def _peak(log: list[dict[str, Any]]) -> int:
    tracemalloc.start()
    try:
        collect(iter(log), "h.test")
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_one_hosts_report_holds_bounded_memory_however_many_requests_are_under_the_interval():
    """A host whose every gap is under the interval (a misconfigured
    Crawl-delay, clocks apart) is reported in about the memory of one that
    kept it: the breaches are counted, the latest ROWS kept."""
    n = 150_000
    paced = logged_requests("h.test", n, 1.5)  # every gap over the interval
    under = logged_requests("h.test", n, 0.9)  # every gap under it
    base = _peak(paced)
    grown = _peak(under)
    assert grown < 1.5 * base, (
        f"peak {grown / 1e6:.0f} MB vs {base / 1e6:.0f} MB for the same log size"
    )


# -- a page a site owner reads without the contract ----------------------------------


def visible_text(dom: str) -> str:
    """What a reader sees: the body without tags, titles or the style sheet."""
    body = re.sub(r"<(style|title)>.*?</\1>", " ", dom, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body))


def glossary_terms(dom: str) -> list[str]:
    found = re.search(r'id="glossary"[^>]*>(.*?)</dl>', dom, re.S)
    assert found, "the page does not explain its words"
    return [re.sub(r"<[^>]+>", "", t) for t in re.findall(r"<dt>(.*?)</dt>", found.group(1))]


@pytest_twisted.ensureDeferred
async def test_a_site_owner_reads_every_code_in_words_and_no_operator_advice(server, tmp_path):
    """Two runs as a user makes them: the second inside the run interval (an
    R8 skip, whose log reason tells the operator which setting to change),
    the list naming a page twice (the operator's own duplicate). The page a
    browser renders explains each code and kind of request it shows, gives
    no setting or command line, and counts the duplicates apart from what
    the site did."""
    server.origin.route("o.test", "/robots.txt", Reply(200, "User-agent: *\nDisallow: /private\n"))
    server.origin.route("o.test", "/a", Reply(200, "ok"))
    state = tmp_path / "state"
    targets = [server.url("o.test", p) for p in ("/a", "/a", "/private")]
    settings = base_settings(server, state, WALSH_RUN_INTERVAL=3600)
    first = await crawl(settings, targets, tmp_path / "1")
    second = await crawl(settings, targets, tmp_path / "2")
    outcomes = [i["outcome"] for i in first.items + second.items]
    assert outcomes.count("duplicate") == 2 and outcomes.count("skipped") == 1, outcomes
    r8 = next(i for i in second.items if i["outcome"] == "skipped")
    assert r8["rule"] == "R8" and "WALSH_RUN_INTERVAL=0" in r8["reason"]  # the operator's

    walsh_report(state, "--host", "o.test", "--out", "o.html", cwd=tmp_path)
    dom = render(tmp_path / "o.html", tmp_path / "o.png")
    text = visible_text(dom)
    assert "WALSH_" not in text and " -s " not in text and "run with" not in text, text
    terms = " ".join(glossary_terms(dom))
    for code in sorted(set(re.findall(r"\b(R[1-9]|PREF)\b", text))):
        assert f"{code}:" in terms, f"{code} is on the page, not explained"
    kinds = set(re.findall(r'<tr class="request[^"]*">(?:<td[^>]*>.*?</td>){2}<td>([^<]+)</td>',
                           dom, re.S))  # fmt: skip
    assert {"robots.txt", "tdmrep.json", "a listed page"} <= kinds, kinds
    assert kinds <= set(glossary_terms(dom)), kinds
    assert not re.search(r"\b(unsigned|keyid|set by|tdmrep(?!\.json))\b", text), text
    assert text_of(dom, "keyid").startswith("no") and "signed (Web Bot Auth)" in terms
    # the R8 row: when the page was fetched, in words
    (skip,) = re.findall(r'<tr class="skipped">(.*?)</tr>', dom, re.S)
    assert "not too often" in skip and re.search(r"fetched \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", skip)
    # the list's own duplicates: apart, not against the site
    assert text_of(dom, "skipped-count") == "1" and text_of(dom, "list-line-count") == "2"
    assert len(re.findall(r'<tr class="duplicate">', dom)) == 2
    assert "duplicate" not in text_of(dom, "not-fetched-count")
    data = json.loads(walsh_report(state, "--host", "o.test", "--json", cwd=tmp_path).stdout)
    assert data["not_fetched_by_outcome"] == {"denied (R2)": 2, "skipped (R8)": 1}
    assert data["list_lines_by_outcome"] == {"duplicate": 2}
    walsh_report(state, "--out", "all.html", cwd=tmp_path)
    summary = (tmp_path / "all.html").read_text()
    row = next(r for r in re.findall(r"<tr[^>]*>(.*?)</tr>", summary, re.S) if ">o.test<" in r)
    assert re.findall(r'<td class="n">([^<]*)</td>', row)[1:3] == ["2", "1"]


def timed_log(gaps_s: list[float], start: float = 1_795_000_000.0) -> list[dict[str, Any]]:
    """Requests to h.test *gaps_s* apart, stamped as the audit log stamps them."""
    from scrapy_walsh_research.core.timestamps import utc_iso

    t, log = start, []
    for i, gap in enumerate([0.0, *gaps_s]):
        t += gap
        log.append({"event": "request", "t": t, "ts": utc_iso(t, "milliseconds"), "id": str(i),
                    "host": "h.test", "url": f"http://h.test/{i}", "interval": 1.0,
                    "kind": "target", "interval_set_by": "floor"})  # fmt: skip
    return log


def test_the_gap_chart_draws_gaps_of_minutes_at_their_true_height(tmp_path):
    """Gaps between runs (58 s, 937 s) beside gaps of a second: each bar as
    tall as its gap on the chart's log scale, none cut off at a cap; the
    long ones labelled with their length."""
    out = tmp_path / "h.html"
    out.write_text(host_page(collect(timed_log([1.0, 1.5, 58.0, 937.0, 1.2]), "h.test")))
    dom = render(out, tmp_path / "h.png")
    bars = {float(g): float(h) for h, g in re.findall(
        r'<rect class="gap[^"]*"[^>]*height="([\d.]+)"[^>]*>\s*<title>[^<]*gap ([\d.]+) s', dom)}
    assert sorted(bars) == [1.0, 1.2, 1.5, 58.0, 937.0], bars
    heights = [bars[g] for g in sorted(bars)]
    assert heights == sorted(heights) and len(set(heights)) == len(heights), bars
    # log scale: as many pixels from 58 s to 937 s as the ratio of the two says
    per_decade = (bars[58.0] - bars[1.0]) / math.log10(58.0)
    assert bars[937.0] - bars[58.0] == pytest.approx(per_decade * math.log10(937 / 58), abs=1)
    labels = re.findall(r'<text class="value"[^>]*>([^<]+)</text>', dom)
    assert "58 s" in labels and "15 min 37 s" in labels, labels
    assert "▲" not in dom


WRAPPED = r"""<script>
const times = [...document.querySelectorAll('body *')].filter(e => !e.children.length
  && /^\s*\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d\S*\s*$/.test(e.textContent));
const wrapped = times.filter(e => {
  const r = document.createRange(); r.selectNodeContents(e); return r.getClientRects().length > 1;
}).map(e => e.textContent);
document.body.setAttribute('data-wrapped', JSON.stringify(wrapped));
document.body.setAttribute('data-times', times.length);
</script>"""


def test_times_are_never_wrapped_and_sitemaps_read_as_urls(tmp_path):
    """In a narrow window, every time on the page stays on one line (they
    broke mid-string), and a sitemap verdict lists its sitemaps as URLs (it
    showed a Python list)."""
    log = timed_log([1.0, 1.1])
    maps = ["http://h.test/sitemap.xml", "http://h.test/news.xml"]
    log.append({**log[-1], "event": "sitemap", "url": "http://h.test/2", "state": "trusted",
                "sitemaps": maps})  # fmt: skip
    log.append({**log[-1], "event": "wait", "url": "http://h.test/robots.txt", "state": "waiting",
                "answer": "503", "tries": 1, "next_try": log[-1]["ts"],
                "wait_until": log[-1]["ts"]})  # fmt: skip
    page = host_page(collect(log, "h.test"))
    out = tmp_path / "h.html"
    out.write_text(page.replace("</body>", WRAPPED + "</body>"))
    assert CHROMIUM is not None
    dom = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--window-size=640,2000", "--dump-dom", out.resolve().as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    found = re.search(r'data-wrapped="([^"]*)" data-times="(\d+)"', dom)
    assert found, "the script did not run"
    assert int(found.group(2)) >= 7 and html.unescape(found.group(1)) == "[]", found.groups()
    (row,) = re.findall(r'<tr class="sitemap">(.*?)</tr>', dom, re.S)
    assert all(f">{u}<" in row for u in maps) and "[" not in visible_text(row), row


@pytest.mark.parametrize(
    ("reason", "shown"),
    [
        ("fetched 2026-11-28T06:02:39+00:00, less than WALSH_RUN_INTERVAL=86400 s ago; due again "
         "2026-11-29T06:02:39+00:00. To fetch it now anyway, run with -s WALSH_RUN_INTERVAL=0",
         "fetched 2026-11-28 06:02:39 UTC, less than the bot's run interval (1 day) ago; due "
         "again 2026-11-29 06:02:39 UTC."),
        ("HTTP 503 with Retry-After 7200 s, beyond WALSH_RETRY_MAX_DELAY (600 s): gave up",
         "HTTP 503 with Retry-After 7200 s, beyond the longest wait the bot accepts (600 s): "
         "gave up"),
        ("opted out: blocklist entry 'a.test' (WALSH_BLOCKLIST_EXTRA)",
         "opted out: blocklist entry 'a.test' (the operator's own additions to the blocklist)"),
    ],
)  # fmt: skip
def test_a_reason_is_shown_to_the_site_owner_without_settings_or_advice(reason, shown):
    from scrapy_walsh_research.evidence.glossary import for_site_owner

    assert for_site_owner(reason) == shown
