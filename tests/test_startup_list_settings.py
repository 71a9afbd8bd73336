"""List-valued WALSH_ settings read alike however they are written: a Python
list in settings.py, comma-separated text, or a JSON array on the command line
(``-s 'WALSH_BLOCKLIST_EXTRA=["x.test"]'``, which Scrapy's ``getlist`` read as
one junk entry, so x.test was crawled). A value of no list shape stops the
crawl, naming the setting; an opt-out is never dropped silently."""

from __future__ import annotations

import json

import pytest
import pytest_twisted

from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.identity.signing import generate_key
from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.settings.options import parse_list
from tests.support.crawling import base_settings, crawl, write_list
from tests.support.processes import _spawn


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, []),
        ("", []),
        ("x.test", ["x.test"]),
        ("x.test, y.test,", ["x.test", "y.test"]),
        ('["x.test"]', ["x.test"]),
        (' [ "x.test" , "y.test" ] ', ["x.test", "y.test"]),
        ("[]", []),
        (["x.test", " y.test "], ["x.test", "y.test"]),
        (("x.test",), ["x.test"]),
    ],
)
def test_every_spelling_of_a_list_setting_reads_as_the_same_list(raw, expected):
    assert parse_list("WALSH_BLOCKLIST_EXTRA", raw) == expected


@pytest.mark.parametrize(
    "raw", ['["x.test"', "[x.test]", '[1, "x.test"]', '{"x.test": 1}', 7, {"x.test": 1}, [None]]
)
def test_a_value_of_no_list_shape_is_refused_naming_the_setting(raw):
    with pytest.raises(WalshConfigurationError, match="WALSH_BLOCKLIST_EXTRA"):
        parse_list("WALSH_BLOCKLIST_EXTRA", raw)


@pytest_twisted.ensureDeferred
async def test_a_blocklist_extra_entry_that_names_no_host_is_refused_before_any_request(
    server, tmp_path
):
    server.origin.route("x.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    settings = base_settings(server, tmp_path / "s", WALSH_BLOCKLIST_EXTRA=["x.test", "!!"])
    with pytest.raises(WalshConfigurationError, match="WALSH_BLOCKLIST_EXTRA: '!!'"):
        await crawl(settings, [server.url("x.test", "/")], tmp_path)
    assert server.origin.hits == []


@pytest_twisted.ensureDeferred
async def test_json_lists_on_the_command_line_block_sign_and_declare(server, tmp_path):
    """One ``scrapy crawl`` in a child process with every list setting given
    as a JSON array with ``-s``: the blocklist entry blocks its host (the
    origin sees nothing of it), the extra signature component is covered on
    the wire, and the declared purposes make a site's no to AI input deny."""
    for host in ("x.test", "ok.test", "input.test"):
        server.origin.route(host, "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
        server.origin.route(host, "/page", Reply(200, "page", {"Content-Type": "text/plain"}))
    # says no to AI input: it denies only if WALSH_PURPOSES was read
    server.origin.route(
        "input.test", "/robots.txt", Reply(200, "User-agent: *\nContent-Signal: ai-input=no\n")
    )
    key = tmp_path / "key.pem"
    generate_key(key)
    urls = write_list(
        tmp_path,
        [server.url("x.test", "/page"), server.url("ok.test", "/page"),
         server.url("input.test", "/page")],
    )  # fmt: skip
    out = tmp_path / "out.jl"
    proc = _spawn(
        server,
        f"list={urls}",
        tmp_path / "state",
        {
            "FEEDS": json.dumps({str(out): {"format": "jsonlines"}}),
            "WALSH_BLOCKLIST_EXTRA": '["x.test"]',
            "WALSH_SIGNING_KEY": str(key),
            "WALSH_SIGNATURE_COMPONENTS": '["@method"]',
            "WALSH_PURPOSES": '["tdm", "ai-input"]',
        },
    )
    await proc.ended
    records = {r["url"]: r for r in map(json.loads, out.read_text().splitlines())}
    blocked = records[server.url("x.test", "/page")]
    assert (blocked["outcome"], blocked["rule"]) == ("denied", "R3"), proc.err.decode()[-2000:]
    assert "WALSH_BLOCKLIST_EXTRA" in blocked["reason"]
    assert server.origin.hits_for("x.test") == []
    assert records[server.url("ok.test", "/page")]["outcome"] == "fetched"
    (page,) = server.origin.hits_for("ok.test", "/page")
    assert '"@method"' in page.headers["signature-input"]
    declared = records[server.url("input.test", "/page")]
    assert (declared["outcome"], declared["rule"]) == ("denied", "PREF")
    assert server.origin.hits_for("input.test", "/page") == []


@pytest_twisted.ensureDeferred
async def test_a_broken_json_list_on_the_command_line_stops_the_crawl(server, tmp_path):
    server.origin.route("x.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    urls = write_list(tmp_path, [server.url("x.test", "/page")])
    proc = _spawn(
        server, f"list={urls}", tmp_path / "state", {"WALSH_BLOCKLIST_EXTRA": '["x.test"'}
    )
    await proc.ended
    assert b"WALSH_BLOCKLIST_EXTRA" in proc.err and b"starts like JSON" in proc.err
    assert server.origin.hits == []
