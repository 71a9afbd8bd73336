"""R9: prefer structured representations; never scrape HTML.

Target requests negotiate ``text/markdown`` first, then feeds. What comes
back is read generically, with well-kept parsers, for metadata only:

* feeds (RSS, Atom: feedparser; JSON Feed: plain JSON, which feedparser does
  not read): per-entry id, title, link, published, updated;
* markdown (a ``text/markdown`` response, or ``text/plain`` at ``/llms.txt``):
  headings and links, with markdown-it-py;
* HTML: nothing is parsed; the record says no structured representation was
  offered.

Links found are metadata; they are never requested (R6).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

import feedparser
from markdown_it import MarkdownIt

from scrapy_walsh_research.internal import LLMS, TARGET, Marks

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self

ACCEPT = (
    "text/markdown, "
    "application/feed+json;q=0.9, application/atom+xml;q=0.9, application/rss+xml;q=0.9, "
    "application/xml;q=0.8, text/xml;q=0.8, text/plain;q=0.7, text/html;q=0.5, */*;q=0.1"
)
ACCEPT_LLMS = "text/markdown, text/plain;q=0.9, */*;q=0.1"

MARKDOWN_TYPES = frozenset({"text/markdown", "text/x-markdown"})
FEED_TYPES = frozenset(
    {"application/rss+xml", "application/atom+xml", "application/rdf+xml", "application/feed+json"}
)
XML_TYPES = frozenset({"application/xml", "text/xml"})
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
HTML_NOTE = "HTML only: no feed or markdown was offered, and HTML is never parsed for content (R9)"


class NegotiationMiddleware:
    """Ask targets for markdown first, then feeds (R9 content negotiation)."""

    def __init__(self, crawler: Crawler) -> None:
        self.marks = Marks.for_crawler(crawler)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def process_request(self, request: Request) -> None:
        purpose = self.marks.purpose(request)
        if purpose == LLMS:
            request.headers[b"Accept"] = ACCEPT_LLMS
        elif purpose == TARGET:
            request.headers[b"Accept"] = ACCEPT


def media_type(response: Response) -> str:
    raw = response.headers.get(b"Content-Type") or b""
    return raw.decode("latin-1").split(";", 1)[0].strip().lower()


def is_llms_txt(url: str) -> bool:
    return urlsplit(url).path == "/llms.txt"


def extract(response: Response) -> dict[str, Any]:
    """Structured metadata of a response: ``{"structured": kind, ...}``."""
    kind = media_type(response)
    body = response.body
    if kind in MARKDOWN_TYPES or (kind in ("text/plain", "") and is_llms_txt(response.url)):
        return {"structured": "markdown", **markdown_metadata(body, response.url)}
    if kind == "application/feed+json" or (kind == "application/json" and _is_json_feed(body)):
        return {"structured": "feed", **json_feed_metadata(body, response.url)}
    if kind in FEED_TYPES or (kind in XML_TYPES and _looks_like_feed(body)):
        return {"structured": "feed", **feed_metadata(body, response.url)}
    if kind in HTML_TYPES:
        return {"structured": None, "note": HTML_NOTE}
    return {"structured": None, "note": f"{kind or 'no content type'}: not a structured format"}


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
                links.append({"text": "".join(text), "url": urljoin(base_url, href)})
                href = None
            elif href is not None and child.type in ("text", "code_inline"):
                text.append(child.content)
    return {"headings": headings, "links": links}


def _looks_like_feed(body: bytes) -> bool:
    head = body[:2048].lower()
    return b"<rss" in head or b"<feed" in head or b"<rdf:rdf" in head


def _is_json_feed(body: bytes) -> bool:
    try:
        doc = json.loads(body)
    except ValueError:
        return False
    return isinstance(doc, dict) and str(doc.get("version", "")).startswith("https://jsonfeed.org/")


def feed_metadata(body: bytes, base_url: str) -> dict[str, Any]:
    parsed = feedparser.parse(body)
    entries = [
        {
            "id": e.get("id") or e.get("link"),
            "title": e.get("title"),
            "link": urljoin(base_url, e["link"]) if e.get("link") else None,
            # dict.get: FeedParserDict maps a missing "updated" to "published"
            "published": dict.get(e, "published"),
            "updated": dict.get(e, "updated"),
        }
        for e in parsed.entries
    ]
    feed = parsed.feed
    return {
        "feed": {"title": feed.get("title"), "link": feed.get("link"), "format": parsed.version},
        "entries": entries,
    }


def json_feed_metadata(body: bytes, base_url: str) -> dict[str, Any]:
    doc = json.loads(body)
    entries = [
        {
            "id": str(item.get("id")) if item.get("id") is not None else item.get("url"),
            "title": item.get("title"),
            "link": urljoin(base_url, item["url"]) if item.get("url") else None,
            "published": item.get("date_published"),
            "updated": item.get("date_modified"),
        }
        for item in doc.get("items", [])
        if isinstance(item, dict)
    ]
    return {
        "feed": {"title": doc.get("title"), "link": doc.get("home_page_url"), "format": "json"},
        "entries": entries,
    }
