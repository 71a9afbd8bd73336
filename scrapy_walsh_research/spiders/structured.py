"""R9: what a body says, read for metadata only; HTML is never scraped.

Target requests negotiate ``text/markdown`` first, then feeds
(:mod:`scrapy_walsh_research.gates.negotiation`). What comes back is read
here, for the targets spider's records, generically, with well-kept parsers:

* feeds (RSS, Atom: feedparser; JSON Feed: plain JSON, which feedparser does
  not read): per-entry id, title, link, published, updated;
* markdown (a ``text/markdown`` response, or ``text/plain`` at ``/llms.txt``):
  headings and links, with markdown-it-py;
* HTML: nothing is parsed; the record says no structured representation was
  offered.

Links found are metadata; they are never requested (R6).

Bodies are whatever a server sends. :func:`extract` never raises: a body
that claims a structured format and cannot be read gives ``structured:
None`` and a ``reason``; one read with problems (fields of the wrong type,
XML that needed the lenient parser) keeps what was read and says what was
not in ``reason``. No parser here opens a file or a URL: feedparser gets a
stream (given ``bytes`` it first tries them as a file name) and refuses
external XML entities; markdown-it and ``json`` only see the text.
"""

from __future__ import annotations

import io
import json
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

import feedparser
from markdown_it import MarkdownIt

if TYPE_CHECKING:
    from scrapy.http import Response

#: markdown-it logs each block rule it tries at DEBUG: 1,455 of the 1,593 log
#: lines a crawl of one 15 KB markdown page wrote at Scrapy's default
#: LOG_LEVEL. The bundle brings it in, so the bundle quiets it (as Scrapy
#: quiets hpack and filelock), unless the project set its level itself.
QUIET_LOGGERS = ("markdown_it",)
for _name in QUIET_LOGGERS:
    if logging.getLogger(_name).level == logging.NOTSET:
        logging.getLogger(_name).setLevel(logging.WARNING)

MARKDOWN_TYPES = frozenset({"text/markdown", "text/x-markdown"})
FEED_TYPES = frozenset(
    {"application/rss+xml", "application/atom+xml", "application/rdf+xml", "application/feed+json"}
)
XML_TYPES = frozenset({"application/xml", "text/xml"})
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
HTML_NOTE = "HTML only: no feed or markdown was offered, and HTML is never parsed for content (R9)"
JSON_FEED_VERSION = "https://jsonfeed.org/"
#: Problems listed in a reason before the rest are only counted.
MAX_PROBLEMS = 5


class Unreadable(ValueError):
    """A body that claims a structured format but cannot be read as one."""


def media_type(response: Response) -> str:
    raw = response.headers.get(b"Content-Type") or b""
    return raw.decode("latin-1").split(";", 1)[0].strip().lower()


def is_llms_txt(url: str) -> bool:
    return urlsplit(url).path == "/llms.txt"


def extract(response: Response) -> dict[str, Any]:
    """Structured metadata of a response: ``{"structured": kind, ...}``, plus
    ``reason`` when the body could not be read, or not all of it."""
    kind = media_type(response)
    body = response.body
    try:
        if kind in MARKDOWN_TYPES or (kind in ("text/plain", "") and is_llms_txt(response.url)):
            return {"structured": "markdown", **markdown_metadata(body, response.url)}
        if kind == "application/feed+json":
            return {"structured": "feed", **json_feed_metadata(body, response.url)}
        if kind == "application/json":
            doc = _json_feed_doc(body)
            if doc is not None:
                return {"structured": "feed", **json_feed_from_doc(doc, response.url)}
        elif kind in FEED_TYPES or (kind in XML_TYPES and _looks_like_feed(body)):
            return {"structured": "feed", **feed_metadata(body, response.url)}
    except Unreadable as exc:
        return {"structured": None, "reason": f"{kind} body not read: {exc}"}
    if kind in HTML_TYPES:
        return {"structured": None, "note": HTML_NOTE}
    return {"structured": None, "note": f"{kind or 'no content type'}: not a structured format"}


def _join(base_url: str, href: str) -> str:
    """*href* resolved against *base_url*; as given when it is not a valid URL
    (``urljoin`` raises ``ValueError`` on e.g. ``http://[x``)."""
    try:
        return urljoin(base_url, href)
    except ValueError:
        return href


def markdown_metadata(body: bytes, base_url: str) -> dict[str, Any]:
    tokens = MarkdownIt("commonmark").parse(body.decode("utf-8", errors="replace"))
    headings: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            inline = tokens[i + 1]
            headings.append({"level": int(token.tag[1:]), "text": inline.content})
        if token.type != "inline" or not token.children:
            continue
        href: str | None = None
        text: list[str] = []
        for child in token.children:
            if child.type == "link_open":
                href, text = str(child.attrGet("href") or ""), []
            elif child.type == "link_close" and href is not None:
                links.append({"text": "".join(text), "url": _join(base_url, href)})
                href = None
            elif href is not None and child.type in ("text", "code_inline"):
                text.append(child.content)
    return {"headings": headings, "links": links}


def _looks_like_feed(body: bytes) -> bool:
    head = body[:2048].lower()
    return b"<rss" in head or b"<feed" in head or b"<rdf:rdf" in head


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _problems(found: list[str]) -> str:
    shown = "; ".join(found[:MAX_PROBLEMS])
    more = len(found) - MAX_PROBLEMS
    return f"{shown}; and {more} more" if more > 0 else shown


def feed_metadata(body: bytes, base_url: str) -> dict[str, Any]:
    """RSS/Atom/RDF metadata. A stream, never ``bytes``: feedparser.parse
    opens ``bytes``/``str`` that name a file (``/dev/zero``, a FIFO, a local
    secret) before it treats them as data."""
    parsed = feedparser.parse(io.BytesIO(body))
    bozo = parsed.get("bozo_exception") if parsed.get("bozo") else None
    why = f"{type(bozo).__name__}: {bozo}"[:200] if bozo is not None else None
    version = _text(parsed.get("version")) or ""
    if not version and not parsed.get("entries"):
        raise Unreadable("not an RSS, Atom or RDF feed" + (f" ({why})" if why else ""))
    entries = []
    for e in parsed.get("entries") or []:
        link = _text(e.get("link"))
        entries.append(
            {
                "id": _text(e.get("id")) or link,
                "title": _text(e.get("title")),
                "link": _join(base_url, link) if link else None,
                # dict.get: FeedParserDict maps a missing "updated" to "published"
                "published": _text(dict.get(e, "published")),
                "updated": _text(dict.get(e, "updated")),
            }
        )
    feed = parsed.get("feed") or {}
    result: dict[str, Any] = {
        "feed": {
            "title": _text(feed.get("title")),
            "link": _text(feed.get("link")),
            "format": version,
        },
        "entries": entries,
    }
    if why:
        result["reason"] = f"not well-formed XML, read leniently ({why})"
    return result


def _load_json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except RecursionError:
        raise Unreadable("not JSON (nested too deeply)") from None
    except ValueError as exc:  # includes UnicodeDecodeError, and ints past 4300 digits
        raise Unreadable(f"not JSON ({str(exc)[:200]})") from None


def _json_feed_doc(body: bytes) -> dict[str, Any] | None:
    """The document when an ``application/json`` body is a JSON Feed, else None."""
    try:
        doc = _load_json(body)
    except Unreadable:
        return None
    version = doc.get("version") if isinstance(doc, dict) else None
    return doc if isinstance(version, str) and version.startswith(JSON_FEED_VERSION) else None


def json_feed_metadata(body: bytes, base_url: str) -> dict[str, Any]:
    return json_feed_from_doc(_load_json(body), base_url)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "a string"


def json_feed_from_doc(doc: Any, base_url: str) -> dict[str, Any]:
    """JSON Feed (https://jsonfeed.org/version/1.1) metadata, checking the
    type of every field read: the document is whatever the server sent."""
    if not isinstance(doc, dict):
        raise Unreadable(f"not a JSON Feed (the top level is {_json_type(doc)}, not an object)")
    problems: list[str] = []

    def string(holder: dict[str, Any], key: str, where: str) -> str | None:
        value = holder.get(key)
        if value is None or isinstance(value, str):
            return value
        problems.append(f"{where}{key} is {_json_type(value)}, not a string: ignored")
        return None

    feed = {
        "title": string(doc, "title", ""),
        "link": string(doc, "home_page_url", ""),
        "format": "json",
    }
    items = doc.get("items")
    if items is None:
        items = []
    elif not isinstance(items, list):
        problems.append(f"items is {_json_type(items)}, not an array: no entries read")
        items = []
    entries = []
    for n, item in enumerate(items):
        where = f"items[{n}]."
        if not isinstance(item, dict):
            problems.append(f"items[{n}] is {_json_type(item)}, not an object: skipped")
            continue
        url = string(item, "url", where)
        raw_id = item.get("id")
        # The spec asks readers to coerce a non-string id to a string.
        if isinstance(raw_id, str):
            item_id: str | None = raw_id
        elif isinstance(raw_id, (bool, int, float)):
            item_id = json.dumps(raw_id)
        else:
            if raw_id is not None:
                problems.append(f"{where}id is {_json_type(raw_id)}, not a string: ignored")
            item_id = url
        entries.append(
            {
                "id": item_id,
                "title": string(item, "title", where),
                "link": _join(base_url, url) if url else None,
                "published": string(item, "date_published", where),
                "updated": string(item, "date_modified", where),
            }
        )
    result: dict[str, Any] = {"feed": feed, "entries": entries}
    if problems:
        result["reason"] = f"JSON Feed read with problems: {_problems(problems)}"
    return result
