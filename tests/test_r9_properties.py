"""Property-based tests over every parser of network input in R9.

No exception escapes :func:`extract` or the feed, JSON Feed and markdown
readers, whatever the bytes and content type (the only one a reader may
raise is :class:`Unreadable`, which ``extract`` turns into a reason); where a
simple reference exists, the readers agree with it.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urljoin
from xml.sax.saxutils import escape

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scrapy.http import Response

from scrapy_walsh_research.spiders.structured import (
    FEED_TYPES,
    HTML_TYPES,
    MARKDOWN_TYPES,
    XML_TYPES,
    Unreadable,
    extract,
    feed_metadata,
    json_feed_from_doc,
    json_feed_metadata,
    markdown_metadata,
)

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BASE = "http://site.test/dir/page"
VERSION = "https://jsonfeed.org/version/1.1"

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
#: Objects shaped like a JSON Feed, with any value in any field.
item_like = st.fixed_dictionaries(
    {},
    optional={
        "id": json_values,
        "url": json_values,
        "title": json_values,
        "date_published": json_values,
        "date_modified": json_values,
    },
)
feed_like = st.fixed_dictionaries(
    {"version": st.just(VERSION) | json_values},
    optional={
        "title": json_values,
        "home_page_url": json_values,
        "items": st.lists(item_like | json_values, max_size=6) | json_values,
    },
)
words = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
    min_size=1,
    max_size=8,
)
#: Link text: words with single spaces, nothing markdown would interpret.
plain_text = st.lists(words, min_size=1, max_size=4).map(" ".join)
#: Link targets without spaces, brackets, parentheses, quotes, entities or escapes.
url_path = st.lists(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.~", min_size=1, max_size=8),
    min_size=1,
    max_size=3,
).map("/".join)
url_like = st.one_of(
    url_path,
    url_path.map(lambda p: "/" + p),
    url_path.map(lambda p: "https://other.test/" + p),
)
xml_snippets = st.sampled_from(
    [
        '<?xml version="1.0"?>',
        '<?xml version="1.0" encoding="utf-16"?>',
        "<rss version='2.0'>",
        "<channel>",
        "<item>",
        "</item>",
        "<title>",
        "</title>",
        '<feed xmlns="http://www.w3.org/2005/Atom">',
        "<entry>",
        "<link href='x'/>",
        "<link>http://[bad</link>",
        "<guid>",
        "<![CDATA[",
        "]]>",
        "<!DOCTYPE rss [<!ENTITY a 'b'>]>",
        "&a;",
        "&amp;",
        "&#0;",
        "\x00",
        "<rdf:RDF>",
    ]
)
xml_like = st.lists(xml_snippets | st.text(max_size=10), max_size=25).map(
    lambda parts: "".join(parts).encode("utf-8", "surrogatepass")
)
bodies = st.one_of(
    st.binary(max_size=2000),
    st.text(max_size=500).map(lambda t: t.encode("utf-8", "surrogatepass")),
    xml_like,
    json_values.map(lambda v: json.dumps(v).encode()),
    feed_like.map(lambda v: json.dumps(v).encode()),
    st.sampled_from([b"/dev/zero", b"/etc/passwd", b"[" * 5000, b"", b"1" * 5000]),
)
content_types = st.one_of(
    st.sampled_from(
        [
            *sorted(MARKDOWN_TYPES | FEED_TYPES | XML_TYPES | HTML_TYPES),
            *("application/json", "text/plain", "", "image/png"),
        ]
    ),
    st.text(max_size=30),
).flatmap(lambda t: st.sampled_from([t, f"{t}; charset=utf-8", f" {t.upper()} ;charset=latin-1"]))


def _is_text_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _check_shape(found: dict[str, Any]) -> None:
    assert found["structured"] in (None, "markdown", "feed")
    json.dumps(found, allow_nan=False)  # a record must stay valid JSON
    for entry in found.get("entries", []):
        assert set(entry) == {"id", "title", "link", "published", "updated"}
        assert all(_is_text_or_none(v) for v in entry.values())
    if "feed" in found:
        assert all(_is_text_or_none(v) for v in found["feed"].values())
    for link in found.get("links", []):
        assert isinstance(link["text"], str) and isinstance(link["url"], str)


@FAST
@given(body=bodies, content_type=content_types, path=st.sampled_from(["/llms.txt", "/x", "/"]))
def test_extract_never_raises_and_gives_a_record_shaped_result(body, content_type, path):
    response = Response(
        f"http://site.test{path}", body=body, headers={"Content-Type": content_type}
    )
    found = extract(response)
    _check_shape(found)
    if found["structured"] is None:
        assert found.get("note") or found.get("reason")


@FAST
@given(body=st.one_of(st.binary(max_size=2000), xml_like))
def test_the_feed_reader_raises_nothing_but_unreadable(body):
    try:
        found = feed_metadata(body, BASE)
    except Unreadable:
        return
    _check_shape({"structured": "feed", **found})


@FAST
@given(body=bodies)
def test_the_json_feed_reader_raises_nothing_but_unreadable(body):
    try:
        found = json_feed_metadata(body, BASE)
    except Unreadable:
        return
    _check_shape({"structured": "feed", **found})


def reference_entry(item: dict[str, Any]) -> dict[str, Any]:
    """JSON Feed 1.1 read by the letter: strings where strings are due; a
    number or boolean id coerced to a string, as the spec asks readers to."""

    def text(key: str) -> str | None:
        value = item.get(key)
        return value if isinstance(value, str) else None

    raw_id = item.get("id")
    if isinstance(raw_id, str):
        item_id = raw_id
    elif isinstance(raw_id, (bool, int, float)):
        item_id = json.dumps(raw_id)
    else:
        item_id = text("url")
    url = text("url")
    try:
        link = urljoin(BASE, url) if url else None
    except ValueError:
        link = url
    return {
        "id": item_id,
        "title": text("title"),
        "link": link,
        "published": text("date_published"),
        "updated": text("date_modified"),
    }


@FAST
@given(doc=feed_like | json_values)
def test_json_feed_entries_agree_with_the_spec_read_by_the_letter(doc):
    if not isinstance(doc, dict):
        with pytest.raises(Unreadable):
            json_feed_from_doc(doc, BASE)
        return
    found = json_feed_from_doc(doc, BASE)
    items = doc.get("items")
    expected = (
        [reference_entry(i) for i in items if isinstance(i, dict)]
        if isinstance(items, list)
        else []
    )
    assert found["entries"] == expected
    # A value ignored in an item always leaves a reason.
    bad_items = isinstance(items, list) and any(
        not isinstance(i, dict)
        or any(
            not (v is None or isinstance(v, str))
            for k, v in i.items()
            if k in ("url", "title", "date_published", "date_modified")
        )
        for i in items
    )
    assert bool(found.get("reason")) >= bool(bad_items)


@FAST
@given(
    entries=st.lists(st.tuples(words, plain_text, url_path), max_size=6, unique_by=lambda e: e[0]),
    title=plain_text,
    atom=st.booleans(),
)
def test_rss_and_atom_entries_agree_with_what_was_generated(entries, title, atom):
    if atom:
        body = (
            f'<feed xmlns="http://www.w3.org/2005/Atom"><title>{escape(title)}</title>'
            + "".join(
                f"<entry><id>{i}</id><title>{escape(t)}</title><link href='{u}'/></entry>"
                for i, t, u in entries
            )
            + "</feed>"
        )
    else:
        body = (
            f'<rss version="2.0"><channel><title>{escape(title)}</title>'
            + "".join(
                f"<item><guid>{i}</guid><title>{escape(t)}</title><link>{u}</link></item>"
                for i, t, u in entries
            )
            + "</channel></rss>"
        )
    found = feed_metadata(body.encode(), BASE)
    assert found["feed"]["title"] == title
    assert [(e["id"], e["title"], e["link"]) for e in found["entries"]] == [
        (i, t, urljoin(BASE, u)) for i, t, u in entries
    ]
    assert "reason" not in found


@FAST
@given(text=st.text(max_size=2000))
def test_the_markdown_reader_never_raises(text):
    found = markdown_metadata(text.encode("utf-8", "surrogatepass"), BASE)
    _check_shape({"structured": "markdown", **found})


@FAST
@given(
    blocks=st.lists(
        st.one_of(
            st.tuples(st.just("link"), plain_text, url_like),
            st.tuples(st.just("heading"), st.integers(min_value=1, max_value=6), plain_text),
        ),
        max_size=8,
    ),
    joiner=st.sampled_from([" ", "\n", "\n\n", " and "]),
)
def test_markdown_links_and_headings_agree_with_a_simple_reference(blocks, joiner):
    """``[text](url)`` gives (text, url resolved against the page) and a
    heading line ``### text`` gives (3, text), in document order."""
    parts, links, headings = [], [], []
    for block in blocks:
        if block[0] == "link":
            _, text, url = block
            parts.append(f"[{text}]({url})")
            links.append((text, urljoin(BASE, url)))
        else:
            _, level, text = block
            # A heading is a line of its own.
            parts.append(f"\n{'#' * level} {text}\n")
            headings.append((level, text))
    found = markdown_metadata(joiner.join(parts).encode(), BASE)
    assert [(link["text"], link["url"]) for link in found["links"]] == links
    assert [(h["level"], h["text"]) for h in found["headings"]] == headings
