"""Host and URL normalisation shared by every gate.

Every gate keys on the *target* URL's host (never on a proxy's), normalised
the same way, so the blocklist, the robots cache and the pacing clocks agree
on what "one host" is.

One host is one address the crawl would connect to, however the URL spells
it. The system resolver (glibc ``gethostbyname``/``getaddrinfo``, behind
Scrapy's and Twisted's resolvers) reads ``2130706433``, ``0x7f.1``,
``127.1`` and ``0177.0.0.1`` as 127.0.0.1 (``inet_aton``'s numbers-and-dots
forms), and a dual-stack socket connecting to ``[::ffff:127.0.0.1]`` reaches
the IPv4 host. So an IPv4 address in any such spelling normalises to its
dotted quad, an IPv6 address to its compressed lower-case form (zone id
dropped), and an IPv4-mapped or NAT64 (``64:ff9b::/96``) IPv6 address to the
IPv4 address it reaches. Names are lower-cased and IDNA-encoded (UTS #46).
"""

from __future__ import annotations

import functools
import ipaddress
import re
import unicodedata
from urllib.parse import SplitResult, urlsplit, urlunsplit

import idna

DEFAULT_PORTS = {"http": 80, "https": 443}

#: trailing dots and whitespace: "a.test." and "a.test. " name a.test
_TRAILING = re.compile(r"[\s.]+\Z")
_DEC = frozenset("0123456789")
_OCT = frozenset("01234567")
_HEX = frozenset("0123456789abcdef")
_IPV6_CHARS = frozenset("0123456789abcdef:.")
#: the most digits a part of a 32-bit address can have, leading zeros aside
_MAX_DIGITS = {10: 10, 8: 11, 16: 8}
#: RFC 6052 well-known NAT64 prefix: 64:ff9b::a.b.c.d is translated to a.b.c.d
_NAT64 = int(ipaddress.IPv6Address("64:ff9b::")) >> 32


def normalize_host(host: str) -> str:
    """The one canonical spelling of *host* (a host, maybe ``[v6]`` and ``:port``).

    IP addresses in every spelling the resolver accepts become one string (see
    the module docstring); names are lower-cased, lose a trailing dot, and are
    IDNA-encoded with UTS #46. A name UTS #46 cannot encode is encoded the way
    Scrapy encodes URLs (IDNA 2003, so ``☃.test`` is ``xn--n3h.test`` as the
    crawl would contact it), and failing that kept lower-cased rather than
    rejected: a blocklist entry must never be dropped because it is unusual.
    Returns ``""`` for an empty host; never raises.
    """
    if not isinstance(host, str):
        return ""
    return _normalize_host(host)


@functools.lru_cache(maxsize=16384)
def _normalize_host(host: str) -> str:
    # Cached: url_host runs several times per request, and IDNA is slow.
    host = _bare(host)
    if not host:
        return ""
    if host.isascii():
        # UTS #46 leaves a lower-case ASCII name as it is or rejects it (then
        # it is kept as it is): no need to run it on the common case.
        return ip_literal(host) or host
    name = _idna_uts46(host) or _idna2003(host)
    if name is None:
        return host
    return _normalize_host(name)  # ASCII now: one more pass, no deeper


def _bare(host: str) -> str:
    """Strip whitespace, ``[...]``, a port, trailing dots; lower-case."""
    host = host.strip()
    while host.startswith("["):
        end = host.find("]")
        host = (host[1:end] if end != -1 else host[1:]).strip()
    if host.count(":") == 1:  # name:port (an IPv6 address has two colons or more)
        host = host.partition(":")[0]
    return _TRAILING.sub("", host).lower()


def _idna_uts46(host: str) -> str | None:
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except (UnicodeError, ValueError):  # idna.IDNAError is a UnicodeError
        return None


def _idna2003(host: str) -> str | None:
    """What Scrapy (w3lib ``safe_url_string``) puts in a request URL for a
    non-ASCII host: NFKC, then Python's IDNA 2003 codec."""
    try:
        return unicodedata.normalize("NFKC", host).encode("idna").decode("ascii")
    except (UnicodeError, ValueError):
        return None


def ip_literal(host: str) -> str | None:
    """The canonical form of *host* (ASCII, lower-case, bare) if it is an IP
    address in a spelling the resolver accepts, else None."""
    if ":" in host:
        return _ipv6(host)
    if host[:1] in _DEC:  # every inet_aton part starts with a digit
        return _ipv4(host)
    return None


def _ipv4(host: str) -> str | None:
    """inet_aton's numbers-and-dots forms: 1-4 parts, each decimal, octal
    (leading 0) or hex (0x); all but the last part one byte, the last part
    the remaining bytes.

    Written by hand because no library parses these: ``ipaddress`` accepts
    only the dotted quad, and ``socket.inet_aton`` also accepts anything
    after a space (``"127.0.0.1 junk"``), which getaddrinfo does not. The
    tests check this against ``socket.inet_aton``.
    """
    parts = host.split(".")
    if len(parts) > 4:
        return None
    values = []
    for part in parts:
        if part[:2] == "0x":
            digits, base, allowed = part[2:], 16, _HEX
        elif part[:1] == "0" and len(part) > 1:
            digits, base, allowed = part[1:], 8, _OCT
        else:
            digits, base, allowed = part, 10, _DEC
        if not digits or not allowed.issuperset(digits):
            return None
        digits = digits.lstrip("0") or "0"
        if len(digits) > _MAX_DIGITS[base]:
            return None
        values.append(int(digits, base))
    *head, last = values
    if any(v > 0xFF for v in head) or last >= 1 << (8 * (4 - len(head))):
        return None
    number = last
    for i, v in enumerate(head):
        number |= v << (24 - 8 * i)
    return str(ipaddress.IPv4Address(number))


def _ipv6(host: str) -> str | None:
    address = host.partition("%")[0]  # a zone id picks an interface, not a host
    if not address or not _IPV6_CHARS.issuperset(address):
        return None
    try:
        ip = ipaddress.IPv6Address(address)
    except ValueError:
        return None
    mapped = ip.ipv4_mapped
    if mapped is None and int(ip) >> 32 == _NAT64:
        mapped = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return str(mapped or ip)


@functools.lru_cache(maxsize=4096)
def is_ip(host: str) -> bool:
    # asked for every queued target's host at each blocklist check: cached,
    # and a name that neither has a colon nor ends in a digit is not parsed
    if ":" not in host and not host[-1:].isdigit():
        return False
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def in_domain(host: str, domain: str) -> bool:
    """Whether *host* is *domain* or a subdomain of it, as R3 matches an entry
    (both normalised: ``a.example.org`` is in ``example.org``, ``badexample.org`` is not)."""
    return host == domain or host.endswith("." + domain)


def host_key(host: str) -> str:
    """*host* with its labels in reverse order (``www.example.org`` is
    ``org.example.www``): a host and its subdomains then share a prefix, so
    one index range finds them (the audit log's index by host)."""
    return ".".join(reversed(host.split(".")))


def domain_key_range(domain: str) -> tuple[str, str, str]:
    """(the key of *domain*, and the bounds ``[low, high)`` of the keys of its
    subdomains): a host is *domain* or under it (:func:`in_domain`) exactly
    when its :func:`host_key` is the first, or lies in the range. ``/``
    follows ``.``; a plain prefix range would also take ``example.org-x``."""
    key = host_key(domain)
    return key, key + ".", key + "/"


def host_variants(host: str) -> set[str]:
    """Every normalised host the crawl may contact for a URL naming *host*.

    Usually one. A name with a character that IDNA 2003 and UTS #46 encode
    differently (``ß``, ``ς``, joiners) has several: ``faß.test`` is
    ``xn--fa-hia.test`` by UTS #46 but Scrapy contacts ``fass.test`` for
    ``http://faß.test/``. A blocklist entry names all of them (the stricter
    reading); an A-label (``xn--fa-hia.test``) is read as its Unicode name.
    """
    primary = normalize_host(host)
    out = {primary} if primary else set()
    text = _bare(host) if isinstance(host, str) else ""
    if text.isascii() and "xn--" not in primary:
        return out
    unicode_name = text
    if text.isascii():
        try:
            unicode_name = idna.decode(primary)
        except (UnicodeError, ValueError):
            return out
    for name in (_idna_uts46(unicode_name), _idna2003(unicode_name)):
        if name is not None:
            out.add(normalize_host(name))
    out.discard("")
    return out


def _authority_host(url: str) -> str:
    """The host part of a URL ``urlsplit`` refuses (bad brackets), read
    loosely so a gate still has a host to match."""
    rest = url.partition("//")[2]
    for stop in "/?#":
        rest = rest.partition(stop)[0]
    return rest.rpartition("@")[2]


#: how many URLs the parsing helpers below remember: each request's URL is
#: asked about by every gate, the frontier and the audit log (url_host about
#: 17 times per request), all within that request's few milliseconds
URL_CACHE = 4096


@functools.lru_cache(maxsize=URL_CACHE)
def url_host(url: str) -> str:
    """The normalised host of *url* (``""`` when it has none); never raises."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        host = _authority_host(url)
    return normalize_host(host)


def _port(parts: SplitResult) -> int | str | None:
    """The port, or its text as written when it is not a valid port."""
    try:
        return parts.port
    except ValueError:
        return parts.netloc.rpartition("]")[2].rpartition(":")[2]


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@functools.lru_cache(maxsize=URL_CACHE)
def origin_of(url: str) -> str:
    """``scheme://host:port``: the authority a robots.txt applies to (RFC 9309 §2.3).

    Two spellings of one address are one origin. Never raises: an invalid
    port is kept as written, so its robots.txt fetch fails (and denies).
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        scheme = url.partition(":")[0].lower()
        return f"{scheme}://{_bracketed(url_host(url))}:0"
    scheme = parts.scheme.lower()
    port = _port(parts) or DEFAULT_PORTS.get(scheme, 0)
    return f"{scheme}://{_bracketed(url_host(url))}:{port}"


@functools.lru_cache(maxsize=URL_CACHE)
def canonical_url(url: str) -> str:
    """Canonical form used for dedup and validators (spec R7).

    Drops the fragment and a trailing slash (keeping the root ``/``),
    lower-cases scheme and normalises the host, drops the default port. The
    query is kept as written: reordering it could merge distinct resources.
    Never raises: a URL ``urlsplit`` refuses is returned without its fragment.
    """
    url = url.strip()
    try:
        parts = urlsplit(url)
    except ValueError:
        return url.partition("#")[0]
    scheme = parts.scheme.lower()
    host = _bracketed(url_host(url))
    port = _port(parts)
    netloc = host if port in (None, DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"
    if parts.username:
        userinfo = parts.username + (f":{parts.password}" if parts.password else "")
        netloc = f"{userinfo}@{netloc}"
    path = parts.path or "/"
    if len(path) > 1 and path.endswith("/"):
        path = path.rstrip("/") or "/"
    return urlunsplit((scheme, netloc, path, parts.query, ""))


@functools.lru_cache(maxsize=URL_CACHE)
def is_http_url(text: str) -> bool:
    """True for an absolute http(s) URL with a host."""
    try:
        parts = urlsplit(text)
        _ = parts.port  # raises ValueError on a malformed port
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.hostname)


def without_password(url: str) -> str:
    """*url* with its password (if any) shown as ``***``, for logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))
