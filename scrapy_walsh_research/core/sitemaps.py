"""Reading sitemaps (sitemaps.org 0.9): which URLs a host lists, and the
``<lastmod>`` it claims for each. Bytes in, entries out; nothing fetched.

:class:`SitemapReader` is fed a response chunk by chunk as it arrives, so a
crawl can stop reading (and downloading) the moment the reader stops: at the
protocol's limits (50 MiB uncompressed, 50,000 entries), counted while
streaming, so a gzip bomb costs at most 50 MiB of decompression and a few
kilobytes of memory; or at the first sign that the document is not a sitemap
worth reading. A malformed document is a :class:`SitemapStatus` with a
one-line ``error``, never an exception; the entries read before it are
offered, and the status says they are not the whole document.

XML from strangers: lxml's push parser with a parser *target* (SAX-like
callbacks; no tree is built, so memory does not grow with the document),
``resolve_entities=False``, ``load_dtd=False``, ``no_network=True``,
``huge_tree=False``; and a document that declares a ``<!DOCTYPE>`` at all is
refused before its internal subset is read (as crawler-commons does by
default): no sitemap needs a DTD, and the entity attacks arrive through one.

Lenient where real sitemaps are messy, as crawler-commons' ``SiteMapParser``
is: any namespace (0.9, Google's 0.84, none), whitespace and CDATA around
values, leading whitespace and a byte-order mark before the XML declaration,
several ``<loc>`` in one entry (an end tag missing), an index entry written
as bare text. Only ``<loc>`` and ``<lastmod>`` are read. Why this and not Scrapy's
``Sitemap`` or ultimate-sitemap-parser: docs/sitemaps.rst ("Reading
sitemaps").

The reader only reads; what a claim is worth is its caller's to decide:
``core/sitemap_claims.py`` matches entries to list targets by canonical URL
and keeps only what the sitemap may speak for; ``core/lastmod.py`` reads
the ``<lastmod>`` values.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, NamedTuple

from lxml import etree

from scrapy_walsh_research.core.lastmod import parse_lastmod
from scrapy_walsh_research.core.urls import is_http_url

#: sitemaps.org 0.9: "no larger than 50MB (52,428,800 bytes)" uncompressed
MAX_SITEMAP_BYTES = 50 * 1024 * 1024
#: sitemaps.org 0.9: "no more than 50,000 URLs" (a sitemap index: sitemaps)
MAX_SITEMAP_ENTRIES = 50_000
#: the longest ``<loc>``/bare-text value kept (sitemaps.org asks for under
#: 2,048 characters; four times that is still a URL someone wrote)
MAX_VALUE_CHARS = 8192
#: decompressed bytes handed to the XML parser at a time: what one gzip
#: chunk can cost before the byte cap is checked again
PIECE = 64 * 1024

SitemapKind = Literal["urlset", "sitemapindex"]

#: the sitemap namespaces real files use (crawler-commons' ``Namespace``);
#: a ``<loc>`` or ``<lastmod>`` in its entry's own namespace, in none, or in
#: one of these is read; one in an extension's namespace is not
SITEMAP_NAMESPACES = frozenset(
    {
        "http://www.sitemaps.org/schemas/sitemap/0.9",
        "https://www.sitemaps.org/schemas/sitemap/0.9",
        "http://www.sitemaps.org/schemas/sitemap/0.9/",
        "https://www.sitemaps.org/schemas/sitemap/0.9/",
        "https://sitemaps.org/schemas/sitemap/0.9",
        "http://www.google.com/schemas/sitemap/0.9",
        "https://www.google.com/schemas/sitemap/0.9",
        "http://www.google.com/schemas/sitemap/0.90",
        "http://www.google.com/schemas/sitemap/0.84",
        "https://www.google.com/schemas/sitemap/0.84",
    }
)
_CHILD = {"urlset": "url", "sitemapindex": "sitemap"}
_GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"
_LEADING_SPACE = b" \t\r\n\x0b"

# -- what the reader gives ------------------------------------------------------------


class SitemapEntry(NamedTuple):
    """One ``<url>`` of a sitemap (one ``<sitemap>`` of an index).

    *loc* is the URL as written (entities decoded, whitespace around it
    stripped; an absolute http(s) URL). *lastmod* and *lastmod_end* are the
    claim as :func:`~scrapy_walsh_research.core.lastmod.parse_lastmod`
    reads it, None when the entry has no readable ``<lastmod>``.
    """

    loc: str
    lastmod: datetime | None = None
    lastmod_end: datetime | None = None


@dataclass(frozen=True)
class SitemapStatus:
    """How reading one document went: *error* is None when it was read whole
    and within the limits; otherwise one line saying why reading stopped,
    and the entries already given are only part of the document."""

    kind: SitemapKind | None
    error: str | None
    entries: int
    #: ``<url>``/``<sitemap>`` elements without an absolute http(s) ``<loc>``
    skipped: int
    #: ``<lastmod>`` values dropped as unreadable (their entries were kept)
    bad_lastmods: int
    #: bytes of XML read (after decompression)
    read_bytes: int
    gzip: bool

    @property
    def complete(self) -> bool:
        return self.error is None

    def describe(self) -> str:
        """One log line: ``sitemap index (gzip): 12 entries``, ``sitemap not
        read whole: not well-formed XML: ... (3 entries before it)``."""
        what = {"urlset": "sitemap", "sitemapindex": "sitemap index"}.get(
            self.kind or "", "document"
        )
        if self.gzip:
            what += " (gzip)"
        counts = f"{self.entries} entries"
        if self.skipped:
            counts += f", {self.skipped} without a usable <loc>"
        if self.bad_lastmods:
            counts += f", {self.bad_lastmods} unreadable <lastmod>"
        if self.error is None:
            return f"{what}: {counts}"
        if not self.entries and not self.skipped and not self.bad_lastmods:
            return f"{what} not read: {self.error}"
        return f"{what} not read whole: {self.error} ({counts} before it)"


# -- the reader -----------------------------------------------------------------------


class _Stop(Exception):
    """Raised inside the parser's callbacks: stop reading, with this reason."""


class _Entry:
    __slots__ = ("lastmods", "loc")

    def __init__(self, loc: str) -> None:
        self.loc = loc
        self.lastmods: list[str] = []


class _Handler:
    """The lxml parser target: sees every element and text event, keeps only
    the text of the current entry's ``<loc>`` and ``<lastmod>`` (capped), so
    memory stays flat however large or deep the document is.

    Within one ``<url>``, each ``<loc>`` starts an entry, and a ``<lastmod>``
    belongs to the ``<loc>`` before it (the first one, if it comes first):
    crawler-commons' reading of an entry whose closing tag is missing. An
    index entry with no ``<loc>`` but bare text uses that text.
    """

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self.kind: SitemapKind | None = None
        self.out: list[SitemapEntry] = []
        self.seen = 0  # entries given or skipped
        self.skipped = 0
        self.bad_lastmods = 0
        self._depth = 0
        self._entry_ns: str | None = None  # inside a <url>/<sitemap> when set
        self._items: list[_Entry] = []
        self._early: list[str] = []  # lastmods before the first <loc>
        self._field: str | None = None  # "loc"/"lastmod" being read
        self._text: list[str] = []
        self._size = 0
        self._bare: list[str] = []
        self._bare_size = 0

    def doctype(self, name: str | None, pubid: str | None, system: str | None) -> None:
        # called as "<!DOCTYPE name ...>" is read, before any "[...]" subset
        raise _Stop("declares a <!DOCTYPE>: refused (a sitemap needs no DTD)")

    # start, data and end run once per element and text run of the whole
    # document (a bomb of "<a/>" is 13 million of them in 50 MiB): each
    # returns at once for what lies deeper than an entry's fields.

    def start(self, tag: str, attrib: object) -> None:
        level = self._depth
        self._depth = level + 1
        if level == 2:
            if self._entry_ns is None:
                return
            name = tag.rpartition("}")[2]
            if name != "loc" and name != "lastmod":
                return
            ns = _namespace(tag)
            if ns == self._entry_ns or ns == "" or ns in SITEMAP_NAMESPACES:
                self._field, self._text, self._size = name, [], 0
        elif level == 1:
            if tag.rpartition("}")[2] == _CHILD[self.kind or "urlset"]:
                self._entry_ns = _namespace(tag)
        elif level == 0:
            name = tag.rpartition("}")[2]
            if name not in _CHILD:
                raise _Stop(f"not a sitemap: the root element is <{name[:40]}>")
            self.kind = "urlset" if name == "urlset" else "sitemapindex"

    def data(self, text: str) -> None:
        if self._field is not None:
            if self._size <= MAX_VALUE_CHARS:
                self._text.append(text)
                self._size += len(text)
        elif self._depth == 2 and self._entry_ns is not None and not self._items:
            if self._bare_size <= MAX_VALUE_CHARS:
                self._bare.append(text)
                self._bare_size += len(text)

    def end(self, tag: str) -> None:
        depth = self._depth = self._depth - 1
        if depth > 2:
            return
        if depth == 2:
            if self._field is not None:
                self._end_field()
        elif depth == 1 and self._entry_ns is not None:
            self._finish_entry()

    def _end_field(self) -> None:
        value = "".join(self._text) if self._size <= MAX_VALUE_CHARS else ""
        if self._field == "loc":
            if self.seen + len(self._items) >= self.max_entries:
                raise _Stop(f"more than {self.max_entries:,} entries (sitemaps.org's limit)")
            self._items.append(_Entry(value))
        elif self._items:
            self._items[-1].lastmods.append(value)
        else:
            self._early.append(value)
        self._field = None

    def close(self) -> None:
        return None

    def _finish_entry(self) -> None:
        items, early = self._items, self._early
        if not items:
            bare = "".join(self._bare) if self._bare_size <= MAX_VALUE_CHARS else ""
            items = [_Entry(bare)]
        items[0].lastmods[:0] = early
        self._entry_ns, self._items, self._early = None, [], []
        self._bare, self._bare_size = [], 0
        for item in items:
            if self.seen >= self.max_entries:
                raise _Stop(f"more than {self.max_entries:,} entries (sitemaps.org's limit)")
            self.seen += 1
            loc = item.loc.strip()
            if not loc or len(loc) > MAX_VALUE_CHARS or not is_http_url(loc):
                self.skipped += 1
                continue
            span: tuple[datetime, datetime] | None = None
            for text in item.lastmods:
                parsed = parse_lastmod(text)
                if parsed is None:
                    self.bad_lastmods += 1
                elif span is None or parsed[1] > span[1]:
                    span = parsed  # two lastmods for one URL: the later one
            if span is None:
                self.out.append(SitemapEntry(loc))
            else:
                self.out.append(SitemapEntry(loc, span[0], span[1]))


def _namespace(tag: str) -> str:
    """The namespace of an lxml tag (``{ns}name``); ``""`` for none."""
    return tag[1 : tag.index("}")] if tag.startswith("{") else ""


def _one_line(error: BaseException) -> str:
    text = str(getattr(error, "msg", None) or error) or type(error).__name__
    return " ".join(text.split())[:300]


class SitemapReader:
    """Reads one sitemap or sitemap index, fed its body chunk by chunk.

    :meth:`feed` returns the entries a chunk completes and never raises;
    :meth:`steps` does the same a :data:`PIECE` of XML at a time, for an
    event loop that must not stall (``twisted.internet.task.cooperate`` can
    take one step per turn). Once :attr:`stopped` is true (a limit was
    reached, or the document is not one to read) further chunks are
    ignored, so the caller can stop the download. :meth:`close` ends the
    document and says how reading went.

    The body may be gzip (``.xml.gz``), told by its magic bytes rather than
    its name: a ``.gz`` URL whose server already decompressed it is plain
    XML. A second gzip member is read too; bytes after the last are ignored.
    *max_bytes* caps the XML after decompression, *max_entries* the
    ``<url>``/``<sitemap>`` entries; both are checked as bytes arrive:
    decompression makes one piece at a time, each read before the next.
    """

    def __init__(
        self,
        *,
        max_bytes: int = MAX_SITEMAP_BYTES,
        max_entries: int = MAX_SITEMAP_ENTRIES,
    ) -> None:
        self.max_bytes = max_bytes
        self._handler = _Handler(max_entries)
        self._parser = etree.XMLParser(
            target=self._handler,
            resolve_entities=False,
            load_dtd=False,
            no_network=True,
            huge_tree=False,
            remove_comments=True,
            remove_pis=True,
        )
        self._gzip: bool | None = None  # None until the first two bytes came
        self._sniffed = b""  # the first byte, until the second tells gzip or not
        self._inflate: zlib._Decompress | None = None  # inside a gzip member
        self._member_head = b""  # a further member's first byte, likewise
        self._after_gzip = False  # past the last gzip member
        self._leading = True  # before the XML's first byte
        self._bom_head = b""  # the XML's first bytes, until a BOM is told
        self._bom_checked = False
        self._read = 0
        self._parsed = False
        self._unfinished = 0  # chunks whose steps are not all taken
        self._error: str | None = None
        self._closed = False

    @property
    def stopped(self) -> bool:
        """True once reading has stopped: more bytes would not be read."""
        return self._error is not None or self._closed

    def feed(self, chunk: bytes) -> list[SitemapEntry]:
        """Read *chunk*; the entries it completed (maybe none)."""
        return [entry for step in self.steps(chunk) for entry in step]

    def steps(self, chunk: bytes) -> Iterator[list[SitemapEntry]]:
        """Read *chunk* a piece at a time, giving the entries each piece
        completed. Take every step before the next chunk: a chunk left
        part-read stops the reader (its rest would be lost unnoticed)."""
        self._unfinished += 1
        return self._steps(chunk)

    def _steps(self, chunk: bytes) -> Iterator[list[SitemapEntry]]:
        finished = False
        try:
            if self._unfinished > 1:
                self._fail("a chunk was left part-read")
            if self.stopped or not chunk:
                finished = True
                return
            if self._gzip is None:
                chunk, self._sniffed = self._sniffed + chunk, b""
                if len(chunk) < len(_GZIP_MAGIC):
                    self._sniffed = chunk
                    finished = True
                    return
                self._gzip = chunk.startswith(_GZIP_MAGIC)
            for _ in self._gunzip(chunk) if self._gzip else self._slices(chunk):
                yield self._drain()
                if self._error is not None:
                    break
            finished = True
        finally:
            self._unfinished -= 1
            if not finished:
                self._fail("a chunk was left part-read")

    def close(self) -> SitemapStatus:
        """End the document (whatever was fed is all there is) and say how
        reading went. Entries it completes are given by :meth:`drain`."""
        if self._unfinished:
            self._fail("a chunk was left part-read")
        if not self.stopped:
            if self._gzip is None:  # fewer than two bytes in all
                self._gzip = False
                self._xml(self._sniffed)
            if self._inflate is not None:
                self._fail("the gzip stream ends early (truncated)")
            self._xml(b"", final=True)
        self._closed = True
        handler = self._handler
        return SitemapStatus(
            kind=handler.kind,
            error=self._error,
            entries=handler.seen - handler.skipped,
            skipped=handler.skipped,
            bad_lastmods=handler.bad_lastmods,
            read_bytes=self._read,
            gzip=bool(self._gzip),
        )

    def drain(self) -> list[SitemapEntry]:
        """Entries completed but not yet given (those :meth:`close` completed)."""
        return self._drain()

    def _drain(self) -> list[SitemapEntry]:
        out, self._handler.out = self._handler.out, []
        return out

    def _fail(self, reason: str) -> None:
        if self._error is None:
            self._error = reason

    def _slices(self, data: bytes) -> Iterator[None]:
        for at in range(0, len(data), PIECE):
            self._xml(data[at : at + PIECE])
            yield None

    def _gunzip(self, data: bytes) -> Iterator[None]:
        """Decompress a piece, read it, and only then make the next."""
        while data and self._error is None and not self._after_gzip:
            if self._inflate is None:  # at the start of a member, or after the last
                data, self._member_head = self._member_head + data, b""
                if len(data) < len(_GZIP_MAGIC):
                    self._member_head = data
                    return
                if not data.startswith(_GZIP_MAGIC):
                    self._after_gzip = True
                    return
                self._inflate = zlib.decompressobj(wbits=31)
            inflate = self._inflate
            while self._error is None:
                try:
                    piece = inflate.decompress(data, PIECE)
                except zlib.error as exc:
                    self._fail(f"not a readable gzip stream: {_one_line(exc)}")
                    return
                data = inflate.unconsumed_tail
                if piece:
                    self._xml(piece)
                    yield None
                if inflate.eof:
                    data = inflate.unused_data + data
                    self._inflate = None
                    break
                if not data and len(piece) < PIECE:
                    return  # all input consumed, all output given

    def _xml(self, data: bytes, final: bool = False) -> None:
        """Hand *data* to the XML parser, within the byte cap."""
        if self._error is not None:
            return
        if self._read + len(data) > self.max_bytes:
            self._fail(f"larger than {self.max_bytes:,} bytes uncompressed (sitemaps.org's limit)")
            return
        self._read += len(data)
        if self._leading:
            # A byte-order mark, then whitespace, before "<?xml": real files
            # have both, and crawler-commons skips them; lxml would not.
            data, self._bom_head = self._bom_head + data, b""
            if not self._bom_checked:
                if len(data) < len(_BOM) and _BOM.startswith(data) and not final:
                    self._bom_head = data
                    return
                self._bom_checked = True
                if data.startswith(_BOM):
                    data = data[len(_BOM) :]
            data = data.lstrip(_LEADING_SPACE)
            self._leading = not data
        try:
            if data:
                self._parsed = True
                self._parser.feed(data)
            if final:
                if not self._parsed:
                    raise _Stop("empty document")
                self._parser.close()
        except _Stop as stop:
            self._fail(str(stop))
        except etree.LxmlError as exc:  # XMLSyntaxError, with the line and column
            self._fail(f"not well-formed XML: {_one_line(exc)}")
        except Exception as exc:  # never expected; still a line, not a raise
            self._fail(f"not read: {type(exc).__name__}: {_one_line(exc)}")


def read_sitemap(
    body: bytes | Iterable[bytes],
    *,
    max_bytes: int = MAX_SITEMAP_BYTES,
    max_entries: int = MAX_SITEMAP_ENTRIES,
) -> tuple[list[SitemapEntry], SitemapStatus]:
    """A whole body (or its chunks) read at once: every entry, and how it went."""
    reader = SitemapReader(max_bytes=max_bytes, max_entries=max_entries)
    entries: list[SitemapEntry] = []
    for chunk in [body] if isinstance(body, bytes) else body:
        entries += reader.feed(chunk)
        if reader.stopped:
            break
    status = reader.close()
    return entries + reader.drain(), status
