"""The targets spider: one record per list line, metadata only, bad lines reported."""

from __future__ import annotations

import hashlib
import logging
import re
import subprocess

import pytest
import pytest_twisted
from OpenSSL import SSL
from scrapy.exceptions import DownloadFailedError
from scrapy.utils.defer import deferred_from_coro
from twisted.python.failure import Failure
from twisted.web.client import ResponseNeverReceived

from scrapy_walsh_research.core.records import OUTCOMES
from scrapy_walsh_research.core.target_list import MAX_LINE_CHARS, read_list
from scrapy_walsh_research.errors import failure_reason
from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.sandbox.crawl import crawl_spider
from scrapy_walsh_research.spiders.targets import TargetsSpider
from tests.support.crawling import TDMREP, base_settings, crawl
from tests.support.processes import SCRAPY, new_project

BODY = b"<html><body>secret page content</body></html>"


@pytest_twisted.ensureDeferred
async def test_exactly_one_record_per_line_with_metadata_and_no_body(server, tmp_path, caplog):
    o = server.origin
    o.route("t.test", "/robots.txt", Reply(200, "User-agent: *\nDisallow: /no\n"))
    o.route(
        "t.test",
        "/page",
        Reply(
            200,
            BODY,
            {
                "Content-Type": "text/html",
                "ETag": '"v1"',
                "Last-Modified": "Sat, 21 Nov 2026 00:00:00 GMT",
            },
        ),
    )
    o.route("t.test", "/gone", Reply(404, "nope"))
    page = server.url("t.test", "/page")
    lines = [
        "# a comment",
        "",
        page,
        "ftp://t.test/file",
        "not a url at all",
        page.replace("/page", "/page/#frag"),  # same canonical URL
        server.url("t.test", "/no"),
        server.url("t.test", "/gone"),
        "http://closed.test:9/x",
    ]
    # (the closed port's robots.txt is not waited for: WALSH_POLICY_WAIT=0)
    settings = base_settings(server, tmp_path / "s", WALSH_POLICY_WAIT=0)
    with caplog.at_level(logging.WARNING):
        res = await crawl(settings, lines, tmp_path)
    got = sorted(res.items, key=lambda i: i["line"])
    assert [(i["line"], i["outcome"], i["rule"]) for i in got] == [
        (3, "fetched", None),
        (4, "invalid", None),
        (5, "invalid", None),
        (6, "duplicate", None),
        (7, "denied", "R2"),
        (8, "failed", None),
        (9, "skipped", "R2"),  # robots.txt of a closed port is unreachable: fail closed
    ]
    fetched = got[0]
    assert fetched["url"] == page and fetched["canonical_url"] == page
    assert fetched["status"] == 200
    assert fetched["content_type"] == "text/html"
    assert fetched["content_length"] == len(BODY)
    assert fetched["sha256"] == hashlib.sha256(BODY).hexdigest()
    assert fetched["etag"] == '"v1"'
    assert fetched["last_modified"] == "Sat, 21 Nov 2026 00:00:00 GMT"
    assert fetched["final_url"] == page and fetched["fetched_at"]
    assert got[4]["reason"] and got[5]["status"] == 404
    assert all(BODY.decode() not in str(v) for i in got for v in i.values())
    assert all(i["outcome"] in OUTCOMES for i in got)
    assert "line 4 is invalid (not an absolute http(s) URL: its scheme is ftp)" in caplog.text
    assert "line 5 is invalid" in caplog.text
    assert res.stats["walsh/outcome/invalid"] == 2
    assert [h.path for h in server.origin.hits_for("t.test")] == [
        "/robots.txt", TDMREP, "/page", "/gone"]  # fmt: skip


def test_a_missing_list_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="-a list=FILE"):
        TargetsSpider()
    with pytest.raises(ValueError, match="does not exist"):
        TargetsSpider(list=str(tmp_path / "nope.txt"))
    with pytest.raises(ValueError, match="is not a file"):
        TargetsSpider(list=str(tmp_path))


def test_a_list_under_the_home_folder_is_found_when_the_shell_left_the_tilde(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "urls.txt").write_text("http://a.test/\n")
    assert TargetsSpider(list="~/urls.txt").list_path == tmp_path / "urls.txt"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["-a", "list=nope.txt"], "URL list 'nope.txt' does not exist."),
        ([], "needs one URL list: scrapy crawl targets -a list=FILE"),
    ],
)
def test_scrapy_crawl_with_a_missing_list_says_so_in_one_line_and_fails(tmp_path, args, says):
    """A user's slip: one ERROR line, exit 1, no traceback (Scrapy's crawl task
    would print asyncio's "Task exception was never retrieved" and one)."""
    project = new_project(tmp_path)
    run = subprocess.run([SCRAPY, "crawl", "targets", *args], cwd=project, capture_output=True,
                         text=True, timeout=120, check=False)  # fmt: skip
    assert run.returncode == 1, run.stderr[-2000:]
    errors = [line for line in run.stderr.splitlines() if "ERROR" in line or "Error" in line]
    assert len(errors) == 1 and says in errors[0], run.stderr[-3000:]
    assert "Traceback" not in run.stderr and "never retrieved" not in run.stderr


@pytest_twisted.ensureDeferred
async def test_a_long_crawl_logs_progress_with_an_eta_from_the_busiest_host(
    server, tmp_path, caplog
):
    """Every LOGSTATS_INTERVAL: done/total, outcomes by rule, and an ETA no
    schedule could beat (here: the one host's chain of 1 s intervals)."""
    server.origin.route("slow.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    for i in range(5):
        server.origin.route("slow.test", f"/p/{i}", Reply(200, "x"))
    lines = [server.url("slow.test", f"/p/{i}") for i in range(5)] + ["not a url"]
    settings = base_settings(server, tmp_path / "s", LOGSTATS_INTERVAL=1.5)
    with caplog.at_level(logging.INFO, logger="scrapy_walsh_research.extensions.progress"):
        await crawl(settings, lines, tmp_path)
    progress = [
        r.getMessage() for r in caplog.records if r.name == "scrapy_walsh_research.extensions.progress"
    ]
    assert any(
        re.search(r"Progress: [1-4]/6 targets .*ETA at least [1-4] s \(busiest host slow.test", p)
        for p in progress
    ), progress
    assert progress[-1].startswith("Progress: 6/6 targets (100 %); outcomes: fetched 5, invalid 1")


@pytest.mark.parametrize(("project", "expected"), [(None, 1), (16, 16)])
def test_item_concurrency_is_one_unless_the_project_sets_it(project, expected):
    """One record per response: Scrapy's 100 item tasks per response are pure
    cost (1.3 ms of CPU per request, bench/cost_bench.py); a project's own
    CONCURRENT_ITEMS still wins."""
    from scrapy.utils.test import get_crawler

    from scrapy_walsh_research.spiders.targets import TargetsSpider

    settings = {} if project is None else {"CONCURRENT_ITEMS": project}
    crawler = get_crawler(TargetsSpider, settings_dict=settings)
    assert crawler.settings.getint("CONCURRENT_ITEMS") == expected


#: The list format (docs/quickstart.rst), as a table: a file's bytes -> every
#: line that gets a record, (number, URL or text, why it is invalid or None).
LIST_FORMAT = {
    "a byte-order mark is not part of line 1": (
        b"\xef\xbb\xbfhttp://a.test/x\n",
        [(1, "http://a.test/x", None)],
    ),
    "CRLF, CR and LF line ends alike": (
        b"http://a.test/1\r\nhttp://a.test/2\rhttp://a.test/3\n\nhttp://a.test/5",
        [(1, "http://a.test/1", None), (2, "http://a.test/2", None),
         (3, "http://a.test/3", None), (5, "http://a.test/5", None)],
    ),
    "a note after whitespace is not sent": (
        b"http://a.test/x  # the news feed\nhttp://a.test/y\t#tab\n",
        [(1, "http://a.test/x", None), (2, "http://a.test/y", None)],
    ),
    "a # right after the URL is its fragment": (
        b"http://a.test/guide#install\nhttp://a.test/guide#install # note\n",
        [(1, "http://a.test/guide#install", None), (2, "http://a.test/guide#install", None)],
    ),
    "comments and blank lines get no record": (
        b"# heading\n   # indented\n \t \n\nhttp://a.test/x\n",
        [(5, "http://a.test/x", None)],
    ),
    "leading and trailing whitespace is dropped": (
        b"   http://a.test/x \t \n",
        [(1, "http://a.test/x", None)],
    ),
    "whitespace inside: two URLs on a line, or a space": (
        b"http://a.test/x http://a.test/y\nhttp://a.test/a b\n",
        [(1, "http://a.test/x http://a.test/y", "whitespace inside the URL"),
         (2, "http://a.test/a b", "whitespace inside the URL")],
    ),
    "a control character": (b"http://a.test/\x00x\n", [(1, "http://a.test/\x00x", "U+0000")]),
    "invisible characters at the ends are dropped, inside they are named": (
        "\u200bhttp://a.test/x\u2060\nhttp://a.test/in\u200bside\n".encode(),
        [(1, "http://a.test/x", None), (2, "http://a.test/in\u200bside", "U+200B")],
    ),
    "UTF-16 with its byte-order mark (Notepad's 'Unicode')": (
        "http://a.test/1\r\nhttp://a.test/2\r\n".encode("utf-16"),
        [(1, "http://a.test/1", None), (2, "http://a.test/2", None)],
    ),
    "a note needs whitespace before its #": (
        b"http://a.test/x# a note\n",
        [(1, "http://a.test/x# a note", "a note starts at a '#' after whitespace")],
    ),
    "not UTF-8": (b"http://a.test/\xff\xfe\n", [(1, "http://a.test/\ufffd\ufffd", "not UTF-8")]),
    "not an http(s) URL, and what is missing": (
        b"ftp://a.test/f\nexample.org/page\n<html>\nhttp://a.test:99999/\n",
        [(1, "ftp://a.test/f", "not an absolute http(s) URL: its scheme is ftp"),
         (2, "example.org/page", "no scheme (write http://example.org/page or https://example.org/page"),
         (3, "<html>", "not an absolute http(s) URL"),
         (4, "http://a.test:99999/", "Port out of range")],
    ),
    "a line without a scheme is told the scheme of the list's other lines": (
        b"http://a.test/1\nhttp://a.test/2\na.test/3\nhttps://b.test/1\n",
        [(1, "http://a.test/1", None), (2, "http://a.test/2", None),
         (3, "a.test/3", "no scheme (write http://a.test/3, as the list's other lines do)"),
         (4, "https://b.test/1", None)],
    ),
}


@pytest.mark.parametrize("case", sorted(LIST_FORMAT))
def test_the_list_format(tmp_path, case):
    data, expected = LIST_FORMAT[case]
    path = tmp_path / "urls.txt"
    path.write_bytes(data)
    got = [(line.number, line.text, line.invalid) for line in read_list(path)]
    assert [(n, t) for n, t, _ in got] == [(n, t) for n, t, _ in expected]
    for (_, _, why), (_, _, want) in zip(got, expected, strict=True):
        assert (why is None) if want is None else (want in str(why)), (why, want)


def test_a_huge_line_is_invalid_read_in_bounded_pieces_and_the_next_lines_keep_their_numbers(
    tmp_path,
):
    path = tmp_path / "urls.txt"
    huge = "http://a.test/" + "x" * (3 * MAX_LINE_CHARS)
    path.write_text(f"http://a.test/1\n{huge}\nhttp://a.test/3\n{huge}")
    got = [(line.number, line.invalid) for line in read_list(path)]
    assert [n for n, _ in got] == [1, 2, 3, 4]
    assert got[0][1] is None and got[2][1] is None
    assert f"a line of {len(huge)} characters" in got[1][1]
    assert f"a line of {len(huge)} characters" in got[3][1]


@pytest_twisted.ensureDeferred
async def test_every_line_of_a_careless_list_gets_exactly_one_record(server, tmp_path):
    """A BOM, CRLF, a note, a URL longer than URLLENGTH_LIMIT (Scrapy's
    UrlLengthMiddleware would drop it without a trace), stray text, a
    fragment duplicate: one record each, and only real targets are sent."""
    o = server.origin
    o.route("t.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    o.route("t.test", "/page", Reply(200, "ok"))
    o.route("t.test", "/feed", Reply(200, "ok"))
    page, feed = server.url("t.test", "/page"), server.url("t.test", "/feed")
    long_url = server.url("t.test", "/long?q=" + "a" * 2100)
    lines = [
        "\ufeff" + page,
        f"{feed}   # the news feed",
        long_url,
        "not a url",
        "<html><body>pasted page</body></html>",
        page + "#top",
        "# a comment",
        "",
        "http://t.test/a b",
    ]
    path = tmp_path / "urls.txt"
    path.write_bytes("\r\n".join(lines).encode() + b"\r\n")
    settings = base_settings(server, tmp_path / "s")
    items, crawler = await deferred_from_coro(crawl_spider(TargetsSpider, settings, list=str(path)))
    got = sorted(items, key=lambda i: i["line"])
    assert [(i["line"], i["outcome"]) for i in got] == [
        (1, "fetched"), (2, "fetched"), (3, "invalid"), (4, "invalid"), (5, "invalid"),
        (6, "duplicate"), (9, "invalid"),
    ]
    assert got[0]["url"] == page and got[1]["url"] == feed
    assert "URLLENGTH_LIMIT (2083)" in got[2]["reason"] and got[2]["url"] == long_url
    assert all("not an absolute http(s) URL" in i["reason"] for i in got[3:5])
    assert "whitespace" in got[6]["reason"]
    assert [h.path for h in server.origin.hits_for("t.test")] == [
        "/robots.txt", TDMREP, "/page", "/feed"]  # fmt: skip
    assert crawler.stats.get_value("walsh/outcome/invalid") == 4


@pytest_twisted.ensureDeferred
async def test_a_file_that_is_no_list_gets_its_records_without_a_warning_per_line(
    server, tmp_path, caplog
):
    """A binary passed by mistake has hundreds of "lines": each gets its
    invalid record, and the log names the first 20, then says it stops."""
    lines = [f"\x7fELF junk {i}" for i in range(25)]
    with caplog.at_level(logging.WARNING, logger="scrapy_walsh_research.spiders.targets"):
        res = await crawl(base_settings(server, tmp_path / "s"), lines, tmp_path)
    assert [i["outcome"] for i in res.items] == ["invalid"] * 25
    said = [r.getMessage() for r in caplog.records if "invalid" in r.getMessage()]
    assert len(said) == 21 and said[-1].startswith("20 invalid lines: further ones are not logged")


@pytest_twisted.ensureDeferred
async def test_a_list_of_only_comments_says_so(server, tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        res = await crawl(base_settings(server, tmp_path / "s"), ["# to do", ""], tmp_path)
    assert res.items == [] and "has no targets: only comments and blank lines" in caplog.text


@pytest_twisted.ensureDeferred
async def test_a_url_within_a_raised_urllength_limit_is_fetched(server, tmp_path):
    """The bundle refuses exactly what Scrapy would not send: URLLENGTH_LIMIT."""
    o = server.origin
    o.route("t.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    long_url = server.url("t.test", "/long?q=" + "a" * 2100)
    o.route("t.test", "/long", Reply(200, "ok"))
    settings = base_settings(server, tmp_path / "s", URLLENGTH_LIMIT=4096)
    res = await crawl(settings, [long_url], tmp_path)
    assert [i["outcome"] for i in res.items] == ["fetched"]


def tls_error() -> SSL.Error:
    """What OpenSSL itself raises when a TLS client is answered in plain HTTP."""
    client = SSL.Connection(SSL.Context(SSL.TLS_METHOD), None)
    client.set_connect_state()
    with pytest.raises(SSL.WantReadError):
        client.do_handshake()
    client.bio_write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    with pytest.raises(SSL.Error) as raised:
        client.do_handshake()
    return raised.value


def as_scrapy_raises_it(cause: BaseException) -> DownloadFailedError:
    """Scrapy 2.19: ``raise DownloadFailedError(str(e)) from e`` for Twisted's
    ResponseNeverReceived, whose text is the repr of its Failures."""
    wrapped = ResponseNeverReceived([Failure(cause)])
    error = DownloadFailedError(str(wrapped))
    error.__cause__ = wrapped
    return error


def test_a_tls_failure_is_written_as_words_not_a_repr():
    error = as_scrapy_raises_it(tls_error())
    assert "twisted.python.failure.Failure" in str(error)  # what the record used to carry
    assert failure_reason(error) == "no response: TLS error: wrong version number"


@pytest_twisted.ensureDeferred
async def test_a_dropped_connection_is_recorded_as_words_not_a_repr(server, tmp_path):
    o = server.origin
    o.route("t.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    o.route("t.test", "/drop", Reply(200, "x", drop=True))
    settings = base_settings(server, tmp_path / "s", WALSH_RETRY_TIMES=0)
    res = await crawl(settings, [server.url("t.test", "/drop")], tmp_path)
    (record,) = res.items
    assert record["outcome"] == "failed"
    assert record["reason"] == "no response: ConnectionDone: Connection was closed cleanly."
