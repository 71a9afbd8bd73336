"""Reading sitemaps (the part no crawl is needed for): as lenient as
crawler-commons with what real sites write, safe with what an attacker
writes (defusedxml's list: billion laughs, quadratic blowup, external
entities, DTD retrieval), bounded by the protocol's limits while streaming,
and never raising: a malformed document is one line, its entries flagged."""

from __future__ import annotations

import gzip
import http.server
import pickle
import resource
import threading
import tracemalloc
import zlib
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scrapy_walsh_research.core import sitemaps
from scrapy_walsh_research.core.lastmod import parse_lastmod
from scrapy_walsh_research.core.robots_policy import RobotsPolicy, declared_sitemaps
from scrapy_walsh_research.core.sitemap_claims import SitemapClaims, sitemap_covers
from scrapy_walsh_research.core.sitemaps import (
    MAX_SITEMAP_BYTES,
    MAX_SITEMAP_ENTRIES,
    PIECE,
    SitemapEntry,
    SitemapReader,
    SitemapStatus,
    read_sitemap,
)

DATA = Path(__file__).parent / "data" / "sitemaps"
TOKEN = "Walsh-Research"
NS = "http://www.sitemaps.org/schemas/sitemap/0.9"


def pieces(body: bytes, size: int | None) -> list[bytes]:
    if size is None:
        return [body]
    return [body[i : i + size] for i in range(0, len(body), size)]


def read(body: bytes, size: int | None = None, **limits: int) -> tuple[list, SitemapStatus]:
    return read_sitemap(pieces(body, size), **limits)


def pairs(entries: list[SitemapEntry]) -> list[tuple[str, str | None]]:
    return [(e.loc, e.lastmod.isoformat() if e.lastmod else None) for e in entries]


def urlset(*urls: str) -> bytes:
    return f'<urlset xmlns="{NS}">{"".join(urls)}</urlset>'.encode()


def url(loc: str, lastmod: str | None = None) -> str:
    return f"<url><loc>{loc}</loc>" + (f"<lastmod>{lastmod}</lastmod>" if lastmod else "") + "</url>"


# -- real-world files (tests/data/sitemaps/README.md says where each is from) ---------

EXAMPLE = "http://www.example.com"
CC_URLSET = [
    (f"{EXAMPLE}/", "2005-01-01T00:00:00+00:00"),
    (f"{EXAMPLE}/catalog?desc=vacation_hawaii&item=12", None),
    (f"{EXAMPLE}/catalog?desc=vacation_new_zealand&item=73", "2004-12-23T00:00:00+00:00"),
    (f"{EXAMPLE}/catalog?desc=vacation_newfoundland&item=74", "2004-12-23T18:00:15+00:00"),
    (f"{EXAMPLE}/catalog?desc=vacation_usa&item=83", "2004-11-23T00:00:00+00:00"),
]
PORTAL = "https://example.com/sitemap.jss?portalCode="
REAL = [
    # (file, kind, entries (loc, lastmod), skipped, unreadable lastmods)
    ("cc-urlset.xml", "urlset", CC_URLSET, 0, 0),
    ("cc-urlset.xml.gz", "urlset", CC_URLSET, 0, 0),
    ("cc-leading-bom.xml", "urlset", CC_URLSET, 0, 0),
    (
        "cc-index.xml",
        "sitemapindex",
        [
            (f"{EXAMPLE}/sitemap1.xml.gz", "2004-10-01T18:23:17+00:00"),
            (f"{EXAMPLE}/sitemap2.xml.gz", "2005-01-01T00:00:00+00:00"),
            (f"{EXAMPLE}/dynsitemap?date=now&all=true", "2004-10-01T18:23:17+00:00"),
            (f"{EXAMPLE}/dynsitemap?date=lastyear&all=false", None),
        ],
        0,
        0,
    ),
    (
        "cc-index-bare-text.xml",
        "sitemapindex",
        [(f"{PORTAL}{n}&lang=en", None) for n in (10260, 2, 10080, 10140)],
        0,
        0,
    ),
    (
        "cc-index-unclosed.xml",
        "sitemapindex",
        [
            ("https://www.example.org/sitemap1.xml", "2004-10-01T18:23:17+00:00"),
            ("https://www.example.org/sitemap2.xml", None),
            ("https://www.example.org/sitemap3.xml", "2005-11-02T19:24:18+00:00"),
        ],
        0,
        0,
    ),
    (
        "cc-index-unicode-space.xml",
        "sitemapindex",
        [("https://www.example.com/sitemap1.xml", None), ("https://www.example.com/sitemap2.xml", None)],
        0,
        0,
    ),
    (
        "cc-google-ns.xml",
        "urlset",
        [(f"{EXAMPLE}/1", None), (f"{EXAMPLE}/2", "2019-06-19T00:00:00+00:00")],
        0,
        0,
    ),
    (
        "cc-prefixed-ns.xml",
        "urlset",
        [(f"{EXAMPLE}/1", "2019-06-19T10:00:00+00:00"), (f"{EXAMPLE}/2", None)],
        0,
        0,
    ),
    (
        "cc-extensions.xml",
        "urlset",
        [
            ("http://news.example.com/local/video-tour-1-7242580", "2015-05-03T17:51:50+00:00"),
            ("http://news.example.com/local/missing-man-1-7242564", "2015-05-03T17:21:08+00:00"),
            ("https://blog.example.com/2017/04/25/job-opening/", None),
        ],
        0,
        0,
    ),
    (
        "cc-links.xml",
        "urlset",
        [(f"{EXAMPLE}/english/", "2024-03-01T00:00:00+00:00"), (f"{EXAMPLE}/deutsch/", None)],
        0,
        0,
    ),
    (
        "cc-loc-nested-url.xml",
        "urlset",
        [
            (
                "http://jobs.example.com/EXPERIENCED-DISPATCHER-NEEDED-NOW----Jobs-in-Vancouver-WA/2333221",
                "2015-04-28T00:00:00+00:00",
            )
        ],
        0,
        0,
    ),
    ("google-0.84.xml", "urlset", [(f"{EXAMPLE}/old", "2006-11-18T18:20:30.450000+00:00")], 0, 0),
    (
        "no-namespace.xml",
        "urlset",
        [("https://example.net/a?x=1&y=2", "2024-02-29T23:59:59+00:00"), ("https://example.net/b", None)],
        2,  # a relative <loc>; a <url> without one
        1,  # 2024-02-30
    ),
]


@pytest.mark.parametrize("size", [None, 1, 7, 4096], ids=["whole", "1-byte", "7-byte", "4k"])
@pytest.mark.parametrize(("name", "kind", "expected", "skipped", "bad"), REAL, ids=[r[0] for r in REAL])
def test_real_world_sitemaps_read_as_crawler_commons_reads_them(name, kind, expected, skipped, bad, size):
    entries, status = read((DATA / name).read_bytes(), size)
    assert status.error is None, status.describe()
    assert status.complete
    assert (status.kind, pairs(entries), status.skipped, status.bad_lastmods) == (kind, expected, skipped, bad)
    assert status.gzip == name.endswith(".gz")
    assert status.entries == len(expected)


def test_extension_elements_named_loc_are_not_entries():
    # image:loc, video:player_loc and xhtml:link hrefs are other resources,
    # not what the sitemap dates
    entries, _ = read((DATA / "cc-extensions.xml").read_bytes())
    assert len(entries) == 3
    assert not any("webimage" in e.loc or "video.example.com" in e.loc for e in entries)
    links, _ = read((DATA / "cc-links.xml").read_bytes())
    assert [e.loc for e in links] == [f"{EXAMPLE}/english/", f"{EXAMPLE}/deutsch/"]


def test_a_loc_or_lastmod_in_an_extensions_namespace_is_not_read():
    body = (
        f'<urlset xmlns="{NS}" xmlns:x="http://example.org/ext">'
        "<url><x:loc>https://a.test/wrong</x:loc><loc>https://a.test/right</loc>"
        "<x:lastmod>2030-01-01</x:lastmod></url></urlset>"
    ).encode()
    entries, status = read(body)
    assert status.complete
    assert pairs(entries) == [("https://a.test/right", None)]


def test_only_entries_of_the_roots_kind_are_read():
    body = urlset(url("https://a.test/1")).replace(b"</urlset>", b"<sitemap><loc>https://a.test/s.xml</loc></sitemap></urlset>")
    entries, status = read(body)
    assert status.complete and [e.loc for e in entries] == ["https://a.test/1"]


def test_a_lastmod_before_its_loc_belongs_to_it():
    entries, _ = read(urlset("<url><lastmod>2024-01-02</lastmod><loc>https://a.test/x</loc></url>"))
    assert pairs(entries) == [("https://a.test/x", "2024-01-02T00:00:00+00:00")]


def test_two_lastmods_for_one_url_give_the_later():
    body = urlset("<url><loc>https://a.test/x</loc><lastmod>2024-05-01</lastmod><lastmod>2023-01-01</lastmod></url>")
    entries, _ = read(body)
    assert pairs(entries) == [("https://a.test/x", "2024-05-01T00:00:00+00:00")]


def test_a_malformed_lastmod_drops_only_that_lastmod():
    body = urlset(url("https://a.test/1", "yesterday"), url("https://a.test/2", "2024-01-01"))
    entries, status = read(body)
    assert status.complete and status.bad_lastmods == 1
    assert pairs(entries) == [("https://a.test/1", None), ("https://a.test/2", "2024-01-01T00:00:00+00:00")]


def test_a_gz_url_served_already_decompressed_is_read_as_xml():
    # the reader tells gzip by its magic bytes, not by the sitemap's name
    entries, status = read((DATA / "cc-urlset.xml").read_bytes())
    assert status.complete and not status.gzip and len(entries) == 5


def test_a_gzip_split_into_members_is_read_whole():
    body = (DATA / "cc-urlset.xml").read_bytes()
    half = len(body) // 2
    two = gzip.compress(body[:half]) + gzip.compress(body[half:])
    for size in (None, 1, 13):
        entries, status = read(two, size)
        assert status.complete and pairs(entries) == CC_URLSET


def test_bytes_after_the_last_gzip_member_are_ignored():
    entries, status = read(gzip.compress(urlset(url("https://a.test/x"))) + b"\0\0garbage")
    assert status.complete and len(entries) == 1


# -- malformed: one line, entries offered but flagged ---------------------------------

MALFORMED = [
    # (id, body, error starts with, entries offered)
    ("end tag without start", (DATA / "cc-broken.xml").read_bytes(), "not well-formed XML", ["http://cs.example.edu/sitemaps/something.html"]),
    ("cut mid-tag", (DATA / "cc-index-truncated.xml").read_bytes(), "not well-formed XML", [f"{EXAMPLE}/sitemap1.xml.gz"]),
    ("root never closed", urlset(url("https://a.test/1")).removesuffix(b"</urlset>"), "not well-formed XML", ["https://a.test/1"]),
    ("empty body", b"", "empty document", []),
    ("whitespace only", b" \r\n\t ", "empty document", []),
    ("an HTML page", b"<!-- hi --><html><body>Not found</body></html>", "not a sitemap: the root element is <html>", []),
    ("an RSS feed", b'<?xml version="1.0"?><rss version="2.0"><channel/></rss>', "not a sitemap: the root element is <rss>", []),
    ("a text sitemap", b"https://a.test/1\nhttps://a.test/2\n", "not well-formed XML", []),
    ("an undefined entity", urlset(url("https://a.test/1"), url("https://a.test/a&nbsp;b")), "not well-formed XML", ["https://a.test/1"]),
    ("two documents", urlset(url("https://a.test/1")) * 2, "not well-formed XML", ["https://a.test/1"]),
    ("bad bytes for its encoding", b'<?xml version="1.0" encoding="UTF-8"?><urlset><url><loc>https://a.test/\xff</loc></url></urlset>', "not well-formed XML", []),
    ("gzip cut short", gzip.compress(urlset(url("https://a.test/1")))[:-6], "the gzip stream ends early (truncated)", ["https://a.test/1"]),
    ("gzip corrupted", gzip.compress(urlset(url("https://a.test/1")))[:12] + b"\x00" * 40, "not a readable gzip stream", []),
    ("gzip with a wrong checksum", gzip.compress(urlset(url("https://a.test/1")))[:-8] + b"\0\0\0\0" + gzip.compress(urlset())[-4:], "not a readable gzip stream", ["https://a.test/1"]),
]


@pytest.mark.parametrize("size", [None, 1, 5])
@pytest.mark.parametrize(("body", "error", "offered"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_a_malformed_document_is_one_line_and_its_entries_are_flagged(body, error, offered, size):
    entries, status = read(body, size)
    assert not status.complete
    assert status.error is not None and status.error.startswith(error), status.error
    if error.startswith("not a readable gzip"):
        # zlib gives nothing of the call that meets the bad checksum: what
        # came in earlier chunks is offered, what came in that one is not
        assert [e.loc for e in entries] == offered[: len(entries)]
        assert len(entries) == len(offered) or size != 1
    else:
        assert [e.loc for e in entries] == offered
    line = status.describe()
    assert "\n" not in line and status.error in line
    assert ("not read whole" in line) == bool(entries)


@pytest.mark.parametrize(
    "cut",
    [
        b"<urlset><url><loc>https://a.test/page-12",  # of /page-123
        b"<urlset><url><loc>https://a.test/1</loc><lastmod>2024-05-1",  # of 2024-05-17
        b"<urlset><url><loc>https://a.test/1</loc><lastmod>2024-05-17</lastmod>",
    ],
)
def test_a_value_cut_by_a_truncated_download_is_never_an_entry(cut):
    for size in (None, 1):
        entries, status = read(cut, size)
        assert entries == [] and not status.complete


def test_feeding_after_close_or_a_stop_reads_nothing_more():
    reader = SitemapReader()
    reader.feed(b"<html>")
    assert reader.stopped
    assert reader.feed(urlset(url("https://a.test/1"))) == []
    status = reader.close()
    assert status.error == "not a sitemap: the root element is <html>"
    assert reader.feed(b"more") == [] and reader.close() == status


# -- a piece at a time, for an event loop ---------------------------------------------


def test_steps_read_a_chunk_one_piece_of_xml_at_a_time():
    body = numbered(30_000)  # 1.2 MB of XML in one 70 kB gzip chunk
    reader = SitemapReader()
    steps = list(reader.steps(gzip.compress(body)))
    assert len(steps) == -(-len(body) // PIECE)
    assert all(len(step) < 2000 for step in steps)
    assert reader.close().complete
    assert [e.loc for step in steps for e in step] == [e.loc for e in read(body)[0]]


@pytest.mark.parametrize("dropped", [False, True], ids=["kept", "closed"])
def test_a_chunk_left_part_read_stops_the_reader(dropped):
    reader = SitemapReader()
    steps = reader.steps(numbered(5000))
    next(steps)
    if dropped:
        steps.close()
    assert reader.stopped == dropped
    assert reader.feed(urlset()) == []
    assert reader.close().error == "a chunk was left part-read"


@pytest.mark.parametrize("taken", [0, 1])
def test_steps_not_all_taken_before_close_stop_the_reader(taken):
    reader = SitemapReader()
    steps = reader.steps(numbered(5000))
    for _ in range(taken):
        next(steps)
    assert reader.close().error == "a chunk was left part-read"


# -- the protocol's limits, enforced while streaming ----------------------------------


def test_the_limits_are_the_protocols():
    assert MAX_SITEMAP_BYTES == 52_428_800
    assert MAX_SITEMAP_ENTRIES == 50_000


def numbered(count: int) -> bytes:
    return urlset(*(f"<url><loc>https://a.test/{n}</loc></url>" for n in range(count)))


def test_a_sitemap_of_exactly_50000_urls_is_read_whole():
    entries, status = read(numbered(50_000), 1 << 16)
    assert status.complete and len(entries) == 50_000


def test_the_50001st_url_stops_reading_and_the_first_50000_are_offered():
    reader = SitemapReader()
    body = numbered(60_000)
    given = []
    fed = 0
    for chunk in pieces(body, 1 << 12):
        given += reader.feed(chunk)
        fed += len(chunk)
        if reader.stopped:
            break
    status = reader.close()
    assert reader.stopped and fed < len(body)  # the caller can stop the download
    assert status.error == "more than 50,000 entries (sitemaps.org's limit)"
    assert len(given + reader.drain()) == 50_000


def test_locs_packed_into_one_url_count_toward_the_entry_cap():
    body = urlset("<url>" + "".join(f"<loc>https://a.test/{n}</loc>" for n in range(50)) + "</url>")
    entries, status = read(body, max_entries=10)
    assert status.error == "more than 10 entries (sitemaps.org's limit)"
    assert entries == []  # the <url> never ended within the cap


def test_urls_without_a_loc_count_toward_the_entry_cap():
    _, status = read(urlset(*["<url/>"] * 20), max_entries=10)
    assert status.error is not None and status.error.startswith("more than 10 entries")
    assert status.skipped == 10


@pytest.mark.parametrize("compress", [False, True], ids=["xml", "gzip"])
def test_the_byte_cap_counts_the_xml_after_decompression(compress):
    body = urlset(url("https://a.test/1"))
    packed = gzip.compress(body) if compress else body
    _, status = read(packed, max_bytes=len(body))
    assert status.complete and status.read_bytes == len(body)
    _, status = read(packed, max_bytes=len(body) - 1)
    assert status.error == f"larger than {len(body) - 1:,} bytes uncompressed (sitemaps.org's limit)"


def bomb(mib: int) -> list[bytes]:
    """A gzip stream of *mib* MiB of whitespace inside <urlset>, in chunks."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b" " * (1 << 20)
    chunks = [packer.compress(f'<urlset xmlns="{NS}">'.encode())]
    chunks += [packer.compress(block) for _ in range(mib)]
    chunks.append(packer.compress(b"</urlset>") + packer.flush())
    return [c for c in chunks if c]


def test_a_gzip_bomb_stops_at_50_MiB_with_memory_that_does_not_grow():
    chunks = bomb(256)  # 256 MiB of XML in about 260 kB of gzip
    reader = SitemapReader()
    tracemalloc.start()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    compressed = 0
    try:
        for chunk in chunks:
            compressed += len(chunk)
            reader.feed(chunk)
            if reader.stopped:
                break
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    status = reader.close()
    rss_growth_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert status.error == "larger than 52,428,800 bytes uncompressed (sitemaps.org's limit)"
    assert status.read_bytes <= MAX_SITEMAP_BYTES
    # decompression stopped within one piece of the cap, and reading stopped
    # long before the stream's end: the caller can cancel the download
    assert compressed < sum(map(len, chunks)) / 4
    assert peak < 4 * PIECE
    assert rss_growth_kib < 64 * 1024


def test_a_bomb_of_tiny_elements_stops_at_the_byte_cap():
    # the costliest XML per byte for the reader (a callback per element)
    body = urlset("<url><loc>https://a.test/x</loc>" + "<a/>" * 100_000 + "</url>")
    entries, status = read(gzip.compress(body), 4096, max_bytes=200_000)
    assert status.error is not None and status.error.startswith("larger than 200,000 bytes")
    assert status.read_bytes <= 200_000 and entries == []


def test_a_loc_longer_than_any_url_is_not_kept():
    entries, status = read(urlset(url("https://a.test/" + "x" * 20_000), url("https://a.test/ok")))
    assert status.complete and status.skipped == 1
    assert [e.loc for e in entries] == ["https://a.test/ok"]


# -- safe XML: defusedxml's list of attacks -------------------------------------------

LAUGHS = (
    b'<?xml version="1.0"?>\n<!DOCTYPE urlset [\n<!ENTITY lol "lol">\n'
    + b"".join(
        b'<!ENTITY lol%d "%s">\n' % (i, (b"&lol%d;" % (i - 1) if i > 1 else b"&lol;") * 10)
        for i in range(1, 10)
    )
    + b"]>\n"
    + urlset(url("https://a.test/&lol9;"))
)
QUADRATIC = (
    b'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY a "'
    + b"x" * 50_000
    + b'">]>'
    + urlset(url("https://a.test/" + "&a;" * 50_000))
)


@pytest.fixture
def origin() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP origin that serves a DTD defining entities, and
    records every path asked for: a parser that fetches shows up here."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = b'<!ENTITY leak "https://leak.test/fetched"><!ENTITY % inner "">'
            self.send_response(200)
            self.send_header("Content-Type", "application/xml-dtd")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_text("https://secret.test/read-from-disk")
    dtd = tmp_path / "evil.dtd"
    dtd.write_text('<!ENTITY leak "https://leak.test/from-a-local-dtd">')
    return path


def attacks(origin: str, secret: Path) -> dict[str, bytes]:
    dtd = secret.parent / "evil.dtd"
    return {
        "billion laughs": LAUGHS,
        "quadratic blowup": QUADRATIC,
        "external entity (file)": (
            f'<!DOCTYPE urlset [<!ENTITY e SYSTEM "file://{secret}">]>'.encode()
            + urlset(url("https://a.test/ok"), url("&e;"))
        ),
        "external entity (network)": (
            f'<!DOCTYPE urlset [<!ENTITY e SYSTEM "{origin}/entity">]>'.encode()
            + urlset(url("https://a.test/ok"), url("&e;"))
        ),
        "external parameter entity": (
            f'<!DOCTYPE urlset [<!ENTITY % p SYSTEM "{origin}/param.dtd"> %p;]>'.encode()
            + urlset(url("https://a.test/ok"), url("&leak;"))
        ),
        "DTD retrieval (network)": (
            f'<!DOCTYPE urlset SYSTEM "{origin}/evil.dtd">'.encode()
            + urlset(url("https://a.test/ok"), url("&leak;"))
        ),
        "DTD retrieval (file)": (
            f'<!DOCTYPE urlset SYSTEM "file://{dtd}">'.encode()
            + urlset(url("https://a.test/ok"), url("&leak;"))
        ),
    }


ATTACKS = [
    "billion laughs",
    "quadratic blowup",
    "external entity (file)",
    "external entity (network)",
    "external parameter entity",
    "DTD retrieval (network)",
    "DTD retrieval (file)",
]


def assert_nothing_leaked(entries: list[SitemapEntry], asked: list[str]) -> None:
    assert asked == [], "the parser fetched something"
    for entry in entries:
        assert "secret" not in entry.loc and "leak" not in entry.loc
        assert "lollol" not in entry.loc and "xxxxxxxxxx" not in entry.loc


@pytest.mark.parametrize("attack", ATTACKS)
def test_a_document_declaring_a_dtd_is_refused_before_it_is_read(attack, origin, secret):
    base, asked = origin
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    entries, status = read(attacks(base, secret)[attack])
    assert status.error == "declares a <!DOCTYPE>: refused (a sitemap needs no DTD)"
    assert entries == []
    assert_nothing_leaked(entries, asked)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 64 * 1024


@pytest.mark.parametrize("attack", ATTACKS)
def test_without_the_dtd_refusal_the_parser_options_still_hold(attack, origin, secret, monkeypatch):
    """Defence in depth: lxml with resolve_entities=False, load_dtd=False,
    no_network=True and huge_tree=False neither expands, nor reads, nor
    fetches, even when the DOCTYPE refusal is taken away."""
    monkeypatch.delattr(sitemaps._Handler, "doctype")
    base, asked = origin
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    entries, status = read(attacks(base, secret)[attack])
    assert_nothing_leaked(entries, asked)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 64 * 1024
    if attack in ("billion laughs", "quadratic blowup"):
        # libxml2 stops an amplifying entity without huge_tree; an entity
        # left unexpanded is no URL either
        assert entries == [] or status.error is not None
    else:
        # the entity stays unread: its <loc> is empty, the rest is read
        assert [e.loc for e in entries] == ["https://a.test/ok"]


def test_xinclude_is_not_processed(secret):
    body = (
        f'<urlset xmlns="{NS}" xmlns:xi="http://www.w3.org/2001/XInclude">'
        f"<url><loc>https://a.test/ok</loc></url>"
        f'<url><loc><xi:include href="file://{secret}" parse="text"/></loc></url></urlset>'
    ).encode()
    entries, status = read(body)
    assert status.complete and [e.loc for e in entries] == ["https://a.test/ok"]


# -- <lastmod>: every W3C datetime form, and crawler-commons' leniencies --------------

LASTMOD = [
    # (written, start (UTC), end: the first instant after all it can mean)
    ("1997", "1997-01-01T00:00:00", "1998-01-01T12:00:00"),
    ("1997-07", "1997-07-01T00:00:00", "1997-08-01T12:00:00"),
    ("1997-12", "1997-12-01T00:00:00", "1998-01-01T12:00:00"),
    ("1997-07-16", "1997-07-16T00:00:00", "1997-07-17T12:00:00"),
    ("1997-07-16T19:20+01:00", "1997-07-16T18:20:00", "1997-07-16T18:21:00"),
    ("1997-07-16T19:20:30+01:00", "1997-07-16T18:20:30", "1997-07-16T18:20:31"),
    ("1997-07-16T19:20:30.45+01:00", "1997-07-16T18:20:30.450000", "1997-07-16T18:20:30.460000"),
    ("1994-11-05T13:15:30Z", "1994-11-05T13:15:30", "1994-11-05T13:15:31"),
    ("1994-11-05T08:15:30-05:00", "1994-11-05T13:15:30", "1994-11-05T13:15:31"),
    ("2004-12-23T18:00:15+00:00", "2004-12-23T18:00:15", "2004-12-23T18:00:16"),
    ("2016-02-29", "2016-02-29T00:00:00", "2016-03-01T12:00:00"),
    (" \n\t2005-01-01 \n", "2005-01-01T00:00:00", "2005-01-02T12:00:00"),
    ("\n" + " " * 200 + "2005-01-01\u00a0\n", "2005-01-01T00:00:00", "2005-01-02T12:00:00"),
    # accepted by crawler-commons (java.time's ISO_OFFSET_DATE_TIME), unambiguous
    ("1997-07-16t19:20:30z", "1997-07-16T19:20:30", "1997-07-16T19:20:31"),
    ("1997-07-16T19:20:30+01", "1997-07-16T18:20:30", "1997-07-16T18:20:31"),
    ("1997-07-16T19:20:30+01:00:30", "1997-07-16T18:20:00", "1997-07-16T18:20:01"),
    ("1997-07-16T19:20:30-00:00", "1997-07-16T19:20:30", "1997-07-16T19:20:31"),
    ("1997-07-16T19:20:30+18:00", "1997-07-16T01:20:30", "1997-07-16T01:20:31"),
    ("1997-07-16T19:20:30.Z", "1997-07-16T19:20:30", "1997-07-16T19:20:31"),
    ("1997-07-16T19:20:30.123456789Z", "1997-07-16T19:20:30.123456", "1997-07-16T19:20:30.123457"),
    ("9999", "9999-01-01T00:00:00", "9999-12-31T23:59:59.999999"),
]


@pytest.mark.parametrize(("text", "start", "end"), LASTMOD, ids=[r[0].strip() for r in LASTMOD])
def test_every_w3c_datetime_form_reads_as_an_aware_utc_datetime(text, start, end):
    parsed = parse_lastmod(text)
    assert parsed is not None
    assert [t.tzinfo for t in parsed] == [timezone.utc, timezone.utc]
    assert parsed == (
        datetime.fromisoformat(start).replace(tzinfo=timezone.utc),
        datetime.fromisoformat(end).replace(tzinfo=timezone.utc),
    )


NOT_LASTMOD = [
    "", "blah", "yesterday",
    "1997-07-16T19:20:30",  # a time without a zone: whose?
    "1997-07-16T19:20",
    "1997-07-16T19:20:30.45",
    "1997-07-16 19:20:30+01:00",  # a space for T
    "1997-07-16T19:20:30 +01:00",
    "1997-07-16T19:20:30+0100",  # not accepted by crawler-commons either
    "1997-07-16T19:20:30+1:00",
    "1997-07-16T19:20:30,45Z",
    "1997-07-16T19Z", "1997-07-16TZ", "1997-07-16Z", "1997-07-16+01:00",
    "1997-07-16T24:00:00Z", "1997-07-16T23:59:60Z", "1997-07-16T9:20:30Z",
    "1997-07-16T19:20:30+19:00", "1997-07-16T19:20:30+05:60",
    "1997-07-16T19:20:30UTC", "1997-07-16T19:20:30GMT",
    "1997-07-16T19:20:30.1234567890Z",
    "2015-02-29", "1997-02-30", "1997-13", "1997-00-10", "1997-07-00", "1997-07-32",
    "1997-7-16", "1997-07-1", "97-07-16", "19970716", "+1997-07-16", "12345",
    "0000", "0000-01-01", "\uff11\uff19\uff19\uff17",  # full-width digits
    "9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00",  # beyond datetime's range
    "2024-01-01" + "0" * 100,
]


@pytest.mark.parametrize("text", NOT_LASTMOD)
def test_what_is_not_a_w3c_datetime_reads_as_none(text):
    assert parse_lastmod(text) is None


@settings(max_examples=300)
@given(st.text(max_size=80))
def test_parse_lastmod_never_raises(text):
    parsed = parse_lastmod(text)
    if parsed is not None:
        start, end = parsed
        assert start.tzinfo is timezone.utc and start < end


# -- any bytes: never raise, stay within the caps -------------------------------------

FRAGMENTS = [
    b"<urlset>", f'<urlset xmlns="{NS}">'.encode(), b"</urlset>", b"<sitemapindex>", b"</sitemapindex>",
    b"<url>", b"</url>", b"<sitemap>", b"</sitemap>", b"<loc>", b"</loc>", b"<lastmod>", b"</lastmod>",
    b"https://a.test/x", b"http://b.test/?a=1&amp;b=2", b"/relative", b"2024-01-01", b"2024-01-01T10:00Z",
    b"nonsense", b"<![CDATA[", b"]]>", b"&amp;", b"&lol;", b"<!DOCTYPE urlset>", b"<!-- c -->",
    b'<?xml version="1.0"?>', b"\xef\xbb\xbf", b"\x1f\x8b", b"\x00", b"\xff", b" ", b"\n", b"<a:b>", b"</a:b>",
]


def check_bounds(entries: list[SitemapEntry], status: SitemapStatus, max_bytes: int, max_entries: int) -> None:
    assert status.read_bytes <= max_bytes
    assert len(entries) == status.entries <= max_entries
    assert "\n" not in status.describe()
    for entry in entries:
        assert entry.loc.startswith(("http://", "https://")) and entry.loc == entry.loc.strip()
        assert (entry.lastmod is None) == (entry.lastmod_end is None)
        if entry.lastmod is not None:
            assert entry.lastmod.tzinfo is timezone.utc


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=st.binary(max_size=3000) | st.lists(st.sampled_from(FRAGMENTS), max_size=80).map(b"".join),
    cuts=st.lists(st.integers(1, 97), max_size=40),
    compress=st.booleans(),
)
def test_any_bytes_in_any_chunks_never_raise_and_stay_within_the_caps(body, cuts, compress):
    max_bytes, max_entries = 1500, 4
    data = gzip.compress(body) if compress else body
    chunks, at = [], 0
    for cut in cuts:
        chunks.append(data[at : at + cut])
        at += cut
    chunks.append(data[at:])
    entries, status = read_sitemap(chunks, max_bytes=max_bytes, max_entries=max_entries)
    check_bounds(entries, status, max_bytes, max_entries)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(
    urls=st.lists(
        st.tuples(
            st.from_regex(r"[a-z0-9/._~-]{0,20}", fullmatch=True),
            st.none()
            | st.datetimes(datetime(1990, 1, 1), datetime(2100, 1, 1)).map(
                lambda t: t.replace(microsecond=0)
            ),
            st.sampled_from(["{}", " {} ", "\n\t{}\n", "<![CDATA[{}]]>"]),
        ),
        max_size=30,
    ),
    size=st.integers(1, 200),
    compress=st.booleans(),
)
def test_a_well_formed_sitemap_reads_the_same_in_any_chunks(urls, size, compress):
    body = urlset(
        *(
            url(
                wrap.format(f"https://a.test/{path}"),
                None if when is None else wrap.format(when.strftime("%Y-%m-%dT%H:%M:%SZ")),
            )
            for path, when, wrap in urls
        )
    )
    entries, status = read(gzip.compress(body) if compress else body, size)
    assert status.complete, status.describe()
    assert [(e.loc, e.lastmod) for e in entries] == [
        (f"https://a.test/{path}", None if when is None else when.replace(tzinfo=timezone.utc))
        for path, when, _ in urls
    ]


# -- matching entries to list targets -------------------------------------------------


def entry(loc: str, lastmod: str | None = None) -> SitemapEntry:
    parsed = parse_lastmod(lastmod) if lastmod else None
    return SitemapEntry(loc, *parsed) if parsed else SitemapEntry(loc)


MATCHES = [
    # (id, target on the list, <loc> in the sitemap, matched)
    ("same URL", "https://a.test/page", "https://a.test/page", True),
    ("host case", "https://a.test/page", "https://A.TEST/page", True),
    ("default port", "https://a.test/page", "https://a.test:443/page", True),
    ("trailing slash", "https://a.test/dir", "https://a.test/dir/", True),
    ("fragment", "https://a.test/page", "https://a.test/page#top", True),
    ("an &amp; decoded", "https://a.test/p?a=1&b=2", "https://a.test/p?a=1&b=2", True),
    ("IDN host", "https://xn--caf-dma.test/", "https://café.test/", True),
    ("another scheme", "https://a.test/page", "http://a.test/page", False),
    ("query reordered", "https://a.test/p?a=1&b=2", "https://a.test/p?b=2&a=1", False),
    ("path case", "https://a.test/Page", "https://a.test/page", False),
]


@pytest.mark.parametrize(("target", "loc", "matched"), [m[1:] for m in MATCHES], ids=[m[0] for m in MATCHES])
def test_a_loc_matches_its_list_target_by_canonical_url(target, loc, matched):
    claims = SitemapClaims([target], "https://a.test/sitemap.xml", declared_by=["https://xn--caf-dma.test/robots.txt"])
    claims.add([entry(loc, "2024-01-01")])
    found = claims.claim(target)
    assert (found is not None) == matched
    if matched:
        assert found.loc == loc and claims.claims() == {target: found}


# sitemaps.org's "Sitemap file location" examples (as crawler-commons tests them)
LOCATION = [
    ("http://example.com/catalog/sitemap.xml", "http://example.com/catalog/show?item=233&user=3453", True),
    ("http://example.com/catalog/sitemap.xml", "http://example.com/catalog/", True),
    ("http://example.com/catalog/sitemap.xml", "http://example.com/image/show?item=233&user=3453", False),
    ("http://example.com/catalog/sitemap.xml", "https://example.com/catalog/page1.php", False),
    ("http://example.com/catalog/sitemap.xml", "http://example.com:8080/catalog/page1.php", False),
    ("http://example.com/catalog/sitemap.xml", "http://www.example.com/catalog/page1.php", False),
    ("https://example.com/index.php?route=path/sitemap", "https://example.com/catalog/page1.php", True),
    ("https://example.com/sitemap.xml", "https://EXAMPLE.com:443/any/where", True),
]


@pytest.mark.parametrize(("sitemap", "loc", "covered"), LOCATION)
def test_a_sitemap_speaks_only_for_urls_under_its_own_directory(sitemap, loc, covered):
    assert sitemap_covers(sitemap, loc) is covered


def test_a_sitemap_a_hosts_robots_txt_declares_speaks_for_that_host():
    # sitemaps.org "Sitemaps & Cross Submits": the sitemap may live anywhere
    sitemap = "https://cdn.test/sitemaps/a.xml"
    assert not sitemap_covers(sitemap, "https://a.test/page")
    assert sitemap_covers(sitemap, "https://a.test/page", declared_by=["https://a.test/robots.txt"])
    assert not sitemap_covers(sitemap, "https://b.test/page", declared_by=["https://a.test/robots.txt"])


def test_entries_a_sitemap_may_not_speak_for_claim_nothing():
    claims = SitemapClaims(["https://a.test/x", "https://b.test/x"], "https://a.test/sitemap.xml")
    claims.add([entry("https://a.test/x", "2024-01-01"), entry("https://b.test/x", "2024-01-01")])
    assert list(claims.claims()) == ["https://a.test/x"]
    assert claims.claim("https://b.test/x") is None and claims.outside == 1


def test_entries_for_urls_not_on_the_list_are_not_kept():
    claims = SitemapClaims(["https://a.test/x"], "https://a.test/sitemap.xml")
    claims.add([entry(f"https://a.test/other/{n}", "2024-01-01") for n in range(1000)])
    assert claims.claims() == {} and claims.listed == 0 and claims.outside == 0


def test_a_target_listed_twice_keeps_the_later_lastmod():
    claims = SitemapClaims(["https://a.test/x"], "https://a.test/sitemap.xml")
    claims.add([entry("https://a.test/x", "2024-05-01"), entry("https://a.test/x/", "2024-01-01")])
    found = claims.claim("https://a.test/x")
    assert found is not None and found.lastmod == datetime(2024, 5, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize("order", ["without first", "without last"])
def test_a_target_also_listed_without_a_lastmod_has_no_claim(order):
    listed = [entry("https://a.test/x", "2024-05-01"), entry("https://a.test/x")]
    if order == "without first":
        listed.reverse()
    claims = SitemapClaims(["https://a.test/x"], "https://a.test/sitemap.xml")
    claims.add(listed)
    assert claims.claim("https://a.test/x") is None and claims.claims() == {}
    assert claims.listed == 1


def test_claims_can_be_gathered_while_the_sitemap_streams():
    targets = [f"{EXAMPLE}/catalog?desc=vacation_usa&item=83", f"{EXAMPLE}/", f"{EXAMPLE}/unlisted"]
    claims = SitemapClaims(targets, f"{EXAMPLE}/sitemap.xml.gz")
    reader = SitemapReader()
    for chunk in pieces((DATA / "cc-urlset.xml.gz").read_bytes(), 16):
        claims.add(reader.feed(chunk))
    assert reader.close().complete
    claims.add(reader.drain())
    assert {t: e.lastmod.isoformat() for t, e in claims.claims().items() if e.lastmod} == {
        targets[0]: "2004-11-23T00:00:00+00:00",
        targets[1]: "2005-01-01T00:00:00+00:00",
    }


# -- the sitemaps a robots.txt declares -----------------------------------------------

# crawler-commons' robots/sitemap-robots.txt, relative-sitemap-robots.txt and
# sitemap-robots-dedup.txt, transcribed
CC_ROBOTS = """# Sitemap can occur anywhere
sitemap: http://domain.com/sitemap.xml

User-agent: *
Disallow:

# And sitemap directive that forgot "sitemap:"
http://domain.com/dir/my-sitemap.xml

# And a mixed case URL which we want to preserve as such
sitemap: http://domain.com/dir/MixedCased-sitemap.xml
"""


def test_sitemap_lines_are_read_wherever_they_stand_and_keep_their_case():
    policy = RobotsPolicy.parse(CC_ROBOTS, TOKEN)
    assert policy.sitemap_urls("http://domain.com/robots.txt") == (
        "http://domain.com/sitemap.xml",
        "http://domain.com/dir/MixedCased-sitemap.xml",
    )


def test_a_bare_url_line_declares_no_sitemap():
    # crawler-commons reads one as a Sitemap line; a request the site did not
    # clearly ask for is not made (the stricter reading protects the site)
    assert "http://domain.com/dir/my-sitemap.xml" not in declared_sitemaps(CC_ROBOTS)


def test_a_relative_sitemap_is_resolved_against_the_robots_url():
    policy = RobotsPolicy.parse("Sitemap: /sitemap.xml\n\nUser-agent: *\nDisallow: /cache/\n", TOKEN)
    assert policy.sitemaps == ("/sitemap.xml",)
    assert policy.sitemap_urls("https://a.test/robots.txt") == ("https://a.test/sitemap.xml",)


def test_one_sitemap_declared_twice_is_given_once():
    text = "User-agent: *\nDisallow: \n\nsitemap: http://example.org/sitemap.xml\nSitemap: http://example.org/sitemap.xml\nSite-map: http://EXAMPLE.org:80/sitemap.xml\n"
    assert RobotsPolicy.parse(text, TOKEN).sitemap_urls("http://example.org/robots.txt") == (
        "http://example.org/sitemap.xml",
    )


SPELLINGS = [
    ("Sitemap: https://a.test/s.xml", ("https://a.test/s.xml",)),
    ("SITEMAP:https://a.test/s.xml", ("https://a.test/s.xml",)),
    ("Sitemaps: https://a.test/s.xml", ("https://a.test/s.xml",)),
    ("Site-map: https://a.test/s.xml", ("https://a.test/s.xml",)),
    ("Sitemap https://a.test/s.xml", ("https://a.test/s.xml",)),
    ("Sitemap: https://a.test/s.xml # the main one", ("https://a.test/s.xml",)),
    ("\ufeffSitemap: https://a.test/s.xml", ("https://a.test/s.xml",)),
    ("Sitemap: https://cdn.test/a.test/s.xml", ("https://cdn.test/a.test/s.xml",)),  # any host
    ("Sitemap:", ()),
    ("Sitemap: ftp://a.test/s.xml", ()),
    ("Sitemap: mailto:x@a.test", ()),
    ("Sitemap: https://", ()),
    ("Sitemapx: https://a.test/s.xml", ()),
    ("# Sitemap: https://a.test/s.xml", ()),
]


@pytest.mark.parametrize(("text", "urls"), SPELLINGS)
def test_sitemap_line_spellings(text, urls):
    assert RobotsPolicy.parse(text + "\n", TOKEN).sitemap_urls("https://a.test/robots.txt") == urls


def test_sitemap_lines_do_not_end_or_join_a_group():
    text = "User-agent: Walsh-Research\nSitemap: https://a.test/s.xml\nDisallow: /private\n"
    policy = RobotsPolicy.parse(text, TOKEN)
    assert policy.group == "named" and not policy.allows("https://a.test/private/x")
    assert policy.sitemaps == ("https://a.test/s.xml",)


def test_sitemaps_are_the_files_whatever_group_applies():
    text = "User-agent: other\nDisallow: /\nSitemap: https://a.test/s.xml\n"
    policy = RobotsPolicy.parse(text, TOKEN)
    assert policy.group == "none" and policy.sitemaps == ("https://a.test/s.xml",)
    assert RobotsPolicy.allow_all("404").sitemaps == ()


def test_a_policy_keeps_its_sitemaps_through_pickling():
    # robots.txt is parsed in a worker process and sent back pickled
    policy = RobotsPolicy.parse("Sitemap: https://a.test/s.xml\nUser-agent: *\nDisallow: /x\n", TOKEN)
    assert pickle.loads(pickle.dumps(policy)).sitemaps == ("https://a.test/s.xml",)
