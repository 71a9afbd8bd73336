"""R3 at scale: a large blocklist is read, validated and indexed off the
reactor, kept as the bytes it was fetched as (its sha256 is the version's),
not read again when a refresh brings the same bytes, and restored only when
those bytes still match. (The reactor-stall figures for a 10^6-entry list are
``bench/stall_bench.py``'s.)"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_walsh_research.core.blocklist.document import INLINE_PARSE_BYTES
from scrapy_walsh_research.core.blocklist.entries import PLAIN_HOST, entry_hosts
from scrapy_walsh_research.core.urls import host_variants
from scrapy_walsh_research.sandbox import Reply
from tests.support.crawling import (
    BLOCKLIST_HOST,
    BLOCKLIST_PATH,
    base_settings,
    blocklist_doc,
    crawl,
)
from tests.test_r3_blocklist import outcomes, serve_hosts


def large(*domains: str, refresh: str = "PT6H") -> bytes:
    """A list past the inline size: *domains* plus enough others."""
    filler = [f"f{i}.filler.example" for i in range(INLINE_PARSE_BYTES // 40)]
    body = json.dumps(blocklist_doc(*domains, *filler, refresh=refresh)).encode()
    assert len(body) > INLINE_PARSE_BYTES
    return body


def serve_list(server: Any, body: bytes) -> None:
    reply = Reply(200, body, {"Content-Type": "application/json"})
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, reply)


def blobs(state: Path) -> list[Path]:
    return sorted((state / "blobs").glob("blocklist-*.json"))


@pytest_twisted.ensureDeferred
async def test_a_large_list_is_adopted_and_kept_as_fetched(server, tmp_path):
    body = large("gone.test")
    serve_list(server, body)
    serve_hosts(server, "fine.test", "gone.test")
    state = tmp_path / "state"
    urls = [server.url("fine.test"), server.url("www.gone.test")]
    res = await crawl(base_settings(server, state), urls, tmp_path)
    assert [outcomes(res)[u] for u in urls] == [("fetched", None), ("denied", "R3")]
    assert server.origin.hits_for("www.gone.test") == []
    assert res.stats["walsh/blocklist/built_in_child"] == 1  # not in the crawl process
    assert res.stats.get("walsh/blocklist/child_failed") is None
    (kept,) = blobs(state)
    assert kept.read_bytes() == body  # byte for byte: sha256sum of the published file
    assert kept.name == f"blocklist-{hashlib.sha256(body).hexdigest()}.json"


@pytest_twisted.ensureDeferred
async def test_a_refresh_with_the_same_bytes_is_not_read_again(server, tmp_path):
    serve_list(server, large("gone.test", refresh="PT1S"))
    serve_hosts(server, "fine.test", "gone.test")
    settings = base_settings(server, tmp_path / "state", WALSH_BLOCKLIST_MIN_REFRESH=1)
    urls = [server.url("fine.test", f"/p{i}") for i in range(3)] + [server.url("gone.test")]
    for i in range(3):
        server.origin.route("fine.test", f"/p{i}", Reply(200, "ok"))
    res = await crawl(settings, urls, tmp_path)
    fetches = len(server.origin.hits_for(BLOCKLIST_HOST, BLOCKLIST_PATH))
    assert fetches >= 2  # refreshed during the crawl (three pages, 1 s apart) ...
    assert res.stats["walsh/blocklist/unchanged"] == fetches - 1  # ... same bytes: kept
    assert outcomes(res)[server.url("gone.test")] == ("denied", "R3")
    assert server.origin.hits_for("gone.test") == []


@pytest_twisted.ensureDeferred
async def test_a_large_document_with_trailing_garbage_is_not_adopted(server, tmp_path):
    serve_list(server, large() + b' {"blocked": []}')
    serve_hosts(server, "fine.test")
    res = await crawl(base_settings(server, tmp_path / "s"), [server.url("fine.test")], tmp_path)
    assert res.stats["walsh/blocklist/fetch_failed"] == 1
    assert res.stats.get("walsh/blocklist/adopted") is None


@pytest_twisted.ensureDeferred
async def test_a_kept_list_whose_bytes_were_changed_is_not_restored(server, tmp_path):
    """The opt-out must not be lost, nor a tampered copy trusted: the restart
    rejects it, fetches the list, and the host stays blocked."""
    serve_list(server, large("gone.test"))
    serve_hosts(server, "gone.test")
    state = tmp_path / "state"
    await crawl(base_settings(server, state), [server.url("gone.test")], tmp_path)
    (kept,) = blobs(state)
    kept.write_bytes(kept.read_bytes().replace(b'"gone.test"', b'"fine.test"'))
    res = await crawl(base_settings(server, state), [server.url("gone.test")], tmp_path)
    assert res.stats["walsh/blocklist/stored_rejected"] == 1
    assert len(server.origin.hits_for(BLOCKLIST_HOST, BLOCKLIST_PATH)) == 2  # fetched again
    assert outcomes(res)[server.url("gone.test")] == ("denied", "R3")
    assert server.origin.hits_for("gone.test") == []


@pytest_twisted.ensureDeferred
async def test_a_kept_list_is_restored_without_fetching_while_fresh(server, tmp_path):
    serve_list(server, large("gone.test"))
    serve_hosts(server, "gone.test", "fine.test")
    state = tmp_path / "state"
    await crawl(base_settings(server, state), [server.url("fine.test")], tmp_path)
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, Reply(503, "down"))
    res = await crawl(base_settings(server, state), [server.url("gone.test")], tmp_path)
    assert len(server.origin.hits_for(BLOCKLIST_HOST, BLOCKLIST_PATH)) == 1  # PT6H: not due
    assert outcomes(res)[server.url("gone.test")] == ("denied", "R3")
    assert server.origin.hits_for("gone.test") == []


# -- the shortcuts that make a 10^6-entry list cheap are exact ----------------------


def test_the_contract_constrains_an_entry_only_by_what_the_shape_shortcut_looks_at():
    """If the published schema ever asks more of an entry (a pattern on
    ``domain``, a format on ``reason``), one entry per shape no longer stands
    for the others: this fails, and the shortcut must be looked at again."""
    from scrapy_walsh_research.core.blocklist.document import ENTRY_SCHEMA_FIELDS
    from scrapy_walsh_research.core.blocklist.schema import bundled_schema

    items = bundled_schema()["properties"]["blocked"]["items"]
    assert set(items) - {"description"} == ENTRY_SCHEMA_FIELDS
    constraints = {
        name: {k: v for k, v in rule.items() if k != "description"}
        for name, rule in items["properties"].items()
    }
    assert constraints == {
        "domain": {"type": "string"},
        "added": {"type": "string", "format": "date"},
        "reason": {"type": "string"},
    }


BAD_ENTRIES = [
    ({"domain": "x.example", "added": "2026-13-45"}, "format"),
    ({"domain": "x.example"}, "required"),
    ({"domain": 7, "added": "2026-01-01"}, "type"),
    ({"domain": "x.example", "added": "2026-01-01", "reason": ["a"]}, "type"),
    ("x.example", "type"),
    (None, "type"),
]


@pytest.mark.parametrize(("bad", "why"), BAD_ENTRIES)
def test_one_bad_entry_among_thousands_rejects_the_list_and_names_it(bad, why, tmp_path):
    from scrapy.utils.test import get_crawler

    from scrapy_walsh_research.core.blocklist.document import BlocklistError
    from scrapy_walsh_research.gates.blocklist import BlocklistMiddleware
    from scrapy_walsh_research.spiders.targets import TargetsSpider

    crawler = get_crawler(TargetsSpider, {"WALSH_STATE_DIR": str(tmp_path)})
    gate = BlocklistMiddleware(crawler)
    doc = blocklist_doc(*(f"d{i}.example" for i in range(3000)))
    doc["blocked"].insert(2345, bad)
    with pytest.raises(BlocklistError, match=r"blocked/2345"):
        gate.builder.parse(doc, url="https://x.test/b.json", fetched_at=0.0)
    del doc["blocked"][2345]
    assert len(gate.builder.parse(doc, url="https://x.test/b.json", fetched_at=0.0).domains) == 3000


@given(st.from_regex(PLAIN_HOST, fullmatch=True).filter(lambda s: "xn--" not in s))
@settings(max_examples=500, deadline=None)
def test_a_plain_host_entry_is_read_as_itself_by_every_reading(name):
    """The fast path of DomainSet.from_entries takes such a name as is; the
    full reading (lenient parts, IDNA variants) must agree."""
    assert entry_hosts(name) == {name} == host_variants(name)


@pytest_twisted.ensureDeferred
async def test_a_changed_large_list_replaces_the_old_and_local_entries_stay(server, tmp_path):
    """The list replaced is freed in a thread, a little at a time: what is in
    force afterwards (the new list, and WALSH_BLOCKLIST_EXTRA) is untouched."""
    from tests.support.crawling import sleep

    serve_hosts(server, "old.test", "new.test", "local.test")
    settings = base_settings(
        server, tmp_path / "s", WALSH_BLOCKLIST_MIN_REFRESH=1, WALSH_BLOCKLIST_EXTRA=["local.test"]
    )
    serve_list(server, large("old.test", refresh="PT1S"))
    await crawl(settings, [server.url("old.test")], tmp_path)
    await sleep(1.1)  # due: the restart restores the first list, then fetches the second
    serve_list(server, large("new.test", refresh="PT1S"))
    urls = [server.url("new.test"), server.url("local.test"), server.url("old.test")]
    res = await crawl(settings, urls, tmp_path)
    assert res.stats["walsh/blocklist/adopted"] >= 1
    got = outcomes(res)
    assert got[urls[0]] == ("denied", "R3") and got[urls[1]] == ("denied", "R3")
    assert got[urls[2]] == ("fetched", None)  # no longer listed
    assert not server.origin.hits_for("new.test") and not server.origin.hits_for("local.test")


@pytest_twisted.ensureDeferred
async def test_a_large_list_with_one_bad_entry_is_rejected_and_the_list_in_force_stays(
    server, tmp_path
):
    """Read in the child process, a large list is still validated in full
    against the bundled schema: one entry without ``added`` rejects it, and
    the list adopted before (which blocks gone.test) stays in force."""
    serve_hosts(server, "gone.test", "fine.test")
    settings = base_settings(server, tmp_path / "s", WALSH_BLOCKLIST_MIN_REFRESH=1)
    serve_list(server, large("gone.test", refresh="PT1S"))
    await crawl(settings, [server.url("fine.test")], tmp_path)
    from tests.support.crawling import sleep

    await sleep(1.1)  # due: the restart fetches the bad list
    bad = json.loads(large("other.test", refresh="PT1S"))
    del bad["blocked"][4321]["added"]
    serve_list(server, json.dumps(bad).encode())
    res = await crawl(settings, [server.url("gone.test")], tmp_path)
    assert res.stats["walsh/blocklist/rejected"] >= 1
    assert res.stats.get("walsh/blocklist/adopted") is None
    assert outcomes(res)[server.url("gone.test")] == ("denied", "R3")
    assert server.origin.hits_for("gone.test") == []


@pytest_twisted.ensureDeferred
async def test_a_child_process_that_dies_does_not_cost_the_list(server, tmp_path, monkeypatch):
    """A child without an answer (killed, cannot start) is no verdict on the
    list: it is read in a thread instead, and still blocks."""
    from scrapy_walsh_research.documents.blocklist import build

    monkeypatch.setattr(build, "CHILD_CODE", "raise SystemExit(3)")
    serve_list(server, large("gone.test"))
    serve_hosts(server, "gone.test")
    res = await crawl(base_settings(server, tmp_path / "s"), [server.url("gone.test")], tmp_path)
    assert res.stats["walsh/blocklist/child_failed"] == 1
    assert res.stats["walsh/blocklist/adopted"] == 1
    assert outcomes(res)[server.url("gone.test")] == ("denied", "R3")


def test_the_child_process_imports_only_the_pure_core():
    """The child reads a list with the pure core alone: no Scrapy, no
    Twisted, no gate module (it used to import the whole gate, and Scrapy
    with it, to run a pure parser). Imported as the crawl process starts it,
    in a fresh interpreter."""
    import subprocess
    import sys

    from scrapy_walsh_research.documents.blocklist.build import CHILD_MODULE

    code = f"import json, sys; import {CHILD_MODULE}; print(json.dumps(sorted(sys.modules)))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    loaded = set(json.loads(run.stdout))
    assert CHILD_MODULE in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("scrapy", "twisted")}
    ours = {m for m in loaded if m.startswith("scrapy_walsh_research.")}
    # the package's own __init__ brings the identity constants and the finder
    # that serves 0.2.0 module paths (the standard library alone), nothing else
    outside_core = {m for m in ours if not m.startswith("scrapy_walsh_research.core")}
    assert outside_core <= {"scrapy_walsh_research._moved"}


# -- the index file a large list is read into ---------------------------------------

NAMES = st.from_regex(PLAIN_HOST, fullmatch=True)


@given(st.sets(NAMES, max_size=60), st.lists(NAMES, max_size=30))
@settings(max_examples=200, deadline=None)
def test_the_index_file_answers_like_the_entries_it_was_written_from(listed, asked):
    import os
    import tempfile

    from scrapy_walsh_research.core.blocklist.entries import DomainSet
    from scrapy_walsh_research.core.blocklist.index import IndexFile, write_index

    entries = {name: {"domain": name, "reason": f"r{i}"} for i, name in enumerate(sorted(listed))}
    fd, path = tempfile.mkstemp()
    os.close(fd)
    try:
        write_index(entries, path)
        index = IndexFile(path)
    finally:
        os.unlink(path)  # the mapping keeps it
    assert len(index) == len(entries) and sorted(index) == sorted(entries)
    in_memory, mapped = DomainSet(entries), DomainSet.from_index(index)
    for name in [*asked, *listed, *(f"www.{n}" for n in listed), "x"]:
        assert index.get(name) == entries.get(name)
        assert mapped.match(name) == in_memory.match(name)


@pytest.mark.parametrize(
    "document, adopted",
    [
        (b'{"x": NaN, "blocked": []}', False),
        (b'{"x": -Infinity, "blocked": []}', False),
        (b'{"x": 1e400, "blocked": []}', False),
        (b'\xef\xbb\xbf{"blocked": []}', True),  # RFC 8259 8.1: a BOM may be ignored
        (b'{"x": 1.5, "blocked": []}', True),
    ],
)
def test_a_document_gets_one_verdict_whichever_path_reads_it(document, adopted):
    """Found by review: the child process read a large list with json.loads
    (NaN, 1e400 accepted) and the thread path with ijson (refused): the same
    bytes were adopted or not depending on whether the child ran."""
    from scrapy_walsh_research.core.blocklist.document import (
        BlocklistError,
        load_json,
        strict_json,
    )

    large = document + b" " * (300 * 1024)
    verdicts = []
    for read, data in ((strict_json, large), (load_json, large), (load_json, document)):
        try:
            read(data)
            verdicts.append(True)
        except BlocklistError:
            verdicts.append(False)
    assert verdicts == [adopted] * 3
