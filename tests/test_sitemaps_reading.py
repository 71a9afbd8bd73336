"""Reading sitemaps (issue 32, the part no crawl is needed for). First the
<lastmod> values: every W3C datetime form, read as crawler-commons reads them."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_walsh_research.core.lastmod import parse_lastmod

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
