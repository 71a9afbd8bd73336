"""One notion of host: every spelling of an address the crawl would connect to
is one host for the blocklist (R3), the robots.txt cache (R2) and pacing (R4).

The references are the system's own parsers: ``socket.inet_aton`` and
``getaddrinfo(AI_NUMERICHOST)`` for IPv4, ``ipaddress``/``inet_pton`` for IPv6,
and Scrapy's ``Request`` for the host a URL makes the crawl contact.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import idna
import pytest
import pytest_twisted
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from scrapy import Request

from scrapy_walsh_research.core.blocklist.entries import DomainSet, entry_hosts, normalize_entry
from scrapy_walsh_research.core.urls import (
    canonical_url,
    host_variants,
    ip_literal,
    normalize_host,
    origin_of,
    url_host,
)
from scrapy_walsh_research.sandbox import Reply
from tests.support.crawling import (
    BLOCKLIST_HOST,
    BLOCKLIST_PATH,
    TDMREP,
    base_settings,
    blocklist_doc,
    crawl,
    json_reply,
)
from tests.support.crawling import gaps as arrival_gaps

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- the table ------------------------------------------------------------------

#: (spelling, the one host it is). IPv4 spellings are those inet_aton reads
#: (glibc gethostbyname/getaddrinfo connect to them); see docs/readings.rst.
HOST_TABLE = [
    ("127.0.0.1", "127.0.0.1"),
    ("2130706433", "127.0.0.1"),
    ("0x7f000001", "127.0.0.1"),
    ("0X7F000001", "127.0.0.1"),
    ("0x7f.1", "127.0.0.1"),
    ("127.1", "127.0.0.1"),
    ("127.0.1", "127.0.0.1"),
    ("0177.0.0.1", "127.0.0.1"),
    ("0177.1", "127.0.0.1"),
    ("017700000001", "127.0.0.1"),
    ("127.0.0.01", "127.0.0.1"),
    ("127.000.000.001", "127.0.0.1"),
    ("0x7f.0x0.0x0.0x1", "127.0.0.1"),
    ("0x00000007f.1", "127.0.0.1"),
    ("127.0.0.1.", "127.0.0.1"),  # stricter: glibc asks DNS; WHATWG reads 127.0.0.1
    ("127.0.0.1:8080", "127.0.0.1"),
    ("0127.0.0.1", "87.0.0.1"),  # octal, as inet_aton reads it
    ("127.256", "127.0.1.0"),
    ("0", "0.0.0.0"),
    ("4294967295", "255.255.255.255"),
    # not IPv4 for the resolver either: names, kept as written
    ("4294967296", "4294967296"),
    ("256.0.0.1", "256.0.0.1"),
    ("127.0.0.08", "127.0.0.08"),
    ("1.2.3.4.5", "1.2.3.4.5"),
    ("0x", "0x"),
    ("127.0.0.1 junk", "127.0.0.1 junk"),  # inet_aton takes it; getaddrinfo does not
    ("::ffff:127.1", "::ffff:127.1"),
    # IPv6: compressed, lower case, zone id dropped; IPv4-mapped and NAT64 -> IPv4
    ("[::ffff:127.0.0.1]", "127.0.0.1"),
    ("[::ffff:7f00:1]:8080", "127.0.0.1"),
    ("[0:0:0:0:0:FFFF:7F00:1]", "127.0.0.1"),
    ("::ffff:7f00:1", "127.0.0.1"),
    ("[64:ff9b::c000:207]", "192.0.2.7"),
    ("[0:0:0:0:0:0:0:1]", "::1"),
    ("[::1%25lo]", "::1"),
    ("[FE80::1%eth0]", "fe80::1"),
    ("[::127.0.0.1]", "::7f00:1"),  # IPv4-compatible: Linux does not route it to IPv4
    ("[2001:DB8::0:1]", "2001:db8::1"),
    # IDNA turns fullwidth digits and ideographic dots into an address too
    ("127。0。0。1", "127.0.0.1"),
    ("127\uff0e0\uff0e0\uff0e1", "127.0.0.1"),  # FULLWIDTH FULL STOP
    ("127｡0｡0｡1", "127.0.0.1"),
    ("\uff11\uff12\uff17.\uff10.\uff10.\uff11", "127.0.0.1"),  # fullwidth digits
    ("\uff10\uff58\uff17\uff46.\uff11", "127.0.0.1"),  # fullwidth 0x7f.1
    # names
    ("BLOCKED.Test.", "blocked.test"),
    ("blocked。test", "blocked.test"),
    ("bücher.test", "xn--bcher-kva.test"),
    ("BÜCHER.test", "xn--bcher-kva.test"),
    ("faß.test", "xn--fa-hia.test"),
    ("☃.test", "xn--n3h.test"),  # not IDNA 2008; encoded as Scrapy encodes it
    ("under_score.test", "under_score.test"),
    ("cafe.de", "cafe.de"),  # hex letters, not an address
    ("", ""),
    ("  ", ""),
    ("[", ""),
    (".", ""),
]


@pytest.mark.parametrize(("spelling", "host"), HOST_TABLE)
def test_every_spelling_of_a_host_normalises_to_one_string(spelling, host):
    assert normalize_host(spelling) == host


#: (blocklist entry, URL host, blocked)
ENTRY_TABLE = [
    ("127.0.0.1", "2130706433", True),
    ("127.0.0.1", "0x7f.1", True),
    ("127.0.0.1", "0177.0.0.1", True),
    ("127.0.0.1", "127.1", True),
    ("127.0.0.1", "127.0.0.1.", True),
    ("127.0.0.1", "[::ffff:127.0.0.1]", True),
    ("127.0.0.1", "[::ffff:7f00:1]", True),
    ("127.0.0.1", "127。0。0。1", True),
    ("2130706433", "127.0.0.1", True),
    ("0x7f.1", "[0:0:0:0:0:ffff:7f00:1]", True),
    ("::ffff:127.0.0.1", "127.0.0.1", True),
    ("[::ffff:7f00:1]:8080", "0x7f000001", True),
    ("http://2130706433:8080/x", "127.0.0.1", True),
    ("192.0.2.7", "[64:ff9b::c000:207]", True),
    ("127.0.0.1", "0127.0.0.1", False),  # that is 87.0.0.1
    ("127.0.0.1", "127.0.0.2", False),
    ("127.0.0.1", "[::127.0.0.1]", False),
    ("127.0.0.1", "[::1]", False),
    ("::1", "[0:0:0:0:0:0:0:1]", True),
    ("::1", "[::1%25lo]", True),
    ("0.1", "1.0.0.1", False),  # an address entry is exact, never a suffix
    # IDNA: an entry names every encoding the crawl may contact
    ("faß.test", "xn--fa-hia.test", True),
    ("faß.test", "fass.test", True),  # Scrapy contacts fass.test for http://faß.test/
    ("xn--fa-hia.test", "www.fass.test", True),
    ("fass.test", "xn--fa-hia.test", False),
    ("☃.test", "xn--n3h.test", True),
    ("σας.test", "xn--mxa9ab.test", True),
    ("blocked。test", "www.blocked.test", True),
]


@pytest.mark.parametrize(("entry", "host", "blocked"), ENTRY_TABLE)
def test_an_entry_matches_every_spelling_of_the_host_it_names(entry, host, blocked):
    domains = DomainSet.from_entries([{"domain": entry}], source="test")
    assert (domains.match(host) is not None) is blocked


def test_origin_and_canonical_url_use_the_one_host():
    assert origin_of("http://0x7f.1:8080/a") == "http://127.0.0.1:8080"
    assert origin_of("HTTP://[::FFFF:7F00:1]/") == "http://127.0.0.1:80"
    assert origin_of("https://[2001:DB8::1]/") == "https://[2001:db8::1]:443"
    assert canonical_url("http://2130706433:80/a/#f") == "http://127.0.0.1/a"
    # unparseable input is never an exception
    assert origin_of("http://a.test:99999/") == "http://a.test:99999"
    assert canonical_url("http://[::1/x#f") == "http://[::1/x"
    assert url_host("http://[::ffff:7f00:1/x") == "127.0.0.1"


# -- the crawl: what the origin receives ---------------------------------------------

#: spellings of 127.0.0.1 (where the sandbox origin listens) that the crawl
#: really connects to, and two that Scrapy's handler refuses (userinfo) but
#: whose robots.txt would still be fetched
LOOPBACK_SPELLINGS = [
    "127.0.0.1",
    "2130706433",
    "0x7f000001",
    "0X7F000001",
    "0x7f.1",
    "127.1",
    "127.0.1",
    "0177.0.0.1",
    "0177.1",
    "017700000001",
    "127.0.0.01",
    "127.000.000.001",
    "0x7f.0x0.0x0.0x1",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[0:0:0:0:0:FFFF:7F00:1]",
    "127。0。0。1",
    "\uff11\uff12\uff17.\uff10.\uff10.\uff11",  # fullwidth digits
    "x.test:80@0x7f.1",
]


def loopback_urls(port: int) -> list[str]:
    return [f"http://{host}:{port}/line/{i}" for i, host in enumerate(LOOPBACK_SPELLINGS)]


def target_hits(server: Any) -> list[Any]:
    return [h for h in server.origin.hits if h.host != BLOCKLIST_HOST]


@pytest.mark.parametrize("entry", ["127.0.0.1", "2130706433", "[::ffff:7f00:1]"])
@pytest_twisted.ensureDeferred
async def test_an_address_entry_blocks_every_spelling_of_it(server, tmp_path, entry):
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc(entry)))
    urls = loopback_urls(server.port)
    res = await crawl(base_settings(server, tmp_path / "state"), urls, tmp_path)
    assert target_hits(server) == []  # not one request, not even robots.txt
    assert sorted((i["line"], i["outcome"], i["rule"]) for i in res.items) == [
        (n, "denied", "R3") for n in range(1, len(urls) + 1)
    ]


@pytest_twisted.ensureDeferred
async def test_two_spellings_of_one_address_share_one_pacing_clock_and_robots_txt(server, tmp_path):
    spellings = ["127.0.0.1", "2130706433", "[::ffff:7f00:1]", "0x7f.1"]
    server.origin.route("127.0.0.1", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    urls = []
    for i, host in enumerate(spellings):
        server.origin.route(host, f"/p/{i}", Reply(200, f"page {i}"))
        urls.append(f"http://{host}:{server.port}/p/{i}")
    res = await crawl(base_settings(server, tmp_path / "state"), urls, tmp_path)
    assert [i["outcome"] for i in res.items] == ["fetched"] * 4
    hits = target_hits(server)
    assert [h.path for h in hits].count("/robots.txt") == 1
    assert [h.path for h in hits].count(TDMREP) == 1
    assert len(hits) == 6
    assert min(arrival_gaps(hits)) >= 1.0


# -- property-based: no exception escapes, and agreement with the references --------

_UNUSUAL = "[]:.%@ /\\\t\n#?0123456789abcdefxXABCDEF。\uff0e｡ßςΣ☃ü\u200d-_"
hostish = st.text(alphabet=st.sampled_from(_UNUSUAL) | st.characters(), max_size=40)
urlish = st.builds(
    lambda scheme, sep, host, rest: f"{scheme}{sep}{host}{rest}",
    st.sampled_from(["http", "HTTPS", "ftp", ""]),
    st.sampled_from(["://", ":", "//", ""]),
    hostish,
    st.text(max_size=20),
)


@FAST
@given(st.one_of(st.text(), hostish, urlish))
def test_no_exception_escapes_and_normalisation_is_idempotent(text):
    host = normalize_host(text)
    assert normalize_host(host) == host
    assert host == host.strip() and not host.endswith(".")
    url_host(text)
    origin_of(text)
    canonical_url(text)
    normalize_entry(text)
    assert host in host_variants(text) or not host
    entry_hosts(text)
    DomainSet.from_entries([{"domain": text}], source="test").match(text)


@st.composite
def ipv4_spelling(draw: Any, numbers: st.SearchStrategy[int] | None = None) -> tuple[int, str]:
    """An IPv4 address and one of its inet_aton spellings."""
    number = draw(numbers if numbers is not None else st.integers(0, 2**32 - 1))
    count = draw(st.integers(1, 4))
    octets = number.to_bytes(4, "big")
    values = [*octets[: count - 1], int.from_bytes(octets[count - 1 :], "big")]
    parts = []
    for value in values:
        zeros = "0" * draw(st.integers(0, 3))
        radix = draw(st.sampled_from(["dec", "oct", "hex"]))
        if radix == "dec":
            parts.append(str(value))
        elif radix == "oct":
            parts.append(f"0{zeros}{value:o}")
        else:
            prefix = draw(st.sampled_from(["0x", "0X"]))
            digits = f"{value:x}"
            parts.append(prefix + zeros + (digits.upper() if draw(st.booleans()) else digits))
    return number, ".".join(parts)


@FAST
@given(ipv4_spelling(), st.sampled_from(["", ".", ":8080"]))
def test_every_inet_aton_spelling_gives_the_dotted_quad(spelled, suffix):
    number, text = spelled
    reference = socket.inet_ntoa(socket.inet_aton(text))
    assert reference == str(ipaddress.IPv4Address(number))
    assert normalize_host(text + suffix) == reference
    assert url_host(f"http://{text}{suffix}/x") == reference
    # what the gates see: the URL after Scrapy's Request has made it safe
    assert url_host(Request(f"http://{text}{suffix}/x").url) == reference


def _resolver_reads(text: str) -> str | None:
    """What the resolver connects to for a numeric host, or None."""
    try:
        infos = socket.getaddrinfo(
            text, None, socket.AF_INET, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST
        )
    except (OSError, UnicodeError):
        return None
    return str(infos[0][4][0])


@FAST
@given(st.text(alphabet="0123456789abcdefxX.", min_size=1, max_size=24))
def test_a_numeric_host_is_an_address_exactly_when_the_resolver_reads_one(text):
    text = text.rstrip(".") or text  # one trailing dot is the stricter reading, tested above
    expected = _resolver_reads(text)
    try:
        aton = socket.inet_ntoa(socket.inet_aton(text))
    except OSError:
        aton = None
    assert aton == expected  # no whitespace here, so inet_aton is the resolver's rule
    got = ip_literal(text.lower())
    assert got == expected


@st.composite
def ipv6_spelling(draw: Any) -> tuple[str, str]:
    """An IPv6 spelling and the one host it is."""
    address = draw(
        st.one_of(
            st.ip_addresses(v=6),
            st.ip_addresses(v=4).map(lambda a: ipaddress.IPv6Address(f"::ffff:{a}")),
            st.ip_addresses(v=4).map(lambda a: ipaddress.IPv6Address(f"64:ff9b::{a}")),
        )
    )
    text = draw(st.sampled_from([address.compressed, address.exploded]))
    if address.ipv4_mapped is not None and draw(st.booleans()):
        text = f"::ffff:{address.ipv4_mapped}"
    if draw(st.booleans()):
        text = text.upper()
    text += draw(st.sampled_from(["", "%25eth0", "%lo"]))
    if draw(st.booleans()):
        text = f"[{text}]" + draw(st.sampled_from(["", ":443"]))
    return text, _one_host(address)


def _one_host(address: ipaddress.IPv6Address) -> str:
    """The reference: the IPv4 address an IPv4-mapped or NAT64 address reaches."""
    mapped = address.ipv4_mapped
    if mapped is None and address in ipaddress.IPv6Network("64:ff9b::/96"):
        mapped = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return str(mapped or address)


@FAST
@given(ipv6_spelling())
def test_ipv6_spellings_agree_with_ipaddress(spelled):
    text, expected = spelled
    assert normalize_host(text) == expected


_GROUPS = ["", "", "0", "1", "00000", "ffff", "FFFF", "7f00", "db8", "64", "ff9b", "12345"]
_TAILS = ["1.2.3.4", "127.0.0.1", "127.0.0.01", "127.1", "1.2.3"]


@FAST
@given(st.lists(st.sampled_from(_GROUPS + _TAILS), min_size=2, max_size=10).map(":".join))
def test_an_ipv6_literal_is_an_address_exactly_when_inet_pton_reads_one(text):
    try:
        packed = socket.inet_pton(socket.AF_INET6, text)
    except OSError:
        packed = None
    expected = None if packed is None else _one_host(ipaddress.IPv6Address(packed))
    assert ip_literal(text.lower()) == expected


_LABELS = st.sampled_from(["a", "b", "ab", "x-y", "b0", "xn--bcher-kva", "under_score"])
_NAMES = st.lists(_LABELS, min_size=1, max_size=4).map(".".join)


def _respell(draw: Any, name: str) -> str:
    """The same name as a URL or an operator might write it."""
    if draw(st.booleans()):
        name = name.upper()
    if draw(st.booleans()):
        name = name.replace(".", draw(st.sampled_from([".", "。", "\uff0e", "｡"])))
    return name + draw(st.sampled_from(["", ".", ":8080"]))


@FAST
@given(st.data(), st.lists(_NAMES, max_size=5), _NAMES)
def test_name_matching_agrees_with_a_whole_label_suffix_reference(data, entries, host):
    domains = DomainSet.from_entries(
        [{"domain": _respell(data.draw, e)} for e in entries], source="test"
    )
    expected = any(host == e or host.endswith("." + e) for e in entries)
    assert (domains.match(_respell(data.draw, host)) is not None) is expected


@FAST
@given(
    st.lists(ipv4_spelling(st.sampled_from([0x7F000001, 0x7F000002, 0xC0000207])), max_size=3),
    ipv4_spelling(st.sampled_from([0x7F000001, 0x7F000002, 0xC0000207, 0x0100007F])),
)
def test_address_matching_agrees_with_inet_aton(entries, host):
    domains = DomainSet.from_entries([{"domain": text} for _, text in entries], source="test")
    expected = host[0] in {number for number, _ in entries}
    assert (domains.match(host[1]) is not None) is expected


_IDN_ALPHABET = st.sampled_from([*"abxß.-", "ς", "Σ", "ü", "Ü", "☃", "。", "\u200d", "\uff42"])


@FAST
@given(st.text(alphabet=_IDN_ALPHABET, min_size=1, max_size=12))
def test_an_entry_names_the_host_scrapy_contacts_for_it(name):
    try:
        contacted = url_host(Request(f"http://{name}/").url)
    except ValueError:
        assume(False)
    assume(contacted.isascii() and contacted)  # else the resolver cannot look it up
    assert contacted in host_variants(name)
    assert DomainSet.from_entries([{"domain": name}], source="test").match(contacted)


@FAST
@given(st.text(alphabet=st.characters(codec="ascii"), max_size=30))
def test_ascii_names_are_normalised_as_uts46_would(text):
    """The fast path for ASCII skips IDNA: check it changes nothing."""
    bare = normalize_host(text)
    assume(bare and not ip_literal(bare))
    try:
        reference = idna.encode(bare, uts46=True).decode("ascii")
    except idna.IDNAError:
        reference = bare
    assert bare == reference
