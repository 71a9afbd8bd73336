"""The declared list (``urls.txt``): its format, and the one reader of it.

One target per line. The file is UTF-8 (or UTF-16 that starts with its
byte-order mark), and line ends may be LF, CRLF or CR. On each line:

* leading and trailing whitespace is dropped, and invisible characters there
  (a byte-order mark, which Windows editors write at the start of a file; a
  zero-width space copied with a URL);
* a blank line, or one whose first character is ``#``, is a comment;
* `` #`` (a ``#`` after whitespace) starts a note that runs to the end of
  the line: ``https://example.org/feed.xml  # the news feed``. A ``#`` right
  after URL characters is the URL's own fragment (``/guide#install``), which
  is never sent (dedup ignores it too);
* what is left must be one absolute http(s) URL with a host, with no
  whitespace, control or invisible character in it; a line is read no
  further than :data:`MAX_LINE_CHARS`.

Comments get no record; every other line gets exactly one, and a line that
breaks a rule above gets an ``invalid`` record saying which (the crawl goes
on). How long a URL the crawl will fetch is Scrapy's ``URLLENGTH_LIMIT``
(2083 by default), checked by the spider, which knows the setting.

Written by hand: a list of URLs has no library, and the rules (a note vs a
fragment, a bounded line) are ours to state.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy_walsh_research.core.urls import is_http_url

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

#: A longer line is invalid, and no more of it is held in memory than this.
#: Far above any URL a server accepts (Scrapy's URLLENGTH_LIMIT is 2083; a
#: project may raise it), far below what a stray binary file's "line" can be.
MAX_LINE_CHARS = 64 * 1024
#: An invalid line's text is kept in its record up to this many characters.
MAX_KEPT_CHARS = 2048
#: A note starts at a ``#`` that follows whitespace.
_NOTE = re.compile(r"\s#")
#: what the decoder puts for each byte that is not UTF-8 (``surrogateescape``)
_NOT_UTF8 = re.compile("[\udc80-\udcff]")
#: a host name and maybe a path, as people write a URL without its scheme
_HOSTISH = re.compile(r"[\w-]+(\.[\w-]+)+(:\d+)?([/?].*)?\Z")


@dataclass(frozen=True)
class ListLine:
    """One line that is not a comment: its number (from 1), its URL (or,
    for an invalid line, its text, cut to :data:`MAX_KEPT_CHARS`), and why
    it is invalid (None for a line to fetch)."""

    number: int
    text: str
    invalid: str | None = None


def unreadable(path: Path) -> str | None:
    """Why the list at *path* cannot be read, or None."""
    if not path.exists():
        return "does not exist"
    if not path.is_file():
        return "is not a file"
    try:
        path.open("rb").close()
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return None


def read_list(path: Path) -> Iterator[ListLine]:
    """Every line of the list at *path* that is not a comment, in order.

    Reads line by line, never more than :data:`MAX_LINE_CHARS` of one line
    at a time, so a file of any size (or one that is no list at all) is read
    in bounded memory. ``utf-8-sig`` drops a byte-order mark at the start;
    universal newlines read LF, CRLF and CR alike; a byte that is not UTF-8
    is kept as a stand-in character, so its line is reported, not the file.
    A file that starts with a UTF-16 byte-order mark (Windows Notepad's
    "Unicode") is read as UTF-16: the mark says so unambiguously.
    """
    with path.open("rb") as raw:
        utf16 = raw.read(2) in (b"\xff\xfe", b"\xfe\xff")
    encoding = "utf-16" if utf16 else "utf-8-sig"
    schemes = _Schemes()
    with path.open(encoding=encoding, errors="surrogateescape", newline=None) as lines:
        number = 0
        while True:
            text = lines.readline(MAX_LINE_CHARS + 1)
            if not text:
                return
            number += 1
            if len(text) <= MAX_LINE_CHARS or text.endswith("\n"):
                line = parse_line(number, text, schemes.usual())
                if line is not None:
                    schemes.count(line)
                    yield line
                continue
            size = len(text)
            head = text[:MAX_KEPT_CHARS]
            while not text.endswith("\n"):
                text = lines.readline(MAX_LINE_CHARS)
                if not text:
                    break
                size += len(text.rstrip("\n"))
            yield ListLine(
                number,
                _printable(head),
                f"a line of {size} characters, longer than the {MAX_LINE_CHARS} a line may have",
            )


class _Schemes:
    """The schemes of the list's valid lines so far: a line without one is
    told to add the scheme the rest of its list uses."""

    def __init__(self) -> None:
        self.seen = {"http": 0, "https": 0}

    def count(self, line: ListLine) -> None:
        if line.invalid is None:
            scheme = line.text.split(":", 1)[0].lower()
            if scheme in self.seen:
                self.seen[scheme] += 1

    def usual(self) -> str | None:
        """``http`` or ``https``, whichever the lines so far use more, or
        None before the first (or on a tie)."""
        http, https = self.seen["http"], self.seen["https"]
        return None if http == https else "http" if http > https else "https"


def parse_line(number: int, text: str, scheme: str | None = None) -> ListLine | None:
    """Line *number*, *text* as read, as a target, an invalid line, or None
    for a comment or a blank line; *scheme* is the one the list's other
    lines use (what a line without a scheme is told to add)."""
    text = _trim(text)
    if not text or text.startswith("#"):
        return None
    note = _NOTE.search(text)
    if note is not None:
        text = text[: note.start()].rstrip()
    if _NOT_UTF8.search(text):
        return ListLine(number, _printable(text[:MAX_KEPT_CHARS]), "not UTF-8 text")
    problem = url_problem(text, scheme)
    return ListLine(number, text[:MAX_KEPT_CHARS] if problem else text, problem)


def _trim(text: str) -> str:
    """*text* without whitespace or invisible characters at either end: a
    byte-order mark (it also starts a line where two lists were joined), a
    zero-width space or joiner that came with a URL copied from a page."""
    start, end = 0, len(text)
    while start < end and (text[start].isspace() or unicodedata.category(text[start]) == "Cf"):
        start += 1
    while end > start and (text[end - 1].isspace() or unicodedata.category(text[end - 1]) == "Cf"):
        end -= 1
    return text[start:end]


def _printable(text: str) -> str:
    """*text* with each byte that was not UTF-8 shown as U+FFFD."""
    return _NOT_UTF8.sub("\ufffd", text)


def url_problem(text: str, scheme: str | None = None) -> str | None:
    """Why *text* (a line without its note) is not a target to fetch, or
    None; *scheme*: the one the rest of the list uses, if known."""
    if not is_http_url(text):
        return "not an absolute http(s) URL" + _hint(text, scheme)
    if any(ch.isspace() for ch in text):
        return (
            "whitespace inside the URL: one URL per line; a note starts at a '#' after "
            "whitespace, and a space in a URL is written %20"
        )
    hidden = next((ch for ch in text if unicodedata.category(ch) in ("Cc", "Cf")), None)
    if hidden is not None:
        return f"a control or invisible character (U+{ord(hidden):04X}) inside the URL"
    return None


def _hint(text: str, scheme: str | None = None) -> str:
    """What is missing from *text*, which is not an absolute http(s) URL: a
    scheme is suggested as the rest of the list has it (both, before any)."""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port that is no port
    except ValueError as exc:
        return f" ({exc})"
    if "://" not in text and _HOSTISH.match(text):
        if scheme is None:
            return f": no scheme (write http://{text} or https://{text}, as the site serves it)"
        return f": no scheme (write {scheme}://{text}, as the list's other lines do)"
    if parts.scheme and parts.scheme.lower() not in ("http", "https") and "://" in text:
        return f": its scheme is {parts.scheme}"
    return ""
